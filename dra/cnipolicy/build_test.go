package cnipolicy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// testApproved are the operator's approved configs of the tests, read
// from files: the design's CNIConfig example (with the apiVersion the API
// server needs; attributeRef one level up, as it writes it), and one that
// names host objects and reads the operator's ConfigMaps.
func testApproved(t testing.TB) ApprovedSet {
	t.Helper()
	set, err := LoadApproved("../api/v1alpha1/testdata/design-cniconfig.yaml", "testdata/storage-net.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// configMaps are the ConfigMaps of the tests, namespace/name -> data;
// those of namespace "locked" fastpathd may not read.
type configMaps map[string]map[string]string

func (m configMaps) ConfigMapData(_ context.Context, namespace, name string) (map[string]string, error) {
	if namespace == "locked" {
		return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, name, nil)
	}
	data, ok := m[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
	}
	return data, nil
}

func testCNIContext(t testing.TB) Sources {
	client := configMaps{
		"default/vlans":           {"eth7": "107", "node-a": "10.9.0.0/24", "ipam": "s3cret-ipam", "mode": "s3cret-mode"},
		"fastpath-system/storage": {"gateway": "10.11.0.1"},
		"kube-system/vlans":       {"eth7": "666"},
	}
	return Sources{ConfigMaps: client, Approved: testApproved(t), Namespace: "default",
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{v1alpha1.CNIDriver + "/name": {StringValue: new("eth7")}},
		Slice:      map[string]string{"spec.nodeName": "node-a", "spec.pool.name": "node-a", "spec.driver": v1alpha1.CNIDriver}}
}

var testPolicy = Options{Plugins: []string{"macvlan", "host-local", "tuning", "vlan", "bridge", "host-device"}, ConfigNamespace: "fastpath-system",
	VLANIDs: []string{"100-199", "300"}}

func decodeCNI(t *testing.T, doc string) v1alpha1.CNIConfig {
	t.Helper()
	cfg, errs := v1alpha1.DecodeCNIConfig([]byte(doc), field.NewPath("parameters"))
	if len(errs) > 0 {
		t.Fatalf("decode: %v", errs)
	}
	return cfg
}

const cniHead = `"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1"`

func TestBuildConflist(t *testing.T) {
	for name, tc := range map[string]struct {
		doc    string
		ifName string
		want   string // the plugins of the built conflist, as JSON
		redact []string
	}{
		"the design's example": {doc: `{` + cniHead + `, "cniVersion": "1.0.0", "plugins": [{"type": "macvlan",
			"config": {"mode": "bridge", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.10.1.0/24"}]]}},
			"arguments": [{"fieldPath": "master", "valueFrom": {"attributeRef": "name"}}]}]}`,
			want: `[{"ipam":{"ranges":[[{"subnet":"10.10.1.0/24"}]],"type":"host-local"},"master":"eth7","mode":"bridge","type":"macvlan"}]`},
		"constant, slice field and ConfigMap keys": {doc: `{` + cniHead + `, "plugins": [{"type": "vlan",
			"config": {"ipam": {"type": "host-local"}},
			"arguments": [{"fieldPath": "master", "attributeRef": "cni.dra.networking.x-k8s.io/name"}, {"fieldPath": "mtu", "value": 9000},
				{"fieldPath": "vlanId", "valueFrom": {"configMapKeyRef": {"name": "vlans", "attribute": "name"}}},
				{"fieldPath": "ipam.subnet", "valueFrom": {"configMapKeyRef": {"name": "vlans", "resourceSliceFieldRef": {"fieldPath": "spec.nodeName"}}}},
				{"fieldPath": "ipam.note", "valueFrom": {"resourceSliceFieldRef": {"apiVersion": "resource.k8s.io/v1", "fieldPath": "spec.nodeName"}}}]}]}`,
			want:   `[{"ipam":{"note":"node-a","subnet":"10.9.0.0/24","type":"host-local"},"master":"eth7","mtu":9000,"type":"vlan","vlanId":"107"}]`,
			redact: []string{"107", "10.9.0.0/24"}},
		// An argument sets the field the plugin reads, whatever the
		// config's spelling of it: the device's master, not the config's.
		"an argument over a key in capitals": {doc: `{` + cniHead + `, "plugins": [{"type": "macvlan",
			"config": {"MASTER": "eth0", "IPAM": {"type": "host-local"}},
			"arguments": [{"fieldPath": "master", "valueFrom": {"attributeRef": "name"}}, {"fieldPath": "ipam.subnet", "value": "10.1.0.0/24"}]}]}`,
			want: `[{"ipam":{"subnet":"10.1.0.0/24","type":"host-local"},"master":"eth7","type":"macvlan"}]`},
		"the design's configName example": {doc: `configName: macvlan-host-local`, ifName: "net1",
			want: `[{"ipam":{"ranges":[[{"subnet":"10.10.1.0/24"}]],"type":"host-local"},"master":"eth7","mode":"bridge","type":"macvlan"}]`},
		"an approved config, another ifName": {doc: `{"ifName": "net5", "configName": "macvlan-host-local"}`, ifName: "net5",
			want: `[{"ipam":{"ranges":[[{"subnet":"10.10.1.0/24"}]],"type":"host-local"},"master":"eth7","mode":"bridge","type":"macvlan"}]`},
		"an approved config naming host objects": {doc: `{"ifName": "net2", "configName": "storage-net"}`, ifName: "net2",
			want:   `[{"ipam":{"dataDir":"/var/lib/cni/storage","gateway":"10.11.0.1","subnet":"10.11.0.0/16","type":"host-local"},"master":"bond0","mode":"private","type":"macvlan"}]`,
			redact: []string{"10.11.0.1"}},
	} {
		t.Run(name, func(t *testing.T) {
			net, errs := Build(context.Background(), decodeCNI(t, tc.doc), "default-c-r", testPolicy, testCNIContext(t))
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			var list struct {
				CNIVersion, Name string
				Plugins          json.RawMessage
			}
			if err := json.Unmarshal(net.Conflist, &list); err != nil {
				t.Fatal(err)
			}
			if list.Name != "default-c-r" || list.CNIVersion == "" {
				t.Errorf("name, cniVersion = %q, %q", list.Name, list.CNIVersion)
			}
			if string(list.Plugins) != tc.want {
				t.Errorf("plugins:\n%s\nwant:\n%s", list.Plugins, tc.want)
			}
			if want := orDefault(tc.ifName, "net1"); net.IfName != want {
				t.Errorf("ifName %q, want %q", net.IfName, want)
			}
			if strings.Join(net.Redact, ",") != strings.Join(tc.redact, ",") {
				t.Errorf("redact %q, want %q", net.Redact, tc.redact)
			}
		})
	}
	// The approved config is not changed by the arguments of a claim.
	c := testCNIContext(t)
	for range 2 {
		if _, errs := Build(context.Background(), decodeCNI(t, `configName: storage-net`+"\nifName: net2"), "default-c-r", testPolicy, c); len(errs) > 0 {
			t.Fatal(errs)
		}
	}
	if ipam := c.Approved.(ApprovedSet)["storage-net"].Spec.Plugins[0].Config["ipam"].(map[string]any); ipam["gateway"] != nil {
		t.Errorf("the approved config was changed: %v", ipam)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func TestBuildConflistErrors(t *testing.T) {
	plugin := func(s string) string { return `{` + cniHead + `, "plugins": [` + s + `]}` }
	for name, tc := range map[string]struct {
		doc    string
		want   []string
		policy *Options
	}{
		"plugin not allowed": {doc: plugin(`{"type": "ptp"}`), want: []string{`plugins[0].type: Forbidden: plugin type "ptp" is not on this node's allowlist`}},
		"IPAM not allowed":   {doc: plugin(`{"type": "macvlan", "config": {"ipam": {"type": "dhcp"}}}`), want: []string{`plugins[0].config.ipam.type: Forbidden: plugin type "dhcp"`}},
		"host-device by default": {doc: plugin(`{"type": "host-device", "config": {"device": "eth0"}}`), policy: &Options{Plugins: DefaultPlugins},
			want: []string{`plugins[0].type: Forbidden: plugin type "host-device"`, "plugins[0].config.device: Forbidden: names an object of the host (device)"}},
		"host-device moving the uplink": {doc: plugin(`{"type": "host-device", "config": {"device": "eth0"}}`),
			want: []string{"plugins[0].config.device: Forbidden: names an object of the host (device): in a claim's own config it may only come from an approved CNIConfig (configName)"}},
		"a bridge and a host path": {doc: plugin(`{"type": "bridge", "config": {"bridge": "cni0", "ipam": {"type": "host-local", "dataDir": "/etc/evil"}}}`),
			want: []string{"plugins[0].config.bridge: Forbidden", "plugins[0].config.ipam.dataDir: Forbidden: names an object of the host (dataDir)"}},
		"a path in any field": {doc: plugin(`{"type": "macvlan", "config": {"ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24", "x": "/etc/passwd"}]]}}}`),
			want: []string{"plugins[0].config.ipam.ranges[0][0].x: Forbidden: names an object of the host (a path)"}},
		"a host field in a list": {doc: plugin(`{"type": "macvlan", "config": {"x": [{"master": "eth0"}]}}`), want: []string{"plugins[0].config.x[0].master: Forbidden"}},
		"master as a constant": {doc: plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "master", "value": "eth0"}]}`),
			want: []string{"plugins[0].arguments[0].value: Forbidden: sets config.master, which names an object of the host (master)"}},
		"a host path inside a constant": {doc: plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "ipam", "value": {"type": "host-local", "dataDir": "/etc/evil"}}]}`),
			want: []string{"plugins[0].arguments[0].value: Forbidden: sets config.ipam.dataDir"}},
		"master from a ConfigMap": {doc: plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "master", "valueFrom": {"configMapKeyRef": {"name": "vlans", "key": "eth7"}}}]}`),
			want: []string{"plugins[0].arguments[0].valueFrom.configMapKeyRef: Forbidden: sets config.master"}},
		// The allocated device gives a claim its master, and nothing else
		// of the host: no host path, no other host device, no option.
		"a data directory from the device": {doc: plugin(`{"type": "macvlan", "config": {"ipam": {"type": "host-local"}}, "arguments": [{"fieldPath": "master", "valueFrom": {"attributeRef": "name"}},
			{"fieldPath": "ipam.dataDir", "valueFrom": {"attributeRef": "name"}}]}`),
			want: []string{"plugins[0].arguments[1].valueFrom.attributeRef: Forbidden: sets config.ipam.dataDir, which names an object of the host (dataDir, a host path), from an attribute of the allocated device"}},
		"a data directory from the device, in capitals": {doc: plugin(`{"type": "macvlan", "config": {"IPAM": {"type": "host-local"}}, "arguments": [{"fieldPath": "master", "attributeRef": "name"},
			{"fieldPath": "ipam.DATADIR", "attributeRef": "cni.dra.networking.x-k8s.io/name"}]}`),
			want: []string{"plugins[0].arguments[1].attributeRef: Forbidden: sets config.ipam.DATADIR, which names an object of the host"}},
		"host-device's device from the device": {doc: plugin(`{"type": "host-device", "arguments": [{"fieldPath": "device", "valueFrom": {"attributeRef": "name"}}]}`),
			want: []string{"plugins[0].arguments[0].valueFrom.attributeRef: Forbidden: sets config.device, which names an object of the host (device, a host device)"}},
		"bridge's bridge from the device": {doc: plugin(`{"type": "bridge", "arguments": [{"fieldPath": "bridge", "valueFrom": {"attributeRef": "name"}}]}`),
			want: []string{"plugins[0].arguments[0].valueFrom.attributeRef: Forbidden: sets config.bridge"}},
		"a master below the top from the device": {doc: plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "master", "attributeRef": "name"}, {"fieldPath": "x.master", "attributeRef": "name"}]}`),
			want: []string{"plugins[0].arguments[1].attributeRef: Forbidden: sets config.x.master"}},
		"an option from the device": {doc: plugin(`{"type": "bridge", "config": {"bridge": "x"}, "arguments": [{"fieldPath": "ipMasq", "attributeRef": "name"}]}`),
			want: []string{"plugins[0].arguments[0].attributeRef: Forbidden: sets config.ipMasq, which changes the node"}},
		"a data directory from a ConfigMap key the device chooses": {doc: plugin(`{"type": "macvlan", "config": {"ipam": {"type": "host-local"}}, "arguments": [{"fieldPath": "master", "attributeRef": "name"},
			{"fieldPath": "ipam.dataDir", "valueFrom": {"configMapKeyRef": {"name": "vlans", "attribute": "name"}}}]}`),
			want: []string{"plugins[0].arguments[1].valueFrom.configMapKeyRef: Forbidden: sets config.ipam.dataDir"}},
		"a data directory from the node's name": {doc: plugin(`{"type": "macvlan", "config": {"ipam": {"type": "host-local"}}, "arguments": [{"fieldPath": "master", "attributeRef": "name"},
			{"fieldPath": "ipam.dataDir", "valueFrom": {"resourceSliceFieldRef": {"fieldPath": "spec.nodeName"}}}]}`),
			want: []string{"plugins[0].arguments[1].valueFrom.resourceSliceFieldRef: Forbidden: sets config.ipam.dataDir"}},
		"master from the node's name": {doc: plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "master", "valueFrom": {"resourceSliceFieldRef": {"fieldPath": "spec.nodeName"}}}]}`),
			want: []string{"plugins[0].arguments[0].valueFrom.resourceSliceFieldRef: Forbidden: sets config.master"}},
		"only approved": {doc: plugin(`{"type": "macvlan"}`), policy: &Options{Plugins: testPolicy.Plugins, RequireApproved: true},
			want: []string{"plugins: Forbidden: this node runs only approved configs (--cni-require-approved)"}},
		"both configs":      {doc: `{` + cniHead + `, "configName": "storage-net", "plugins": [{"type": "macvlan"}]}`, want: []string{"configName"}},
		"no config":         {doc: `{` + cniHead + `}`, want: []string{"plugins: Required value"}},
		"unknown approved":  {doc: `{` + cniHead + `, "configName": "nope"}`, want: []string{`configName: Not found: "nope"`}},
		"cniVersion banana": {doc: `{` + cniHead + `, "cniVersion": "banana", "plugins": [{"type": "macvlan"}]}`, want: []string{`cniVersion: Unsupported value: "banana": supported values: "0.1.0"`}},
		"bad ifName":        {doc: `{"ifName": "a/b", "plugins": [{"type": "macvlan"}]}`, want: []string{"ifName"}},
		"unknown attribute": {doc: plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "mtu", "valueFrom": {"attributeRef": "uplink"}}]}`),
			want: []string{"plugins[0].arguments[0].valueFrom.attributeRef: Not found"}},
		"missing ConfigMap key": {doc: plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "mode", "valueFrom": {"configMapKeyRef": {"name": "vlans", "key": "eth9"}}}]}`),
			want: []string{"configMapKeyRef.key: Not found"}},
		"missing ConfigMap": {doc: plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "mode", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "eth9"}}}]}`),
			want: []string{`configMapKeyRef.name: Not found: "ConfigMap default/nope"`}},
		"type by argument": {doc: plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "type", "value": "bridge"}]}`), want: []string{"arguments[0].fieldPath"}},
		"type in config":   {doc: plugin(`{"type": "macvlan", "config": {"type": "bridge"}}`), want: []string{"plugins[0].config.type: Forbidden"}},
		// Plugins read keys in any letter case, Unicode folding included.
		"TYPE in config":               {doc: plugin(`{"type": "macvlan", "config": {"TYPE": "bridge"}}`), want: []string{"plugins[0].config.TYPE: Forbidden"}},
		"type by argument in capitals": {doc: plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "Type", "value": "bridge"}]}`), want: []string{"arguments[0].fieldPath"}},
		"IPAM not allowed, in capitals": {doc: plugin(`{"type": "macvlan", "config": {"IPAM": {"Type": "host-device"}, "Device": "eth0"}, "arguments": [{"fieldPath": "master", "attributeRef": "name"}]}`),
			policy: &Options{Plugins: DefaultPlugins},
			want: []string{`plugins[0].config.IPAM.Type: Forbidden: plugin type "host-device" is not on this node's allowlist`,
				"plugins[0].config.Device: Forbidden: read by the plugin as device, names an object of the host (device)"}},
		"Master, maſter, PCIBusID": {doc: plugin(`{"type": "macvlan", "config": {"Master": "eth0", "x": {"maſter": "eth1"}, "PCIBusID": "0000:3b:00.0"}}`),
			want: []string{"plugins[0].config.Master: Forbidden: read by the plugin as master", "plugins[0].config.x.maſter: Forbidden: read by the plugin as master",
				"plugins[0].config.PCIBusID: Forbidden: read by the plugin as pciBusID"}},
		"RuntimeConfig": {doc: plugin(`{"type": "macvlan", "config": {"RuntimeConfig": {"deviceID": "0000:3b:00.0"}}, "arguments": [{"fieldPath": "master", "attributeRef": "name"}]}`),
			want: []string{"plugins[0].config.RuntimeConfig.deviceID: Forbidden: names an object of the host (deviceID)"}},
		"master spelled twice": {doc: plugin(`{"type": "macvlan", "config": {"master": "eth7", "MASTER": "eth0"}}`),
			want: []string{`plugins[0].config: Invalid value: "": the configuration: the keys "MASTER" and "master" set one field`}},
		"master left out": {doc: plugin(`{"type": "ipvlan", "config": {"ipam": {"type": "static"}}}`),
			want: []string{"plugins[0].config.master: Required value: left out, the plugin takes the node's default-route interface (a host device): set master from the allocated device"}},
		"master empty": {doc: plugin(`{"type": "vlan", "config": {"master": "", "vlanId": 5}}`),
			want: []string{"plugins[0].config.master: Required value: left out"}},
		"bridge left out, gateway and NAT": {doc: plugin(`{"type": "bridge", "config": {"isGateway": true, "IPMASQ": true, "hairpinMode": false}}`),
			want: []string{"plugins[0].config.bridge: Required value: left out, the plugin takes cni0 (a host device), which a claim's own config may not name", "plugins[0].config.isGateway: Forbidden: changes the node",
				"plugins[0].config.IPMASQ: Forbidden: changes the node (the plugin's ipMasq)"}},
		"a sysctl of the node": {doc: plugin(`{"type": "tuning", "config": {"sysctl": {"kernel.core_pattern": "|/x", "net.ipv4.conf.net1.rp_filter": "0"}}}`),
			want: []string{"plugins[0].config.sysctl[kernel.core_pattern]: Forbidden: changes the node (the plugin's sysctl)"}},
		// tuning reads args.cni over its own fields: a sysctl there is one
		// it writes.
		"a sysctl of the node in args.cni": {doc: plugin(`{"type": "tuning", "config": {"sysctl": {}, "args": {"cni": {"sysctl": {"kernel.core_pattern": "|/x"}}}}}`),
			want: []string{"plugins[0].config.args.cni.sysctl[kernel.core_pattern]: Forbidden: changes the node (the plugin's sysctl)"}},
		"a sysctl of the node by argument": {doc: plugin(`{"type": "tuning", "arguments": [{"fieldPath": "args.cni.sysctl", "value": {"kernel.core_pattern": "|/x"}}]}`),
			want: []string{"plugins[0].arguments[0].value: Forbidden: sets config.args.cni.sysctl[kernel.core_pattern], which changes the node"}},
		"promisc, which reaches the master": {doc: plugin(`{"type": "tuning", "config": {"ARGS": {"CNI": {"promisc": true}}}}`),
			want: []string{"plugins[0].config.ARGS.CNI.promisc: Forbidden: changes the node (the plugin's promisc)"}},
		"value and valueFrom": {doc: plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "mode", "value": "x", "valueFrom": {"attributeRef": "name"}}]}`),
			want: []string{"not more than one"}},
	} {
		t.Run(name, func(t *testing.T) {
			policy := testPolicy
			if tc.policy != nil {
				policy = *tc.policy
			}
			_, errs := Build(context.Background(), decodeCNI(t, tc.doc), "default-c-r", policy, testCNIContext(t))
			msg := errs.ToAggregate()
			for _, want := range tc.want {
				if msg == nil || !strings.Contains(msg.Error(), want) {
					t.Errorf("errors = %v, want %q", errs, want)
				}
			}
		})
	}
}

// A claim reads ConfigMaps of its own namespace only, with the RBAC the
// operator gave fastpathd; a value it read is never in an error.
func TestCNIConfigMaps(t *testing.T) {
	c := testCNIContext(t)
	c.Namespace = "locked"
	_, errs := Build(context.Background(), decodeCNI(t, `{`+cniHead+`, "plugins": [{"type": "macvlan", "arguments": [{"fieldPath": "mode", "valueFrom": {"configMapKeyRef": {"name": "vlans", "key": "eth7"}}}]}]}`),
		"locked-c-r", testPolicy, c)
	if msg := errs.ToAggregate(); msg == nil || !strings.Contains(msg.Error(), "fastpathd may not read ConfigMaps of namespace locked") ||
		!strings.Contains(msg.Error(), "cni.configMapNamespaces") {
		t.Errorf("forbidden: %v", errs)
	}
	// A plugin type read from a ConfigMap, refused, is not named.
	_, errs = Build(context.Background(), decodeCNI(t, `{`+cniHead+`, "plugins": [{"type": "macvlan", "config": {"ipam": {}},
		"arguments": [{"fieldPath": "ipam.type", "valueFrom": {"configMapKeyRef": {"name": "vlans", "key": "ipam"}}}]}]}`),
		"default-c-r", testPolicy, testCNIContext(t))
	if msg := errs.ToAggregate(); msg == nil || !strings.Contains(msg.Error(), "not on this node's allowlist") || strings.Contains(msg.Error(), "s3cret") {
		t.Errorf("a ConfigMap's value in an error: %v", errs)
	}
}

// Accept is the status condition of approved configs.
func TestAcceptCNIConfig(t *testing.T) {
	set := testApproved(t)
	for name, tc := range map[string]struct {
		change         func(*v1alpha1.CNIConfigObject)
		policy         Options
		status, reason string
		want           string
	}{
		"accepted":       {policy: testPolicy, status: "True", reason: "Accepted", want: "[macvlan host-local]"},
		"not allowed":    {policy: Options{Plugins: []string{"macvlan"}}, status: "False", reason: "PluginNotAllowed", want: `"host-local" is not on this node's allowlist`},
		"invalid":        {change: func(o *v1alpha1.CNIConfigObject) { o.Spec.CNIVersion = "banana" }, policy: testPolicy, status: "False", reason: "Invalid", want: "spec.cniVersion"},
		"does not parse": {change: func(o *v1alpha1.CNIConfigObject) { o.Spec.Plugins[0].Config["ipam"] = "dhcp" }, policy: testPolicy, status: "False", reason: "Invalid", want: "not a valid CNI configuration"},
	} {
		t.Run(name, func(t *testing.T) {
			o := *set["macvlan-host-local"]
			o.Generation = 3
			o.Spec.Plugins = []v1alpha1.CNIPlugin{o.Spec.Plugins[0]}
			o.Spec.Plugins[0].Config = map[string]any{"mode": "bridge", "ipam": map[string]any{"type": "host-local"}}
			if tc.change != nil {
				tc.change(&o)
			}
			cond := Accept(&o, tc.policy)
			if string(cond.Status) != tc.status || cond.Reason != tc.reason || cond.Type != "Accepted" || cond.ObservedGeneration != 3 ||
				!strings.Contains(cond.Message, tc.want) {
				t.Errorf("condition = %+v, want %s %s %q", cond, tc.status, tc.reason, tc.want)
			}
		})
	}
}

