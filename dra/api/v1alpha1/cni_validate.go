package v1alpha1

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/version"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// SupportedCNIVersions are the cniVersions a config may name: those the
// libcni fastpath runs plugins with supports.
func SupportedCNIVersions() []string { return version.All.SupportedVersions() }

var pluginType = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// maxFieldPath bounds an argument's fieldPath. The plugins and arguments
// of a config are bounded by bounds.Plugins and bounds.Arguments.
const maxFieldPath = 256

// ValidCNIPluginType says why t cannot be a plugin type (an executable's
// name in the plugin directories), or nil.
func ValidCNIPluginType(t string) error {
	switch {
	case t == "":
		return errors.New("must not be empty")
	case len(t) > 255 || !pluginType.MatchString(t):
		return errors.New("must be a file name: letters, digits, '.', '_' and '-', not starting with '.'")
	}
	return nil
}

// Validate checks the shape of a CNI request's parameters: apiVersion and
// kind (or neither), plugins or configName (not both), an interface name
// (which a configName claim may leave to the approved config), a
// cniVersion libcni supports, every plugin with a type, and every argument
// with exactly one source. Package dra resolves the arguments and checks
// the plugins against the node's policy.
func (c *CNIConfig) Validate() field.ErrorList {
	errs := c.validateTypeMeta(nil)
	if c.IfName != "" || c.ConfigName == "" {
		errs = append(errs, validIfName(field.NewPath("ifName"), c.IfName)...)
	}
	switch {
	case len(c.Plugins) > 0 && c.ConfigName != "":
		errs = append(errs, field.Invalid(field.NewPath("configName"), c.ConfigName, "give plugins or configName, not both"))
	case len(c.Plugins) == 0 && c.ConfigName == "":
		errs = append(errs, field.Required(field.NewPath("plugins"), "give plugins or configName"))
	case c.ConfigName != "":
		for _, msg := range validation.IsDNS1123Subdomain(c.ConfigName) {
			errs = append(errs, field.Invalid(field.NewPath("configName"), c.ConfigName, "must be the name of a CNIConfig: "+msg))
		}
		if c.CNIVersion != "" {
			errs = append(errs, field.Forbidden(field.NewPath("cniVersion"), "the approved config's cniVersion applies to a claim naming it with configName"))
		}
	}
	return append(errs, c.validateChain(nil)...)
}

// ValidateApproved checks the spec of an approved config (CNIConfigObject)
// below path: as Validate, but with plugins (configName would name
// another approved config) and ifName optional (claims then set it).
func (c *CNIConfig) ValidateApproved(path *field.Path) field.ErrorList {
	errs := c.validateTypeMeta(path)
	if c.IfName != "" {
		errs = append(errs, validIfName(path.Child("ifName"), c.IfName)...)
	}
	if c.ConfigName != "" {
		errs = append(errs, field.Forbidden(path.Child("configName"), "an approved config holds plugins; it cannot name another"))
	}
	if len(c.Plugins) == 0 {
		errs = append(errs, field.Required(path.Child("plugins"), "an approved config needs at least one plugin"))
	}
	return append(errs, c.validateChain(path)...)
}

func (c *CNIConfig) validateTypeMeta(path *field.Path) field.ErrorList {
	if (c.APIVersion == "" && c.Kind == "") || (c.APIVersion == CNIGroupVersion && c.Kind == KindCNI) {
		return nil
	}
	return field.ErrorList{field.Invalid(child(path, "apiVersion"), c.APIVersion+"/"+c.Kind,
		fmt.Sprintf("want apiVersion %s, kind %s, or neither", CNIGroupVersion, KindCNI))}
}

// child is path.Child(name), or a new path for a nil one.
func child(path *field.Path, name string, more ...string) *field.Path {
	if path == nil {
		return field.NewPath(name, more...)
	}
	return path.Child(name, more...)
}

func validIfName(path *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "the interface's name in the pod")}
	}
	if err := ValidInterfaceName(name); err != nil {
		return field.ErrorList{field.Invalid(path, name, err.Error())}
	}
	return nil
}

// validateChain checks cniVersion and the plugins.
func (c *CNIConfig) validateChain(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c.CNIVersion != "" && !slices.Contains(SupportedCNIVersions(), c.CNIVersion) {
		errs = append(errs, field.NotSupported(child(path, "cniVersion"), c.CNIVersion, SupportedCNIVersions()))
	}
	if err := bounds.TooMany(child(path, "plugins"), len(c.Plugins), bounds.Plugins); err != nil {
		errs = append(errs, err)
	}
	for i, p := range c.Plugins {
		pp := child(path, "plugins").Index(i)
		if err := ValidCNIPluginType(p.Type); err != nil {
			errs = append(errs, field.Invalid(pp.Child("type"), p.Type, err.Error()))
		}
		// Plugins read their keys in any letter case: "Type" is type.
		for _, k := range slices.Sorted(maps.Keys(p.Config)) {
			if strings.EqualFold(k, "type") {
				errs = append(errs, field.Forbidden(pp.Child("config", k), "the plugin's type is plugins[].type"))
			}
		}
		if err := bounds.TooMany(pp.Child("arguments"), len(p.Arguments), bounds.Arguments); err != nil {
			errs = append(errs, err)
		}
		for j, a := range p.Arguments {
			errs = append(errs, a.validate(pp.Child("arguments").Index(j))...)
		}
	}
	return errs
}

