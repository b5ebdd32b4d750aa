package cnipolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// DefaultPlugins are the plugin types a CNI claim may run unless the
// operator says otherwise: the reference plugins that attach an interface
// to the pod or configure it, and their IPAM. host-device is not among
// them: it moves any host interface it is told to into the pod.
var DefaultPlugins = []string{"bridge", "host-local", "ipvlan", "macvlan", "static", "tuning", "vlan"}

// Options is what the operator allows (flags).
type Options struct {
	// Plugins are the plugin types a config may run, IPAM included: a CNI
	// config runs privileged code.
	Plugins []string
	// ConfigNamespace is where approved configs read ConfigMaps from.
	ConfigNamespace string
	// RequireApproved: claims may only name approved configs
	// (configName), not carry their own plugins.
	RequireApproved bool
	// VLANIDs are the VLANs of the allocated device (the node's
	// interface) a claim's own config may make its interface on (vlan's
	// vlanId), as Policy.VLANIDs; none by default. Approved configs may
	// use any.
	VLANIDs []string
}

// Sources is what an argument may refer to.
type Sources struct {
	ctx context.Context // Build's
	// ConfigMaps reads ConfigMaps (nil: none can be read); Approved reads
	// approved configs.
	ConfigMaps ConfigMaps
	Approved   ApprovedConfigs
	Namespace  string // the claim's
	// Attributes of the allocated device, and Slice: sliceFields -> value.
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	Slice      map[string]string
	// Static: nothing is read and no device is allocated (fastpathd
	// validate). Attributes, slice fields and ConfigMap keys resolve to
	// placeholders; approved configs not found are not checked further.
	Static bool
}

// ConfigMaps reads the data of ConfigMaps. An error of one that does not
// exist, or that fastpathd may not read, is the API server's
// (apierrors.IsNotFound, apierrors.IsForbidden say which).
type ConfigMaps interface {
	ConfigMapData(ctx context.Context, namespace, name string) (map[string]string, error)
}

// originAllowlist marks the errors of plugin types not on the allowlist.
const originAllowlist = "allowlist"

// Network is a request's network, resolved: what runs at sandbox
// creation.
type Network struct {
	IfName   string
	Conflist []byte
	// Redact are the values read from ConfigMaps: never shown in a
	// claim's status or in errors.
	Redact []string
	// Approved names the approved config used, "" for an inline config.
	Approved string
}

// errApprovedUnknown: in static mode, the approved config a claim names is
// not among the inputs.
type errApprovedUnknown struct{ name string }

func (e errApprovedUnknown) Error() string { return "CNIConfig " + e.name + " is not among the inputs" }

// Build validates cfg and builds the conflist to run: plugins from
// the config or the approved config it names, arguments resolved,
// cniVersion and name set, every plugin type (and IPAM type) on the
// allowlist, host objects only from the device or the operator, and the
// result parsed by libcni. Errors name the fields and never carry a value
// read from a ConfigMap; at most bounds.Problems of them are kept, the
// rest counted (bounds.Keep).
func Build(ctx context.Context, cfg v1alpha1.CNIConfig, name string, policy Options, c Sources) (Network, field.ErrorList) {
	net, errs := build(ctx, cfg, name, policy, c)
	return net, bounds.Keep(errs)
}

