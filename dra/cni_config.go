package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// The CNI DRA driver: a claim's request of class cni.networking.x-k8s.io
// carries a CNI configuration (v1alpha1.CNIConfig) that fastpath runs with
// libcni when the pod's sandbox starts.
const (
	CNIDriverName = claims.DriverCNI
	CNIClassName  = "cni.networking.x-k8s.io"
)

// sliceFields are the ResourceSlice fields an argument may read.
var sliceFields = []string{"spec.nodeName", "spec.pool.name", "spec.driver"}

// CNIPolicy is what the operator allows (flags).
type CNIPolicy struct {
	// Plugins are the plugin types a config may run, IPAM included: a CNI
	// config runs privileged code.
	Plugins []string
	// ConfigNamespace holds the operator's approved configs (configName).
	ConfigNamespace string
}

// cniContext is what an argument may refer to.
type cniContext struct {
	ctx        context.Context
	client     kubernetes.Interface
	namespace  string // the claim's
	attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	slice      map[string]string // sliceFields -> value
}

var cniNetworkName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// buildConflist validates cfg and builds the conflist to run: plugins from
// the config or the approved config, arguments resolved, cniVersion and
// name set, every plugin type (and IPAM type) on the allowlist, and the
// result parsed by libcni. Errors name the fields.
func buildConflist(cfg v1alpha1.CNIConfig, name string, policy CNIPolicy, c cniContext) ([]byte, field.ErrorList) {
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, errs
	}
	var errs field.ErrorList
	plugins, cniVersion := cfg.Plugins, cfg.CNIVersion
	if cfg.ConfigName != "" {
		approved, err := approvedConfig(c, policy.ConfigNamespace, cfg.ConfigName)
		if err != nil {
			return nil, append(errs, field.Invalid(field.NewPath("configName"), cfg.ConfigName, err.Error()))
		}
		plugins = approved.Plugins
		if cniVersion == "" {
			cniVersion = approved.CNIVersion
		}
	}
	if cniVersion == "" {
		cniVersion = v1alpha1.DefaultCNIVersion
	}
	if !cniNetworkName.MatchString(name) {
		errs = append(errs, field.Invalid(field.NewPath("name"), name, "not a valid CNI network name"))
	}
	list := map[string]any{"cniVersion": cniVersion, "name": name}
	var out []any
	for i, p := range plugins {
		path := field.NewPath("plugins").Index(i)
		conf := map[string]any{}
		for k, v := range p.Config {
			conf[k] = v
		}
		if _, set := conf["type"]; set {
			errs = append(errs, field.Forbidden(path.Child("config", "type"), "the plugin's type is plugins[].type"))
		}
		conf["type"] = p.Type
		for j, a := range p.Arguments {
			apath := path.Child("arguments").Index(j)
			v, err := argument(a).resolve(c, apath)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if err := setField(conf, a.FieldPath); err != nil {
				errs = append(errs, field.Invalid(apath.Child("fieldPath"), a.FieldPath, err.Error()))
				continue
			}
			setPath(conf, strings.Split(a.FieldPath, "."), v)
		}
		for _, t := range pluginTypes(conf) {
			if !slices.Contains(policy.Plugins, t.name) {
				errs = append(errs, field.Forbidden(path.Child(t.field), fmt.Sprintf("plugin type %q is not on this node's allowlist %v (--cni-plugins)", t.name, policy.Plugins)))
			}
		}
		out = append(out, conf)
	}
	list["plugins"] = out
	if len(errs) > 0 {
		return nil, errs
	}
	data, err := json.Marshal(list)
	if err != nil {
		return nil, field.ErrorList{field.Invalid(field.NewPath("plugins"), "", err.Error())}
	}
	if _, err := libcni.ConfListFromBytes(data); err != nil {
		return nil, field.ErrorList{field.Invalid(field.NewPath("plugins"), "", fmt.Sprintf("not a valid CNI configuration: %v", err))}
	}
	return data, nil
}

type pluginType struct{ field, name string }

// pluginTypes are the executables a plugin config runs: its type and its
// IPAM's.
func pluginTypes(conf map[string]any) []pluginType {
	var out []pluginType
	if t, _ := conf["type"].(string); t != "" {
		out = append(out, pluginType{"type", t})
	}
	if ipam, ok := conf["ipam"].(map[string]any); ok {
		if t, _ := ipam["type"].(string); t != "" {
			out = append(out, pluginType{"config.ipam.type", t})
		}
	}
	return out
}

func setField(conf map[string]any, fieldPath string) error {
	if fieldPath == "" {
		return fmt.Errorf("required")
	}
	for _, p := range strings.Split(fieldPath, ".") {
		if p == "" {
			return fmt.Errorf("empty path element")
		}
	}
	if fieldPath == "type" {
		return fmt.Errorf("the plugin's type cannot be set by an argument")
	}
	return nil
}

// setPath sets conf[path...] = v, making maps on the way.
func setPath(conf map[string]any, path []string, v any) {
	for _, p := range path[:len(path)-1] {
		next, ok := conf[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			conf[p] = next
		}
		conf = next
	}
	conf[path[len(path)-1]] = v
}

