package v1alpha1

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

func TestMarshalSetsTypeMeta(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{InterfaceConfig{Mode: ModeVFIO}, `{"apiVersion":"fastpath.dev/v1alpha1","kind":"InterfaceConfig","mode":"vfio"}`},
		{&InterfaceConfig{}, `{"apiVersion":"fastpath.dev/v1alpha1","kind":"InterfaceConfig"}`},
		{CNIConfig{IfName: "net1", ConfigName: "x"}, `{"apiVersion":"cni.networking.x-k8s.io/v1alpha1","kind":"CNI","ifName":"net1","configName":"x"}`},
		{CNIConfigObject{}, `{"apiVersion":"cni.networking.x-k8s.io/v1alpha1","kind":"CNIConfig","metadata":{},"spec":{"apiVersion":"cni.networking.x-k8s.io/v1alpha1","kind":"CNI"}}`},
		{MemifConfig{}, `{"apiVersion":"fastpath.dev/v1alpha1","kind":"MemifConfig","endpoints":null}`},
	} {
		data, err := json.Marshal(tc.v)
		if err != nil || string(data) != tc.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tc.v, data, err, tc.want)
		}
	}
}

// A config written in Go decodes back to itself, in JSON and in YAML.
func TestRoundTrip(t *testing.T) {
	in := InterfaceConfig{Mode: ModeNetdev, Interface: &InterfaceSpec{Name: "net1", MTU: 9000, MAC: "02:00:00:00:00:01",
		Addresses: []string{"10.0.0.2/24"}, Routes: []Route{{Destination: "10.1.0.0/16", Gateway: "10.0.0.1"}}},
		VF: &VFConfig{VLAN: new(100), SpoofChk: new(true)}}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out InterfaceConfig
	if errs := DecodeInterfaceConfig(data, &out, field.NewPath("p")); len(errs) > 0 {
		t.Fatal(errs)
	}
	again, _ := json.Marshal(out)
	if string(again) != string(data) {
		t.Errorf("round trip: %s, want %s", again, data)
	}
	yaml := "apiVersion: fastpath.dev/v1alpha1\nkind: InterfaceConfig\nmode: netdev\ninterface:\n  name: net1\n  mtu: 9000\n"
	var fromYAML InterfaceConfig
	if errs := DecodeInterfaceConfig([]byte(yaml), &fromYAML, field.NewPath("p")); len(errs) > 0 || fromYAML.Interface.MTU != 9000 {
		t.Errorf("YAML: %+v, %v", fromYAML, errs)
	}
}