// A claim in the upstream CNI DRA driver's form (ifName and config) runs
// with the same checks as the plugins form: a master left out comes from
// the allocated device (its attribute name), not from the plugin's
// default; a master written into the config names an object of the host
// and is refused.
func TestBuildUpstreamForm(t *testing.T) {
	const head = `"apiVersion": "cni.dra.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1"`
	cfg := decodeCNI(t, `{`+head+`, "config": {"cniVersion": "1.0.0", "name": "macvlan0", "plugins": [
		{"type": "macvlan", "mode": "bridge"}, {"type": "tuning", "mtu": 1400}]}}`)
	net, errs := Build(context.Background(), cfg, "default-c-r", testPolicy, testCNIContext(t))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !strings.Contains(string(net.Conflist), `"master":"eth7"`) || net.IfName != "net1" {
		t.Errorf("conflist %s (ifName %s), want master eth7 from the device", net.Conflist, net.IfName)
	}
	cfg = decodeCNI(t, `{`+head+`, "config": {"cniVersion": "1.0.0", "plugins": [{"type": "macvlan", "master": "eth0", "mode": "bridge"}]}}`)
	if _, errs := Build(context.Background(), cfg, "default-c-r", testPolicy, testCNIContext(t)); len(errs) == 0 ||
		!strings.Contains(errs.ToAggregate().Error(), "config.plugins[0].master: Forbidden: names an object of the host") ||
		!strings.Contains(errs.ToAggregate().Error(), "leave the field out where the node fills it from the allocated device") {
		t.Errorf("master eth0 in the upstream form: %v", errs)
	}
}

