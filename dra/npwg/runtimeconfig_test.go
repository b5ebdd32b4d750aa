package npwg

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// list is a configuration list of the tests, loaded as a NAD's.
func list(t *testing.T, config string) *libcni.NetworkConfigList {
	t.Helper()
	c, err := LoadConfig(nad("my-namespace", "net-b", config), "")
	if err != nil {
		t.Fatal(err)
	}
	return c.List
}

// assigned is the one attachment of an annotation, with its interface.
func assigned(t *testing.T, value string) *Attachment {
	t.Helper()
	atts, errs := ParseNetworks(podNS, value)
	if len(errs) > 0 || len(atts) != 1 {
		t.Fatalf("%d attachments, errors %v", len(atts), errs)
	}
	if err := AssignInterfaces(atts, nil); err != nil {
		t.Fatal(err)
	}
	return &atts[0]
}

// everything is a list whose plugins between them have every capability.
const everything = `{"cniVersion": "1.0.0", "plugins": [
	{"type": "macvlan", "master": "eth1", "capabilities": {"ips": true, "mac": true}},
	{"type": "ib-sriov", "capabilities": {"infinibandGUID": true}},
	{"type": "portmap", "capabilities": {"portMappings": true}},
	{"type": "bandwidth", "capabilities": {"bandwidth": true}}]}`

// The runtimeConfig of the standard's examples (§4.1.2.1.3.2, .4.2, .7,
// .10.2), and the other keys.
func TestBuildInvocationCapabilities(t *testing.T) {
	for name, tc := range map[string]struct {
		value string
		want  string // CapabilityArgs as JSON
	}{
		"ips, §4.1.2.1.3.1":              {value: specAnnotation(t, "spec-4.1.2.1.3.1.yaml"), want: `{"ips": ["10.2.2.42/24", "2001:db8::5/64"]}`},
		"mac, §4.1.2.1.4.1":              {value: specAnnotation(t, "spec-4.1.2.1.4.1.yaml"), want: `{"mac": "02:23:45:67:89:01"}`},
		"portMappings, §4.1.2.1.7.1":     {value: specAnnotation(t, "spec-4.1.2.1.7.1.yaml"), want: `{"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}`},
		"infiniband-guid, §4.1.2.1.10.1": {value: specAnnotation(t, "spec-4.1.2.1.10.1-value.txt"), want: `{"infinibandGUID": "24:8a:07:03:00:8d:ae:2f"}`},
		"a MAC in another spelling":      {value: `[{"name": "net-b", "mac": "02-23-45-67-89-AB"}]`, want: `{"mac": "02:23:45:67:89:ab"}`},
		"protocols in CNI's spelling": {value: `[{"name": "net-b", "portMappings": [{"hostPort": 53, "containerPort": 53, "protocol": "UDP"}, {"hostPort": 1, "containerPort": 2, "hostIP": "192.0.2.1"}]}]`,
			want: `{"portMappings": [{"hostPort": 53, "containerPort": 53, "protocol": "udp"}, {"hostPort": 1, "containerPort": 2, "protocol": "tcp", "hostIP": "192.0.2.1"}]}`},
		"bursts where none is given": {value: `[{"name": "net-b", "bandwidth": {"ingressRate": 2048, "egressRate": 8000, "egressBurst": 200}}]`,
			want: `{"bandwidth": {"ingressRate": 2048, "ingressBurst": 2147483647, "egressRate": 8000, "egressBurst": 200}}`},
		"everything at once": {value: `[{"name": "net-b", "ips": ["10.0.0.2/24"], "mac": "02:00:00:00:00:01", "infiniband-guid": "00:11:22:33:44:55:66:77",
			"portMappings": [{"hostPort": 80, "containerPort": 8080, "protocol": "sctp"}], "bandwidth": {"egressRate": 1000000}}]`,
			want: `{"ips": ["10.0.0.2/24"], "mac": "02:00:00:00:00:01", "infinibandGUID": "00:11:22:33:44:55:66:77",
				"portMappings": [{"hostPort": 80, "containerPort": 8080, "protocol": "sctp"}],
				"bandwidth": {"ingressRate": 0, "ingressBurst": 0, "egressRate": 1000000, "egressBurst": 2147483647}}`},
		"nothing":                                        {value: `net-b`, want: `{}`},
		"default-route is not runtimeConfig":             {value: `[{"name": "net-b", "default-route": ["10.0.0.1"]}]`, want: `{}`},
		"an IPAMClaim is not runtimeConfig":              {value: `[{"name": "net-b", "ipam-claim-reference": "vm-a.tenantred"}]`, want: `{}`},
		"the interface is CNI_IFNAME, not runtimeConfig": {value: `net-b@data0`, want: `{}`},
	} {
		t.Run(name, func(t *testing.T) {
			a := assigned(t, tc.value)
			inv, err := BuildInvocation(a, list(t, everything))
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(inv.CapabilityArgs)
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, got, []byte(tc.want)) {
				t.Errorf("runtimeConfig %s, want %s", got, tc.want)
			}
			if inv.IfName != a.InterfaceRequest || inv.Network != "my-namespace/net-b" {
				t.Errorf("invocation of %s as %s", inv.Network, inv.IfName)
			}
		})
	}
}