// argument is an argument being resolved.
type argument v1alpha1.CNIArgument

func (a argument) resolve(c cniContext, path *field.Path) (any, *field.Error) {
	switch {
	case len(a.Value) > 0 && a.ValueFrom != nil:
		return nil, field.Invalid(path.Child("valueFrom"), "", "give value or valueFrom, not both")
	case len(a.Value) > 0:
		var v any
		if err := json.Unmarshal(a.Value, &v); err != nil {
			return nil, field.Invalid(path.Child("value"), string(a.Value), err.Error())
		}
		return v, nil
	case a.ValueFrom == nil:
		return nil, field.Required(path.Child("value"), "give value or valueFrom")
	}
	if cm := a.ValueFrom.ConfigMapKeyRef; cm != nil {
		if a.ValueFrom.AttributeRef != "" || a.ValueFrom.ResourceSliceFieldRef != "" {
			return nil, field.Invalid(path.Child("valueFrom"), "", "give exactly one of attributeRef, resourceSliceFieldRef, configMapKeyRef")
		}
		return c.configMapValue(*cm, path.Child("valueFrom", "configMapKeyRef"))
	}
	return c.value(*a.ValueFrom, path.Child("valueFrom"))
}

// value is an attribute of the allocated device or a field of its slice.
func (c cniContext) value(src v1alpha1.CNIValueSource, path *field.Path) (string, *field.Error) {
	switch {
	case src.AttributeRef != "" && src.ResourceSliceFieldRef != "":
		return "", field.Invalid(path, "", "give exactly one of attributeRef, resourceSliceFieldRef")
	case src.AttributeRef != "":
		name := resourceapi.QualifiedName(src.AttributeRef)
		if !strings.Contains(src.AttributeRef, "/") {
			name = resourceapi.QualifiedName(CNIDriverName + "/" + src.AttributeRef)
		}
		a, ok := c.attributes[name]
		if !ok {
			a, ok = c.attributes[resourceapi.QualifiedName(src.AttributeRef)]
		}
		if !ok {
			return "", field.NotFound(path.Child("attributeRef"), src.AttributeRef)
		}
		return attributeString(a), nil
	case src.ResourceSliceFieldRef != "":
		v, ok := c.slice[src.ResourceSliceFieldRef]
		if !ok {
			return "", field.NotSupported(path.Child("resourceSliceFieldRef"), src.ResourceSliceFieldRef, sliceFields)
		}
		return v, nil
	}
	return "", field.Required(path, "give attributeRef, resourceSliceFieldRef or configMapKeyRef")
}

func (c cniContext) configMapValue(ref v1alpha1.CNIConfigMapKeyRef, path *field.Path) (string, *field.Error) {
	key := ref.Key
	switch {
	case ref.Name == "":
		return "", field.Required(path.Child("name"), "")
	case (ref.Key == "") == (ref.KeyFrom == nil):
		return "", field.Invalid(path.Child("key"), ref.Key, "give key or keyFrom")
	case ref.KeyFrom != nil:
		if ref.KeyFrom.ConfigMapKeyRef != nil {
			return "", field.Forbidden(path.Child("keyFrom", "configMapKeyRef"), "a key comes from an attribute or a slice field")
		}
		var err *field.Error
		if key, err = c.value(*ref.KeyFrom, path.Child("keyFrom")); err != nil {
			return "", err
		}
	}
	ns := ref.Namespace
	if ns == "" {
		ns = c.namespace
	}
	if c.client == nil {
		return "", field.Invalid(path.Child("name"), ref.Name, "no API server to read ConfigMaps from")
	}
	cm, err := c.client.CoreV1().ConfigMaps(ns).Get(c.ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", field.Invalid(path.Child("name"), ref.Name, fmt.Sprintf("ConfigMap %s/%s: %v", ns, ref.Name, err))
	}
	v, ok := cm.Data[key]
	if !ok {
		return "", field.NotFound(path.Child("key"), key)
	}
	return v, nil
}

// approvedConfig reads the operator's config name: ConfigMap name in ns,
// key "config", YAML or JSON with cniVersion and plugins.
func approvedConfig(c cniContext, ns, name string) (*v1alpha1.CNIConfig, error) {
	if c.client == nil {
		return nil, fmt.Errorf("no API server to read approved configs from")
	}
	cm, err := c.client.CoreV1().ConfigMaps(ns).Get(c.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("no approved config %s in namespace %s", name, ns)
	}
	if err != nil {
		return nil, err
	}
	var approved v1alpha1.CNIConfig
	if errs := v1alpha1.DecodeStrict([]byte(cm.Data["config"]), &approved, field.NewPath("data", "config")); len(errs) > 0 {
		return nil, fmt.Errorf("approved config %s/%s: %w", ns, name, errs.ToAggregate())
	}
	if len(approved.Plugins) == 0 {
		return nil, fmt.Errorf("approved config %s/%s has no plugins", ns, name)
	}
	return &approved, nil
}

func attributeString(a resourceapi.DeviceAttribute) string {
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return fmt.Sprint(*a.IntValue)
	case a.BoolValue != nil:
		return fmt.Sprint(*a.BoolValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return ""
}
