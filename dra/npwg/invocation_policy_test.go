package npwg

import (
	"errors"
	"strings"
	"testing"
)

// What a pod's element adds to a network's configuration (its cni-args
// in args.cni, its capability values in runtimeConfig) is judged as the
// plugin reads it, after the merge, with the configuration: a sysctl of
// the node in cni-args is one in the configuration.
func TestInvocationHostObjects(t *testing.T) {
	const (
		tuning  = `{"cniVersion": "1.0.0", "plugins": [{"type": "macvlan", "master": "eth1", "ipam": {"type": "static"}}, {"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.rp_filter": "0"}}]}`
		portmap = `{"cniVersion": "1.0.0", "plugins": [{"type": "macvlan", "master": "eth1", "ipam": {"type": "static"}}, {"type": "portmap", "capabilities": {"portMappings": true}}]}`
	)
	allowed := Policy{HostDevices: []string{"eth1"}}
	for name, tc := range map[string]struct {
		config, element string
		trusted         bool
		policy          *Policy
		want            []string // in the error; none: allowed
	}{
		"cni-args sysctl of the node": {config: tuning, element: `[{"name": "net-b", "cni-args": {"sysctl": {"kernel.core_pattern": "|/tmp/x"}}}]`,
			want: []string{`plugins[1] (tuning): args.cni.sysctl[kernel.core_pattern] "kernel.core_pattern" changes the node (tuning's sysctl)`,
				`the element's cni-args "sysctl", which each plugin reads as args.cni.sysctl`}},
		"cni-args SYSCTL in capitals": {config: tuning, element: `[{"name": "net-b", "cni-args": {"SYSCTL": {"vm.overcommit_memory": "1"}}}]`,
			want: []string{`args.cni.SYSCTL[vm.overcommit_memory]`}},
		"cni-args promisc": {config: tuning, element: `[{"name": "net-b", "cni-args": {"promisc": true}}]`,
			want: []string{`plugins[1] (tuning): args.cni.promisc "true" changes the node (tuning's promisc)`}},
		"cni-args sysctl of the pod": {config: tuning, element: `[{"name": "net-b", "cni-args": {"sysctl": {"net.ipv4.ip_forward": "1"}}}]`},
		"cni-args sysctl of the node, allowed": {config: tuning, element: `[{"name": "net-b", "cni-args": {"sysctl": {"kernel.x": "1"}}}]`,
			policy: &Policy{HostDevices: []string{"eth1"}, HostOptions: []string{"tuning.sysctl"}}},
		// The operator's configuration may name what it likes; the pod's
		// cni-args may not add to it.
		"the operator's configuration, the pod's sysctl": {config: `{"cniVersion": "1.0.0", "plugins": [{"type": "macvlan", "master": "eth0"}, {"type": "tuning", "sysctl": {"kernel.shmmax": "1"}}]}`,
			trusted: true, element: `[{"name": "net-b", "cni-args": {"sysctl": {"kernel.core_pattern": "|/tmp/x"}}}]`,
			want: []string{`plugins[1] (tuning): args.cni.sysctl[kernel.core_pattern]`}},
		"the operator's configuration alone": {config: `{"cniVersion": "1.0.0", "plugins": [{"type": "macvlan", "master": "eth0"}, {"type": "tuning", "sysctl": {"kernel.shmmax": "1"}}]}`,
			trusted: true, element: `[{"name": "net-b", "cni-args": {"sysctl": {"net.core.somaxconn": "9"}}}]`},
		"the pod's cni-args spelling a field of the operator's twice": {config: `{"cniVersion": "1.0.0", "plugins": [{"type": "tuning", "args": {"cni": {"sysctl": {"net.x": "1"}}}}]}`,
			trusted: true, element: `[{"name": "net-b", "cni-args": {"Sysctl": {"net.y": "1"}}}]`,
			want: []string{`args.cni: the keys "Sysctl" and "sysctl" set one field`}},
		// The node's ports, by the element's portMappings (the capability
		// portMappings in portmap's runtimeConfig).
		"portMappings": {config: portmap, element: `[{"name": "net-b", "portMappings": [{"hostPort": 22, "containerPort": 2222}]}]`,
			want: []string{`plugins[1] (portmap): runtimeConfig.portMappings`, `changes the node (portmap's portMappings)`,
				`the element's "portMappings", which libcni gives the plugin as runtimeConfig.portMappings`}},
		"portMappings of the operator's configuration": {config: portmap, trusted: true, element: `[{"name": "net-b", "portMappings": [{"hostPort": 22, "containerPort": 2222}]}]`,
			want: []string{`runtimeConfig.portMappings`}},
		// Numbers keep their digits as libcni hands them over: a zero is
		// off.
		"an option at zero, numbers as written": {config: `{"cniVersion": "1.0.0", "plugins": [{"type": "bridge", "bridge": "eth1", "vlan": 0, "ipam": {"type": "static"}}]}`,
			element: `[{"name": "net-b", "cni-args": {"mtu": 1500}}]`},
		"portMappings, allowed": {config: portmap, element: `[{"name": "net-b", "portMappings": [{"hostPort": 8080, "containerPort": 80}]}]`,
			policy: &Policy{HostDevices: []string{"eth1"}, HostOptions: []string{"portmap.portMappings"}}},
	} {
		t.Run(name, func(t *testing.T) {
			inv, err := BuildInvocation(assigned(t, tc.element), list(t, tc.config))
			if err != nil {
				t.Fatal(err)
			}
			p := allowed
			if tc.policy != nil {
				p = *tc.policy
			}
			err = p.InvocationHostObjects(inv, tc.trusted)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrHostObject) {
				t.Fatalf("error %v, want one wrapping ErrHostObject", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// What the node gives a network (a delegated device: its master,
// pciBusID, deviceID) is not the pod's, and not refused.
func TestInvocationHostObjectsGiven(t *testing.T) {
	inv, err := BuildInvocation(assigned(t, `[{"name": "net-b", "cni-args": {"x": "y"}}]`),
		list(t, `{"cniVersion": "1.0.0", "plugins": [{"type": "macvlan", "capabilities": {"deviceID": true}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := inv.GiveDevice(Device{PCIAddress: "0000:3b:02.1", Netdev: "ens1f0v1"}); err != nil {
		t.Fatal(err)
	}
	if err := (Policy{}).InvocationHostObjects(inv, false); err != nil {
		t.Errorf("refused what the node gave: %v", err)
	}
	confs, err := inv.PluginConfs()
	if err != nil || len(confs) != 1 {
		t.Fatal(confs, err)
	}
	if rc, _ := confs[0]["runtimeConfig"].(map[string]any); rc["deviceID"] != "0000:3b:02.1" || confs[0]["master"] != "ens1f0v1" {
		t.Errorf("the plugin's configuration as libcni gives it: %v", confs[0])
	}
}
