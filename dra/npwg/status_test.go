package npwg

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func result(t *testing.T, js string) cnitypes.Result {
	t.Helper()
	var v struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatal(err)
	}
	r, err := version.NewResult(v.CNIVersion, []byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// §5.1.1, §5.3: the first sandbox interface and its addresses.
func TestAttachmentStatus(t *testing.T) {
	pci := &nadv1.DeviceInfo{Type: nadv1.DeviceInfoTypePCI, Version: nadv1.DeviceInfoVersion, Pci: &nadv1.PciDevice{PciAddress: "0000:18:02.5", PfPciAddress: "0000:18:00.0"}}
	for name, tc := range map[string]struct {
		value  string
		result string // JSON; empty for no result
		dev    *nadv1.DeviceInfo
		want   nadv1.NetworkStatus
	}{
		"the sandbox interface, not the host's": {
			value: "other-ns/net-b",
			result: `{"cniVersion": "1.0.0",
				"interfaces": [{"name": "veth1", "mac": "02:00:00:00:00:0a"}, {"name": "net1", "mac": "02:11:22:33:44:55", "mtu": 9000, "sandbox": "/var/run/netns/p"}, {"name": "net9", "sandbox": "/var/run/netns/p"}],
				"ips": [{"address": "10.0.0.1/24", "interface": 0}, {"address": "192.0.2.2/24", "interface": 1}, {"address": "2001:db8::2234/32", "interface": 1}, {"address": "10.9.0.1/24", "interface": 2}, {"address": "10.8.0.1/24"}],
				"dns": {"nameservers": ["192.0.2.1", "2001:db8:4860::8888"], "domain": "example.com", "search": ["eng.example.com", "example.com"], "options": ["ndots:2"]}}`,
			dev: pci,
			want: nadv1.NetworkStatus{Name: "other-ns/net-b", Interface: "net1", IPs: []string{"192.0.2.2", "2001:db8::2234"}, Mac: "02:11:22:33:44:55", Mtu: 9000,
				DNS:        nadv1.DNS{Nameservers: []string{"192.0.2.1", "2001:db8:4860::8888"}, Domain: "example.com", Search: []string{"eng.example.com", "example.com"}, Options: []string{"ndots:2"}},
				DeviceInfo: pci},
		},
		"no interface with a sandbox: the addresses of no interface": {
			value: "net-b",
			result: `{"cniVersion": "1.1.0", "interfaces": [{"name": "br0"}],
				"ips": [{"address": "10.0.0.5/24", "interface": 0}, {"address": "10.0.0.6/24"}, {"address": "fd00::6/64", "interface": -1}]}`,
			want: nadv1.NetworkStatus{Name: "my-namespace/net-b", Interface: "net1", IPs: []string{"10.0.0.6", "fd00::6"}},
		},
		"no interfaces": {
			value:  "net-b@data",
			result: `{"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.0.0.6/24"}]}`,
			want:   nadv1.NetworkStatus{Name: "my-namespace/net-b", Interface: "data", IPs: []string{"10.0.0.6"}},
		},
		// §5.3.3.1: before 0.3.0, ip4 and ip6.
		"a result of 0.2.0": {
			value:  "net-b",
			result: `{"cniVersion": "0.2.0", "ip4": {"ip": "10.1.0.2/16", "gateway": "10.1.0.1"}, "ip6": {"ip": "fd01::2/64"}, "dns": {"nameservers": ["10.1.0.1"]}}`,
			want:   nadv1.NetworkStatus{Name: "my-namespace/net-b", Interface: "net1", IPs: []string{"10.1.0.2", "fd01::2"}, DNS: nadv1.DNS{Nameservers: []string{"10.1.0.1"}}},
		},
		// §5.1.1: no result, a minimal entry.
		"no result":                {value: "net-b@data", want: nadv1.NetworkStatus{Name: "my-namespace/net-b", Interface: "data"}},
		"no result, a device-info": {value: "net-b", dev: pci, want: nadv1.NetworkStatus{Name: "my-namespace/net-b", Interface: "net1", DeviceInfo: pci}},
		// §5.3.6.4: the gateways of an attachment with default-route.
		"default-route with gateways": {
			value:  `[{"name": "net-b", "default-route": ["10.0.0.1", "fd00::1"]}]`,
			result: `{"cniVersion": "1.0.0", "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.254"}]}`,
			want:   nadv1.NetworkStatus{Name: "my-namespace/net-b", Interface: "net1", Gateway: []string{"10.0.0.1", "fd00::1"}},
		},
		"default-route without gateways: the result's default routes": {
			value:  `[{"name": "net-b", "default-route": []}]`,
			result: `{"cniVersion": "1.0.0", "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.254"}, {"dst": "10.9.0.0/16", "gw": "10.0.0.9"}, {"dst": "::/0", "gw": "fd00::fe"}, {"dst": "0.0.0.0/0"}]}`,
			want:   nadv1.NetworkStatus{Name: "my-namespace/net-b", Interface: "net1", Gateway: []string{"10.0.0.254", "fd00::fe"}},
		},
		"no default-route, no gateways": {
			value:  "net-b",
			result: `{"cniVersion": "1.0.0", "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.254"}]}`,
			want:   nadv1.NetworkStatus{Name: "my-namespace/net-b", Interface: "net1"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			a := assigned(t, tc.value)
			var r cnitypes.Result
			if tc.result != "" {
				r = result(t, tc.result)
			}
			got, err := AttachmentStatus(a, r, tc.dev)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %s\nwant %s", show(got), show(tc.want))
			}
		})
	}
}

