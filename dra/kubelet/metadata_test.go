package kubelet

import (
	"os"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// TestResultKeepsNetworkData: a claim prepared again (the kubelet
// restarted) keeps in its metadata the network data its file holds, and
// gets its attributes; with metadata off, Result carries none.
func TestResultKeepsNetworkData(t *testing.T) {
	dir := t.TempDir()
	file := metadataFile(dir, "default", "web-nic", "nic")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	// As the helper writes it: a stream, the newest version first.
	stream := `{"kind":"DeviceMetadata","apiVersion":"metadata.resource.k8s.io/v1beta1","metadata":{"name":"web-nic","namespace":"default","uid":"u1","generation":2},` +
		`"requests":[{"name":"nic","devices":[{"driver":"fastpath.dev","pool":"node-a","name":"netdev-a","networkData":{"interfaceName":"net1","ips":["10.0.0.2/24"],"hardwareAddress":"02:00:00:00:00:01"}}]}]}` + "\n"
	if err := os.WriteFile(file, []byte(stream), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &Metadata{}
	m.register(claims.DriverFastpath, dir, nil)
	c := &claims.Claim{Driver: claims.DriverFastpath, UID: "u1", Namespace: "default", Name: "web-nic",
		Devices: []claims.Device{{Request: "nic", Pool: "node-a", Device: "netdev-a"}, {Request: "other", Pool: "node-a", Device: "netdev-b"}}}
	kind := "netdev"
	attrs := func(_, device string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"kind": {StringValue: &kind}}
	}
	res := Result(c, m, attrs)
	if len(res.Devices) != 2 {
		t.Fatalf("devices = %+v", res.Devices)
	}
	a, b := res.Devices[0].Metadata, res.Devices[1].Metadata
	if a == nil || a.NetworkData == nil || a.NetworkData.InterfaceName != "net1" || a.NetworkData.HardwareAddress != "02:00:00:00:00:01" {
		t.Errorf("netdev-a metadata = %+v, want the network data its file holds", a)
	}
	if a == nil || a.Attributes["kind"].StringValue == nil || *a.Attributes["kind"].StringValue != "netdev" {
		t.Errorf("netdev-a attributes = %+v", a)
	}
	if b == nil || b.NetworkData != nil {
		t.Errorf("netdev-b, of a request without a file, metadata = %+v, want attributes only", b)
	}
	if off := Result(c, nil, attrs); off.Devices[0].Metadata != nil {
		t.Errorf("with metadata off, Result carries %+v", off.Devices[0].Metadata)
	}
}
