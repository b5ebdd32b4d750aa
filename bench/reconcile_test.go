package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/dratest"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// reconcilePods is how many prepared pods a restarted daemon finds.
const reconcilePods = 64

// benchPlugin is an NRI plugin over a fresh store.
func benchPlugin(b *testing.B) (*nri.Plugin, *claims.Store) {
	b.Helper()
	store, err := claims.Open(filepath.Join(b.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		b.Fatal(err)
	}
	a, err := dataplane.NewAttacher()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Close() })
	return nri.New(nri.Options{Store: store, Attacher: a, Status: status.NewWriter(fake.NewClientset())}), store
}

func netdevClaim(i int, pod types.UID, host netlink.Link) claims.Claim {
	return claims.Claim{Driver: claims.DriverFastpath, UID: types.UID(fmt.Sprintf("uid-%d", i)), Namespace: "default",
		Name: fmt.Sprintf("c%d", i), Pod: claims.Pod{UID: pod, Name: string(pod)}, Prepared: true,
		Devices: []claims.Device{{Request: "nic", Pool: "node-a", Device: "netdev-" + host.Attrs().Name, Mode: "netdev",
			Host: &claims.HostNetdev{Name: host.Attrs().Name, MTU: host.Attrs().MTU, MAC: host.Attrs().HardwareAddr.String()},
			Pod:  &claims.PodInterface{Name: "net1", Addresses: []string{"10.93.0.2/24"}}}}}
}

func sandboxOf(pod nri.Pod) *api.PodSandbox {
	return &api.PodSandbox{Uid: string(pod.UID), Id: pod.SandboxID, Name: pod.Name, Namespace: pod.Namespace,
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: pod.NetNS}}}}
}

