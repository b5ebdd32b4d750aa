package v1alpha1

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// DecodeCNIConfig decodes the parameters of a CNI request, as Decode does,
// but apiVersion and kind may be left out (the design's configName
// example has neither). A field the CNI DRA driver design spells
// differently in its Go sketch (name, config, Args, field, attribute) is
// refused with the spelling to use. It holds the parameters to the bounds
// of a claim's config, upstream form included: bounds.ConfigBytes,
// bounds.Depth and bounds.Items checked before they are decoded, then
// bounds.Plugins and bounds.Arguments. Over one, the one error says which,
// and nothing else of them is judged.
func DecodeCNIConfig(data []byte, path *field.Path) (CNIConfig, field.ErrorList) {
	var cfg CNIConfig
	js, errs, _ := boundedJSON(data, path, bounds.ConfigBytes, "a config")
	if len(errs) > 0 {
		return cfg, errs
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &meta); err != nil {
		return cfg, field.ErrorList{invalid(path, fmt.Sprintf("not a JSON object: %v", err))}
	}
	if meta.APIVersion == CNIDRAGroupVersion && meta.Kind == KindCNI {
		return decodeUpstreamCNI(js, path)
	}
	if (meta.APIVersion != "" || meta.Kind != "") && (meta.APIVersion != CNIGroupVersion || meta.Kind != KindCNI) {
		return cfg, field.ErrorList{field.Invalid(path.Child("apiVersion"), meta.APIVersion+"/"+meta.Kind,
			fmt.Sprintf("want apiVersion %s or %s, kind %s, or neither", CNIGroupVersion, CNIDRAGroupVersion, KindCNI))}
	}
	errs = decodeStrict(js, &cfg, path)
	if err := cfg.overBounds(path); err != nil {
		return cfg, field.ErrorList{err}
	}
	return cfg, cniHints(errs, path)
}

// overBounds is the error of the plugins, or of a plugin's arguments,
// more than their bound; nil when they are within.
func (c *CNIConfig) overBounds(path *field.Path) *field.Error {
	if err := bounds.TooMany(child(path, "plugins"), len(c.Plugins), bounds.Plugins); err != nil {
		return err
	}
	for i, p := range c.Plugins {
		if err := bounds.TooMany(child(path, "plugins").Index(i).Child("arguments"), len(p.Arguments), bounds.Arguments); err != nil {
			return err
		}
	}
	return nil
}

// decodeUpstreamCNI reads the upstream CNI DRA driver's form: ifName and
// config, a CNI configuration list (cniVersion, name, plugins) or a single
// plugin's configuration, into the plugins form. The list's name is the
// driver's to give (the claim's network), and is not kept; a key of the
// list other than these is refused rather than dropped.
func decodeUpstreamCNI(js []byte, path *field.Path) (CNIConfig, field.ErrorList) {
	var up struct {
		APIVersion string          `json:"apiVersion"`
		Kind       string          `json:"kind"`
		IfName     string          `json:"ifName"`
		Config     json.RawMessage `json:"config"`
	}
	cfg := CNIConfig{APIVersion: CNIGroupVersion, Kind: KindCNI, Upstream: true}
	if errs := decodeStrict(js, &up, path); len(errs) > 0 {
		return cfg, errs
	}
	cfg.IfName = up.IfName
	at := path.Child("config")
	if len(up.Config) == 0 || string(up.Config) == "null" {
		return cfg, field.ErrorList{field.Required(at, "the CNI configuration (cniVersion, plugins)")}
	}
	var list map[string]any
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(up.Config, &list); err != nil {
		return cfg, field.ErrorList{invalid(at, fmt.Sprintf("not a JSON object: %v", err))}
	}
	var errs field.ErrorList
	var plugins []any
	if _, single := list["type"]; single {
		conf := maps.Clone(list)
		delete(conf, "cniVersion")
		delete(conf, "name")
		plugins = []any{conf}
		list = map[string]any{"cniVersion": list["cniVersion"]}
	}
	for k, v := range list {
		switch k {
		case "cniVersion":
			if s, ok := v.(string); ok {
				cfg.CNIVersion = s
			} else if v != nil {
				errs = append(errs, field.Invalid(at.Child(k), v, "must be a string"))
			}
		case "name":
		case "plugins":
			ps, ok := v.([]any)
			if !ok {
				errs = append(errs, field.Invalid(at.Child(k), "", "must be a list of plugin configurations"))
				continue
			}
			if err := bounds.TooMany(at.Child(k), len(ps), bounds.Plugins); err != nil {
				return cfg, field.ErrorList{err}
			}
			plugins = ps
		default:
			errs = append(errs, field.Forbidden(at.Child(k), "not taken by this driver (it runs cniVersion, name and plugins)"))
		}
	}
	for i, p := range plugins {
		conf, ok := p.(map[string]any)
		if !ok {
			errs = append(errs, field.Invalid(at.Child("plugins").Index(i), "", "must be a plugin configuration (an object)"))
			continue
		}
		t, _ := conf["type"].(string)
		rest := maps.Clone(conf)
		delete(rest, "type")
		cfg.Plugins = append(cfg.Plugins, CNIPlugin{Type: t, Config: rest})
	}
	return cfg, errs
}

