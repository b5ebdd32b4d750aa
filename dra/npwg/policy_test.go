package npwg

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPolicy(t *testing.T) {
	for name, tc := range map[string]struct {
		policy  Policy
		podNS   string
		network Attachment
		err     string
	}{
		"the pod's own namespace":          {podNS: "app", network: att(0, "app", "net-a")},
		"the pod's own namespace, allowed": {policy: Policy{AllowedNamespaces: []string{"infra"}}, podNS: "app", network: att(0, "app", "net-a")},
		"another namespace, allowed":       {policy: Policy{AllowedNamespaces: []string{"infra", "shared"}}, podNS: "app", network: att(0, "shared", "net-a")},
		"every namespace allowed":          {policy: Policy{AllowedNamespaces: []string{AllNamespaces}}, podNS: "app", network: att(0, "anything", "net-a")},
		"another namespace, none allowed": {podNS: "app", network: att(0, "other", "net-c"),
			err: "network not allowed: network other/net-c: a pod of namespace app may use the networks of its own namespace and of those the operator allows (none)"},
		"another namespace, not among those allowed": {policy: Policy{AllowedNamespaces: []string{"infra", "shared"}}, podNS: "app", network: att(0, "other", "net-c"),
			err: "(infra, shared)"},
		// No namespace is special, the one called default included.
		"the default namespace, not allowed": {podNS: "app", network: att(0, "default", "net-a"), err: "network default/net-a"},
		"from the default namespace":         {podNS: "default", network: att(0, "kube-system", "net-a"), err: "network kube-system/net-a"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.policy.Check(tc.podNS, &tc.network)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrNotAllowed)):
				t.Errorf("error %v, want ErrNotAllowed and %q", err, tc.err)
			}
		})
	}
}

