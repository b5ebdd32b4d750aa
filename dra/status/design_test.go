package status

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	cni100 "github.com/containernetworking/cni/pkg/types/100"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// TestNetworkReadyDesignExample: the status of a CNI network is the CNI
// DRA design's example's, read from the example itself: its driver, pool
// and device, its Ready condition (reason and message), its networkData,
// and as data the CNI result, which the design's text says is "directly
// reported in status.devices.data": the result object, which the
// example writes as the one item of a list (docs/conformance.md).
func TestNetworkReadyDesignExample(t *testing.T) {
	raw, err := os.ReadFile("testdata/cni-design-status.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var example struct {
		Devices []struct {
			Conditions  []struct{ Type, Status, Reason, Message string } `json:"conditions"`
			Data        []json.RawMessage                                `json:"data"`
			Device      string                                           `json:"device"`
			Driver      string                                           `json:"driver"`
			Pool        string                                           `json:"pool"`
			NetworkData map[string]any                                   `json:"networkData"`
		} `json:"devices"`
	}
	if err := yaml.Unmarshal(raw, &example); err != nil {
		t.Fatal(err)
	}
	want := example.Devices[0]
	if len(want.Data) != 1 {
		t.Fatalf("the example's data holds %d items, want 1", len(want.Data))
	}
	// The plugin's result, as the example's data says it.
	res, err := cni100.NewResult(want.Data[0])
	if err != nil {
		t.Fatal(err)
	}
	result, err := res.GetAsVersion("1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	resultJSON, err := json.Marshal(result)
	if err != nil {
		t.Fatal(err)
	}
	got := NetworkReady(claims.Network{Pool: want.Pool, Device: want.Device, IfName: "net1"}, resultJSON, result.(*cni100.Result))

	if got.Driver != want.Driver || got.Pool != want.Pool || got.Device != want.Device {
		t.Errorf("device %s/%s/%s, want %s/%s/%s", got.Driver, got.Pool, got.Device, want.Driver, want.Pool, want.Device)
	}
	if len(got.Conditions) != 1 || got.Conditions[0].Type != want.Conditions[0].Type || string(got.Conditions[0].Status) != want.Conditions[0].Status ||
		got.Conditions[0].Reason != want.Conditions[0].Reason || got.Conditions[0].Message != want.Conditions[0].Message {
		t.Errorf("conditions %+v, want %+v", got.Conditions, want.Conditions)
	}
	var gotND, gotData, wantData map[string]any
	ndJSON, _ := json.Marshal(got.NetworkData)
	if err := json.Unmarshal(ndJSON, &gotND); err != nil || !reflect.DeepEqual(gotND, want.NetworkData) {
		t.Errorf("networkData %s, want %v", ndJSON, want.NetworkData)
	}
	if err := json.Unmarshal(got.Data.Raw, &gotData); err != nil {
		t.Fatalf("data %s is not the result object: %v", got.Data.Raw, err)
	}
	if err := json.Unmarshal(want.Data[0], &wantData); err != nil {
		t.Fatal(err)
	}
	delete(gotData, "dns") // an empty dns the example leaves out
	if !reflect.DeepEqual(gotData, wantData) {
		t.Errorf("data %s, want the example's result %s", got.Data.Raw, want.Data[0])
	}
}
