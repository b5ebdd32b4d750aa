package dra

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// hostObjects checks a plugin's config, its arguments set (set: the field
// path each argument set, and from where), below prefix: a field naming a
// host object, or a string that is a host path, may be set in a claim's
// own config only by an argument taking it from the allocated device
// (attributeRef). The operator's approved configs are not checked.
func hostObjects(conf map[string]any, set map[string]argSource, path *field.Path, prefix string) field.ErrorList {
	return hostObjectsIn(conf, set, path.Child("config"), path, prefix, nil)
}

// inList is the dotted path of fields below a list: no argument can set
// them.
const inList = "\x00"

func hostObjectsIn(v any, set map[string]argSource, at, plugin *field.Path, dotted string, blame *argSource) field.ErrorList {
	var errs field.ErrorList
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := inList
			if dotted == "" {
				p = k
			} else if dotted != inList {
				p = dotted + "." + k
			}
			b := blame
			if src, ok := set[p]; ok {
				if src.kind == sourceAttribute {
					continue
				}
				b = &src
			}
			if v1alpha1.HostObjectField(k) {
				errs = append(errs, refuseHostObject(at.Child(k), plugin, k, b))
				continue
			}
			errs = append(errs, hostObjectsIn(v[k], set, at.Child(k), plugin, p, b)...)
		}
	case []any:
		for i, e := range v {
			errs = append(errs, hostObjectsIn(e, set, at.Index(i), plugin, inList, blame)...)
		}
	case string:
		if strings.HasPrefix(v, "/") {
			errs = append(errs, refuseHostObject(at, plugin, "a path", blame))
		}
	}
	return errs
}

// refuseHostObject is the error of a field at naming a host object (what),
// set by the config itself or by the argument blame.
func refuseHostObject(at, plugin *field.Path, what string, blame *argSource) *field.Error {
	const rule = "in a claim's own config it may only come from the allocated device (an argument with valueFrom.attributeRef), " +
		"or from an approved CNIConfig (configName)"
	if blame != nil {
		rel := strings.TrimPrefix(at.String(), plugin.String()+".")
		return field.Forbidden(blame.field(plugin), fmt.Sprintf("sets %s, which names an object of the host (%s): %s", rel, what, rule))
	}
	return field.Forbidden(at, fmt.Sprintf("names an object of the host (%s): %s", what, rule))
}

// redactErrs removes values read from ConfigMaps from errors.
func redactErrs(errs field.ErrorList, secrets []string) field.ErrorList {
	if len(secrets) == 0 {
		return errs
	}
	for _, e := range errs {
		e.Detail = claims.Redacted(e.Detail, secrets)
		if s, ok := e.BadValue.(string); ok {
			e.BadValue = claims.Redacted(s, secrets)
		}
	}
	return errs
}