func TestDefaultNetworkStatus(t *testing.T) {
	got := DefaultNetworkStatus("kube-system/cluster", "eth0", []corev1.PodIP{{IP: "10.244.0.5"}, {IP: "fd00:10:244::5"}, {IP: "bogus"}})
	want := nadv1.NetworkStatus{Name: "kube-system/cluster", Interface: "eth0", IPs: []string{"10.244.0.5", "fd00:10:244::5"}, Default: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %s\nwant %s", show(got), show(want))
	}
}

// §4.2.2: the same network twice is two entries.
func TestStatusSameNetworkTwice(t *testing.T) {
	atts, errs := ParseNetworks(podNS, specAnnotation(t, "spec-4.2.2.yaml"))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := AssignInterfaces(atts, map[string]bool{"eth0": true}); err != nil {
		t.Fatal(err)
	}
	entries := []nadv1.NetworkStatus{DefaultNetworkStatus("kube-system/cluster", "eth0", []corev1.PodIP{{IP: "10.244.0.5"}})}
	for i := range atts {
		st, err := AttachmentStatus(&atts[i], nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, st)
	}
	value, err := EncodeNetworkStatus(entries)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeNetworkStatus(value)
	if err != nil || len(back) != 3 || back[1].Name != "my-namespace/net-a" || back[1].Interface != "net1" || back[2].Name != "my-namespace/net-a" || back[2].Interface != "net2" {
		t.Errorf("%s: %s, %v", value, show(back), err)
	}
}

func specStatus(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		t.Fatal(err)
	}
	return pod.Annotations[nadv1.NetworkStatusAnnot]
}

