package v1alpha1

import (
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// AnnotationNetworkStatus is the pod annotation that reports the networks
// attached to a pod: a JSON list of NetworkStatus, the KEP's
// Pod.status.networks, until Pod has that field.
const AnnotationNetworkStatus = Group + "/network-status"

// NetworkStatus provides the status of specific PodNetwork in a Pod: one
// element of the KEP's Pod.status.networks.
type NetworkStatus struct {
	// Name is name of PodNetwork (for an attachment through a
	// PodNetworkAttachment, the PodNetwork it references).
	Name string `json:"name"`

	// InterfaceName is the network interface name inside the Pod for this attachment.
	// Examples: eth1 or net1
	//
	// +optional
	InterfaceName string `json:"interfaceName"`

	// IP is an IP address (IPv4 or IPv6) assigned to the pod: the first
	// of IPs.
	IP string `json:"ip,omitempty"`

	// IPs are the pod's addresses on this network, at most one per
	// family (the KEP allows one address per family per PodNetwork),
	// IP first. The KEP's shape has IP alone; IPs carries the second
	// family of a dual-stack network as PodIPs does beside PodIP.
	//
	// +optional
	IPs []string `json:"ips,omitempty"`

	// IsDefaultGW is a flag indicating that the interface with this IP
	// inside the Pod holds the Default Gateway.
	//
	// +optional
	IsDefaultGW bool `json:"isDefaultGW,omitempty"`
}

// NewNetworkStatus is the status of an attachment to the PodNetwork name
// through interface ifName with addrs: IP the first address, IPs the first
// of each family.
func NewNetworkStatus(name, ifName string, isDefaultGW bool, addrs []netip.Addr) NetworkStatus {
	st := NetworkStatus{Name: name, InterfaceName: ifName, IsDefaultGW: isDefaultGW}
	var have4, have6 bool
	for _, a := range addrs {
		a = a.Unmap()
		if (a.Is4() && have4) || (a.Is6() && have6) || !a.IsValid() {
			continue
		}
		have4, have6 = have4 || a.Is4(), have6 || a.Is6()
		st.IPs = append(st.IPs, a.String())
	}
	if len(st.IPs) > 0 {
		st.IP = st.IPs[0]
	}
	return st
}

// Validate checks the shape: a name, IPs addresses of distinct families
// with IP the first.
func (s NetworkStatus) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(path.Child("name"), "the PodNetwork's name"))
	}
	families := map[bool]bool{}
	for i, ip := range s.IPs {
		a, err := netip.ParseAddr(ip)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(path.Child("ips").Index(i), ip, err.Error()))
		case families[a.Is4()]:
			errs = append(errs, field.Invalid(path.Child("ips").Index(i), ip, fmt.Sprintf("a second %s address: one per family", family(a))))
		default:
			families[a.Is4()] = true
		}
	}
	if len(s.IPs) > 0 && s.IP != s.IPs[0] {
		errs = append(errs, field.Invalid(path.Child("ip"), s.IP, "must be the first of ips"))
	}
	if len(s.IPs) == 0 && s.IP != "" {
		errs = append(errs, field.Invalid(path.Child("ip"), s.IP, "must be the first of ips, which is empty"))
	}
	return errs
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}
