package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// AnnotationNetworks is the pod annotation that lists the networks a pod
// attaches to: a JSON list of Network, the KEP's Pod.spec.networks, until
// Pod has that field.
const AnnotationNetworks = Group + "/networks"

// quoted bounds the part of an annotation quoted in an error.
const quoted = 128

// annotationPath is the field path of AnnotationNetworks.
func annotationPath() *field.Path {
	return field.NewPath("metadata", "annotations").Key(AnnotationNetworks)
}

// Network defines what PodNetwork to attach to the Pod: one element of
// the KEP's Pod.spec.networks. It is read by the names of the KEP's Go
// type and Pod example (name, attachmentName) and by those of its
// auto-population (podNetworkName, and podNetworkAttachmentName beside
// it), which fastpath wrote first and keeps as aliases; ParseNetworks
// leaves the names in PodNetworkName and PodNetworkAttachmentName.
type Network struct {
	// Name is the KEP's name of PodNetworkName.
	//
	// +optional
	Name string `json:"name,omitempty"`

	// AttachmentName is the KEP's name of PodNetworkAttachmentName.
	//
	// +optional
	AttachmentName string `json:"attachmentName,omitempty"`

	// PodNetworkName is the name of the PodNetwork to attach.
	// Only one of: [PodNetworkName, PodNetworkAttachmentName] can be set.
	//
	// +optional
	PodNetworkName string `json:"podNetworkName,omitempty"`

	// PodNetworkAttachmentName is the name of the PodNetworkAttachment, in
	// the pod's namespace, to attach.
	// Only one of: [PodNetworkName, PodNetworkAttachmentName] can be set.
	//
	// +optional
	PodNetworkAttachmentName string `json:"podNetworkAttachmentName,omitempty"`

	// InterfaceName is the network interface name inside the Pod for this
	// attachment. Examples: eth1 or net1. Empty: the implementation names
	// it.
	//
	// +optional
	InterfaceName string `json:"interfaceName,omitempty"`

	// IsDefaultGW is a flag indicating this PodNetwork will hold the Default
	// Gateway inside the Pod. Only one Network can have this flag set to True.
	//
	// +optional
	IsDefaultGW bool `json:"isDefaultGW,omitempty"`
}

// DefaultNetworks is the list of a pod with no network list and no host
// network (the KEP's auto-population): the default PodNetwork.
func DefaultNetworks() []Network {
	return []Network{{PodNetworkName: DefaultPodNetworkName}}
}

// ParseNetworks decodes the value of AnnotationNetworks, strictly: a field
// the KEP does not have is an error, not ignored. A value of more than
// bounds.AnnotationBytes is refused unread, one beyond bounds.Depth or
// bounds.Items before it is decoded, with a *field.Error naming the
// annotation (and the list or object over its bound).
func ParseNetworks(value string) ([]Network, error) {
	nets, err := parseNetworks(value)
	if fe, ok := errors.AsType[*field.Error](err); ok {
		return nil, fe
	}
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationNetworks, err)
	}
	return nets, nil
}