// The standard's examples (§5.4) read, and what is encoded from them reads
// the same.
func TestNetworkStatusSpecExamples(t *testing.T) {
	files, err := filepath.Glob("testdata/status/spec-5.4-*.yaml")
	if err != nil || len(files) != 3 {
		t.Fatalf("examples %v, %v", files, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			entries, err := DecodeNetworkStatus(specStatus(t, file))
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) < 3 || entries[0].Name != "namespace-a/cluster-wide-default" || entries[0].Mac != "02:11:22:33:44:54" || len(entries[0].Gateway) == 0 {
				t.Fatalf("entries %s", show(entries))
			}
			value, err := EncodeNetworkStatus(entries)
			if err != nil {
				t.Fatal(err)
			}
			again, err := DecodeNetworkStatus(value)
			if err != nil || !reflect.DeepEqual(again, entries) {
				t.Errorf("again %s, %v\nwas   %s", show(again), err, show(entries))
			}
		})
	}
	single, err := DecodeNetworkStatus(specStatus(t, "testdata/status/spec-5.4-single-gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := nadv1.NetworkStatus{Name: "namespace-b/some-network", Interface: "eth1", IPs: []string{"192.0.2.2/24", "2001:db8::2234/32"}, Mac: "02:11:22:33:44:55",
		DNS: nadv1.DNS{Nameservers: []string{"192.0.2.1", "2001:db8:4860::8888"}, Search: []string{"eng.example.com", "example.com"}}}
	if !single[0].Default || !reflect.DeepEqual(single[0].Gateway, []string{"192.0.2.1"}) || !reflect.DeepEqual(single[1], want) {
		t.Errorf("entries %s", show(single))
	}
	multi, err := DecodeNetworkStatus(specStatus(t, "testdata/status/spec-5.4-multiple-gateways.yaml"))
	if err != nil || !reflect.DeepEqual(multi[0].Gateway, []string{"192.0.2.1", "2001:db8::1", "2001:db8::2"}) {
		t.Errorf("entries %s, %v", show(multi), err)
	}
	dev, err := DecodeNetworkStatus(specStatus(t, "testdata/status/spec-5.4-device-info.yaml"))
	if err != nil || dev[1].DeviceInfo == nil || dev[1].DeviceInfo.Pci.PciAddress != "0000:18:02.5" || dev[4].DeviceInfo.Vdpa.Path != "/dev/vhost-vdpa0" {
		t.Errorf("entries %s, %v", show(dev), err)
	}
}