// Each key that needs a capability fails the attachment when no plugin
// declares it, and the error names every such key and the plugins.
func TestBuildInvocationMissingCapabilities(t *testing.T) {
	for name, tc := range map[string]struct {
		config, value, want string
	}{
		"ips, §4.1.2.1.3.2": {config: `{"cniVersion": "1.0.0", "type": "bridge"}`, value: `[{"name": "net-b", "ips": ["10.0.0.2/24"]}]`,
			want: `no plugin of the network has the capability: network my-namespace/net-b: the pod asks for "ips" (capability "ips"), but none of the network's plugins (bridge) declares the capability`},
		"mac, §4.1.2.1.4.2":              {config: `{"cniVersion": "1.0.0", "type": "bridge"}`, value: `[{"name": "net-b", "mac": "02:00:00:00:00:01"}]`, want: `"mac" (capability "mac")`},
		"infiniband-guid, §4.1.2.1.10.2": {config: `{"cniVersion": "1.0.0", "type": "bridge"}`, value: `[{"name": "net-b", "infiniband-guid": "00:11:22:33:44:55:66:77"}]`, want: `"infiniband-guid" (capability "infinibandGUID")`},
		"portMappings, §4.1.2.1.7.2":     {config: `{"cniVersion": "1.0.0", "type": "bridge"}`, value: `[{"name": "net-b", "portMappings": [{"hostPort": 1, "containerPort": 1}]}]`, want: `"portMappings" (capability "portMappings")`},
		"bandwidth, §4.1.2.1.8.2":        {config: `{"cniVersion": "1.0.0", "type": "bridge"}`, value: `[{"name": "net-b", "bandwidth": {"ingressRate": 1}}]`, want: `"bandwidth" (capability "bandwidth")`},
		"a capability declared false": {config: `{"cniVersion": "1.0.0", "plugins": [{"type": "macvlan", "capabilities": {"mac": false}}, {"type": "tuning"}]}`,
			value: `[{"name": "net-b", "mac": "02:00:00:00:00:01"}]`, want: `none of the network's plugins (macvlan, tuning) declares the capability`},
		"several at once": {config: `{"cniVersion": "1.0.0", "plugins": [{"type": "macvlan", "capabilities": {"ips": true}}]}`,
			value: `[{"name": "net-b", "ips": ["10.0.0.2/24"], "mac": "02:00:00:00:00:01", "bandwidth": {"ingressRate": 1}}]`,
			want:  `the pod asks for "mac" (capability "mac"), "bandwidth" (capability "bandwidth"), but`},
	} {
		t.Run(name, func(t *testing.T) {
			inv, err := BuildInvocation(assigned(t, tc.value), list(t, tc.config))
			if !errors.Is(err, ErrCapability) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want ErrCapability and %q", err, tc.want)
			}
			if inv != nil {
				t.Errorf("an invocation with an error: %+v", inv)
			}
		})
	}
}

