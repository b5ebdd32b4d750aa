package cnidriver

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/sharedl2"
)

// staticClaim is a CNI claim named name of a macvlan on the device's
// link (eth7) with the IPAM config ipam.
func staticClaim(name, ipam string) *resourceapi.ResourceClaim {
	claim := cniTestClaim([]string{"net"}, fromClaimFor("net", `{`+cniHead+`, "plugins": [{"type": "macvlan", "config": {"mode": "bridge", "ipam": `+ipam+`}, `+
		`"arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`))
	claim.Name, claim.UID = name, types.UID("uid-"+name)
	claim.Status.ReservedFor[0].UID = types.UID("pod-" + name)
	claim.Status.Allocation.Devices.Results[0].Device = "cni-" + name
	return claim
}

// A CNI claim's static address on its network's parent (the master the
// device's attribute names) is refused at Prepare when another record
// holds it there (a fastpath.dev claim's sub-interface, another CNI
// claim's network), when the parent itself has it, when it is a node
// pool's gateway, or the gateway its own config names; the error names
// claim, request, device and field, and the claim is not recorded.
func TestCNIStaticAddressOnSharedParent(t *testing.T) {
	policy := testPolicy
	policy.Plugins = append(slices.Clone(policy.Plugins), "static")
	policy.VLANIDs = []string{"7"}
	d := testDriver(t, Options{NodeName: testNode, Policy: policy, Devices: 16,
		HostAddresses: func(name string) ([]netip.Addr, error) {
			if name != "eth7" {
				return nil, fmt.Errorf("no link %s", name)
			}
			return []netip.Addr{netip.MustParseAddr("10.8.0.1"), netip.MustParseAddr("fd00:8::1")}, nil
		},
		PoolGateways: func() sharedl2.Gateways {
			return sharedl2.GatewaysOf(map[string]v1alpha1.IPPool{"fast": {Name: "fast", Subnet: "10.56.0.0/29", Gateway: "10.56.0.1"}})
		}})
	fp := claims.Claim{Driver: claims.DriverFastpath, UID: "uid-fp", Namespace: "default", Name: "fp", Pod: claims.Pod{UID: "pod-fp"}, Prepared: true,
		Devices: []claims.Device{{Request: "r", Pool: testNode, Device: "pci-0000-3b-00-0", Mode: "macvlan",
			Shared: &claims.SharedInterface{Parent: "eth7", Kind: "macvlan"}, Pod: &claims.PodInterface{Name: "net1", Addresses: []string{"10.8.0.5/24"}}}}}
	if err := d.opts.Store.Admit(fp); err != nil {
		t.Fatal(err)
	}
	static := func(address, gateway string) string {
		if gateway != "" {
			gateway = `, "gateway": "` + gateway + `"`
		}
		return `{"type": "static", "addresses": [{"address": "` + address + `"` + gateway + `}]}`
	}
	const at = `claim default/%s, request "net", device cni-%s: plugins[0].config.ipam.`
	if res := d.prepareClaim(t.Context(), staticClaim("x", static("10.8.0.6/24", "10.8.0.254"))); res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, tc := range []struct{ name, ipam, want string }{
		{"fastpath", static("10.8.0.5/25", ""), fmt.Sprintf(at, "fastpath", "fastpath") +
			`addresses[0].address: Invalid value: "10.8.0.5/25": 10.8.0.5 is already the address of claim default/fp on parent eth7: an address on a shared parent is one interface's at a time; choose another address`},
		{"cni", static("10.8.0.6/24", ""), fmt.Sprintf(at, "cni", "cni") + `addresses[0].address: Invalid value: "10.8.0.6/24": 10.8.0.6 is already the address of claim default/x on parent eth7`},
		{"range", `{"type": "host-local", "ranges": [[{"subnet": "10.8.0.0/24", "rangeStart": "10.8.0.6", "rangeEnd": "10.8.0.6"}]]}`,
			fmt.Sprintf(at, "range", "range") + `ranges[0][0].rangeStart: Invalid value: "10.8.0.6": 10.8.0.6 is already the address of claim default/x on parent eth7`},
		{"parent", static("fd00:8::1/64", ""), fmt.Sprintf(at, "parent", "parent") + `addresses[0].address: Invalid value: "fd00:8::1/64": fd00:8::1 is an address of the parent eth7 itself, the node's: choose another address`},
		{"pool-gateway", static("10.56.0.1/24", ""), `10.56.0.1 is the gateway of the node's IP pool fast (10.56.0.0/29)`},
		{"own-gateway", static("10.8.0.9/24", "10.8.0.9"), `claim default/own-gateway, request "net", device cni-own-gateway: ` +
			`config[0][FromClaim].parameters.plugins[0].config.ipam.addresses[0].address: Invalid value: "10.8.0.9/24": 10.8.0.9 is also the gateway plugins[0].config.ipam.addresses[0].gateway: a route through the interface's own address goes nowhere`},
		{"own-route", `{"type": "static", "addresses": [{"address": "10.8.0.9/24"}], "routes": [{"dst": "0.0.0.0/0", "gw": "10.8.0.9"}]}`,
			`10.8.0.9 is also the gateway plugins[0].config.ipam.routes[0].gw`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := d.prepareClaim(t.Context(), staticClaim(tc.name, tc.ipam))
			if res.Err == nil || !strings.Contains(res.Err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", res.Err, tc.want)
			}
			if _, ok := d.opts.Store.Get(claims.Key{Driver: claims.DriverCNI, UID: types.UID("uid-" + tc.name)}); ok {
				t.Error("a refused claim was recorded")
			}
		})
	}
	// On another link of the parent's (a VLAN), the address is free.
	vlan := cniTestClaim([]string{"net"}, fromClaimFor("net", `{`+cniHead+`, "plugins": [{"type": "vlan", "config": {"vlanId": 7, "ipam": `+static("10.8.0.5/24", "")+`}, `+
		`"arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`))
	vlan.Name, vlan.UID, vlan.Status.ReservedFor[0].UID = "vlan", "uid-vlan", "pod-vlan"
	vlan.Status.Allocation.Devices.Results[0].Device = "cni-vlan"
	if res := d.prepareClaim(t.Context(), vlan); res.Err != nil {
		t.Errorf("VLAN 7: %v", res.Err)
	}
}