// An entry is written with the gateways under both names, and with
// "default" whether true or false (§5.3.6: required).
func TestEncodeNetworkStatus(t *testing.T) {
	value, err := EncodeNetworkStatus([]nadv1.NetworkStatus{
		{Name: "kube-system/cluster", Interface: "eth0", IPs: []string{"10.244.0.5"}, Default: true},
		{Name: "ns/net-b", Interface: "net1", Mac: "02:00:00:00:00:01", Mtu: 1500, Gateway: []string{"10.0.0.1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var raw []map[string]any
	if err := json.Unmarshal([]byte(value), &raw); err != nil {
		t.Fatal(err)
	}
	if raw[0]["default"] != true || raw[1]["default"] != false || !reflect.DeepEqual(raw[1]["gateway"], []any{"10.0.0.1"}) || !reflect.DeepEqual(raw[1]["default-route"], []any{"10.0.0.1"}) || raw[1]["mtu"] != 1500.0 {
		t.Errorf("%s", value)
	}
	for name, tc := range map[string]struct {
		entries []nadv1.NetworkStatus
		want    string
	}{
		"no name":                 {[]nadv1.NetworkStatus{{Interface: "net1"}}, "entry 0: no name"},
		"a mac without interface": {[]nadv1.NetworkStatus{{Name: "a", Mac: "02:00:00:00:00:01"}}, "entry 0 (a): a mac without an interface"},
		"two defaults":            {[]nadv1.NetworkStatus{{Name: "a", Default: true}, {Name: "b", Default: true}}, "2 entries are the default network's; one may be"},
		"one attachment twice":    {[]nadv1.NetworkStatus{{Name: "a", Interface: "net1"}, {Name: "a", Interface: "net1"}}, `entry 1: network a, interface "net1", twice`},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := EncodeNetworkStatus(tc.entries); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDecodeNetworkStatus(t *testing.T) {
	for value, want := range map[string]string{
		`{"name": "a"}`:                      "network status: must be a JSON list of objects, not an object",
		`[{"name": "a"}`:                     "network status: unexpected end of JSON input",
		`[{"name": "a", "ips": "10.0.0.1"}]`: "network status: json: cannot unmarshal string",
		`[1]`:                                "cannot unmarshal number",
	} {
		if _, err := DecodeNetworkStatus(value); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", value, err, want)
		}
	}
	if got, err := DecodeNetworkStatus(" "); got != nil || err != nil {
		t.Errorf("empty: %v, %v", got, err)
	}
	got, err := DecodeNetworkStatus(`[{"name": "a", "interface": "net1", "default-route": ["10.0.0.1"], "org.example.key": 1}, {"name": "b", "gateway": ["10.0.0.2"], "default-route": ["10.0.0.3"]}]`)
	if err != nil || !reflect.DeepEqual(got[0].Gateway, []string{"10.0.0.1"}) || !reflect.DeepEqual(got[1].Gateway, []string{"10.0.0.2"}) {
		t.Errorf("%s, %v", show(got), err)
	}
}

func TestMergeNetworkStatus(t *testing.T) {
	current := `[
		{"name": "kube-system/cluster", "interface": "eth0", "ips": ["10.244.0.5"], "default": true},
		{"name": "other/claim-net", "interface": "net1", "org.example.writer": {"who": "someone else"}},
		{"name": "ns/net-b", "interface": "net2", "ips": ["10.0.0.9"]},
		42
	]`
	ours := []nadv1.NetworkStatus{
		{Name: "ns/net-b", Interface: "net2", IPs: []string{"10.0.0.2"}},
		{Name: "ns/net-c", Interface: "net3"},
	}
	value, err := MergeNetworkStatus(current, ours)
	if err != nil {
		t.Fatal(err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(value), &raw); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"name": "kube-system/cluster", "interface": "eth0", "ips": ["10.244.0.5"], "default": true}`,
		`{"name": "other/claim-net", "interface": "net1", "org.example.writer": {"who": "someone else"}}`,
		`{"name": "ns/net-b", "interface": "net2", "ips": ["10.0.0.2"], "dns": {}, "default": false}`,
		`42`,
		`{"name": "ns/net-c", "interface": "net3", "dns": {}, "default": false}`,
	}
	if len(raw) != len(want) {
		t.Fatalf("merged %s", value)
	}
	for i, w := range want {
		if !jsonEqual(t, raw[i], []byte(w)) {
			t.Errorf("entry %d: %s, want %s", i, raw[i], w)
		}
	}

	// Our default entry replaces another writer's.
	value, err = MergeNetworkStatus(current, []nadv1.NetworkStatus{DefaultNetworkStatus("cluster", "eth0", []corev1.PodIP{{IP: "10.244.0.6"}})})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := DecodeNetworkStatus(strings.Replace(value, "42", `{"name": "x"}`, 1))
	if err != nil {
		t.Fatal(err)
	}
	defaults := 0
	for _, e := range entries {
		if e.Default {
			defaults++
			if e.Name != "cluster" {
				t.Errorf("the default entry is %s", show(e))
			}
		}
	}
	if defaults != 1 || len(entries) != 4 {
		t.Errorf("merged %s", value)
	}

	// Nothing yet: ours only.
	value, err = MergeNetworkStatus("", ours)
	if err != nil || !strings.Contains(value, "ns/net-c") {
		t.Errorf("%s, %v", value, err)
	}
	if value, err := MergeNetworkStatus("", nil); err != nil || value != "[]" {
		t.Errorf("%q, %v", value, err)
	}
	for _, bad := range []string{`{"name": "a"}`, `[`, `"x"`} {
		if _, err := MergeNetworkStatus(bad, ours); err == nil || !strings.Contains(err.Error(), "the pod's network status") {
			t.Errorf("%s: error %v", bad, err)
		}
	}
	if _, err := MergeNetworkStatus("", []nadv1.NetworkStatus{{Name: "a"}, {Name: "a"}}); err == nil {
		t.Error("no error for one attachment twice")
	}
}
