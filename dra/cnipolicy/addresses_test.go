package cnipolicy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// ReadAddressing reads a list as its plugins do: the first plugin's
// master (any letter case) and VLAN, none for a link in the pod or a
// plugin of no master; its static addresses (a static IPAM's, a
// host-local range of one address, in either of host-local's forms,
// args.cni.ips, the runtimeConfig's ips) and its gateways, with where
// each is written.
func TestReadAddressing(t *testing.T) {
	list := func(plugin string) string {
		return `{"cniVersion": "1.0.0", "name": "n", "plugins": [` + plugin + `, {"type": "tuning"}]}`
	}
	for name, tc := range map[string]struct {
		conflist   string
		capability map[string]any
		parent     string
		vlan       int
		static     []string
		gateways   []string
	}{
		"static": {conflist: list(`{"type": "macvlan", "MASTER": "ens1f0", "IPAM": {"Type": "static", "addresses": [{"address": "10.9.0.5/24", "gateway": "10.9.0.1"}, {"Address": "fd00:9::5/64"}],
			"routes": [{"dst": "0.0.0.0/0", "gw": "10.9.0.254"}]}}`), parent: "ens1f0",
			static:   []string{"plugins[0].IPAM.addresses[0].address=10.9.0.5", "plugins[0].IPAM.addresses[1].Address=fd00:9::5"},
			gateways: []string{"plugins[0].IPAM.addresses[0].gateway=10.9.0.1", "plugins[0].IPAM.routes[0].gw=10.9.0.254"}},
		"host-local": {conflist: list(`{"type": "vlan", "master": "ens1f0", "vlanId": 42, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.9.0.0/24", "rangeStart": "10.9.0.7", "rangeEnd": "10.9.0.7", "gateway": "10.9.0.1"},
			{"subnet": "10.9.1.0/24", "rangeStart": "10.9.1.7", "rangeEnd": "10.9.1.8"}]]}}`), parent: "ens1f0", vlan: 42,
			static: []string{"plugins[0].ipam.ranges[0][0].rangeStart=10.9.0.7"}, gateways: []string{"plugins[0].ipam.ranges[0][0].gateway=10.9.0.1"}},
		"host-local, one range": {conflist: list(`{"type": "ipvlan", "master": "ens1f0", "ipam": {"type": "host-local", "subnet": "10.9.0.0/24", "rangeStart": "10.9.0.8", "rangeEnd": "10.9.0.8"}}`),
			parent: "ens1f0", static: []string{"plugins[0].ipam.rangeStart=10.9.0.8"}},
		"args and runtimeConfig": {conflist: list(`{"type": "macvlan", "master": "ens1f0", "args": {"cni": {"ips": ["10.9.0.9", "10.9.0.10/24"]}}, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.9.0.0/24"}]]}}`),
			capability: map[string]any{"ips": []any{"::ffff:10.9.0.11/120"}}, parent: "ens1f0",
			static: []string{"plugins[0].args.cni.ips[0]=10.9.0.9", "plugins[0].args.cni.ips[1]=10.9.0.10", "ips[0]=10.9.0.11"}},
		"in the pod":  {conflist: list(`{"type": "macvlan", "master": "eth1", "linkInContainer": true, "ipam": {"type": "static", "addresses": [{"address": "10.9.0.5/24"}]}}`), static: []string{"plugins[0].ipam.addresses[0].address=10.9.0.5"}},
		"bridge":      {conflist: list(`{"type": "bridge", "bridge": "br0", "ipam": {"type": "static", "addresses": [{"address": "10.9.0.5/24"}]}}`), static: []string{"plugins[0].ipam.addresses[0].address=10.9.0.5"}},
		"left out":    {conflist: list(`{"type": "macvlan"}`)},
		"other IPAMs": {conflist: list(`{"type": "macvlan", "master": "ens1f0", "ipam": {"type": "dhcp", "addresses": [{"address": "10.9.0.5/24"}]}}`), parent: "ens1f0"},
	} {
		t.Run(name, func(t *testing.T) {
			a, err := ReadAddressing([]byte(tc.conflist), tc.capability)
			if err != nil {
				t.Fatal(err)
			}
			if a.Parent != tc.parent || a.VLAN != tc.vlan {
				t.Errorf("parent %q, VLAN %d; want %q, %d", a.Parent, a.VLAN, tc.parent, tc.vlan)
			}
			show := func(as []Address) []string {
				var out []string
				for _, x := range as {
					out = append(out, fmt.Sprintf("%s=%s", x.Field(), x.Addr))
				}
				return out
			}
			if got := show(a.Static); !slices.Equal(got, tc.static) {
				t.Errorf("static = %q, want %q", got, tc.static)
			}
			if got := show(a.Gateways); !slices.Equal(got, tc.gateways) {
				t.Errorf("gateways = %q, want %q", got, tc.gateways)
			}
		})
	}
	if _, err := ReadAddressing([]byte(`{"plugins": 1}`), nil); err == nil {
		t.Error("a list that does not decode: no error")
	}
}

// A static address that is also a gateway of the config is refused at
// Build (so at Prepare and by validate), naming the address's field in
// the claim's config, in either form.
func TestBuildOwnGateway(t *testing.T) {
	policy := testPolicy
	policy.Plugins = append(slices.Clone(policy.Plugins), "static")
	for name, tc := range map[string]struct{ doc, want string }{
		"address's gateway": {`{` + cniHead + `, "plugins": [{"type": "macvlan", "config": {"ipam": {"type": "static", "addresses": [{"address": "10.9.0.5/24", "gateway": "10.9.0.5"}]}},
			"arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`,
			`plugins[0].config.ipam.addresses[0].address: Invalid value: "10.9.0.5/24": 10.9.0.5 is also the gateway plugins[0].config.ipam.addresses[0].gateway: ` +
				`a route through the interface's own address goes nowhere; write the router's address as the gateway, or give the interface another address`},
		"a route's": {`{` + cniHead + `, "plugins": [{"type": "macvlan", "config": {"ipam": {"type": "host-local", "ranges": [[{"subnet": "10.9.0.0/24", "rangeStart": "10.9.0.5", "rangeEnd": "10.9.0.5"}]],
			"routes": [{"dst": "0.0.0.0/0", "gw": "10.9.0.5"}]}}, "arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`,
			`plugins[0].config.ipam.ranges[0][0].rangeStart: Invalid value: "10.9.0.5": 10.9.0.5 is also the gateway plugins[0].config.ipam.routes[0].gw`},
		"upstream": {`{"apiVersion": "cni.dra.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1", "config": {"cniVersion": "1.0.0", "plugins": [
			{"type": "macvlan", "ipam": {"type": "static", "addresses": [{"address": "10.9.0.5/24", "gateway": "10.9.0.5"}]}}]}}`,
			`config.plugins[0].ipam.addresses[0].address: Invalid value: "10.9.0.5/24"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, errs := Build(context.Background(), decodeCNI(t, tc.doc), "default-c-r", policy, testCNIContext(t))
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
	ok := `{` + cniHead + `, "plugins": [{"type": "macvlan", "config": {"ipam": {"type": "static", "addresses": [{"address": "10.9.0.5/24", "gateway": "10.9.0.1"}]}},
		"arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`
	if _, errs := Build(context.Background(), decodeCNI(t, ok), "default-c-r", policy, testCNIContext(t)); len(errs) > 0 {
		t.Errorf("a gateway of its own: %v", errs)
	}
}
