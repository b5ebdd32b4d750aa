package cnipolicy

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// hostObjects checks a plugin's config, read as the plugin reads it
// (Inspect), its arguments set (set: the dotted field path each
// argument set, and from where): an object of the host, named or taken by
// default, may be in a claim's own config only as the plugin's master
// taken from the allocated device (an argument with attributeRef, as the
// device's attribute name gives it); a VLAN of it only when vlanIDs
// (--cni-vlan-ids) hold it (static: a VLAN an argument reads from the
// cluster is left to the node); any other host device, host path or
// host-changing option not at all, from the device's attributes, a
// ResourceSlice's fields, a ConfigMap or the config; a field spelled
// twice never. The operator's approved configs are not checked.
func hostObjects(view View, set map[string]argSource, path *field.Path, vlanIDs []string, static bool) field.ErrorList {
	var errs field.ErrorList
	for _, p := range view.Problems {
		errs = append(errs, field.Invalid(path.Child("config"), "", p))
	}
	for _, r := range view.Refs {
		src, ok := argumentOf(set, r.Path)
		if r.Kind == HostVLAN {
			if static && ok && src.kind != sourceValue {
				continue
			}
			if !allowsVLAN(vlanIDs, r.Value) {
				errs = append(errs, refuseVLAN(path, r, ok, src, vlanIDs))
			}
			continue
		}
		if ok && src.kind == sourceAttribute && fromDevice(r) {
			continue
		}
		var blame *argSource
		if ok {
			blame = &src
		}
		errs = append(errs, refuseHostObject(path, r, blame))
	}
	return errs
}

// fromDevice says whether r is what a claim may take from the allocated
// device: the plugin's master (macvlan's, ipvlan's, vlan's), named. The
// device gives no host path (its attributes name interfaces, not
// directories) and no other host device: an attribute in host-device's
// device, or in bridge's bridge, would hand the pod the node's interface
// the device only stands on.
func fromDevice(r Ref) bool {
	return r.Kind == HostDevice && !r.Omitted && r.Field == "master" && Fold(r.Path) == Fold(r.Field)
}

// argumentOf is the argument that set the field at the dotted path p, or
// a field p is below; field names compared as the plugin compares them.
func argumentOf(set map[string]argSource, p string) (argSource, bool) {
	fp := Fold(p)
	var best string
	var src argSource
	found := false
	for at, s := range set {
		fa := Fold(at)
		if (fp == fa || strings.HasPrefix(fp, fa+".") || strings.HasPrefix(fp, fa+"[")) && len(at) >= len(best) {
			best, src, found = at, s, true
		}
	}
	return src, found
}

// refuseHostObject is the error of a plugin's config at path taking r,
// set by the config itself or by the argument blame.
func refuseHostObject(path *field.Path, r Ref, blame *argSource) *field.Error {
	rule := "in a claim's own config it may only come from an approved CNIConfig (configName)"
	if r.Kind == HostDevice && LastKey(r.Path) == r.Path && Fold(r.Path) == Fold("master") {
		rule = "in a claim's own config it may only come from the allocated device (an argument with valueFrom.attributeRef), " +
			"or from an approved CNIConfig (configName)"
	}
	at := path.Child("config")
	for _, k := range strings.Split(r.Path, ".") {
		at = at.Child(k)
	}
	what := r.Field
	if what == "" {
		what = "a path"
	}
	switch {
	case r.Omitted && r.Field == "master":
		return field.Required(at, fmt.Sprintf("left out, the plugin takes %s (a %s): set %s from the allocated device (an argument with valueFrom.attributeRef), "+
			"or name an approved CNIConfig (configName)", r.Value, r.Kind, r.Field))
	case r.Omitted:
		return field.Required(at, fmt.Sprintf("left out, the plugin takes %s (a %s), which a claim's own config may not name: name an approved CNIConfig (configName)", r.Value, r.Kind))
	case r.Kind == HostOption:
		what := "the plugin's " + r.Field
		if r.Why != "" {
			what = r.Why
		}
		const rule = "a claim's own config may not; only an approved CNIConfig (configName) may"
		if blame != nil {
			return field.Forbidden(blame.field(path), fmt.Sprintf("sets config.%s, which changes the node (%s): %s", r.Path, what, rule))
		}
		return field.Forbidden(at, fmt.Sprintf("changes the node (%s): %s", what, rule))
	case blame != nil && blame.kind == sourceAttribute:
		return field.Forbidden(blame.field(path), fmt.Sprintf("sets config.%s, which names an object of the host (%s, a %s), from an attribute of the allocated device: "+
			"the device gives a claim its plugin's master and nothing else of the host; %s", r.Path, what, r.Kind, rule))
	case blame != nil:
		return field.Forbidden(blame.field(path), fmt.Sprintf("sets config.%s, which names an object of the host (%s): %s", r.Path, what, rule))
	case Fold(LastKey(r.Path)) == Fold(r.Field) && LastKey(r.Path) != r.Field:
		return field.Forbidden(at, fmt.Sprintf("read by the plugin as %s, names an object of the host (%s): %s", r.Field, what, rule))
	}
	return field.Forbidden(at, fmt.Sprintf("names an object of the host (%s): %s", what, rule))
}

// refuseVLAN is the error of a plugin's config at path making its
// interface on a VLAN r of the allocated device that vlanIDs do not hold,
// set by the config itself or, when byArgument, by the argument src.
func refuseVLAN(path *field.Path, r Ref, byArgument bool, src argSource, vlanIDs []string) *field.Error {
	at := path.Child("config")
	for _, k := range strings.Split(r.Path, ".") {
		at = at.Child(k)
	}
	if byArgument && !r.Omitted {
		at = src.field(path)
	}
	allowed := fmt.Sprintf("the VLAN IDs the operator allows CNI claims (--cni-vlan-ids: %s): a VLAN of the node's interface is a network of the node's; "+
		"use one of them, or name an approved CNIConfig (configName)", listOrNone(vlanIDs))
	if r.Omitted {
		return field.Required(at, fmt.Sprintf("left out, the plugin makes VLAN 0 of the node's interface (priority tags on its untagged network), which is not among %s", allowed))
	}
	return field.Forbidden(at, fmt.Sprintf("VLAN %s of the node's interface is not among %s", r.Value, allowed))
}

// redactErrs removes values read from ConfigMaps from errors.
func redactErrs(errs field.ErrorList, secrets []string) field.ErrorList {
	if len(secrets) == 0 {
		return errs
	}
	for _, e := range errs {
		e.Detail = Redacted(e.Detail, secrets)
		if s, ok := e.BadValue.(string); ok {
			e.BadValue = Redacted(s, secrets)
		}
	}
	return errs
}
