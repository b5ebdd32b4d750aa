package npwg

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"unicode"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// Attachment is one element of a pod's network selection annotation: one
// attachment to a network, however many the pod has to that network
// (§4.2).
type Attachment struct {
	// The element in the standard's Go type. Namespace is always set, to
	// the pod's when the element names none. InterfaceRequest is the name
	// the element asks for, or the one AssignInterfaces gave it.
	// GatewayRequest is non-nil, and may be empty, exactly when the
	// element has "default-route".
	nadv1.NetworkSelectionElement
	// Index is the element's position in the annotation.
	Index int
	// GeneratedInterface says that AssignInterfaces chose
	// InterfaceRequest.
	GeneratedInterface bool
	// Extensions are the element's keys of other implementations, named
	// in reverse domain notation (§4.1.2.1), as written.
	Extensions map[string]json.RawMessage
}

// Network is the attachment's network as namespace/name, as the status
// annotation names it (§5.3.1).
func (a *Attachment) Network() string { return a.Namespace + "/" + a.Name }

// DefaultRoute says whether the element has "default-route": this
// attachment, not the cluster default network's, carries the pod's default
// route (§4.1.2.1.9).
func (a *Attachment) DefaultRoute() bool { return a.GatewayRequest != nil }

// NetworksPath is the field path of the selection annotation; the paths of
// the errors of ParseNetworks, CheckInterfaces and AssignInterfaces start
// with it.
func NetworksPath() *field.Path {
	return field.NewPath("metadata", "annotations").Key(nadv1.NetworkAttachmentAnnot)
}

// ParseNetworks reads the value of a pod's k8s.v1.cni.cncf.io/networks
// annotation (§4.1) in either format: a comma-separated list of
// [namespace/]name[@interface], or a JSON list of objects. Elements that
// name no namespace are of podNamespace. It checks everything that can be
// checked without the networks: names, addresses, ports, keys and their
// types, that no interface name is asked for twice and that at most one
// element has "default-route". The annotation is valid or not as a whole
// (the standard says an invalid one is ignored): with errors, there are no
// attachments. An empty value selects no network; one of more than
// bounds.AnnotationBytes is refused unread, and one of more than
// bounds.Items elements, or beyond bounds.Depth or bounds.Items within an
// element, before any element is read, with one error saying which.
func ParseNetworks(podNamespace, value string) ([]Attachment, field.ErrorList) {
	path := NetworksPath()
	if err := overBounds(value, path); err != nil {
		return nil, field.ErrorList{err}
	}
	value = strings.TrimSpace(value)
	var atts []Attachment
	var errs field.ErrorList
	switch {
	case value == "":
		return nil, nil
	case strings.ContainsAny(value[:1], `[{"`):
		atts, errs = parseJSONList(podNamespace, value, path)
	default:
		atts, errs = parseCommaList(podNamespace, value, path)
	}
	errs = append(errs, checkUnique(atts, path)...)
	if len(errs) > 0 {
		return nil, errs
	}
	return atts, nil
}

// overBounds is the error of a selection over its bounds, nil when it is
// within them: its bytes, its elements (counted by their commas in the
// comma-delimited format), and in the JSON format what bounds.CheckJSON
// checks.
func overBounds(value string, path *field.Path) *field.Error {
	const what = "a network selection"
	if len(value) > bounds.AnnotationBytes {
		err := bounds.TooLong(path, len(value), bounds.AnnotationBytes, what)
		err.Detail += ": select fewer networks"
		return err
	}
	if t := strings.TrimSpace(value); t != "" && !strings.ContainsAny(t[:1], `[{"`) {
		return bounds.TooMany(path, strings.Count(t, ",")+1, bounds.Items)
	}
	return bounds.CheckJSON([]byte(value), path, bounds.AnnotationBytes, what)
}

