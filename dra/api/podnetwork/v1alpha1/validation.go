package v1alpha1

import (
	"fmt"
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The bounds of the objects' fields, as the CRDs have them.
const (
	maxProvider       = 253
	maxParametersRefs = 16
	maxRefGroup       = 253
	maxRefKind        = 63
	maxRefName        = 253
	maxRefNamespace   = 63
	maxPodNetworkName = 253
)

// providerPattern is a provider: a domain, a slash, a path (the KEP's
// domain-prefixed identifier, acme.io/foo).
var providerPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$`)

// ValidatePodNetwork checks a PodNetwork as far as the object alone
// tells: its name, its provider and its parametersRefs, as the CRD's
// schema refuses them, and a ref to a NetworkAttachmentDefinition without
// a namespace, which the controller judges not ready for use (a
// PodNetwork has no namespace to look in). Whether the objects the refs
// name exist needs the cluster.
func ValidatePodNetwork(pn *PodNetwork) field.ErrorList {
	errs := validateName(field.NewPath("metadata", "name"), pn.Name, KindPodNetwork)
	spec := field.NewPath("spec")
	if p := pn.Spec.Provider; p != "" {
		switch {
		case len(p) > maxProvider:
			errs = append(errs, field.TooLong(spec.Child("provider"), p, maxProvider))
		case !providerPattern.MatchString(p):
			errs = append(errs, field.Invalid(spec.Child("provider"), p, "must be a domain-prefixed identifier, like acme.io/foo (leave it out for fastpath's)"))
		}
	}
	errs = append(errs, validateRefs(spec.Child("parametersRefs"), pn.Spec.ParametersRefs)...)
	for i, ref := range pn.Spec.ParametersRefs {
		if ref.NamesNAD() && ref.Namespace == "" {
			errs = append(errs, field.Required(spec.Child("parametersRefs").Index(i).Child("namespace"),
				"a NetworkAttachmentDefinition is namespaced, and a PodNetwork has no namespace to look in: set the ref's namespace"))
		}
	}
	return errs
}

// ValidatePodNetworkAttachment checks a PodNetworkAttachment as far as the
// object alone tells: its name, its PodNetwork's name and its
// parametersRefs, as the CRD's schema refuses them. A ref without a
// namespace is of the attachment's. Whether its PodNetwork and the
// objects the refs name exist needs the cluster.
func ValidatePodNetworkAttachment(pna *PodNetworkAttachment) field.ErrorList {
	errs := validateName(field.NewPath("metadata", "name"), pna.Name, KindPodNetworkAttachment)
	if ns := pna.Namespace; ns != "" {
		for _, msg := range validation.IsDNS1123Label(ns) {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "namespace"), ns, msg))
		}
	}
	spec := field.NewPath("spec")
	switch name := pna.Spec.PodNetworkName; {
	case name == "":
		errs = append(errs, field.Required(spec.Child("podNetworkName"), "the PodNetwork this attachment is of"))
	case len(name) > maxPodNetworkName:
		errs = append(errs, field.TooLong(spec.Child("podNetworkName"), name, maxPodNetworkName))
	default:
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(spec.Child("podNetworkName"), name, fmt.Sprintf("no PodNetwork can have this name: %s", msgs[0])))
		}
	}
	return append(errs, validateRefs(spec.Child("parametersRefs"), pna.Spec.ParametersRefs)...)
}

// validateName checks an object's name: a DNS subdomain, as the API
// server has every custom object's.
func validateName(path *field.Path, name, kind string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(path, "a "+kind+" needs a name")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

// validateRefs checks parametersRefs as the CRDs' schema does: at most
// maxParametersRefs; each with a group, a kind and a name of bounded
// length, and a namespace that is a namespace's name.
func validateRefs(path *field.Path, refs []ParametersRef) field.ErrorList {
	var errs field.ErrorList
	if len(refs) > maxParametersRefs {
		errs = append(errs, field.TooMany(path, len(refs), maxParametersRefs))
	}
	for i, ref := range refs {
		p := path.Index(i)
		if len(ref.Group) > maxRefGroup {
			errs = append(errs, field.TooLong(p.Child("group"), ref.Group, maxRefGroup))
		}
		errs = append(errs, boundedRequired(p.Child("kind"), ref.Kind, maxRefKind, "the kind (or resource) of the object, like network-attachment-definitions")...)
		errs = append(errs, boundedRequired(p.Child("name"), ref.Name, maxRefName, "the object's name")...)
		if ns := ref.Namespace; ns != "" {
			if len(ns) > maxRefNamespace {
				errs = append(errs, field.TooLong(p.Child("namespace"), ns, maxRefNamespace))
			} else if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				errs = append(errs, field.Invalid(p.Child("namespace"), ns, "no namespace can have this name: "+msgs[0]))
			}
		}
	}
	return errs
}

func boundedRequired(path *field.Path, value string, maxLen int, what string) field.ErrorList {
	switch {
	case value == "":
		return field.ErrorList{field.Required(path, what)}
	case len(value) > maxLen:
		return field.ErrorList{field.TooLong(path, value, maxLen)}
	}
	return nil
}