// cni-args go into each plugin's args.cni over the configuration's own
// (§4.1.2.1.6.2); no runtimeConfig written into the configuration reaches
// a plugin (§7.5); the list given is not changed.
func TestBuildInvocationConfig(t *testing.T) {
	l := list(t, `{"cniVersion": "1.0.0", "runtimeConfig": {"ips": ["10.9.9.9/32"]}, "plugins": [
		{"type": "sriov", "capabilities": {"mac": true}, "runtimeConfig": {"mac": "02:00:00:00:00:99"}, "args": {"cni": {"spoofchk": "off", "trust": "on"}, "other": 1}},
		{"type": "tuning", "runtimeConfig": {"portMappings": []}}]}`)
	before := bytes.Clone(l.Bytes)
	beforePlugin := bytes.Clone(l.Plugins[0].Bytes)
	a := assigned(t, `[{"name": "net-b", "mac": "02:00:00:00:00:01", "cni-args": {"spoofchk": "on", "vlan": 10}}]`)
	inv, err := BuildInvocation(a, l)
	if err != nil {
		t.Fatal(err)
	}
	// libcni gives each plugin the list's name and cniVersion as it runs
	// it (§7.1).
	for i, want := range []string{
		`{"type": "sriov", "capabilities": {"mac": true}, "args": {"cni": {"spoofchk": "on", "trust": "on", "vlan": 10}, "other": 1}}`,
		`{"type": "tuning", "args": {"cni": {"spoofchk": "on", "vlan": 10}}}`,
	} {
		if got := inv.List.Plugins[i].Bytes; !jsonEqual(t, got, []byte(want)) {
			t.Errorf("plugin %d: %s, want %s", i, got, want)
		}
	}
	if strings.Contains(string(inv.List.Bytes), "runtimeConfig") {
		t.Errorf("the list keeps a runtimeConfig: %s", inv.List.Bytes)
	}
	again, err := libcni.NetworkConfFromBytes(inv.List.Bytes)
	if err != nil || len(again.Plugins) != 2 || again.Name != "net-b" || again.CNIVersion != "1.0.0" {
		t.Errorf("the list's bytes read as %+v, %v", again, err)
	}
	if !inv.List.Plugins[0].Network.Capabilities["mac"] {
		t.Error("the plugin lost its capabilities")
	}
	if !bytes.Equal(l.Bytes, before) || !bytes.Equal(l.Plugins[0].Bytes, beforePlugin) {
		t.Error("the list given was changed")
	}
	rt := inv.RuntimeConf("c1", "/var/run/netns/p", [][2]string{{"K8S_POD_NAME", "p"}})
	if rt.ContainerID != "c1" || rt.NetNS != "/var/run/netns/p" || rt.IfName != "net1" || !reflect.DeepEqual(rt.CapabilityArgs, map[string]any{"mac": "02:00:00:00:00:01"}) || len(rt.Args) != 1 {
		t.Errorf("runtime conf %+v", rt)
	}
}

// A runtimeConfig is dropped even when the attachment asks for nothing, in
// any letter case and however its key is written (libcni and the plugins
// read "RuntimeConfig" and "\u0052untimeConfig" as runtimeConfig).
func TestBuildInvocationStripsRuntimeConfig(t *testing.T) {
	for _, key := range []string{"runtimeConfig", "RuntimeConfig", "RUNTIMECONFIG", `\u0052untimeConfig`} {
		inv, err := BuildInvocation(assigned(t, "net-b"), list(t, `{"cniVersion": "0.4.0", "type": "host-device", "`+key+`": {"deviceID": "0000:00:03.0"}}`))
		if err != nil {
			t.Fatal(err)
		}
		for _, data := range [][]byte{inv.List.Bytes, inv.List.Plugins[0].Bytes} {
			if strings.Contains(strings.ToLower(string(data)), "untimeconfig") || strings.Contains(string(data), "0000:00:03.0") {
				t.Errorf("%s: a runtimeConfig is left: %s", key, data)
			}
		}
	}
}