func (a CNIArgument) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case a.FieldPath == "":
		errs = append(errs, field.Required(path.Child("fieldPath"), "the dot-separated path of the field to set in config"))
	case len(a.FieldPath) > maxFieldPath:
		errs = append(errs, field.TooLong(path.Child("fieldPath"), "", maxFieldPath))
	case strings.EqualFold(a.FieldPath, "type"):
		errs = append(errs, field.Invalid(path.Child("fieldPath"), a.FieldPath, "the plugin's type cannot be set by an argument"))
	case slices.Contains(strings.Split(a.FieldPath, "."), ""):
		errs = append(errs, field.Invalid(path.Child("fieldPath"), a.FieldPath, "empty path element"))
	}
	n := 0
	for _, set := range []bool{len(a.Value) > 0, a.ValueFrom != nil, a.AttributeRef != ""} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		errs = append(errs, field.Required(path.Child("value"), "give value or valueFrom"))
	case n > 1:
		errs = append(errs, field.Invalid(path.Child("valueFrom"), "", "give value or valueFrom (or attributeRef), not more than one"))
	case a.ValueFrom != nil:
		errs = append(errs, a.ValueFrom.validate(path.Child("valueFrom"))...)
	}
	return errs
}

func (s CNIValueSource) validate(path *field.Path) field.ErrorList {
	n := 0
	for _, set := range []bool{s.AttributeRef != "", s.ResourceSliceFieldRef != nil, s.ConfigMapKeyRef != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return field.ErrorList{field.Invalid(path, "", "give exactly one of attributeRef, resourceSliceFieldRef, configMapKeyRef")}
	}
	switch {
	case s.ResourceSliceFieldRef != nil:
		return validSliceField(path.Child("resourceSliceFieldRef"), s.ResourceSliceFieldRef)
	case s.ConfigMapKeyRef != nil:
		return s.ConfigMapKeyRef.validate(path.Child("configMapKeyRef"))
	}
	return nil
}

func validSliceField(path *field.Path, sel *corev1.ObjectFieldSelector) field.ErrorList {
	var errs field.ErrorList
	if sel.APIVersion != "" && sel.APIVersion != CNISliceAPIVersion {
		errs = append(errs, field.NotSupported(path.Child("apiVersion"), sel.APIVersion, []string{CNISliceAPIVersion}))
	}
	if !slices.Contains(CNISliceFields, sel.FieldPath) {
		errs = append(errs, field.NotSupported(path.Child("fieldPath"), sel.FieldPath, CNISliceFields))
	}
	return errs
}

func (r CNIConfigMapKeyRef) validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if r.Name == "" {
		errs = append(errs, field.Required(path.Child("name"), "the ConfigMap's name"))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(r.Name) {
			errs = append(errs, field.Invalid(path.Child("name"), r.Name, msg))
		}
	}
	n := 0
	for _, set := range []bool{r.Key != "", r.Attribute != "", r.ResourceSliceFieldRef != nil} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		errs = append(errs, field.Invalid(path.Child("key"), r.Key, "give exactly one of key, attribute, resourceSliceFieldRef"))
	case r.Key != "":
		for _, msg := range validation.IsConfigMapKey(r.Key) {
			errs = append(errs, field.Invalid(path.Child("key"), r.Key, msg))
		}
	case r.ResourceSliceFieldRef != nil:
		errs = append(errs, validSliceField(path.Child("resourceSliceFieldRef"), r.ResourceSliceFieldRef)...)
	}
	return errs
}

// Validate checks an approved config object: its kind, a name claims can
// give as configName, and its spec.
func (o *CNIConfigObject) Validate() field.ErrorList {
	var errs field.ErrorList
	if o.APIVersion != CNIGroupVersion || o.Kind != KindCNIConfig {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), o.APIVersion+"/"+o.Kind,
			fmt.Sprintf("want apiVersion %s, kind %s", CNIGroupVersion, KindCNIConfig)))
	}
	if o.Namespace != "" {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "namespace"), "a CNIConfig is cluster-scoped"))
	}
	if o.Name == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "name"), ""))
	}
	for _, msg := range validation.IsDNS1123Subdomain(o.Name) {
		if o.Name != "" {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), o.Name, msg))
		}
	}
	return append(errs, o.Spec.ValidateApproved(field.NewPath("spec"))...)
}