// An element that names no namespace is of the pod's (§4.1.1), so the
// policy lets it through.
func TestPolicyParsed(t *testing.T) {
	atts, errs := ParseNetworks("app", "net-a,app/net-b,other/net-c")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var p Policy
	for i, a := range atts {
		if err := p.Check("app", &a); (err != nil) != (i == 2) {
			t.Errorf("%s: %v", a.Network(), err)
		}
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := (Policy{AllowedNamespaces: []string{"infra", AllNamespaces}}).Validate(); err != nil {
		t.Error(err)
	}
	err := Policy{AllowedNamespaces: []string{"ok", "Not_OK", "a.b"}}.Validate()
	if err == nil || !strings.Contains(err.Error(), `allowed namespace "Not_OK"`) || !strings.Contains(err.Error(), `allowed namespace "a.b"`) {
		t.Errorf("error %v", err)
	}
}

// A NetworkAttachmentDefinition's spec.config names only the host devices
// and directories the operator allows; a configuration of the operator's
// directory names any.
func TestPolicyHostObjects(t *testing.T) {
	operator := Policy{HostDevices: []string{"ens1f*", "br-data", "0000:3b:00.*"}, HostPaths: []string{"/var/lib/cni/networks", "/run/fastpath-nets"}}
	for name, tc := range map[string]struct {
		policy Policy
		config string
		err    []string // each in the error; none: allowed
	}{
		"no host object": {config: `{"cniVersion": "1.0.0", "type": "tuning", "mtu": 1400, "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1"}}`},
		// Plugins read keys in any letter case, Unicode folding included.
		"Master": {config: `{"cniVersion": "1.0.0", "type": "macvlan", "Master": "eth0"}`,
			err: []string{`Master (read by the plugin as master) "eth0" is not one of the host devices the operator allows (none)`}},
		"MASTER": {config: `{"cniVersion": "1.0.0", "type": "ipvlan", "MASTER": "eth0"}`, err: []string{`MASTER (read by the plugin as master) "eth0"`}},
		"maſter": {config: `{"cniVersion": "1.0.0", "type": "vlan", "maſter": "eth0", "vlanId": 5}`, err: []string{`maſter (read by the plugin as master) "eth0"`}},
		"Device, PCIBusID, DeviceID": {config: `{"cniVersion": "1.0.0", "type": "host-device", "Device": "eth0", "PCIBusID": "0000:00:03.0", "runtimeConfig": {"DeviceID": "0000:00:04.0"}}`,
			err: []string{`Device (read by the plugin as device) "eth0"`, `PCIBusID (read by the plugin as pciBusID) "0000:00:03.0"`, `runtimeConfig.DeviceID (read by the plugin as deviceID) "0000:00:04.0"`}},
		"IPAM with a data directory": {config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f0", "IPAM": {"Type": "host-local", "DATADIR": "/etc"}}`,
			policy: Policy{HostDevices: []string{"ens1f0"}}, err: []string{`IPAM.DATADIR "/etc" is not under a host directory the operator allows (none)`}},
		"one field spelled twice": {config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f0", "Master": "eth0"}`,
			policy: Policy{HostDevices: []string{"ens1f0", "eth0"}}, err: []string{`the keys "Master" and "master" set one field`}},
		// Defaults that are objects of the host count as named.
		"macvlan without master": {config: `{"cniVersion": "1.0.0", "type": "macvlan", "ipam": {"type": "static"}}`, policy: operator,
			err: []string{`master is left out, so macvlan takes the node's default-route interface`}},
		"ipvlan without master, every device allowed": {config: `{"cniVersion": "1.0.0", "type": "ipvlan"}`, policy: Policy{HostDevices: []string{"*"}}},
		"bridge without bridge": {config: `{"cniVersion": "1.0.0", "type": "bridge"}`,
			err: []string{`bridge is left out, so bridge takes "cni0", which is not one of the host devices the operator allows (none)`}},
		"bridge without bridge, cni0 allowed": {config: `{"cniVersion": "1.0.0", "type": "bridge"}`, policy: Policy{HostDevices: []string{"cni0"}}},
		"bridge options that change the node": {config: `{"cniVersion": "1.0.0", "type": "bridge", "bridge": "br-data", "isGateway": true, "IPMasq": true, "hairpinMode": false}`,
			policy: operator, err: []string{`isGateway "true" changes the node (bridge's isGateway)`, `IPMasq "true" changes the node (bridge's ipMasq)`}},
		"bridge options allowed": {config: `{"cniVersion": "1.0.0", "type": "bridge", "bridge": "br-data", "isGateway": true, "ipMasq": true}`,
			policy: Policy{HostDevices: []string{"br-data"}, HostOptions: []string{"bridge.*"}}},
		"a sysctl of the node": {config: `{"cniVersion": "1.0.0", "type": "tuning", "sysctl": {"kernel.core_pattern": "|/x", "net.ipv4.conf.IFNAME.rp_filter": "0"}}`,
			err: []string{`sysctl[kernel.core_pattern] "kernel.core_pattern" changes the node (tuning's sysctl)`}},
		"a master allowed": {policy: operator,
			config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f0", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24", "dataDir": "/var/lib/cni/networks/a"}}`},
		"a bridge and a PCI address allowed": {policy: operator,
			config: `{"cniVersion": "1.0.0", "plugins": [{"type": "bridge", "bridge": "br-data"}, {"type": "host-device", "pciBusID": "0000:3b:00.2"}]}`},
		"every device and path allowed": {policy: Policy{HostDevices: []string{"*"}, HostPaths: []string{"/"}},
			config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0", "ipam": {"type": "host-local", "dataDir": "/etc"}}`},
		"the node's uplink, nothing allowed": {config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0"}`,
			err: []string{`plugins[0] (macvlan): master "eth0" is not one of the host devices the operator allows (none)`}},
		"a master not allowed": {policy: operator, config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0"}`,
			err: []string{`master "eth0"`, "(ens1f*, br-data, 0000:3b:00.*)"}},
		"host-local writing to /etc": {policy: operator,
			config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f1", "ipam": {"type": "host-local", "dataDir": "/etc"}}`,
			err:    []string{`ipam.dataDir "/etc" is not under a host directory the operator allows (/var/lib/cni/networks, /run/fastpath-nets)`}},
		"a way out of an allowed directory": {policy: operator,
			config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f1", "ipam": {"type": "host-local", "dataDir": "/var/lib/cni/networks/../../../etc"}}`,
			err:    []string{`ipam.dataDir "/var/lib/cni/networks/../../../etc"`}},
		"a prefix that is not a directory": {policy: operator,
			config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f1", "ipam": {"type": "host-local", "dataDir": "/var/lib/cni/networks-evil"}}`,
			err:    []string{`ipam.dataDir`}},
		"a relative directory": {policy: operator,
			config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f1", "ipam": {"type": "host-local", "dataDir": "here"}}`,
			err:    []string{`ipam.dataDir "here"`}},
		"an absolute path in any field, deep in a list": {policy: operator,
			config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f1", "ipam": {"type": "static", "routes": [{"dst": "/proc/self"}]}}`,
			err:    []string{`ipam.routes[0].dst "/proc/self"`}},
		// A master a NetworkAttachmentDefinition names may be shared by
		// every network of the node on it: taking it whole, or a VLAN of
		// it, is the operator's to allow.
		"macvlan passthru": {policy: operator, config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f0", "mode": "passthru"}`,
			err: []string{`plugins[0] (macvlan): mode "passthru" changes the node (macvlan's passthru: a passthru macvlan takes its master whole: the master turns promiscuous, ` +
				`its MAC is the pod's to change, and no other macvlan can be made on it), and is not among the host options the operator allows (none)`}},
		"MODE PassThru": {policy: operator, config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f0", "MODE": "PassThru"}`,
			err: []string{`MODE "PassThru" changes the node (macvlan's passthru`}},
		"macvlan passthru allowed": {config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f0", "mode": "passthru"}`,
			policy: Policy{HostDevices: []string{"ens1f0"}, HostOptions: []string{"macvlan.passthru"}}},
		"macvlan bridge": {policy: operator, config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f0", "mode": "bridge"}`},
		"a VLAN": {policy: operator, config: `{"cniVersion": "1.0.0", "type": "vlan", "master": "ens1f0", "vlanId": 42}`,
			err: []string{`plugins[0] (vlan): vlanId 42 is not among the VLAN IDs the operator allows (none): a VLAN of a host device is a network of the node's`}},
		"a VLAN in capitals": {policy: Policy{HostDevices: []string{"ens1f0"}, VLANIDs: []string{"100-199"}}, config: `{"cniVersion": "1.0.0", "type": "vlan", "master": "ens1f0", "VLANID": 42}`,
			err: []string{`VLANID (read by the plugin as vlanId) 42 is not among the VLAN IDs the operator allows (100-199)`}},
		"the VLAN left out": {policy: operator, config: `{"cniVersion": "1.0.0", "type": "vlan", "master": "ens1f0"}`,
			err: []string{`plugins[0] (vlan): vlanId is left out, so vlan makes VLAN 0 of its master (priority tags on its untagged network), which is not among the VLAN IDs the operator allows (none)`}},
		"a VLAN allowed": {config: `{"cniVersion": "1.0.0", "type": "vlan", "master": "ens1f0", "vlanId": 142}`,
			policy: Policy{HostDevices: []string{"ens1f0"}, VLANIDs: []string{"7", "100-199"}}},
		"each fault of each plugin": {policy: operator,
			config: `{"cniVersion": "1.0.0", "plugins": [{"type": "host-device", "device": "eth0"}, {"type": "tuning", "sysctlConf": "/etc/sysctl.conf"}]}`,
			err:    []string{`plugins[0] (host-device): device "eth0"`, `plugins[1] (tuning): sysctlConf "/etc/sysctl.conf"`}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadConfig(nad("app", "net-a", tc.config), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			err = tc.policy.HostObjects(cfg, false)
			if len(tc.err) == 0 {
				if err != nil {
					t.Errorf("error %v", err)
				}
				return
			}
			if !errors.Is(err, ErrHostObject) {
				t.Fatalf("error %v, want ErrHostObject", err)
			}
			for _, want := range tc.err {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %v, want %q in it", err, want)
				}
			}
		})
	}
	// The operator's own configurations are not checked.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "net-a.conf"), []byte(`{"cniVersion": "1.0.0", "name": "net-a", "type": "macvlan", "master": "eth0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(nad("app", "net-a", ""), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := (Policy{}).HostObjects(cfg, false); err != nil {
		t.Errorf("a configuration of the operator's directory: %v", err)
	}
	// A network given a delegated device has its master filled from it.
	cfg, err = LoadConfig(nad("app", "net-a", `{"cniVersion": "1.0.0", "type": "macvlan"}`), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := (Policy{}).HostObjects(cfg, true); err != nil {
		t.Errorf("a delegated device's network without master: %v", err)
	}
	// That master is the pod's own device: the pod may take it whole, or
	// make VLANs of it; not of a master it names.
	for config, want := range map[string]string{
		`{"cniVersion": "1.0.0", "plugins": [{"type": "macvlan", "mode": "passthru"}, {"type": "vlan", "vlanId": 4000}]}`: "",
		`{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f0", "mode": "passthru"}`:                              `mode "passthru" changes the node`,
		`{"cniVersion": "1.0.0", "type": "vlan", "master": "ens1f0", "vlanId": 4000}`:                                     `vlanId 4000 is not among the VLAN IDs`,
	} {
		cfg, err := LoadConfig(nad("app", "net-a", config), dir)
		if err != nil {
			t.Fatal(err)
		}
		err = (Policy{HostDevices: []string{"ens1f0"}}).HostObjects(cfg, true)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("a delegated device's network %s: %v, want %q", config, err, want)
		}
	}
	if err := (Policy{HostDevices: []string{"[eth"}, HostPaths: []string{"var/lib", "/var/lib/"}}).Validate(); err == nil ||
		!strings.Contains(err.Error(), `host device "[eth"`) || !strings.Contains(err.Error(), `host path "var/lib"`) || !strings.Contains(err.Error(), `host path "/var/lib/"`) {
		t.Errorf("Validate of bad host devices and paths: %v", err)
	}
}