// parseCommaList reads the comma-delimited format (§4.1.1). Whitespace
// around an element is ignored, so that a long list may be wrapped; an
// empty element is an error. The @interface suffix is not in v1.3 of the
// standard but is how Multus, its reference implementation, and its users
// name an interface in this format.
func parseCommaList(podNamespace, value string, path *field.Path) ([]Attachment, field.ErrorList) {
	var atts []Attachment
	var errs field.ErrorList
	for i, elem := range strings.Split(value, ",") {
		p := path.Index(i)
		elem = strings.TrimSpace(elem)
		switch {
		case elem == "":
			errs = append(errs, field.Required(p, "empty element: network references are separated by single commas, like net-a,other-ns/net-b"))
			continue
		case strings.ContainsAny(elem, `[]{}"`):
			errs = append(errs, field.Invalid(p, elem, `must be [namespace/]name[@interface]; the JSON format is a list of objects and starts with "["`))
			continue
		case strings.ContainsFunc(elem, unicode.IsSpace):
			errs = append(errs, field.Invalid(p, elem, "must not contain whitespace; whitespace is allowed only around the commas"))
			continue
		case strings.Count(elem, "@") > 1:
			errs = append(errs, field.Invalid(p, elem, "must be [namespace/]name[@interface], with at most one '@'"))
			continue
		}
		ref, iface, hasIface := strings.Cut(elem, "@")
		if strings.Count(ref, "/") > 1 {
			errs = append(errs, field.Invalid(p, elem, "must be [namespace/]name[@interface], with at most one '/'"))
			continue
		}
		a := Attachment{Index: i}
		a.Namespace, a.Name = podNamespace, ref
		if ns, name, ok := strings.Cut(ref, "/"); ok {
			a.Namespace, a.Name = ns, name
			if ns == "" {
				errs = append(errs, field.Required(p.Child("namespace"), fmt.Sprintf("%q names no namespace before '/'; leave out the '/' for the pod's namespace", elem)))
			} else {
				errs = append(errs, validNamespace(p.Child("namespace"), ns)...)
			}
		}
		errs = append(errs, validName(p.Child("name"), a.Name)...)
		if hasIface {
			a.InterfaceRequest = iface
			errs = append(errs, validInterface(p.Child("interface"), iface, "after '@'")...)
		}
		atts = append(atts, a)
	}
	return atts, errs
}

// checkUnique checks what holds across elements: interface names asked
// for are unique in the pod (§4.1.2.1.5), and so are the (namespace, name,
// interface) tuples (§4.2.1); one element at most has "default-route"
// (§4.1.2.1.9).
func checkUnique(atts []Attachment, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	byIface := map[string]*Attachment{}
	var defaultRoute *Attachment
	for i := range atts {
		a := &atts[i]
		p := path.Index(a.Index)
		if a.InterfaceRequest != "" {
			if other, dup := byIface[a.InterfaceRequest]; dup {
				e := field.Duplicate(p.Child("interface"), a.InterfaceRequest)
				if other.Namespace == a.Namespace && other.Name == a.Name {
					e.Detail = fmt.Sprintf("element [%d] attaches network %s as %s too; each attachment to the same network needs an interface name of its own", other.Index, a.Network(), a.InterfaceRequest)
				} else {
					e.Detail = fmt.Sprintf("element [%d] (network %s) asks for this interface name too; interface names are unique in the pod", other.Index, other.Network())
				}
				errs = append(errs, e)
			} else {
				byIface[a.InterfaceRequest] = a
			}
		}
		if a.DefaultRoute() {
			if defaultRoute != nil {
				errs = append(errs, field.Forbidden(p.Child("default-route"),
					fmt.Sprintf("element [%d] has default-route too; only one attachment may carry the pod's default route", defaultRoute.Index)))
			} else {
				defaultRoute = a
			}
		}
	}
	return errs
}

func validNamespace(p *field.Path, ns string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(ns) {
		errs = append(errs, field.Invalid(p, ns, msg))
	}
	return errs
}

// validName checks a NetworkAttachmentDefinition's name: units of
// DNS-1123 labels separated by dots (§3.3), the names the API server
// accepts for it.
func validName(p *field.Path, name string) field.ErrorList {
	return subdomainName(p, name, "the name of a NetworkAttachmentDefinition")
}

// subdomainName checks the name of an object the API server names with a
// DNS-1123 subdomain; what says what it names, if it is missing.
func subdomainName(p *field.Path, name, what string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, what)}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

func validInterface(p *field.Path, name, where string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "an interface name "+where+"; leave it out to have one chosen")}
	}
	if err := ValidInterfaceName(name); err != nil {
		return field.ErrorList{field.Invalid(p, name, "a Linux interface name "+err.Error())}
	}
	return nil
}

// gatewayIPs turns default-route's gateways into the standard type's.
func gatewayIPs(gws []string) []net.IP {
	ips := make([]net.IP, 0, len(gws))
	for _, gw := range gws {
		ips = append(ips, net.ParseIP(gw))
	}
	return ips
}
