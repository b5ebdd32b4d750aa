package bench

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// BenchmarkPrepareBurst prepares 64 claims of a VF netdev each (name, MTU,
// addresses, VLAN), of 64 pods, as the kubelet asks for them when 64 pods
// start at once on a node: each claim its own NodePrepareResources call,
// all at once ("burst"), then one after another ("serial"), in the same
// run; each round is then unprepared, untimed. The store is on the
// machine's disk, as the daemon's state directory is. It reports each
// Prepare's time (p50-ns/prepare, p99-ns/prepare) and the round's
// (ns/op): what the claims' records' syncs, one after another or shared,
// cost the burst.
func BenchmarkPrepareBurst(b *testing.B) {
	for _, burst := range []bool{true, false} {
		name := "serial"
		if burst {
			name = "burst"
		}
		b.Run(name, func(b *testing.B) { benchPrepareBurst(b, 64, burst) })
	}
}

func benchPrepareBurst(b *testing.B, n int, burst bool) {
	inv, sysfs := generatedNode(b, 2*n) // half of its VFs have a netdev
	params, err := json.Marshal(v1alpha1.InterfaceConfig{
		Interface: &v1alpha1.InterfaceSpec{Name: "net1", MTU: 1500, Addresses: []string{"10.10.1.2/24", "fd00::2/64"}},
		VF:        &v1alpha1.VFConfig{VLAN: new(100), SpoofChk: new(true)},
	})
	if err != nil {
		b.Fatal(err)
	}
	var cs []*resourceapi.ResourceClaim
	for _, dev := range inv.Devices {
		if dev.VF == nil || dev.Netdev == nil || len(cs) == n {
			continue
		}
		c := prepareClaim([]resourceapi.DeviceRequestAllocationResult{{Request: "nic", Driver: devices.DriverName, Pool: "node-a", Device: dev.Name}}, params)
		i := len(cs)
		c.Name, c.UID = fmt.Sprintf("burst-%d", i), types.UID(fmt.Sprintf("uid-burst-%d", i))
		c.Status.ReservedFor[0].Name, c.Status.ReservedFor[0].UID = fmt.Sprintf("p-%d", i), types.UID(fmt.Sprintf("pod-burst-%d", i))
		cs = append(cs, c)
	}
	if len(cs) != n {
		b.Fatalf("the generated node has %d VF netdevs, want %d", len(cs), n)
	}
	d := benchDriver(b, inv, sysfs, 0)
	ctx := klog.NewContext(b.Context(), logr.Discard())
	var took []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		took = append(took, timedRound(len(cs), burst, func(i int) {
			c := cs[i]
			res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
			if err != nil || res[c.UID].Err != nil || len(res[c.UID].Devices) != 1 {
				b.Errorf("prepare %s: %v %+v", c.Name, err, res)
			}
		})...)
		b.StopTimer()
		unprepareAll(b, d, cs)
		b.StartTimer()
	}
	reportPercentiles(b, took, "prepare")
}

// timedRound runs op for 0 to n-1, all at once (burst) or one after
// another, and returns each one's time.
func timedRound(n int, burst bool, op func(i int)) []time.Duration {
	took := make([]time.Duration, n)
	timed := func(i int) {
		start := time.Now()
		op(i)
		took[i] = time.Since(start)
	}
	if !burst {
		for i := range n {
			timed(i)
		}
		return took
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { timed(i) })
	}
	wg.Wait()
	return took
}

// reportPercentiles reports the median and the 99th percentile of took,
// in ns per what.
func reportPercentiles(b *testing.B, took []time.Duration, what string) {
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns/"+what)
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns/"+what)
}

// unprepareAll unprepares the claims cs, each by a call of its own, at
// once.
func unprepareAll(b *testing.B, d *dra.Driver, cs []*resourceapi.ResourceClaim) {
	ctx := klog.NewContext(b.Context(), logr.Discard())
	timedRound(len(cs), true, func(i int) {
		c := cs[i]
		refs := []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID}}
		un, err := d.UnprepareResourceClaims(ctx, refs)
		if err != nil || un[c.UID] != nil {
			b.Errorf("unprepare %s: %v %v", c.Name, err, un)
		}
	})
}

// BenchmarkStoreBurst writes the records of 64 claims to the claim store
// on the machine's disk (each Put synced before it returns), all at once
// ("burst", as the Prepares of 64 pods started together write them) and
// one after another ("serial"), in the same run; "shared" is the store as
// the chart's daemon has it (Share: its file lock taken at each write).
// Each round's records are then deleted, untimed. It reports each Put's
// time (p50-ns/put, p99-ns/put) and the round's (ns/op).
func BenchmarkStoreBurst(b *testing.B) {
	for _, tc := range []struct {
		name          string
		burst, shared bool
	}{{"burst", true, false}, {"serial", false, false}, {"burst-shared", true, true}, {"serial-shared", false, true}} {
		b.Run(tc.name, func(b *testing.B) { benchStoreBurst(b, 64, tc.burst, tc.shared) })
	}
}

func benchStoreBurst(b *testing.B, n int, burst, shared bool) {
	store, err := claims.Open(filepath.Join(b.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		b.Fatal(err)
	}
	if shared {
		if err := store.Share(); err != nil {
			b.Fatal(err)
		}
		store.SetJournal(true)
	}
	// The first write makes the checkpoint; the rounds append to its
	// journal.
	fillStore(b, store, 1)
	var recs []claims.Claim
	for i := range n {
		uid := types.UID(fmt.Sprintf("burst-%03d", i))
		pod := types.UID(fmt.Sprintf("pod-burst-%03d", i))
		recs = append(recs, claims.Claim{Driver: claims.DriverFastpath, UID: uid, Namespace: "tenant", Name: string(uid),
			Pod: claims.Pod{UID: pod, Name: string(pod)}, BootID: "boot",
			CDISpec: "/var/run/cdi/fastpath.dev-" + string(uid) + ".json", Dir: "/var/lib/fastpath/claims/" + string(uid),
			Steps: []claims.Step{{Name: "files", State: claims.StepStarted}},
			Devices: []claims.Device{{Request: "nic", Pool: "node-a", Device: fmt.Sprintf("pci-0000-3b-%02x-%x", i/8, i%8), Kind: "sriov-vf", Mode: "netdev",
				PCIAddress: fmt.Sprintf("0000:3b:%02x.%x", i/8, i%8), PFPCIAddress: "0000:3b:00.0",
				Host: &claims.HostNetdev{Name: fmt.Sprintf("ens1f0v%d", i), MTU: 1500},
				Pod:  &claims.PodInterface{Name: "net1", MTU: 9000, Addresses: []string{"10.10.0.2/24"}},
				VF:   &claims.VF{PFName: "ens1f0", ID: i, Set: claims.VFSettings{VLAN: new(100)}}}}})
	}
	var took []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		took = append(took, timedRound(n, burst, func(i int) {
			if err := store.Put(recs[i]); err != nil {
				b.Error(err)
			}
		})...)
		b.StopTimer()
		timedRound(n, true, func(i int) {
			if err := store.Delete(recs[i].Key()); err != nil {
				b.Error(err)
			}
		})
		b.StartTimer()
	}
	reportPercentiles(b, took, "put")
}
