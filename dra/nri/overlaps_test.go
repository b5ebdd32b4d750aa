package nri

import (
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// TestOverlaps: a pod whose devices are netdevs, or netdevs with a
// hardware RDMA device, is attached beside the runtime; one with a
// software RDMA device (whose verbs device the attach writes into the CDI
// spec the runtime reads before CreateContainer) or a CNI network is
// attached inside RunPodSandbox.
func TestOverlaps(t *testing.T) {
	store, err := claims.Open(filepath.Join(t.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(pod types.UID, name string, rdma *claims.RDMA, networks ...claims.Network) {
		c := claims.Claim{Driver: claims.DriverFastpath, UID: types.UID("uid-" + name), Namespace: "default", Name: name,
			Pod: claims.Pod{UID: pod, Name: "pod-" + string(pod)}, Prepared: true, Networks: networks,
			Devices: []claims.Device{{Request: "nic", Pool: "node-a", Device: "netdev-" + name, Kind: "netdev", Mode: "netdev",
				Host: &claims.HostNetdev{Name: "fp-" + name}, Pod: &claims.PodInterface{Name: "net-" + name}, RDMA: rdma}}}
		if err := store.Admit(c); err != nil {
			t.Fatal(err)
		}
	}
	claim("plain", "a", nil)
	claim("hardware", "b", &claims.RDMA{Device: "mlx5_0"})
	claim("software", "c", nil)
	claim("software", "d", &claims.RDMA{Device: "rxe0", Link: "rxe"})
	claim("network", "e", nil, claims.Network{Request: "net", Pool: "node-a", Device: "cni-0", IfName: "net2", Conflist: []byte(`{}`)})
	p := New(Options{Socket: filepath.Join(t.TempDir(), "nri.sock"), Store: store})
	for pod, want := range map[types.UID]bool{"plain": true, "hardware": true, "software": false, "network": false} {
		if got := p.overlaps(Pod{UID: pod}); got != want {
			t.Errorf("pod %s: overlaps = %v, want %v", pod, got, want)
		}
	}
}