func TestDecodeIsStrict(t *testing.T) {
	head := `"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig"`
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown field":       {`{` + head + `, "interface": {"colour": "red"}}`, "p.interface.colour: Forbidden: unknown field"},
		"field case":          {`{` + head + `, "Mode": "netdev"}`, "p.Mode: Forbidden: unknown field"},
		"duplicate field":     {`{` + head + `, "mode": "netdev", "mode": "vfio"}`, "p.mode: Forbidden: duplicate field"},
		"YAML duplicate":      {"apiVersion: fastpath.dev/v1alpha1\nkind: InterfaceConfig\nmode: netdev\nmode: vfio\n", "p: Invalid value"},
		"wrong kind":          {`{"apiVersion": "v1", "kind": "ConfigMap"}`, `p.apiVersion: Invalid value: "v1/ConfigMap"`},
		"no kind":             {`{"mode": "netdev"}`, "want apiVersion fastpath.dev/v1alpha1, kind InterfaceConfig"},
		"not an object":       {`[1, 2]`, "p: Invalid value"},
		"wrong type":          {`{` + head + `, "interface": {"mtu": "big"}}`, "p: Invalid value"},
		"number out of range": {`{` + head + `, "interface": {"mtu": 1e400}}`, "p: Invalid value"},
		"empty":               {``, "p.apiVersion"},
	} {
		t.Run(name, func(t *testing.T) {
			var cfg InterfaceConfig
			errs := DecodeInterfaceConfig([]byte(tc.doc), &cfg, field.NewPath("p"))
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
}

func TestDefault(t *testing.T) {
	var c InterfaceConfig
	c.Default("nic")
	if c.APIVersion != GroupVersion || c.Mode != ModeNetdev || c.Interface == nil || c.Interface.Name != "nic" || c.XDP != nil {
		t.Errorf("netdev defaults = %+v", c)
	}
	x := InterfaceConfig{Mode: ModeAFXDP}
	x.Default("xsk")
	if x.XDP == nil || *x.XDP != (XDPConfig{Program: XDPProgramXSKRedirect, AttachMode: AttachNative, Queues: 1, ZeroCopy: ZeroCopyPrefer}) || x.Interface.Name != "xsk" {
		t.Errorf("afxdp defaults = %+v %+v", x.XDP, x.Interface)
	}
	v := InterfaceConfig{Mode: ModeVFIO}
	v.Default("dpdk")
	if v.Interface != nil {
		t.Errorf("vfio got an interface: %+v", v.Interface)
	}
}

func TestValidInterfaceName(t *testing.T) {
	for _, ok := range []string{"net1", "xsk0", "a", "eth1", "n-1_2.3", "123456789012345"} {
		if err := ValidInterfaceName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1234567890123456", ".", "..", "lo", "eth0", "a/b", "a:b", "a b", "a\tb", "net\u200b1", "nét1", "a\x7f", "\x00"} {
		if err := ValidInterfaceName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestValidate(t *testing.T) {
	valid := func() InterfaceConfig {
		c := InterfaceConfig{Interface: &InterfaceSpec{Name: "net1", MTU: 9000, MAC: "02:00:00:00:00:01", Addresses: []string{"10.0.0.2/24", "fd00::2/64"},
			Routes: []Route{{Destination: "10.1.0.0/16", Gateway: "10.0.0.1"}, {Destination: "::/0", Gateway: "fd00::1"}}},
			VF: &VFConfig{VLAN: new(4094), QoS: new(7), VLANProto: "802.1ad", MaxTxRateMbps: new(4294967295), LinkState: "enable"}}
		c.Default("nic")
		return c
	}
	if errs := (func() *InterfaceConfig { c := valid(); return &c }()).Validate(); len(errs) > 0 {
		t.Fatalf("valid config: %v", errs)
	}
	for name, tc := range map[string]struct {
		change func(*InterfaceConfig)
		want   string
	}{
		"mode":              {func(c *InterfaceConfig) { c.Mode = "sriov" }, "mode: Unsupported value"},
		"name":              {func(c *InterfaceConfig) { c.Interface.Name = "eth0" }, "interface.name"},
		"MTU":               {func(c *InterfaceConfig) { c.Interface.MTU = 67 }, "interface.mtu"},
		"multicast MAC":     {func(c *InterfaceConfig) { c.Interface.MAC = "01:00:5e:00:00:01" }, "interface.mac"},
		"zero MAC":          {func(c *InterfaceConfig) { c.Interface.MAC = "00:00:00:00:00:00" }, "interface.mac"},
		"long MAC":          {func(c *InterfaceConfig) { c.Interface.MAC = "02:00:00:00:00:00:00:01" }, "interface.mac"},
		"non-canonical":     {func(c *InterfaceConfig) { c.Interface.Addresses = []string{"FD00::2/64"} }, "canonical: fd00::2/64"},
		"no prefix":         {func(c *InterfaceConfig) { c.Interface.Addresses = []string{"10.0.0.1"} }, "interface.addresses[0]"},
		"mapped":            {func(c *InterfaceConfig) { c.Interface.Addresses = []string{"::ffff:10.0.0.1/120"} }, "IPv4-mapped"},
		"duplicate address": {func(c *InterfaceConfig) { c.Interface.Addresses = []string{"10.0.0.2/24", "10.0.0.2/24"} }, "addresses[1]: Duplicate"},
		"route family":      {func(c *InterfaceConfig) { c.Interface.Routes[0].Gateway = "fd00::1" }, "routes[0].gateway"},
		"route destination": {func(c *InterfaceConfig) { c.Interface.Routes[0].Destination = "10.1.0.0" }, "routes[0].destination"},
		"route via itself": {func(c *InterfaceConfig) { c.Interface.Routes[1].Gateway = "fd00::2" },
			`interface.addresses[1]: Invalid value: "fd00::2/64": fd00::2 is also the gateway of interface.routes[1]: a route through the interface's own address goes nowhere`},
		"VLAN":               {func(c *InterfaceConfig) { c.VF.VLAN = new(4095) }, "vf.vlan"},
		"QoS":                {func(c *InterfaceConfig) { c.VF.QoS = new(8) }, "vf.qos"},
		"QoS without VLAN":   {func(c *InterfaceConfig) { c.VF.VLAN = nil }, "vf.qos: Invalid value: 7: needs a vlan"},
		"proto":              {func(c *InterfaceConfig) { c.VF.VLANProto = "802.1x" }, "vf.vlanProto"},
		"link state":         {func(c *InterfaceConfig) { c.VF.LinkState = "up" }, "vf.linkState"},
		"rate above 32 bits": {func(c *InterfaceConfig) { c.VF.MaxTxRateMbps = new(4294967396) }, "vf.maxTxRateMbps: Invalid value: 4294967396: must be between 0 and 4294967295"},
		"negative rate":      {func(c *InterfaceConfig) { c.VF.MinTxRateMbps = new(-1) }, "vf.minTxRateMbps"},
		"min above max":      {func(c *InterfaceConfig) { c.VF.MinTxRateMbps, c.VF.MaxTxRateMbps = new(20), new(10) }, "must not exceed maxTxRateMbps"},
		"xdp in netdev":      {func(c *InterfaceConfig) { c.XDP = &XDPConfig{} }, "xdp: Forbidden: only for mode afxdp"},
		"interface in vfio":  {func(c *InterfaceConfig) { c.Mode = ModeVFIO }, "interface: Forbidden"},
		"rdma in vfio":       {func(c *InterfaceConfig) { c.Mode, c.Interface, c.RDMA = ModeVFIO, nil, &RDMAConfig{} }, "rdma: Forbidden: only for modes netdev, macvlan, ipvlan, vlan"},
		"rdma in delegate":   {func(c *InterfaceConfig) { c.Mode, c.Interface, c.RDMA = ModeDelegate, nil, &RDMAConfig{} }, "rdma: Forbidden"},
		"memif uid":          {func(c *InterfaceConfig) { c.Memif = &MemifSpec{UID: new(int64(-1))} }, "memif.uid"},
		"memif gid":          {func(c *InterfaceConfig) { c.Memif = &MemifSpec{GID: new(int64(1) << 32)} }, "memif.gid"},
	} {
		t.Run(name, func(t *testing.T) {
			c := valid()
			tc.change(&c)
			if errs := c.Validate(); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
	x := InterfaceConfig{Mode: ModeAFXDP, XDP: &XDPConfig{Program: "xdp-pwn", AttachMode: "offload", Queues: -1, ZeroCopy: "always"}}
	x.Default("xsk")
	msg := x.Validate().ToAggregate().Error()
	for _, want := range []string{"xdp.program: Unsupported value", "xdp.attachMode", "xdp.queues", "xdp.zeroCopy"} {
		if !strings.Contains(msg, want) {
			t.Errorf("afxdp errors %q lack %q", msg, want)
		}
	}
}

func TestValidateCNIConfig(t *testing.T) {
	plugin := func(p CNIPlugin) CNIConfig { return CNIConfig{IfName: "net1", Plugins: []CNIPlugin{p}} }
	arg := func(a CNIArgument) CNIConfig { return plugin(CNIPlugin{Type: "a", Arguments: []CNIArgument{a}}) }
	cm := func(r CNIConfigMapKeyRef) CNIConfig {
		return arg(CNIArgument{FieldPath: "x", ValueFrom: &CNIValueSource{ConfigMapKeyRef: &r}})
	}
	node := &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}
	for name, c := range map[string]CNIConfig{
		"inline":                  plugin(CNIPlugin{Type: "macvlan", Arguments: []CNIArgument{{FieldPath: "master", ValueFrom: &CNIValueSource{AttributeRef: "name"}}}}),
		"approved, own ifName":    {ConfigName: "macvlan-host-local"},
		"approved, ifName given":  {IfName: "net2", ConfigName: "macvlan-host-local"},
		"short attributeRef":      arg(CNIArgument{FieldPath: "master", AttributeRef: "name"}),
		"slice field selector":    arg(CNIArgument{FieldPath: "x", ValueFrom: &CNIValueSource{ResourceSliceFieldRef: &corev1.ObjectFieldSelector{APIVersion: "resource.k8s.io/v1", FieldPath: "spec.pool.name"}}}),
		"ConfigMap key":           cm(CNIConfigMapKeyRef{Name: "vlans", Key: "eth7"}),
		"key from an attribute":   cm(CNIConfigMapKeyRef{Name: "vlans", Attribute: "name"}),
		"key from a slice field":  cm(CNIConfigMapKeyRef{Name: "vlans", ResourceSliceFieldRef: node}),
		"every supported version": {IfName: "net1", CNIVersion: "1.1.0", Plugins: []CNIPlugin{{Type: "a"}}},
	} {
		if errs := c.Validate(); len(errs) > 0 {
			t.Errorf("%s: %v", name, errs)
		}
	}
	for name, tc := range map[string]struct {
		c    CNIConfig
		want string
	}{
		"both":              {CNIConfig{IfName: "net1", ConfigName: "x", Plugins: []CNIPlugin{{Type: "macvlan"}}}, "configName"},
		"neither":           {CNIConfig{IfName: "net1"}, "plugins: Required value"},
		"reserved name":     {CNIConfig{IfName: "lo", ConfigName: "x"}, "ifName"},
		"primary network":   {CNIConfig{IfName: "eth0", ConfigName: "x"}, "ifName: Invalid value: \"eth0\": eth0 is reserved"},
		"invisible name":    {CNIConfig{IfName: "net\u200b1", ConfigName: "x"}, "ifName: Invalid value"},
		"no ifName inline":  {CNIConfig{Plugins: []CNIPlugin{{Type: "a"}}}, "ifName: Required value"},
		"bad configName":    {CNIConfig{ConfigName: "Not_A_Name"}, "configName: Invalid value"},
		"cniVersion, named": {CNIConfig{ConfigName: "x", CNIVersion: "1.0.0"}, "cniVersion: Forbidden"},
		"cniVersion banana": {CNIConfig{IfName: "net1", CNIVersion: "banana", Plugins: []CNIPlugin{{Type: "a"}}}, `cniVersion: Unsupported value: "banana"`},
		"wrong kind":        {CNIConfig{APIVersion: "v1", Kind: "ConfigMap", ConfigName: "x"}, "apiVersion: Invalid value"},
		"no type":           {plugin(CNIPlugin{}), "plugins[0].type: Invalid value"},
		"path type":         {plugin(CNIPlugin{Type: "../../bin/sh"}), "plugins[0].type: Invalid value"},
		"type in config":    {plugin(CNIPlugin{Type: "a", Config: map[string]any{"type": "b"}}), "plugins[0].config.type: Forbidden"},
		"no field path":     {arg(CNIArgument{Value: json.RawMessage(`1`)}), "arguments[0].fieldPath: Required"},
		"empty element":     {arg(CNIArgument{FieldPath: "a..b", Value: json.RawMessage(`1`)}), "empty path element"},
		"type by argument":  {arg(CNIArgument{FieldPath: "type", Value: json.RawMessage(`"b"`)}), "arguments[0].fieldPath"},
		"no value":          {arg(CNIArgument{FieldPath: "x"}), "give value or valueFrom"},
		"value and short":   {arg(CNIArgument{FieldPath: "x", Value: json.RawMessage(`1`), AttributeRef: "name"}), "not more than one"},
		"two sources":       {arg(CNIArgument{FieldPath: "x", ValueFrom: &CNIValueSource{AttributeRef: "a", ResourceSliceFieldRef: node}}), "give exactly one of"},
		"slice field":       {arg(CNIArgument{FieldPath: "x", ValueFrom: &CNIValueSource{ResourceSliceFieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.devices"}}}), "resourceSliceFieldRef.fieldPath: Unsupported value"},
		"slice apiVersion":  {arg(CNIArgument{FieldPath: "x", ValueFrom: &CNIValueSource{ResourceSliceFieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}}), "resourceSliceFieldRef.apiVersion: Unsupported value"},
		"key and attribute": {cm(CNIConfigMapKeyRef{Name: "m", Key: "k", Attribute: "a"}), "give exactly one of key, attribute, resourceSliceFieldRef"},
		"no key":            {cm(CNIConfigMapKeyRef{Name: "m"}), "configMapKeyRef.key"},
		"no ConfigMap name": {cm(CNIConfigMapKeyRef{Key: "k"}), "configMapKeyRef.name: Required"},
		"bad ConfigMap key": {cm(CNIConfigMapKeyRef{Name: "m", Key: "a/b"}), "configMapKeyRef.key: Invalid value"},
		"too many plugins":  {CNIConfig{IfName: "net1", Plugins: make([]CNIPlugin, bounds.Plugins+1)}, "plugins: Too many"},
	} {
		t.Run(name, func(t *testing.T) {
			if errs := tc.c.Validate(); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
}

// The CNI DRA driver design's examples decode as they are written, and
// the spellings of its Go sketch are refused naming the API's.
func TestDecodeCNIConfig(t *testing.T) {
	inline := `apiVersion: cni.networking.x-k8s.io/v1alpha1
kind: CNI
ifName: "net1"
cniVersion: 1.0.0
plugins:
- type: macvlan
  config:
    mode: bridge
    ipam:
      type: host-local
      ranges:
      - - subnet: 10.10.1.0/24
  arguments:
  - fieldPath: master
    valueFrom:
      attributeRef: name
`
	c, errs := DecodeCNIConfig([]byte(inline), field.NewPath("p"))
	if len(errs) > 0 || c.Validate() != nil || c.Plugins[0].Arguments[0].ValueFrom.AttributeRef != "name" {
		t.Errorf("the design's inline example: %+v, %v, %v", c, errs, c.Validate())
	}
	c, errs = DecodeCNIConfig([]byte("configName: macvlan-host-local\n"), field.NewPath("p"))
	if len(errs) > 0 || c.Validate() != nil || c.ConfigName != "macvlan-host-local" {
		t.Errorf("the design's configName example: %+v, %v, %v", c, errs, c.Validate())
	}
	for name, tc := range map[string]struct{ doc, want string }{
		"name":            {`{"name": "net1", "configName": "x"}`, "p.name: Forbidden: unknown field: the interface's name is ifName"},
		"config":          {`{"ifName": "net1", "config": {"cniVersion": "1.0.0", "plugins": []}}`, "p.config: Forbidden: unknown field: a config is plugins[]"},
		"Args":            {`{"ifName": "net1", "plugins": [{"type": "a", "Args": []}]}`, "unknown field: a plugin's arguments are arguments"},
		"field":           {`{"ifName": "net1", "plugins": [{"type": "a", "arguments": [{"field": "x", "value": 1}]}]}`, "unknown field: the field an argument sets is fieldPath"},
		"attribute":       {`{"ifName": "net1", "plugins": [{"type": "a", "arguments": [{"fieldPath": "x", "valueFrom": {"attribute": "name"}}]}]}`, "valueFrom.attribute: Forbidden: unknown field: a device attribute is valueFrom.attributeRef"},
		"namespace":       {`{"ifName": "net1", "plugins": [{"type": "a", "arguments": [{"fieldPath": "x", "valueFrom": {"configMapKeyRef": {"name": "m", "namespace": "kube-system", "key": "k"}}}]}]}`, "configMapKeyRef.namespace: Forbidden: unknown field: a ConfigMap is read from the claim's own namespace"},
		"keyFrom":         {`{"ifName": "net1", "plugins": [{"type": "a", "arguments": [{"fieldPath": "x", "valueFrom": {"configMapKeyRef": {"name": "m", "keyFrom": {"attributeRef": "a"}}}}]}]}`, "configMapKeyRef.keyFrom: Forbidden: unknown field: a key from a device attribute is configMapKeyRef.attribute"},
		"string selector": {`{"ifName": "net1", "plugins": [{"type": "a", "arguments": [{"fieldPath": "x", "valueFrom": {"resourceSliceFieldRef": "spec.nodeName"}}]}]}`, "p: Invalid value"},
		"upstream, ours":  {`{"apiVersion": "cni.dra.networking.x-k8s.io/v1alpha1", "kind": "CNI", "configName": "x"}`, "p.configName: Forbidden: unknown field"},
		"upstream bare":   {`{"apiVersion": "cni.dra.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1"}`, "p.config: Required value"},
		"upstream extra":  {`{"apiVersion": "cni.dra.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1", "config": {"cniVersion": "1.0.0", "plugins": [], "disableGC": true}}`, "p.config.disableGC: Forbidden: not taken by this driver"},
		"wrong group":     {`{"apiVersion": "cni.example.com/v1alpha1", "kind": "CNI", "configName": "x"}`, "p.apiVersion: Invalid value"},
		"kind only":       {`{"kind": "CNI", "configName": "x"}`, "p.apiVersion: Invalid value"},
	} {
		t.Run(name, func(t *testing.T) {
			_, errs := DecodeCNIConfig([]byte(tc.doc), field.NewPath("p"))
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
}

// The design's CNIConfig example, with the apiVersion the API server needs,
// is a valid approved config: its attributeRef one level up included.
func TestCNIConfigObject(t *testing.T) {
	doc, err := os.ReadFile("testdata/design-cniconfig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o, errs := DecodeCNIConfigObject(doc, field.NewPath("f"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if errs := o.Validate(); len(errs) > 0 || o.Name != "macvlan-host-local" || o.Spec.Plugins[0].Arguments[0].AttributeRef != "name" {
		t.Errorf("the design's CNIConfig: %+v, %v", o, errs)
	}
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	again, errs := DecodeCNIConfigObject(data, field.NewPath("f"))
	if len(errs) > 0 || again.Validate() != nil {
		t.Errorf("round trip %s: %v", data, errs)
	}
	for name, tc := range map[string]struct {
		change func(*CNIConfigObject)
		want   string
	}{
		"configName":   {func(o *CNIConfigObject) { o.Spec.ConfigName = "other" }, "spec.configName: Forbidden"},
		"no plugins":   {func(o *CNIConfigObject) { o.Spec.Plugins = nil }, "spec.plugins: Required"},
		"namespaced":   {func(o *CNIConfigObject) { o.Namespace = "default" }, "metadata.namespace: Forbidden"},
		"bad name":     {func(o *CNIConfigObject) { o.Name = "A_B" }, "metadata.name: Invalid value"},
		"bad version":  {func(o *CNIConfigObject) { o.Spec.CNIVersion = "2.0.0" }, "spec.cniVersion: Unsupported value"},
		"bad ifName":   {func(o *CNIConfigObject) { o.Spec.IfName = "eth0" }, "spec.ifName: Invalid value"},
		"no ifName ok": {func(o *CNIConfigObject) { o.Spec.IfName = "" }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			c := o
			c.Spec.Plugins = slices.Clone(o.Spec.Plugins)
			tc.change(&c)
			errs := c.Validate()
			if tc.want == "" {
				if len(errs) > 0 {
					t.Errorf("errors = %v", errs)
				}
				return
			}
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
}

func TestValidateMemifConfig(t *testing.T) {
	c := MemifConfig{APIVersion: GroupVersion, Kind: KindMemifConfig, Endpoints: []MemifEndpoint{
		{Name: "fw0", Role: MemifRoleSlave, SocketPath: "/run/fw0.sock"}, {Name: "vpp", Role: MemifRoleMaster}}}
	c.Default()
	if errs := c.Validate(field.NewPath("m")); len(errs) > 0 || c.Endpoints[1].Mode != MemifModeEthernet {
		t.Fatalf("valid config: %v, %+v", errs, c)
	}
	c.Endpoints = append(c.Endpoints, MemifEndpoint{Name: "fw0", Role: "boss", Mode: "tun", SocketPath: "rel.sock"})
	msg := c.Validate(field.NewPath("m")).ToAggregate().Error()
	for _, want := range []string{"m.endpoints[2].name: Duplicate", "m.endpoints[2].role", "m.endpoints[2].mode", "m.endpoints[2].socketPath"} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors %q lack %q", msg, want)
		}
	}
}

// The upstream CNI DRA driver's form (ifName and config, a CNI
// configuration list or one plugin's) reads as the plugins form.
func TestDecodeUpstreamCNI(t *testing.T) {
	list := `{"apiVersion": "cni.dra.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1",
		"config": {"cniVersion": "1.0.0", "name": "macvlan0", "plugins": [
			{"type": "macvlan", "mode": "bridge", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.10.1.0/24"}]]}},
			{"type": "tuning", "mtu": 1400}]}}`
	cfg, errs := DecodeCNIConfig([]byte(list), field.NewPath("p"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if !cfg.Upstream || cfg.IfName != "net1" || cfg.CNIVersion != "1.0.0" || len(cfg.Plugins) != 2 ||
		cfg.Plugins[0].Type != "macvlan" || cfg.Plugins[0].Config["mode"] != "bridge" || cfg.Plugins[0].Config["type"] != nil ||
		cfg.Plugins[1].Type != "tuning" || cfg.Plugins[1].Config["mtu"] != int64(1400) {
		t.Errorf("decoded %+v", cfg)
	}
	if errs := cfg.Validate(); len(errs) > 0 {
		t.Errorf("the upstream form does not validate: %v", errs)
	}
	single := `{"apiVersion": "cni.dra.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net2",
		"config": {"cniVersion": "1.0.0", "name": "m", "type": "macvlan", "mode": "bridge"}}`
	cfg, errs = DecodeCNIConfig([]byte(single), field.NewPath("p"))
	if len(errs) > 0 || len(cfg.Plugins) != 1 || cfg.Plugins[0].Type != "macvlan" || cfg.Plugins[0].Config["mode"] != "bridge" ||
		cfg.Plugins[0].Config["name"] != nil || cfg.CNIVersion != "1.0.0" {
		t.Errorf("one plugin's configuration: %+v, %v", cfg, errs)
	}
}