// A delegated device fills a master left out, over no other spelling of
// the fields it sets: the plugin reads the device fastpath gives.
func TestGiveDeviceMaster(t *testing.T) {
	inv, err := BuildInvocation(assigned(t, "net-b"), list(t, `{"cniVersion": "1.0.0", "plugins": [{"type": "macvlan"}, {"type": "host-device", "DeviceID": "0000:00:09.0"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.GiveDevice(Device{PCIAddress: "0000:3b:02.1", Netdev: "ens1f0v1"}); err != nil {
		t.Fatal(err)
	}
	var confs []map[string]any
	for _, p := range inv.List.Plugins {
		var c map[string]any
		if err := json.Unmarshal(p.Bytes, &c); err != nil {
			t.Fatal(err)
		}
		confs = append(confs, c)
	}
	if confs[0]["master"] != "ens1f0v1" {
		t.Errorf("macvlan's master is %v, want the device's netdev", confs[0]["master"])
	}
	if _, ok := confs[1]["DeviceID"]; ok || confs[1]["deviceID"] != "0000:3b:02.1" {
		t.Errorf("host-device is given %v, want only deviceID 0000:3b:02.1", confs[1])
	}
	// An empty master is left out too: the plugin would take the uplink.
	inv, err = BuildInvocation(assigned(t, "net-b"), list(t, `{"cniVersion": "1.0.0", "type": "vlan", "Master": "", "vlanId": 7}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.GiveDevice(Device{PCIAddress: "0000:3b:02.1", Netdev: "ens1f0v1"}); err != nil {
		t.Fatal(err)
	}
	var vlan map[string]any
	if err := json.Unmarshal(inv.List.Plugins[0].Bytes, &vlan); err != nil {
		t.Fatal(err)
	}
	if _, ok := vlan["Master"]; ok || vlan["master"] != "ens1f0v1" {
		t.Errorf("vlan is given %v, want only master ens1f0v1", vlan)
	}
	// A device without a netdev cannot be a master.
	inv, err = BuildInvocation(assigned(t, "net-b"), list(t, `{"cniVersion": "1.0.0", "type": "ipvlan"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.GiveDevice(Device{PCIAddress: "0000:3b:02.1"}); err == nil || !strings.Contains(err.Error(), "ipvlan makes its interface on a master") {
		t.Errorf("error %v", err)
	}
}

func TestBuildInvocationErrors(t *testing.T) {
	a := assigned(t, `[{"name": "net-b", "cni-args": {"x": "y"}}]`)
	for name, tc := range map[string]struct {
		att    *Attachment
		config string
		want   string
	}{
		"no interface": {att: &Attachment{}, config: `{"cniVersion": "1.0.0", "type": "bridge"}`, want: "the attachment has no interface name yet"},
		"args that is not an object": {att: a, config: `{"cniVersion": "1.0.0", "type": "bridge", "args": "x"}`,
			want: "network my-namespace/net-b: plugins[0] (bridge): the configuration's args must be an object to take the pod's cni-args, not a string"},
		"args.cni that is not an object": {att: a, config: `{"cniVersion": "1.0.0", "type": "bridge", "args": {"cni": [1]}}`,
			want: "the configuration's args.cni must be an object to take the pod's cni-args, not a list"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := BuildInvocation(tc.att, list(t, tc.config))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := BuildInvocation(a, &libcni.NetworkConfigList{}); err == nil {
		t.Error("no error for a list without plugins")
	}
}

// The device-info file and the environment variable of a resource are
// named as the SR-IOV device plugin names them.
func TestDeviceInfoPathAndEnv(t *testing.T) {
	if got, want := DeviceInfoPath(DefaultDeviceInfoDir, "intel.com/sriov_netdevice", "0000:3b:02.1"),
		"/var/run/k8s.cni.cncf.io/devinfo/dp/intel.com-sriov_netdevice-0000:3b:02.1-device.json"; got != want {
		t.Errorf("DeviceInfoPath = %q, want %q", got, want)
	}
	if got, want := ResourceEnv("intel.com/sriov-net.dev"), "PCIDEVICE_INTEL_COM_SRIOV_NET_DEV"; got != want {
		t.Errorf("ResourceEnv = %q, want %q", got, want)
	}
}
