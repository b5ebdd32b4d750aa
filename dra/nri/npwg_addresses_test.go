package nri

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/sharedl2"
)

// A network a pod selects whose static address (its element's "ips", the
// static IPAM of its NetworkAttachmentDefinition) another record holds on
// the same parent, the parent itself has, or is a node pool's gateway,
// is refused at the sandbox's creation, before any CNI ADD, naming the
// pod, the element and the field; nothing of the pod's is recorded.
func TestNPWGStaticAddressOnSharedParent(t *testing.T) {
	fp := claims.Claim{Driver: claims.DriverFastpath, UID: "uid-fp", Namespace: "default", Name: "fp", Prepared: true, Pod: claims.Pod{UID: "pod-fp"},
		Devices: []claims.Device{{Request: "r", Pool: "node", Device: "pci-0000-3b-00-0", Mode: "macvlan",
			Shared: &claims.SharedInterface{Parent: "eth9", Kind: "macvlan"}, Pod: &claims.PodInterface{Name: "net1", Addresses: []string{"10.1.0.9/24"}}}}}
	r := newNPWGRig(t, fp)
	o := r.plugin.opts.NPWG
	o.HostAddresses = func(name string) ([]netip.Addr, error) {
		if name != "eth9" {
			return nil, errors.New("no link " + name)
		}
		return []netip.Addr{netip.MustParseAddr("10.1.0.1")}, nil
	}
	o.PoolGateways = func() sharedl2.Gateways {
		return sharedl2.GatewaysOf(map[string]v1alpha1.IPPool{"fast": {Name: "fast", Subnet: "10.56.0.0/29", Gateway: "10.56.0.1"}})
	}
	o.NADs.(fakeNADs)["default/static-x"] = nad("default", "static-x",
		`{"cniVersion":"1.0.0","name":"static-x","type":"macvlan","master":"eth9","ipam":{"type":"static","addresses":[{"address":"10.1.0.20/24"}]}}`)
	pod := func(name, networks string) Pod {
		p := npwgPod(networks)
		p.UID, p.Name, p.SandboxID = types.UID("uid-"+name), name, "sandbox-"+name
		return p
	}
	if err := r.plugin.AttachPod(r.ctx, pod("first", `[{"name":"static-x"}]`)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ pod, networks, want string }{
		{"ips", `[{"name":"net-b","ips":["10.1.0.9/25"]}]`, `pod default/ips, annotation k8s.v1.cni.cncf.io/networks, element 0 (network default/net-b, interface net1): ` +
			`ips[0]: Invalid value: "10.1.0.9/25": 10.1.0.9 is already the address of claim default/fp on parent eth9: an address on a shared parent is one interface's at a time; choose another address`},
		{"nad", `[{"name":"static-x"}]`, `pod default/nad, annotation k8s.v1.cni.cncf.io/networks, element 0 (network default/static-x, interface net1): plugins[0].ipam.addresses[0].address: Invalid value: "10.1.0.20/24": 10.1.0.20 is already the address of pod default/first, network default/static-x on parent eth9`},
		{"parent", `[{"name":"net-a","ips":["10.1.0.1/24"]}]`, `ips[0]: Invalid value: "10.1.0.1/24": 10.1.0.1 is an address of the parent eth9 itself, the node's: choose another address`},
		{"pool-gateway", `[{"name":"net-a","ips":["10.56.0.1/24"]}]`, `10.56.0.1 is the gateway of the node's IP pool fast (10.56.0.0/29)`},
	} {
		t.Run(tc.pod, func(t *testing.T) {
			r.cni.order = nil
			err := r.plugin.AttachPod(r.ctx, pod(tc.pod, tc.networks))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
			if len(r.cni.order) > 0 {
				t.Errorf("CNI ran: %v", r.cni.order)
			}
			if _, ok := r.store.Get(npwgKey(types.UID("uid-" + tc.pod))); ok {
				t.Error("the refused pod's networks are recorded")
			}
		})
	}
}
