package v1alpha1

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

// kepNetworkStatus is the KEP's NetworkStatus, as its text defines it.
type kepNetworkStatus struct {
	Name          string `json:"name"`
	InterfaceName string `json:"interfaceName"`
	IP            string `json:"ip,omitempty"`
	IsDefaultGW   bool   `json:"isDefaultGW,omitempty"`
}

// What fastpath writes for the KEP's example pod's networks is the KEP's
// example status, read by a decoder of the KEP's type that refuses any key
// but "ips" (docs/conformance.md lists it): name, interfaceName, ip and
// isDefaultGW as the example has them.
func TestNetworkStatusKEPExample(t *testing.T) {
	data, err := os.ReadFile("testdata/kep-pod-status.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pod struct {
		Kind     string         `json:"kind"`
		Metadata map[string]any `json:"metadata"`
		Status   struct {
			PodIP    string             `json:"podIP"`
			PodIPs   []map[string]any   `json:"podIPs"`
			Networks []kepNetworkStatus `json:"networks"`
		} `json:"status"`
	}
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatal(err)
	}
	want := pod.Status.Networks
	var written []NetworkStatus
	for _, n := range want {
		written = append(written, NewNetworkStatus(n.Name, n.InterfaceName, n.IsDefaultGW, []netip.Addr{netip.MustParseAddr(n.IP)}))
	}
	value, err := json.Marshal(written)
	if err != nil {
		t.Fatal(err)
	}
	var raws []map[string]json.RawMessage
	if err := json.Unmarshal(value, &raws); err != nil {
		t.Fatal(err)
	}
	var got []kepNetworkStatus
	for i, raw := range raws {
		delete(raw, "ips") // the listed deviation
		entry, _ := json.Marshal(raw)
		dec := json.NewDecoder(bytes.NewReader(entry))
		dec.DisallowUnknownFields()
		var st kepNetworkStatus
		if err := dec.Decode(&st); err != nil {
			t.Fatalf("entry %d as fastpath writes it (%s): %v", i, value, err)
		}
		got = append(got, st)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fastpath writes %s\nthe KEP's example has %+v", value, want)
	}
}
