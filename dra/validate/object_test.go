package validate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claimspec"
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

// TestChartDeviceClasses: the classes the checks assume of the chart when
// the inputs lack them are the chart's, as deploy/deviceclasses.yaml
// renders them with its defaults: the same configs (each pinning its
// mode, the shared class's sharedParent), none more or fewer.
func TestChartDeviceClasses(t *testing.T) {
	docs, errs := ReadManifests([]string{"../../deploy/deviceclasses.yaml"}, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	chart := ChartDeviceClasses()
	for _, d := range docs {
		dec, errs := decode(d)
		if len(errs) > 0 || dec == nil || dec.class == nil {
			t.Fatalf("%s: %v", d.Object(), errs)
		}
		name := dec.class.Name
		c, ok := chart[name]
		if !ok {
			t.Errorf("deploy/deviceclasses.yaml has %s, ChartDeviceClasses does not", name)
			continue
		}
		delete(chart, name)
		if got, want := classConfig(t, c), classConfig(t, dec.class); got != want {
			t.Errorf("%s: ChartDeviceClasses' config %s, the chart's %s", name, got, want)
		}
	}
	delete(chart, claimspec.CNIClassName)
	for name := range chart {
		t.Errorf("ChartDeviceClasses has %s, deploy/deviceclasses.yaml does not", name)
	}
}

// classConfig is the InterfaceConfig of a class as JSON, "" for none.
func classConfig(t *testing.T, c *resourceapi.DeviceClass) string {
	t.Helper()
	if len(c.Spec.Config) == 0 {
		return ""
	}
	var cfg v1alpha1.InterfaceConfig
	if errs := v1alpha1.DecodeInterfaceConfig(c.Spec.Config[0].Opaque.Parameters.Raw, &cfg, field.NewPath(c.Name)); len(errs) > 0 {
		t.Fatal(errs)
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// A claim of the chart's shared.fastpath.dev is judged by the class the
// check knows (the cluster's, with the operator's values), else by the
// chart's defaults: VLANs refused unless the class allows them.
func TestObjectClusterClasses(t *testing.T) {
	claim := []byte(`{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "vlan"}, "spec": {"devices": {
		"requests": [{"name": "fast", "exactly": {"deviceClassName": "shared.fastpath.dev"}}],
		"config": [{"opaque": {"driver": "fastpath.dev", "parameters": {"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "vlan": {"id": 100}}}}]}}}`)
	rules := npwg.ConfigRules{Plugins: cnipolicy.DefaultPlugins}
	check := Check{Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}}
	if v := Object(claim, "app", check, rules); len(v.Problems) != 1 || !strings.Contains(v.Problems[0].Err.Error(), "vlan: Forbidden: only for mode vlan") {
		t.Errorf("with the chart's defaults: %+v, want the class's macvlan", v.Problems)
	}
	class := ChartDeviceClasses()["shared.fastpath.dev"].DeepCopy()
	class.Spec.Config[0].Opaque.Parameters.Raw = []byte(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "vlan", "pinned": ["mode"], ` +
		`"sharedParent": {"vlanIDs": ["100-199"]}}`)
	check.Classes = map[string]*resourceapi.DeviceClass{class.Name: class}
	if v := Object(claim, "app", check, rules); len(v.Problems) != 0 {
		t.Errorf("with the cluster's class allowing VLANs 100-199: %+v", v.Problems)
	}
	if len(chartClasses()["shared.fastpath.dev"].Spec.Config) != 1 || strings.Contains(string(chartClasses()["shared.fastpath.dev"].Spec.Config[0].Opaque.Parameters.Raw), "vlanIDs") {
		t.Error("the cluster's class changed the chart's")
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

// A claim whose configs hold thousands of problems is judged holding at
// most bounds.Problems of each request's, the rest counted: a CNI claim
// of 2,000 host paths has 2,000 problems, of which 16 are kept.
func TestObjectKeepsProblems(t *testing.T) {
	// Eight lists of 250 paths: a list of more is over bounds.Items.
	var lists []string
	for l := range 8 {
		lists = append(lists, fmt.Sprintf(`"l%d": [%s]`, l, strings.TrimSuffix(strings.Repeat(`"/",`, 250), ",")))
	}
	claim := []byte(`{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "paths", "namespace": "app"}, "spec": {"devices": {
		"requests": [{"name": "net", "exactly": {"deviceClassName": "cni.networking.x-k8s.io"}}],
		"config": [{"opaque": {"driver": "cni.dra.networking.x-k8s.io", "parameters": {"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1",
			"plugins": [{"type": "macvlan", "config": {` + strings.Join(lists, ",") + `}, "arguments": [{"fieldPath": "master", "valueFrom": {"attributeRef": "name"}}]}]}}}]}}}`)
	check := Check{Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}}
	v := Object(claim, "app", check, npwg.ConfigRules{Plugins: cnipolicy.DefaultPlugins})
	var errs field.ErrorList
	for _, p := range v.Problems {
		errs = append(errs, p.Err)
	}
	if len(v.Problems) != bounds.Problems+1 || bounds.Count(errs) != 2000 {
		t.Errorf("%d problems kept, standing for %d; want %d, standing for 2000", len(v.Problems), bounds.Count(errs), bounds.Problems+1)
	}
}