// A CNI claim's macvlan, vlan and ipvlan are made on the node's interface,
// which every CNI claim of the node shares: a claim's own config may not
// take it whole (a passthru macvlan, in any letter case of key and value,
// by a constant argument too) nor make its interface on a VLAN of it the
// operator did not allow (--cni-vlan-ids: a vlanId, in any letter case;
// left out, VLAN 0); an approved config may.
func TestBuildConflistSharedMaster(t *testing.T) {
	plugin := func(s string) string { return `{` + cniHead + `, "plugins": [` + s + `]}` }
	const master = `"arguments": [{"fieldPath": "master", "valueFrom": {"attributeRef": "name"}}]`
	const whole = "changes the node (a passthru macvlan takes its master whole: the master turns promiscuous, its MAC is the pod's to change, " +
		"and no other macvlan can be made on it): a claim's own config may not; only an approved CNIConfig (configName) may"
	noVLANs := Options{Plugins: testPolicy.Plugins, ConfigNamespace: testPolicy.ConfigNamespace}
	for name, tc := range map[string]struct {
		doc    string
		policy *Options
		want   []string // errors, whole; none: built
	}{
		"bridge":   {doc: plugin(`{"type": "macvlan", "config": {"mode": "bridge"}, ` + master + `}`)},
		"vepa":     {doc: plugin(`{"type": "macvlan", "config": {"mode": "vepa"}, ` + master + `}`)},
		"passthru": {doc: plugin(`{"type": "macvlan", "config": {"mode": "passthru"}, ` + master + `}`), want: []string{"plugins[0].config.mode: Forbidden: " + whole}},
		"Mode PASSTHRU": {doc: plugin(`{"type": "macvlan", "config": {"Mode": "PASSTHRU"}, ` + master + `}`),
			want: []string{"plugins[0].config.Mode: Forbidden: " + whole}},
		"passthru by argument": {doc: plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "master", "attributeRef": "name"}, {"fieldPath": "mode", "value": "passthru"}]}`),
			want: []string{"plugins[0].arguments[1].value: Forbidden: sets config.mode, which " + whole}},
		"passthru of another plugin": {doc: plugin(`{"type": "tuning", "config": {"mode": "passthru"}}`)},
		"a VLAN allowed":             {doc: plugin(`{"type": "vlan", "config": {"vlanId": 150, "ipam": {"type": "host-local"}}, ` + master + `}`)},
		"a VLAN not allowed": {doc: plugin(`{"type": "vlan", "config": {"vlanId": 42}, ` + master + `}`),
			want: []string{"plugins[0].config.vlanId: Forbidden: VLAN 42 of the node's interface is not among the VLAN IDs the operator allows CNI claims (--cni-vlan-ids: 100-199, 300): " +
				"a VLAN of the node's interface is a network of the node's; use one of them, or name an approved CNIConfig (configName)"}},
		"VLANID in capitals": {doc: plugin(`{"type": "vlan", "config": {"VLANID": 42}, ` + master + `}`),
			want: []string{"plugins[0].config.VLANID: Forbidden: VLAN 42 of the node's interface"}},
		"a VLAN by argument": {doc: plugin(`{"type": "vlan", "arguments": [{"fieldPath": "master", "attributeRef": "name"}, {"fieldPath": "VlanId", "value": 4000}]}`),
			want: []string{"plugins[0].arguments[1].value: Forbidden: VLAN 4000 of the node's interface"}},
		"the VLAN left out": {doc: plugin(`{"type": "vlan", ` + master + `}`),
			want: []string{"plugins[0].config.vlanId: Required value: left out, the plugin makes VLAN 0 of the node's interface (priority tags on its untagged network), " +
				"which is not among the VLAN IDs the operator allows CNI claims (--cni-vlan-ids: 100-199, 300)"}},
		"no VLAN allowed": {doc: plugin(`{"type": "vlan", "config": {"vlanId": 150}, ` + master + `}`), policy: &noVLANs,
			want: []string{"plugins[0].config.vlanId: Forbidden: VLAN 150 of the node's interface is not among the VLAN IDs the operator allows CNI claims (--cni-vlan-ids: none)"}},
		"an approved config": {doc: `{"ifName": "net3", "configName": "takes-all"}`, policy: &noVLANs},
	} {
		t.Run(name, func(t *testing.T) {
			policy := testPolicy
			if tc.policy != nil {
				policy = *tc.policy
			}
			c := testCNIContext(t)
			set := c.Approved.(ApprovedSet)
			set["takes-all"] = &v1alpha1.CNIConfigObject{Spec: v1alpha1.CNIConfig{Plugins: []v1alpha1.CNIPlugin{
				{Type: "macvlan", Config: map[string]any{"master": "ens1f0", "mode": "passthru"}},
				{Type: "vlan", Config: map[string]any{"master": "ens1f0", "vlanId": 7}}}}}
			_, errs := Build(context.Background(), decodeCNI(t, tc.doc), "default-c-r", policy, c)
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %q", errs, tc.want)
			}
			for i, want := range tc.want {
				if !strings.HasPrefix(errs[i].Error(), want) {
					t.Errorf("error %d:\n%s\nwant\n%s", i, errs[i], want)
				}
			}
		})
	}
}
