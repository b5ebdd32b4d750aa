package bench

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// scales are the claims on the node in the AtScale benchmarks: the one
// timed alone, and with 999 of other pods prepared beside it.
var scales = []int{1, 1000}

// fillStore records n prepared claims of other pods, each a VF netdev
// attached to its pod with VF settings, as a busy node's store holds.
func fillStore(b *testing.B, store *claims.Store, n int) {
	b.Helper()
	for i := range n {
		uid := types.UID(fmt.Sprintf("other-%05d", i))
		pod := types.UID(fmt.Sprintf("pod-other-%05d", i))
		c := claims.Claim{Driver: claims.DriverFastpath, UID: uid, Namespace: "tenant", Name: string(uid),
			Pod: claims.Pod{UID: pod, Name: string(pod)}, Prepared: true, BootID: "boot",
			CDISpec: "/var/run/cdi/fastpath.dev-" + string(uid) + ".json", Dir: "/var/lib/fastpath/claims/" + string(uid),
			Devices: []claims.Device{{Request: "nic", Pool: "node-a", Device: fmt.Sprintf("pci-0000-5e-%02x-%x", i/8, i%8), Kind: "sriov-vf", Mode: "netdev",
				PCIAddress: fmt.Sprintf("0000:5e:%02x.%x", i/8, i%8), PFPCIAddress: "0000:5e:00.0",
				Host: &claims.HostNetdev{Name: fmt.Sprintf("ens5f0v%d", i), MTU: 1500, MAC: "02:00:00:00:00:01"},
				Pod:  &claims.PodInterface{Name: "net1", MTU: 9000, Addresses: []string{"10.10.0.2/24"}},
				VF: &claims.VF{PFName: "ens5f0", ID: i, Set: claims.VFSettings{VLAN: new(100)},
					Before: &claims.VFState{VLANProto: "802.1q", MAC: "00:00:00:00:00:00", LinkState: "auto"}},
				CDIDevice: "fastpath.dev/net=" + string(uid),
				Attached:  &claims.Attachment{SandboxID: "sandbox-" + string(pod), NetNS: "/var/run/netns/cni-" + string(pod)}}}}
		if err := store.Put(c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPrepareAtScale is BenchmarkPrepare on a node with 1 and with
// 1000 claims: the time of a claim's Prepare and Unprepare does not grow
// with the others.
func BenchmarkPrepareAtScale(b *testing.B) {
	for _, n := range scales {
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) { benchPrepare(b, n-1) })
	}
}

// BenchmarkHookAtScale is BenchmarkHookShared (RunPodSandbox of a pod with
// a claim on a shared device, its record written, its macvlan made) on a
// node with 1 and with 1000 claims: the hook does not slow down with the
// claims of other pods.
func BenchmarkHookAtScale(b *testing.B) {
	for _, n := range scales {
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) { benchHookShared(b, n-1) })
	}
}