// parseNetworks is ParseNetworks; a bound broken is a *field.Error.
func parseNetworks(value string) ([]Network, error) {
	if err := bounds.CheckJSON([]byte(value), annotationPath(), bounds.AnnotationBytes, "a pod's network list"); err != nil {
		if err.Type == field.ErrorTypeTooLong {
			err.Detail += ": list fewer networks"
		}
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	var nets []Network
	if err := dec.Decode(&nets); err != nil {
		return nil, fmt.Errorf("want a JSON list of {name | attachmentName (or podNetworkName | podNetworkAttachmentName), interfaceName, isDefaultGW}: %w", err)
	}
	if dec.More() {
		return nil, errors.New("data after the list")
	}
	if nets == nil {
		return nil, errors.New("want a JSON list, not null")
	}
	for i := range nets {
		if err := nets[i].unalias(); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return nets, nil
}

// unalias moves the KEP's names into the fields fastpath reads; an
// element that gives one name twice, differently, is an error.
func (n *Network) unalias() error {
	for _, a := range []struct {
		kep, alias string
		from, into *string
	}{
		{"name", "podNetworkName", &n.Name, &n.PodNetworkName},
		{"attachmentName", "podNetworkAttachmentName", &n.AttachmentName, &n.PodNetworkAttachmentName},
	} {
		if *a.from == "" {
			continue
		}
		if *a.into != "" && *a.into != *a.from {
			return fmt.Errorf("%s %q and %s %q name different objects: give one (%s is the KEP's, %s fastpath's alias)", a.kep, *a.from, a.alias, *a.into, a.kep, a.alias)
		}
		*a.into, *a.from = *a.from, ""
	}
	return nil
}

// PodNetworks is the networks a pod with annotations attaches to:
// AnnotationNetworks parsed and validated (ValidateNetworks), or, when the
// pod has none, DefaultNetworks (nil with host network). Errors are
// field.ErrorList under metadata.annotations[network.fastpath.dev/networks].
func PodNetworks(annotations map[string]string, hostNetwork bool) ([]Network, field.ErrorList) {
	path := annotationPath()
	value, ok := annotations[AnnotationNetworks]
	if !ok {
		if hostNetwork {
			return nil, nil
		}
		return DefaultNetworks(), nil
	}
	nets, err := parseNetworks(value)
	if fe, ok := errors.AsType[*field.Error](err); ok {
		return nil, field.ErrorList{fe}
	}
	if err != nil {
		return nil, field.ErrorList{field.Invalid(path, bounds.Cut(value, quoted), err.Error())}
	}
	if errs := ValidateNetworks(path, nets, hostNetwork); len(errs) > 0 {
		return nil, errs
	}
	return nets, nil
}

// ValidateNetworks checks a pod's network list as the KEP's static
// validation does, with nothing but the list: each element names exactly
// one of a PodNetwork and a PodNetworkAttachment, by a valid object name;
// the pod references a PodNetwork (or a PodNetworkAttachment) once; at most
// one element is the default gateway; interface names are valid Linux names
// and unique; a pod with host network lists none. The list is not empty.
// Whether two attachments, or an attachment and a PodNetwork, are of the
// same PodNetwork needs the objects: the KEP's active validation, not this.
func ValidateNetworks(path *field.Path, nets []Network, hostNetwork bool) field.ErrorList {
	var errs field.ErrorList
	if hostNetwork {
		return append(errs, field.Forbidden(path, "a pod with hostNetwork attaches to no PodNetwork"))
	}
	if len(nets) == 0 {
		return append(errs, field.Required(path, "at least one network; leave the annotation out for the default PodNetwork"))
	}
	podNetworks := map[string]int{}
	attachments := map[string]int{}
	interfaces := map[string]int{}
	gateway := -1
	for i, n := range nets {
		p := path.Index(i)
		switch {
		case n.PodNetworkName == "" && n.PodNetworkAttachmentName == "":
			errs = append(errs, field.Required(p, "one of name (podNetworkName) and attachmentName (podNetworkAttachmentName)"))
		case n.PodNetworkName != "" && n.PodNetworkAttachmentName != "":
			errs = append(errs, field.Invalid(p.Child("attachmentName"), n.PodNetworkAttachmentName, "only one of name (podNetworkName) and attachmentName (podNetworkAttachmentName) may be set"))
		case n.PodNetworkName != "":
			errs = append(errs, uniqueName(p.Child("podNetworkName"), n.PodNetworkName, i, podNetworks, "PodNetwork")...)
		default:
			errs = append(errs, uniqueName(p.Child("podNetworkAttachmentName"), n.PodNetworkAttachmentName, i, attachments, "PodNetworkAttachment")...)
		}
		if n.InterfaceName != "" {
			if err := validInterfaceName(n.InterfaceName); err != nil {
				errs = append(errs, field.Invalid(p.Child("interfaceName"), n.InterfaceName, err.Error()))
			} else if first, dup := interfaces[n.InterfaceName]; dup {
				errs = append(errs, field.Duplicate(p.Child("interfaceName"), fmt.Sprintf("%s (as in element %d)", n.InterfaceName, first)))
			} else {
				interfaces[n.InterfaceName] = i
			}
		}
		if n.IsDefaultGW {
			if gateway >= 0 {
				errs = append(errs, field.Invalid(p.Child("isDefaultGW"), true, fmt.Sprintf("only one network holds the default gateway, and element %d does", gateway)))
			} else {
				gateway = i
			}
		}
	}
	return errs
}

func uniqueName(p *field.Path, name string, i int, seen map[string]int, kind string) field.ErrorList {
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p, name, fmt.Sprintf("must be a %s's name: %s", kind, msgs[0]))}
	}
	if first, dup := seen[name]; dup {
		return field.ErrorList{field.Duplicate(p, fmt.Sprintf("%s (a pod references a %s once; element %d does)", name, kind, first))}
	}
	seen[name] = i
	return nil
}

// validInterfaceName says why name cannot be a Linux network interface's
// name, or nil: the kernel's dev_valid_name (1 to 15 bytes, not "." or
// "..", no '/', ':' or whitespace), with NUL refused too. Windows takes
// every name Linux takes.
func validInterfaceName(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case len(name) > 15:
		return fmt.Errorf("must be at most 15 bytes, not %d", len(name))
	case name == "." || name == "..":
		return errors.New(`must not be "." or ".."`)
	}
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '/', ':':
			return errors.New("must not contain '/' or ':'")
		case ' ', '\t', '\n', '\v', '\f', '\r', 0xa0:
			return errors.New("must not contain whitespace (the kernel takes the byte 0xa0 of characters such as à for one)")
		case 0:
			return errors.New("must not contain a NUL byte")
		}
	}
	return nil
}