// DecodeCNIConfigObject decodes a CNIConfig object (an approved config),
// JSON or YAML, strictly. Its spec is held to the bounds of a CNI
// configuration that is not a claim's: bounds.NetworkConfigBytes,
// bounds.Depth and bounds.Items checked before it is decoded, then
// bounds.Plugins and bounds.Arguments; its metadata and status are the API
// server's to bound. Over one, the one error says which.
func DecodeCNIConfigObject(data []byte, path *field.Path) (CNIConfigObject, field.ErrorList) {
	var o CNIConfigObject
	js, errs := toJSON(data, path)
	if len(errs) > 0 {
		return o, errs
	}
	var top struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &top); err != nil {
		return o, field.ErrorList{invalid(path, fmt.Sprintf("not a JSON object: %v", err))}
	}
	spec := child(path, "spec")
	if err := bounds.CheckJSON(top.Spec, spec, bounds.NetworkConfigBytes, "an approved config's spec"); err != nil {
		return o, field.ErrorList{err}
	}
	errs = decodeKind(js, &o, path, CNIGroupVersion, KindCNIConfig)
	if err := o.Spec.overBounds(spec); err != nil {
		return o, field.ErrorList{err}
	}
	return o, cniHints(errs, spec)
}

// cniHints adds to unknown-field errors below root the spelling the API
// uses, where the design's Go sketch names the field differently.
func cniHints(errs field.ErrorList, root *field.Path) field.ErrorList {
	prefix := root.String() + "."
	for _, e := range errs {
		if e.Type != field.ErrorTypeForbidden || !strings.HasPrefix(e.Field, prefix) {
			continue
		}
		rel := strings.TrimPrefix(e.Field, prefix)
		parent, name := "", rel
		if i := strings.LastIndex(rel, "."); i >= 0 {
			parent, name = rel[:i], rel[i+1:]
		}
		if hint := cniHint(parent, name); hint != "" {
			e.Detail += ": " + hint
		}
	}
	return errs
}

func cniHint(parent, name string) string {
	last := parent
	if i := strings.LastIndex(parent, "."); i >= 0 {
		last = parent[i+1:]
	}
	switch {
	case parent == "" && name == "name":
		return "the interface's name is ifName (fastpathd names the CNI network)"
	case parent == "" && name == "config":
		return "a config is plugins[], each with type, config and arguments"
	case strings.HasPrefix(last, "plugins[") && (name == "Args" || name == "args"):
		return "a plugin's arguments are arguments"
	case strings.HasPrefix(last, "arguments[") && name == "field":
		return "the field an argument sets is fieldPath"
	case last == "valueFrom" && name == "attribute":
		return "a device attribute is valueFrom.attributeRef"
	case last == "configMapKeyRef" && name == "namespace":
		return "a ConfigMap is read from the claim's own namespace (an approved config's from fastpathd's --cni-config-namespace)"
	case last == "configMapKeyRef" && (name == "keyFrom" || name == "attributeRef"):
		return "a key from a device attribute is configMapKeyRef.attribute, from a slice field configMapKeyRef.resourceSliceFieldRef"
	}
	return ""
}
