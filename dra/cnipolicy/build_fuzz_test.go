package cnipolicy

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/bounds/boundstest"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/dratest"
)

// FuzzCNIConfig: any CNI parameters decode and build without panicking,
// within boundstest.Budget and saying at most bounds.MessageBytes; a
// conflist that builds runs only allowed plugin types, names no host
// object the device did not give, and carries the claim's ifName.
func FuzzCNIConfig(f *testing.F) {
	for _, seed := range dratest.CNISeeds() {
		f.Add(seed)
	}
	f.Add(`{` + cniHead + `, "plugins": [{"type": "macvlan", "config": {"mode": "bridge", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}},
		"arguments": [{"fieldPath": "master", "valueFrom": {"attributeRef": "name"}}]}]}`)
	f.Add(`{` + cniHead + `, "plugins": [{"type": "vlan", "arguments": [{"fieldPath": "a.b.c", "value": {"x": [1]}},
		{"fieldPath": "vlanId", "valueFrom": {"configMapKeyRef": {"name": "vlans", "attribute": "name"}}},
		{"fieldPath": "ipam.subnet", "valueFrom": {"resourceSliceFieldRef": {"fieldPath": "spec.nodeName"}}}]}]}`)
	f.Add(`{"configName": "storage-net", "ifName": "net3"}`)
	f.Add("configName: macvlan-host-local\n")
	f.Add(`{` + cniHead + `, "plugins": [{"type": "bridge", "config": {"bridge": "cni0", "ipam": {"type": "host-local", "dataDir": "/etc/evil"}}}]}`)
	f.Add(`{` + cniHead + `, "plugins": [{"type": "host-device", "config": {"device": "eth0"}}]}`)
	f.Add(`{` + cniHead + `, "cniVersion": "banana", "plugins": [{"type": "macvlan", "arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`)
	// No API client: ConfigMap references fail, as they do for a claim
	// naming one that does not exist.
	c := testCNIContext(f)
	c.ConfigMaps = nil
	f.Fuzz(func(t *testing.T, raw string) {
		var cfg v1alpha1.CNIConfig
		var net Network
		var errs field.ErrorList
		boundstest.Check(t, func() string {
			if cfg, errs = v1alpha1.DecodeCNIConfig([]byte(raw), field.NewPath("parameters")); len(errs) == 0 {
				net, errs = Build(context.Background(), cfg, "default-c-r", testPolicy, c)
			}
			return bounds.Join(errs)
		})
		if len(errs) > 0 {
			return
		}
		if v1alpha1.ValidInterfaceName(net.IfName) != nil {
			t.Errorf("built %s for interface %q", raw, net.IfName)
		}
		if !slices.Contains(v1alpha1.SupportedCNIVersions(), cfg.CNIVersion) && cfg.CNIVersion != "" {
			t.Errorf("accepted cniVersion %q", cfg.CNIVersion)
		}
		var list struct {
			Plugins []map[string]any `json:"plugins"`
		}
		if err := json.Unmarshal(net.Conflist, &list); err != nil {
			t.Fatalf("built %s: %v", net.Conflist, err)
		}
		for _, p := range list.Plugins {
			view := Inspect(p)
			for _, pt := range view.Types {
				if !slices.Contains(testPolicy.Plugins, pt.Name) {
					t.Errorf("built a conflist running %q: %s", pt.Name, net.Conflist)
				}
			}
			if net.Approved == "" {
				if len(view.Problems) > 0 {
					t.Errorf("built an inline conflist the plugin reads ambiguously (%v): %s", view.Problems, net.Conflist)
				}
				for _, r := range view.Refs {
					if r.Value != "eth7" || r.Omitted {
						t.Errorf("built an inline conflist taking the host object %+v: %s", r, net.Conflist)
					}
				}
			}
		}
	})
}