func build(ctx context.Context, cfg v1alpha1.CNIConfig, name string, policy Options, c Sources) (Network, field.ErrorList) {
	c.ctx = ctx
	if errs := cfg.Validate(); len(errs) > 0 {
		return Network{}, errs
	}
	if policy.RequireApproved && cfg.ConfigName == "" {
		return Network{}, field.ErrorList{field.Forbidden(field.NewPath("plugins"),
			"this node runs only approved configs (--cni-require-approved): name a CNIConfig with configName")}
	}
	net := Network{IfName: cfg.IfName}
	chain, base, trusted := cfg, (*field.Path)(nil), false
	if cfg.ConfigName != "" {
		obj, err := c.approvedConfig(cfg.ConfigName)
		if err != nil {
			return Network{}, field.ErrorList{err}
		}
		if obj == nil {
			return Network{}, nil
		}
		chain, base, trusted, net.Approved = obj.Spec, field.NewPath("configName").Key(cfg.ConfigName).Child("spec"), true, cfg.ConfigName
		if net.IfName == "" {
			net.IfName = obj.Spec.IfName
		}
		if net.IfName == "" {
			return Network{}, field.ErrorList{field.Required(field.NewPath("ifName"),
				fmt.Sprintf("CNIConfig %s sets no ifName: the claim must", cfg.ConfigName))}
		}
	}
	cniVersion := chain.CNIVersion
	if cniVersion == "" {
		cniVersion = v1alpha1.DefaultCNIVersion
	}
	var errs field.ErrorList
	if err := ValidNetworkName(name); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("name"), name, err.Error()))
	}
	ns := c.Namespace
	if trusted {
		ns = policy.ConfigNamespace
	}
	var out []any
	for i, p := range chain.Plugins {
		path := sub(base, "plugins").Index(i)
		conf := maps.Clone(p.Config)
		if conf == nil {
			conf = map[string]any{}
		}
		conf["type"] = p.Type
		set := map[string]argSource{}
		args := p.Arguments
		if cfg.Upstream && !trusted {
			args = append(slices.Clone(args), deviceDefaults(p.Type, conf)...)
		}
		for j, a := range args {
			apath := path.Child("arguments").Index(j)
			v, src, err := c.resolve(a, ns, apath)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if src.kind == sourceConfigMap {
				if s, ok := v.(string); ok && s != "" {
					net.Redact = append(net.Redact, s)
				}
			}
			setPath(conf, strings.Split(a.FieldPath, "."), v)
			src.index = j
			set[a.FieldPath] = src
		}
		view := Inspect(conf)
		if !trusted {
			errs = append(errs, hostObjects(view, set, path, policy.VLANIDs, c.Static)...)
		}
		for _, t := range view.Types {
			if !slices.Contains(policy.Plugins, t.Name) {
				at := path.Child("type")
				if t.Path != "type" {
					at = path.Child("config")
					for _, k := range strings.Split(t.Path, ".") {
						at = at.Child(k)
					}
				}
				errs = append(errs, field.Forbidden(at, fmt.Sprintf("plugin type %q is not on this node's allowlist %v (--cni-plugins)",
					t.Name, policy.Plugins)).WithOrigin(originAllowlist))
			}
		}
		out = append(out, conf)
	}
	if len(errs) > 0 {
		if cfg.Upstream && !trusted {
			errs = upstreamPaths(errs)
		}
		return Network{}, redactErrs(errs, net.Redact)
	}
	data, err := json.Marshal(map[string]any{"cniVersion": cniVersion, "name": name, "plugins": out})
	if err != nil {
		return Network{}, field.ErrorList{field.Invalid(sub(base, "plugins"), "", err.Error())}
	}
	if _, err := libcni.ConfListFromBytes(data); err != nil {
		return Network{}, redactErrs(field.ErrorList{field.Invalid(sub(base, "plugins"), "", fmt.Sprintf("not a valid CNI configuration: %v", err))}, net.Redact)
	}
	if errs := ownGateway(data, base); len(errs) > 0 {
		if cfg.Upstream && !trusted {
			errs = upstreamPaths(errs)
		}
		return Network{}, redactErrs(errs, net.Redact)
	}
	net.Conflist = data
	return net, nil
}

// ownGateway refuses a static address of the list that is also a
// gateway it names (OwnGateway), at its path in the config under base.
func ownGateway(conflist []byte, base *field.Path) field.ErrorList {
	a, err := ReadAddressing(conflist, nil)
	if err != nil {
		return nil // libcni read it: not for here
	}
	s, g, ok := a.OwnGateway()
	if !ok {
		return nil
	}
	return field.ErrorList{field.Invalid(ConfigPath(base, s), s.Value, OwnGatewayDetail(s, ConfigPath(base, g).String()))}
}

// ConfigPath is where a plugin's address is written in a config whose
// plugins are under base (nil: the claim's parameters):
// plugins[i].config.path.
func ConfigPath(base *field.Path, a Address) *field.Path {
	if a.Plugin < 0 {
		return field.NewPath(a.Path)
	}
	return sub(base, "plugins").Index(a.Plugin).Child("config", a.Path)
}

// OwnGatewayDetail says why the static address s, also the gateway at
// gateway, is refused, and what to do.
func OwnGatewayDetail(s Address, gateway string) string {
	return fmt.Sprintf("%s is also the gateway %s: a route through the interface's own address goes nowhere; "+
		"write the router's address as the gateway, or give the interface another address", s.Addr, gateway)
}

// sub is base.Child(name), or a path of name alone for a nil base.
func sub(base *field.Path, name string) *field.Path {
	if base == nil {
		return field.NewPath(name)
	}
	return base.Child(name)
}

