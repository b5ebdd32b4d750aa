package npwg

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPAMClaim is the Network Plumbing WG's persistent IP allocation
// (k8s.cni.cncf.io/v1alpha1, kind IPAMClaim), in the shape and JSON of
// the upstream Go types (github.com/k8snetworkplumbingwg/ipamclaims,
// pkg/crd/ipamclaims/v1alpha1): an element of the selection annotation
// names one by "ipam-claim-reference" (§4.1.2.1.11), and the attachment's
// addresses are the claim's, for as long as the claim lives, whatever pod
// holds it.
type IPAMClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   IPAMClaimSpec   `json:"spec,omitempty"`
	Status IPAMClaimStatus `json:"status,omitempty"`
}

// IPAMClaimSpec says what the claim is for.
type IPAMClaimSpec struct {
	// Network is the network the allocation was made for: the name of
	// the network's CNI configuration, as the upstream implementations
	// write it.
	Network string `json:"network"`
	// Interface is the pod interface the allocation was made for.
	Interface string `json:"interface"`
}

// IPAMClaimStatus is what was allocated, and to which pod.
type IPAMClaimStatus struct {
	// IPs are the addresses (one per family), in CIDR form.
	IPs []string `json:"ips"`
	// OwnerPod is the pod holding the claim.
	OwnerPod   *OwnerPod          `json:"ownerPod,omitempty"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// OwnerPod names the pod holding an IPAMClaim, in the claim's namespace.
type OwnerPod struct {
	Name string `json:"name,omitempty"`
}

// IPAMClaimGroupVersion and IPAMClaimKind are the IPAMClaim's API.
const (
	IPAMClaimGroupVersion = "k8s.cni.cncf.io/v1alpha1"
	IPAMClaimKind         = "IPAMClaim"
)

// IPAMClaimFieldPath is the selection key naming an IPAMClaim, as errors
// name it.
const IPAMClaimFieldPath = "ipam-claim-reference"

// ErrIPAMClaimMismatch is the error of an IPAMClaim that was made for
// another network or interface than the attachment naming it.
var ErrIPAMClaimMismatch = errors.New("the IPAMClaim was made for another attachment")

// CheckIPAMClaim checks that claim may give the addresses of att, an
// attachment to the network whose CNI configuration is list: the claim's
// spec.network is that configuration's name (or, for fastpath's own
// users, the attachment's namespace/name), its spec.interface is empty or
// the attachment's interface, and its status.ips, when set, are at most
// one CIDR of each family. Errors name the claim and what to change.
func CheckIPAMClaim(claim *IPAMClaim, att *Attachment, list *libcni.NetworkConfigList) error {
	name := claim.Namespace + "/" + claim.Name
	if att.InterfaceRequest == "" {
		return fmt.Errorf("IPAMClaim %s: the attachment has no interface name yet", name)
	}
	var netName string
	if list != nil {
		netName = list.Name
	}
	if n := claim.Spec.Network; n != netName && n != att.Network() {
		return fmt.Errorf("%w: IPAMClaim %s has spec.network %q, and the element attaches NetworkAttachmentDefinition %s, whose CNI network is %q: "+
			"name an IPAMClaim of that network", ErrIPAMClaimMismatch, name, n, att.Network(), netName)
	}
	if i := claim.Spec.Interface; i != "" && i != att.InterfaceRequest {
		return fmt.Errorf("%w: IPAMClaim %s has spec.interface %q, and the element attaches interface %s: name it in the element's \"interface\"",
			ErrIPAMClaimMismatch, name, i, att.InterfaceRequest)
	}
	if _, err := ClaimedIPs(claim); err != nil {
		return err
	}
	return nil
}

// ClaimedIPs are the claim's status.ips, each a canonical CIDR
// (address/prefix length), at most one of each family; nil when the
// claim has none yet.
func ClaimedIPs(claim *IPAMClaim) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range claim.Status.IPs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("IPAMClaim %s/%s: status.ips[%d] %q is not an address in CIDR form (10.0.0.5/24)", claim.Namespace, claim.Name, i, s)
		}
		if slices.ContainsFunc(out, func(o netip.Prefix) bool { return o.Addr().Is4() == p.Addr().Is4() }) {
			return nil, fmt.Errorf("IPAMClaim %s/%s: status.ips has two addresses of one family: %s", claim.Namespace, claim.Name, strings.Join(claim.Status.IPs, ", "))
		}
		out = append(out, p)
	}
	return out, nil
}

// DeclaresCapability says whether a plugin of the list declares the
// capability.
func DeclaresCapability(list *libcni.NetworkConfigList, capability string) bool {
	if list == nil {
		return false
	}
	return slices.ContainsFunc(list.Plugins, func(p *libcni.PluginConfig) bool { return p.Network.Capabilities[capability] })
}

// NeedsIPsCapability is the check of an attachment whose addresses an
// IPAMClaim keeps: they reach the network's plugins as the "ips"
// capability, so a plugin of the network must declare it, when the claim
// has them (the pod, recreated, gets them again) and when it has none
// yet (the next pod will).
func NeedsIPsCapability(att *Attachment, list *libcni.NetworkConfigList) error {
	if DeclaresCapability(list, CapabilityIPs) {
		return nil
	}
	var types []string
	if list != nil {
		for _, p := range list.Plugins {
			types = append(types, p.Network.Type)
		}
	}
	return fmt.Errorf("%w: network %s: %q %s keeps the attachment's addresses, which reach the plugins as capability %q, "+
		"and none of the network's plugins (%s) declares it: use an IPAM that takes it (static, host-local) with \"capabilities\": {\"ips\": true}",
		ErrCapability, att.Network(), IPAMClaimFieldPath, att.IPAMClaimReference, CapabilityIPs, strings.Join(types, ", "))
}

// IPAMClaimNodeCondition is the condition of an IPAMClaim's status by
// which fastpath says which node's pod holds it: status True while one
// does, False once that node let it go, its message the node's name. A
// node's fastpathd writes it with every status it writes, and the
// admission policies read it on the old and the new object: a node's
// fastpathd writes no IPAMClaim that another node holds.
const IPAMClaimNodeCondition = "fastpath.dev/HeldOnNode"

// The reasons of IPAMClaimNodeCondition: a pod of the node holds the
// claim; the node let it go (its pod's networks are gone); the node or
// the pod is gone (fastpathd controller let it go for it).
const (
	ReasonHeldOnNode = "PodOnNode"
	ReasonReleased   = "Released"
	ReasonHolderGone = "HolderGone"
)

// HeldOn is the node whose pod holds the claim (IPAMClaimNodeCondition
// True), "" for none.
func HeldOn(claim *IPAMClaim) string {
	c := meta.FindStatusCondition(claim.Status.Conditions, IPAMClaimNodeCondition)
	if c == nil || c.Status != metav1.ConditionTrue {
		return ""
	}
	return c.Message
}

// WithOwner is the status that gives claim to pod, of node, with ips: the
// claim's own status.ips are never changed once set, the owner is the pod,
// IPAMClaimNodeCondition names node, and the other conditions are kept.
// changed says whether it differs from the claim's status.
func WithOwner(claim *IPAMClaim, pod, node string, ips []string) (st IPAMClaimStatus, changed bool) {
	st = claim.Status
	st.Conditions = slices.Clone(st.Conditions)
	if len(st.IPs) == 0 && len(ips) > 0 {
		st.IPs, changed = slices.Clone(ips), true
	}
	if st.IPs == nil {
		// Required by the CRD's schema: an empty list, not null.
		st.IPs = []string{}
	}
	if st.OwnerPod == nil || st.OwnerPod.Name != pod {
		st.OwnerPod, changed = &OwnerPod{Name: pod}, true
	}
	if setNode(&st, metav1.ConditionTrue, ReasonHeldOnNode, node) {
		changed = true
	}
	return st, changed
}

// Released is the status of claim once node let it go, reason being
// ReasonReleased or ReasonHolderGone: IPAMClaimNodeCondition False, still
// naming the node; the rest as it is. changed is false, and the status the
// claim's, when the condition does not say node holds it.
func Released(claim *IPAMClaim, node, reason string) (st IPAMClaimStatus, changed bool) {
	st = claim.Status
	st.Conditions = slices.Clone(st.Conditions)
	if node == "" || HeldOn(claim) != node {
		return st, false
	}
	if st.IPs == nil {
		st.IPs = []string{}
	}
	return st, setNode(&st, metav1.ConditionFalse, reason, node)
}

// setNode sets IPAMClaimNodeCondition; false when it was so.
func setNode(st *IPAMClaimStatus, status metav1.ConditionStatus, reason, node string) bool {
	if c := meta.FindStatusCondition(st.Conditions, IPAMClaimNodeCondition); c != nil && c.Status == status && c.Reason == reason && c.Message == node {
		return false
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: IPAMClaimNodeCondition, Status: status, Reason: reason, Message: node})
	return true
}

// IPPoolAnnotation, on a NetworkAttachmentDefinition, names the node's IP
// pool (fastpathd run --ip-pools) that gives the addresses IPAMClaims of
// the network keep, when fastpath allocates them; without it, the
// network's own IPAM does.
const IPPoolAnnotation = "fastpath.dev/ip-pool"
