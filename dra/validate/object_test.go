package validate

import (
	"strings"
	"testing"

	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// TestObject: one object judged on its own, as among the manifests.
func TestObject(t *testing.T) {
	check := Check{Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}}
	rules := npwg.ConfigRules{Plugins: cnipolicy.DefaultPlugins}
	if v := Object([]byte(`{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}`), "app", check, rules); v.Judged || len(v.Problems) > 0 {
		t.Errorf("a ConfigMap: %+v, want it not judged", v)
	}
	v := Object([]byte(`{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "nic"}, "spec": {"devices": {
		"requests": [{"name": "a", "exactly": {"deviceClassName": "netdev.fastpath.dev"}}],
		"config": [{"opaque": {"driver": "fastpath.dev", "parameters": {"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "interface": {"mtu": 60}}}}]}}}`), "app", check, rules)
	if !v.Judged || len(v.Problems) != 1 || v.Problems[0].Request != "a" ||
		v.Problems[0].Err.Field != "spec.devices.config[0].opaque.parameters.interface.mtu" {
		t.Errorf("a claim with MTU 60: %+v, want one problem of request a's interface.mtu", v)
	}
	// The request's namespace is the object's: its on-disk configuration
	// is refused for a namespace not allowed it.
	v = Object([]byte(`{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", "metadata": {"name": "sriov"}}`), "tenant-b", check, rules)
	if !v.Judged || len(v.Problems) != 1 || !strings.Contains(v.Problems[0].Err.Detail, "namespace tenant-b") {
		t.Errorf("a NetworkAttachmentDefinition without spec.config: %+v, want it refused for namespace tenant-b", v)
	}
	rules.ConfDir.Namespaces = []string{"tenant-b"}
	v = Object([]byte(`{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", "metadata": {"name": "sriov"}}`), "tenant-b", check, rules)
	if !v.Judged || len(v.Problems) != 0 || !strings.Contains(v.Partly, "spec.config is empty") {
		t.Errorf("a NetworkAttachmentDefinition without spec.config in an allowed namespace: %+v, want it judged in part", v)
	}
	if v := Object([]byte(`[1, 2]`), "app", check, rules); !v.Judged || len(v.Problems) != 1 || !strings.Contains(v.Problems[0].Err.Error(), "not a Kubernetes object: it is a JSON array") {
		t.Errorf("a JSON array: %+v, want it refused as no object", v)
	}
}

// An address that is also the gateway of the same config is refused at
// apply time: a fastpath.dev interface's route through its own address,
// a CNI claim's static IPAM address that is its gateway, and the same in
// a NetworkAttachmentDefinition's configuration.
func TestObjectOwnGateway(t *testing.T) {
	check := Check{Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}}
	rules := npwg.ConfigRules{Plugins: cnipolicy.DefaultPlugins, Policy: npwg.Policy{HostDevices: []string{"ens1f0"}}}
	for name, tc := range map[string]struct{ object, want string }{
		"fastpath.dev": {`{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "nic"}, "spec": {"devices": {
			"requests": [{"name": "a", "exactly": {"deviceClassName": "shared.fastpath.dev"}}],
			"config": [{"opaque": {"driver": "fastpath.dev", "parameters": {"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig",
				"interface": {"addresses": ["10.9.0.5/24"], "routes": [{"destination": "0.0.0.0/0", "gateway": "10.9.0.5"}]}}}}]}}}`,
			`spec.devices.config[0].opaque.parameters.interface.addresses[0]: Invalid value: "10.9.0.5/24": 10.9.0.5 is also the gateway of interface.routes[0]`},
		"CNI claim": {`{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "net"}, "spec": {"devices": {
			"requests": [{"name": "a", "exactly": {"deviceClassName": "cni.networking.x-k8s.io"}}],
			"config": [{"opaque": {"driver": "cni.dra.networking.x-k8s.io", "parameters": {"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1",
				"plugins": [{"type": "macvlan", "config": {"ipam": {"type": "static", "addresses": [{"address": "10.9.0.5/24", "gateway": "10.9.0.5"}]}},
					"arguments": [{"fieldPath": "master", "valueFrom": {"attributeRef": "name"}}]}]}}}]}}}`,
			`spec.devices.config[0].opaque.parameters.plugins[0].config.ipam.addresses[0].address: Invalid value: "10.9.0.5/24": 10.9.0.5 is also the gateway`},
		"NetworkAttachmentDefinition": {`{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", "metadata": {"name": "storage"}, "spec": {"config":
			"{\"cniVersion\": \"1.0.0\", \"type\": \"macvlan\", \"master\": \"ens1f0\", \"ipam\": {\"type\": \"static\", \"addresses\": [{\"address\": \"10.9.0.5/24\"}], \"routes\": [{\"dst\": \"0.0.0.0/0\", \"gw\": \"10.9.0.5\"}]}}"}}`,
			`plugins[0].ipam.addresses[0].address: Invalid value: "10.9.0.5/24": 10.9.0.5 is also the gateway plugins[0].ipam.routes[0].gw`},
	} {
		t.Run(name, func(t *testing.T) {
			v := Object([]byte(tc.object), "app", check, rules)
			var msgs []string
			for _, p := range v.Problems {
				msgs = append(msgs, p.Err.Error())
			}
			if !v.Judged || !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
				t.Errorf("problems %q, want %q", msgs, tc.want)
			}
		})
	}
}
