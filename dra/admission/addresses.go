package admission

import (
	"fmt"
	"net/netip"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claimspec"
	"github.com/fastpath-dra/fastpath/dra/validate"
)

// ClaimIndex is what the webhook knows of the cluster's ResourceClaims
// and DeviceClasses (Claims), to refuse a static address another claim of
// the same class already has on a shared parent.
type ClaimIndex interface {
	// Synced says whether the index holds every claim of the cluster.
	Synced() bool
	// WithAddress are the claims whose own fastpath.dev configs write
	// addr in interface.addresses of a request of class.
	WithAddress(class string, addr netip.Addr) []*resourceapi.ResourceClaim
	// Class is the DeviceClass name, nil when it is not known.
	Class(name string) *resourceapi.DeviceClass
	// Classes are the cluster's DeviceClasses by name.
	Classes() map[string]*resourceapi.DeviceClass
}

// sharedAddress is a static address a claim's request gives a
// sub-interface of a shared device.
type sharedAddress struct {
	request, class string
	// vlan is the request's VLAN on the parent, 0 untagged: pods on
	// other VLANs are on other links.
	vlan  int
	addr  netip.Addr
	value string
	// path is where the claim (or its class) writes it.
	path string
}

// sharedModes are the modes that make a sub-interface of a shared device.
var sharedModes = []string{v1alpha1.ModeMacvlan, v1alpha1.ModeIPVLAN, v1alpha1.ModeVLAN}

// sharedAddresses are the static addresses the claim's requests in a
// shared mode give their sub-interfaces, the class's configs (class, nil
// for none) under the claim's as the node merges them. With a nil class,
// every request's addresses are, whatever its mode: the claim's own
// configs say no more.
func sharedAddresses(namespace, name string, spec *resourceapi.ResourceClaimSpec, class func(string) *resourceapi.DeviceClass) []sharedAddress {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: *spec,
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}}
	devs := field.NewPath("spec", "devices")
	paths := map[int]string{}
	for i, c := range spec.Devices.Config {
		claim.Status.Allocation.Devices.Config = append(claim.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: resourceapi.AllocationConfigSourceClaim, Requests: c.Requests, DeviceConfiguration: c.DeviceConfiguration})
		paths[i] = devs.Child("config").Index(i).Child("opaque", "parameters").String()
	}
	type candidate struct{ name, class string }
	var cands []candidate
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil {
			cands = append(cands, candidate{r.Name, r.Exactly.DeviceClassName})
		}
		for _, sub := range r.FirstAvailable {
			cands = append(cands, candidate{r.Name + "/" + sub.Name, sub.DeviceClassName})
		}
	}
	if class != nil {
		for _, cand := range cands {
			dc := class(cand.class)
			if dc == nil {
				continue
			}
			for j, c := range dc.Spec.Config {
				paths[len(claim.Status.Allocation.Devices.Config)] = fmt.Sprintf("(DeviceClass %s) spec.config[%d].opaque.parameters", cand.class, j)
				claim.Status.Allocation.Devices.Config = append(claim.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
					Source: resourceapi.AllocationConfigSourceClass, Requests: []string{cand.name}, DeviceConfiguration: c.DeviceConfiguration})
			}
		}
	}
	var out []sharedAddress
	for _, cand := range cands {
		cfg, errs := claimspec.ResolveConfig(claim, cand.name)
		if len(errs) > 0 || cfg.Interface == nil || class != nil && !slices.Contains(sharedModes, cfg.Mode) {
			continue
		}
		vlan := 0
		if cfg.Mode == v1alpha1.ModeVLAN && cfg.VLAN != nil {
			vlan = cfg.VLAN.ID
		}
		at := addressesAt(claim, cand.name, paths)
		for i, a := range cfg.Interface.Addresses {
			p, err := netip.ParsePrefix(a)
			if err != nil {
				continue // validate says why
			}
			out = append(out, sharedAddress{request: cand.name, class: cand.class, vlan: vlan, addr: p.Addr().Unmap(), value: a,
				path: fmt.Sprintf("%s.interface.addresses[%d]", at, i)})
		}
	}
	return out
}

// addressesAt is the path of the last config of the request that writes
// interface.addresses (the claim's over the class's), "" for none.
func addressesAt(claim *resourceapi.ResourceClaim, request string, paths map[int]string) string {
	at, fromClaim := "", false
	for i, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != devices.DriverName || !claimspec.AppliesTo(c.Requests, request) {
			continue
		}
		var cfg v1alpha1.InterfaceConfig
		if errs := v1alpha1.DecodeInterfaceConfig(c.Opaque.Parameters.Raw, &cfg, nil); len(errs) > 0 || cfg.Interface == nil || cfg.Interface.Addresses == nil {
			continue
		}
		claimConfig := c.Source == resourceapi.AllocationConfigSourceClaim
		if at == "" || claimConfig || !fromClaim {
			at, fromClaim = paths[i], claimConfig
		}
	}
	return at
}

// IndexAddresses are the keys under which a claim is found by the static
// addresses of its own fastpath.dev configs (ClaimIndex.WithAddress):
// "class address", one per request's address.
func IndexAddresses(claim *resourceapi.ResourceClaim) []string {
	var keys []string
	for _, a := range sharedAddresses(claim.Namespace, claim.Name, &claim.Spec, nil) {
		if k := indexKey(a.class, a.addr); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

func indexKey(class string, addr netip.Addr) string { return class + " " + addr.String() }

// addressProblems are the static addresses of the claim's requests in a
// shared mode that another claim of the same DeviceClass has for one of
// its own in a shared mode, on the same VLAN: on a shared parent an
// address is one interface's at a time. The other claim is named when it
// is of the claim's namespace, else only as another claim of the class.
// The nodes check again, against every claim and pod on each parent, at
// Prepare and at the sandbox's creation.
func addressProblems(idx ClaimIndex, claim *resourceapi.ResourceClaim) []validate.Problem {
	class := func(name string) *resourceapi.DeviceClass {
		if c := idx.Class(name); c != nil {
			return c
		}
		return chartClasses()[name]
	}
	var problems []validate.Problem
	for _, mine := range sharedAddresses(claim.Namespace, claim.Name, &claim.Spec, class) {
		for _, other := range idx.WithAddress(mine.class, mine.addr) {
			if other.Namespace == claim.Namespace && other.Name == claim.Name {
				continue
			}
			i := slices.IndexFunc(sharedAddresses(other.Namespace, other.Name, &other.Spec, class), func(a sharedAddress) bool {
				return a.class == mine.class && a.addr == mine.addr && a.vlan == mine.vlan
			})
			if i < 0 {
				continue
			}
			holder := "another claim of class " + mine.class
			if other.Namespace == claim.Namespace {
				holder = fmt.Sprintf("claim %s/%s of class %s", other.Namespace, other.Name, mine.class)
			}
			problems = append(problems, validate.Problem{Request: mine.request, Err: field.Invalid(field.NewPath(mine.path), mine.value, fmt.Sprintf(
				"%s is already the address of %s, on the class's shared parent: an address on a shared parent is one interface's at a time; choose another address",
				mine.addr, holder))})
			break
		}
	}
	return problems
}
