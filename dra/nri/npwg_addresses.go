package nri

import (
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/sharedl2"
)

// checkHost is the addresses the networks of the pod's NPWG record give
// it on shared parents (sharedl2.Of): a static one that is an address of
// its parent itself (NPWGOptions.HostAddresses) or the gateway of one of
// the node's IP pools is refused, naming the element.
func (p *Plugin) checkHost(pod Pod, rec *claims.Claim, elements []string) ([]sharedl2.Holding, error) {
	o := p.opts.NPWG
	own := sharedl2.Of(rec)
	if len(own) == 0 {
		return nil, nil
	}
	host := sharedl2.Host{Parents: map[string][]netip.Addr{}}
	if o.PoolGateways != nil {
		host.Gateways = o.PoolGateways()
	}
	for _, h := range own {
		parent := h.L2.Parent
		if _, read := host.Parents[parent]; read {
			continue
		}
		addrs, err := o.HostAddresses(parent)
		if err != nil {
			return nil, fmt.Errorf("pod %s, %s: read the addresses of the parent %s: %w", pod, elementOf(rec, h, elements), parent, err)
		}
		host.Parents[parent] = addrs
	}
	if h, why, refused := host.Refused(own); refused {
		return nil, fmt.Errorf("pod %s, %s: %w", pod, elementOf(rec, h, elements), field.Invalid(field.NewPath(h.Field), h.Value, why))
	}
	return own, nil
}

// takenError is the refusal of an address another record holds on a
// shared parent: it names the pod and the element.
type takenError struct{ msg string }

func (e *takenError) Error() string { return e.msg }

// admitter refuses, under the store's lock, a static address of own that
// another record holds on the same shared parent (sharedl2.Taken); nil
// when own holds none.
func admitter(pod Pod, own []sharedl2.Holding, elements []string) func(c *claims.Claim, others []*claims.Claim) error {
	if len(own) == 0 {
		return nil
	}
	return func(c *claims.Claim, others []*claims.Claim) error {
		mine, theirs, taken := sharedl2.Taken(own, sharedl2.All(others))
		if !taken {
			return nil
		}
		err := field.Invalid(field.NewPath(mine.Field), mine.Value, sharedl2.TakenDetail(mine, theirs, pod.Namespace))
		return &takenError{fmt.Sprintf("pod %s, %s: %v", pod, elementOf(c, mine, elements), err)}
	}
}

// elementOf names the element of the pod's annotation that asked for the
// network of h (elements, by the record's networks).
func elementOf(rec *claims.Claim, h sharedl2.Holding, elements []string) string {
	for i, n := range rec.Networks {
		if n.Request == h.Request && n.Device == h.Device && i < len(elements) {
			return elements[i]
		}
	}
	return fmt.Sprintf("network %s, interface %s", h.Request, h.Device)
}