// BenchmarkReconcile is a restarted daemon's reconciliation with 64
// prepared pods: half run without their devices (the runtime started them
// while the daemon was down), half are gone and their devices are back in
// the host under the names the kernel gave them. One iteration is the
// runtime's Synchronize: until every running pod's device is attached and
// every gone pod's restored. Setting the scene again is not timed.
func BenchmarkReconcile(b *testing.B) {
	ctx := klog.NewContext(b.Context(), logr.Discard())
	plugin, store := benchPlugin(b)
	var running, gone []nri.Pod
	for i := range reconcilePods {
		host := netnstest.Veth(b, fmt.Sprintf("%sr%da", benchPrefix, i), fmt.Sprintf("%sr%db", benchPrefix, i))
		pod := nri.Pod{UID: types.UID(fmt.Sprintf("pod-%d", i)), Namespace: "default", Name: fmt.Sprintf("pod-%d", i), SandboxID: fmt.Sprintf("s%d", i)}
		if err := store.Admit(netdevClaim(i, pod.UID, host)); err != nil {
			b.Fatal(err)
		}
		if i%2 == 0 {
			pod.NetNS = scaleNetNS(b, i)
			running = append(running, pod)
		} else {
			gone = append(gone, pod)
		}
	}
	var sandboxes []*api.PodSandbox
	for _, p := range running {
		sandboxes = append(sandboxes, sandboxOf(p))
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		// The scene: running pods without their devices, gone pods' devices
		// in the host under other names, their attachment still recorded.
		for _, p := range running {
			if err := plugin.DetachPod(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
		for i, p := range gone {
			c := store.PodClaims(p.UID)[0]
			c.Devices[0].Attached = &claims.Attachment{SandboxID: p.SandboxID, NetNS: "/run/netns/gone"}
			if err := store.Put(c); err != nil {
				b.Fatal(err)
			}
			l, err := netlink.LinkByName(c.Devices[0].Host.Name)
			if err != nil {
				b.Fatal(err)
			}
			if err := netlink.LinkSetAlias(l, c.Devices[0].Host.Name); err != nil {
				b.Fatal(err)
			}
			if err := netlink.LinkSetName(l, fmt.Sprintf("%sret%d", benchPrefix, i)); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		plugin.Synchronize(ctx, sandboxes)
		b.StopTimer()
		for _, c := range store.Claims() {
			running := slices.ContainsFunc(running, func(p nri.Pod) bool { return p.UID == c.Pod.UID })
			if a := c.Devices[0].Attached; running != (a != nil) {
				b.Fatalf("after Synchronize, %s (running %v) is attached: %+v", c.Name, running, a)
			}
			if _, err := netlink.LinkByName(c.Devices[0].Host.Name); (err == nil) == running {
				b.Fatalf("after Synchronize, %s (running %v) in the host: %v", c.Name, running, err == nil)
			}
		}
		b.StartTimer()
	}
}

// slowBinder binds to vfio-pci in bindTime, as a function whose driver
// takes its time to let go does.
type slowBinder struct{ bindTime time.Duration }

func (s slowBinder) Driver(string) (string, error) { return "iavf", nil }
func (s slowBinder) BindVFIO(ctx context.Context, _ string, _ int) error {
	select {
	case <-time.After(s.bindTime):
	case <-ctx.Done():
	}
	return nil
}
func (slowBinder) Restore(context.Context, string, string) error { return nil }
func (slowBinder) GroupNode(g int) string                        { return fmt.Sprintf("/dev/vfio/%d", g) }
func (slowBinder) ContainerNode() string                         { return "/dev/vfio/vfio" }

// GroupDevices: each VF alone in its group, as behind ACS.
func (slowBinder) GroupDevices(int) ([]string, error) { return nil, nil }

// BenchmarkHookUnderSlowPrepares is the RunPodSandbox hook (attach) and
// StopPodSandbox hook (detach) of a pod with a prepared netdev while other
// claims are prepared all the time, each waiting a second in its vfio
// bind. It reports the hooks' p99: they must stay far from the runtime's
// 2 s timeout, whatever Prepare does.
func BenchmarkHookUnderSlowPrepares(b *testing.B) {
	ctx := klog.NewContext(b.Context(), logr.Discard())
	plugin, store := benchPlugin(b)
	inv := generatedInventory(b, 16)
	d, err := dra.New(dra.Options{NodeName: "node-a", PluginDir: b.TempDir(), StateDir: b.TempDir(), CDIDir: b.TempDir(), PF: dratest.NopPF{},
		Store: store, Status: status.NewWriter(fake.NewClientset()), PCI: slowBinder{time.Second}, BootID: "boot"})
	if err != nil {
		b.Fatal(err)
	}
	d.UseInventory(inv)
	var vfs []string
	for _, dev := range inv.Devices {
		if dev.VF != nil && dev.PCI.VFIOCapable() {
			vfs = append(vfs, dev.Name)
		}
	}
	// Two streams of Prepares and Unprepares of vfio claims, each bind a
	// second long.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				claim := vfioClaim(fmt.Sprintf("w%d-%d", w, i), vfs[w])
				res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
				if err := res[claim.UID].Err; err != nil {
					b.Error(err)
					return
				}
				_, _ = d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: claim.UID}})
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	host := netnstest.Veth(b, benchPrefix+"h0a", benchPrefix+"h0b")
	pod := nri.Pod{UID: "pod-hook", Namespace: "default", Name: "pod-hook", SandboxID: "s", NetNS: scaleNetNS(b, 999)}
	if err := store.Admit(netdevClaim(999, pod.UID, host)); err != nil {
		b.Fatal(err)
	}
	var took []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		if err := plugin.AttachPod(ctx, pod); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
		start = time.Now()
		if err := plugin.DetachPod(ctx, pod); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns/hook")
	b.ReportMetric(float64(took[len(took)-1].Nanoseconds()), "max-ns/hook")
}

var vfioParams, _ = json.Marshal(v1alpha1.InterfaceConfig{Mode: v1alpha1.ModeVFIO})

func vfioClaim(name, device string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "dpdk", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "vfio.fastpath.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}},
		Status: resourceapi.ResourceClaimStatus{
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p-" + name, UID: types.UID("pod-" + name)}},
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
				Results: []resourceapi.DeviceRequestAllocationResult{{Request: "dpdk", Driver: devices.DriverName, Pool: "node-a", Device: device}},
				Config: []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim,
					DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
						Driver: devices.DriverName, Parameters: runtime.RawExtension{Raw: vfioParams}}}}},
			}},
		},
	}
}