// approvedConfig reads and checks the approved config name; nil, nil in
// static mode when it is not known.
func (c Sources) approvedConfig(name string) (*v1alpha1.CNIConfigObject, *field.Error) {
	path := field.NewPath("configName")
	if c.Approved == nil {
		return nil, field.Invalid(path, name, "no API server to read approved configs (CNIConfig objects) from")
	}
	obj, err := c.Approved.Get(c.ctx, name)
	switch {
	case c.Static && (apierrors.IsNotFound(err) || isApprovedUnknown(err)):
		return nil, nil
	case apierrors.IsNotFound(err) || isApprovedUnknown(err):
		return nil, field.NotFound(path, name)
	case err != nil:
		return nil, field.Invalid(path, name, fmt.Sprintf("reading CNIConfig %s: %v", name, err))
	}
	if errs := obj.Spec.ValidateApproved(field.NewPath("spec")); len(errs) > 0 {
		return nil, field.Invalid(path, name, fmt.Sprintf("CNIConfig %s is not valid: %s", name, bounds.Join(errs)))
	}
	return obj, nil
}

func isApprovedUnknown(err error) bool { return errors.As(err, new(errApprovedUnknown)) }

// Where an argument's value came from.
const (
	sourceValue = iota
	sourceAttribute
	sourceSlice
	sourceConfigMap
)

type argSource struct {
	kind  int
	index int // of the argument
	// top: an attribute named by the argument's own attributeRef, not
	// by valueFrom's.
	top bool
}

func (s argSource) field(path *field.Path) *field.Path {
	a := path.Child("arguments").Index(s.index)
	switch s.kind {
	case sourceValue:
		return a.Child("value")
	case sourceSlice:
		return a.Child("valueFrom", "resourceSliceFieldRef")
	case sourceConfigMap:
		return a.Child("valueFrom", "configMapKeyRef")
	case sourceAttribute:
		if s.top {
			return a.Child("attributeRef")
		}
		return a.Child("valueFrom", "attributeRef")
	}
	return a
}

// resolve is an argument's value and where it came from.
func (c Sources) resolve(a v1alpha1.CNIArgument, ns string, path *field.Path) (any, argSource, *field.Error) {
	switch {
	case len(a.Value) > 0:
		var v any
		if err := json.Unmarshal(a.Value, &v); err != nil {
			return nil, argSource{}, field.Invalid(path.Child("value"), string(a.Value), err.Error())
		}
		return v, argSource{kind: sourceValue}, nil
	case a.AttributeRef != "":
		v, err := c.attribute(a.AttributeRef, path.Child("attributeRef"))
		return v, argSource{kind: sourceAttribute, top: true}, err
	case a.ValueFrom == nil:
		return nil, argSource{}, field.Required(path.Child("value"), "give value or valueFrom")
	}
	from := a.ValueFrom
	vpath := path.Child("valueFrom")
	switch {
	case from.AttributeRef != "":
		v, err := c.attribute(from.AttributeRef, vpath.Child("attributeRef"))
		return v, argSource{kind: sourceAttribute}, err
	case from.ResourceSliceFieldRef != nil:
		v, err := c.sliceField(from.ResourceSliceFieldRef.FieldPath, vpath.Child("resourceSliceFieldRef", "fieldPath"))
		return v, argSource{kind: sourceSlice}, err
	case from.ConfigMapKeyRef != nil:
		v, err := c.configMapValue(*from.ConfigMapKeyRef, ns, vpath.Child("configMapKeyRef"))
		return v, argSource{kind: sourceConfigMap}, err
	}
	return nil, argSource{}, field.Required(vpath, "give attributeRef, resourceSliceFieldRef or configMapKeyRef")
}

// attribute is the string form of an attribute of the allocated device.
func (c Sources) attribute(ref string, path *field.Path) (string, *field.Error) {
	if c.Static {
		return "<attribute " + ref + ">", nil
	}
	name := resourceapi.QualifiedName(ref)
	if !strings.Contains(ref, "/") {
		name = resourceapi.QualifiedName(v1alpha1.CNIDriver + "/" + ref)
	}
	a, ok := c.Attributes[name]
	if !ok {
		return "", field.NotFound(path, ref)
	}
	return attributeString(a), nil
}

func (c Sources) sliceField(fieldPath string, path *field.Path) (string, *field.Error) {
	if c.Static && fieldPath != "spec.driver" {
		return "<" + fieldPath + ">", nil
	}
	if fieldPath == "spec.driver" {
		return v1alpha1.CNIDriver, nil
	}
	v, ok := c.Slice[fieldPath]
	if !ok {
		return "", field.NotSupported(path, fieldPath, v1alpha1.CNISliceFields)
	}
	return v, nil
}

