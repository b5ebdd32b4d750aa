package claimspec

import (
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// Count is how many devices a request (or subrequest) of a claim's spec
// asks for: N of them (allocationMode ExactCount), or All that match.
type Count struct {
	All bool
	N   int64
}

// Many says whether the request may get more than one device: each
// device's interface name, addresses and files are then its own
// (Expand, Slot).
func (c Count) Many() bool { return c.All || c.N > 1 }

// String is the count as the spec says it.
func (c Count) String() string {
	if c.All {
		return "allocationMode All"
	}
	return fmt.Sprintf("count %d", c.N)
}

// MaxDevices is the most devices a claim can be allocated, and so the most
// an allocationMode All request can get.
const MaxDevices = resourceapi.AllocationResultsMaxSize

// CountOf is what the request (req, or req/sub) of the claim's spec asks
// for; false when the spec has no such request.
func CountOf(claim *resourceapi.ResourceClaim, request string) (Count, bool) {
	base, sub, hasSub := strings.Cut(request, "/")
	for _, r := range claim.Spec.Devices.Requests {
		if r.Name != base {
			continue
		}
		var mode resourceapi.DeviceAllocationMode
		var count int64
		switch {
		case hasSub:
			found := false
			for _, s := range r.FirstAvailable {
				if s.Name == sub {
					mode, count, found = s.AllocationMode, s.Count, true
				}
			}
			if !found {
				return Count{}, false
			}
		case r.Exactly != nil:
			mode, count = r.Exactly.AllocationMode, r.Exactly.Count
		default:
			return Count{}, false
		}
		if mode == resourceapi.DeviceAllocationModeAll {
			return Count{All: true}, true
		}
		return Count{N: max(count, 1)}, true
	}
	return Count{}, false
}

// ExactlyOne says what is wrong unless the request asks for exactly one
// device: a CNI request's config makes one interface (the CNI DRA
// design).
func ExactlyOne(claim *resourceapi.ResourceClaim, request string) string {
	c, ok := CountOf(claim, request)
	switch {
	case !ok:
		return "request not found in the claim's spec"
	case c.Many():
		return fmt.Sprintf("%s: a request of class %s must ask for exactly one device (allocationMode ExactCount, count 1): a CNI config makes one interface; use one request per network", c, CNIClassName)
	}
	return ""
}

// Slot is the name of the index-th device of a request in the files,
// environment variables and CDI device names fastpath gives the pod: the
// request's own name when it asks for one device, request.index (from 0,
// in the allocation's order) when it may get more. A request's name has
// no dot, so that no slot is another request's.
func Slot(request string, count Count, index int) string {
	if !count.Many() {
		return request
	}
	return request + "." + strconv.Itoa(index)
}

// Expand makes the config of a request that may get several devices the
// config of its index-th device of total: its interface name (the
// config's, else ifName) with the index after it (net → net0, net1, ...);
// of its static addresses, the index-th of total equal groups, in order.
// What cannot differ per device is refused with the field named: a MAC,
// routes (every device's would claim the same destinations), a
// PodNetwork, static addresses for allocationMode All (how many devices
// it gets is not known ahead) or not a multiple of the count. The
// returned ifName is the device's default name. total is the count for
// the checks of the spec alone (validate), the allocated devices at
// Prepare.
func Expand(cfg v1alpha1.InterfaceConfig, ifName string, count Count, index, total int) (v1alpha1.InterfaceConfig, string, field.ErrorList) {
	if !count.Many() {
		return cfg, ifName, nil
	}
	var errs field.ErrorList
	why := fmt.Sprintf("a request of %s gives each of its devices an interface of its own", count)
	if cfg.PodNetwork != "" {
		errs = append(errs, field.Forbidden(field.NewPath("podNetwork"), why+": a PodNetwork attaches one interface; use one request per PodNetwork"))
	}
	if cfg.PodNetworkAttachment != "" {
		errs = append(errs, field.Forbidden(field.NewPath("podNetworkAttachment"), why+": a PodNetworkAttachment names one interface; use one request per attachment"))
	}
	suffix := strconv.Itoa(index)
	if s := cfg.Interface; s != nil {
		c := *s
		path := field.NewPath("interface")
		if c.MAC != "" {
			errs = append(errs, field.Forbidden(path.Child("mac"), why+", and one MAC cannot be given to each; leave mac out (each keeps its own) or use one request per device"))
		}
		if len(c.Routes) > 0 {
			errs = append(errs, field.Forbidden(path.Child("routes"), why+", and their routes would claim the same destinations; use one request per device"))
		}
		if n := len(c.Addresses); n > 0 {
			switch {
			case count.All:
				errs = append(errs, field.Forbidden(path.Child("addresses"), why+": allocationMode All gets as many devices as match, so static addresses cannot be shared out; use an ipam pool"))
			case n%total != 0:
				errs = append(errs, field.Invalid(path.Child("addresses"), fmt.Sprintf("%d addresses", n),
					fmt.Sprintf("%s: give a multiple of %d addresses, the same number for each device in order, or an ipam pool", why, total)))
			default:
				k := n / total
				c.Addresses = c.Addresses[index*k : (index+1)*k]
			}
		}
		if c.Name != "" {
			c.Name += suffix
		}
		cfg.Interface = &c
	}
	return cfg, ifName + suffix, errs
}