// configMapValue reads a key of a ConfigMap in ns.
func (c Sources) configMapValue(ref v1alpha1.CNIConfigMapKeyRef, ns string, path *field.Path) (string, *field.Error) {
	key := ref.Key
	var err *field.Error
	switch {
	case ref.Attribute != "":
		key, err = c.attribute(ref.Attribute, path.Child("attribute"))
	case ref.ResourceSliceFieldRef != nil:
		key, err = c.sliceField(ref.ResourceSliceFieldRef.FieldPath, path.Child("resourceSliceFieldRef", "fieldPath"))
	}
	if err != nil {
		return "", err
	}
	if c.Static {
		return "<ConfigMap " + ref.Name + ">", nil
	}
	if c.ConfigMaps == nil {
		return "", field.Invalid(path.Child("name"), ref.Name, "no API server to read ConfigMaps from")
	}
	data, getErr := c.ConfigMaps.ConfigMapData(c.ctx, ns, ref.Name)
	switch {
	case apierrors.IsNotFound(getErr):
		return "", field.NotFound(path.Child("name"), fmt.Sprintf("ConfigMap %s/%s", ns, ref.Name))
	case apierrors.IsForbidden(getErr):
		return "", field.Forbidden(path.Child("name"), fmt.Sprintf("fastpathd may not read ConfigMaps of namespace %s: the operator allows it per namespace (chart value cni.configMapNamespaces)", ns))
	case getErr != nil:
		return "", field.Invalid(path.Child("name"), ref.Name, fmt.Sprintf("reading ConfigMap %s/%s: %v", ns, ref.Name, getErr))
	}
	v, ok := data[key]
	if !ok {
		return "", field.NotFound(path.Child("key"), key)
	}
	return v, nil
}

// setPath sets conf[path...] = v, making maps on the way. Keys are
// matched as the plugin matches them (in any letter case): an argument
// sets the field the plugin reads, whatever its spelling in the config.
func setPath(conf map[string]any, path []string, v any) {
	for _, p := range path[:len(path)-1] {
		key := p
		if keys := Keys(conf, p); len(keys) == 1 {
			key = keys[0]
		}
		next, ok := conf[key].(map[string]any)
		if !ok {
			next = map[string]any{}
		} else {
			// A copy: the plugin's config is the claim's (or the
			// approved config's), shared.
			next = maps.Clone(next)
		}
		Set(conf, p, next)
		conf = next
	}
	Set(conf, path[len(path)-1], v)
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

// deviceDefaults are the arguments that give a plugin of the upstream form
// (which has none) the host device it would take by default, the node's
// default-route interface (macvlan's, ipvlan's, vlan's master), from the
// allocated device instead: its attribute "name", as the upstream
// driver's own example sets master.
func deviceDefaults(pluginType string, conf map[string]any) []v1alpha1.CNIArgument {
	var out []v1alpha1.CNIArgument
	for _, d := range referencePlugins[pluginType].defaults {
		if d.kind != HostDevice || d.value != DefaultRouteLink {
			continue
		}
		if setFolded(conf, d.field) {
			continue
		}
		out = append(out, v1alpha1.CNIArgument{FieldPath: d.field, ValueFrom: &v1alpha1.CNIValueSource{AttributeRef: "name"}})
	}
	return out
}

// upstreamPlugin is a path into a plugin of the plugins form.
var upstreamPlugin = regexp.MustCompile(`^plugins\[(\d+)\](\.config)?`)

// upstreamPaths are errors of a claim of the upstream form at the paths
// of that form (config.plugins[0].master for plugins[0].config.master),
// saying what that form, which has no arguments, does instead.
func upstreamPaths(errs field.ErrorList) field.ErrorList {
	out := make(field.ErrorList, 0, len(errs))
	for _, e := range errs {
		c := *e
		c.Field = upstreamPlugin.ReplaceAllString(c.Field, "config.plugins[$1]")
		if strings.Contains(c.Detail, "(an argument with valueFrom.attributeRef)") {
			c.Detail += "; this form has no arguments: leave the field out where the node fills it from the allocated device (macvlan's, ipvlan's and vlan's master)"
		}
		out = append(out, &c)
	}
	return out
}

// setFolded says whether conf has field under any key the plugin reads as
// it (encoding/json's folding).
func setFolded(conf map[string]any, field string) bool {
	for k := range conf {
		if Fold(k) == Fold(field) {
			return true
		}
	}
	return false
}
