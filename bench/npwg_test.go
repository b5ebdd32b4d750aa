package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/go-logr/logr"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/dra/watch"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// The network the NPWG benchmarks attach: one NetworkAttachmentDefinition,
// a bridge-mode macvlan of a veth with static IPAM, its address given by
// the "ips" capability, from the "ips" of the pod's annotation element.
const (
	npwgNamespace = "default"
	npwgNetwork   = "bench-npwg"
	npwgAddress   = "10.96.0.2/24"
	npwgIfName    = "net1"
)

// npwgConflist is the network's configuration, the NetworkAttachmentDefinition's
// spec.config.
func npwgConflist(master string) []byte {
	return fmt.Appendf(nil, `{"cniVersion": "1.0.0", "name": %q, "plugins": [{"type": "macvlan", "master": %q, "mode": "bridge",
		"capabilities": {"ips": true}, "ipam": {"type": "static"}}]}`, npwgNetwork, master)
}

// npwgPod is the pod of an iteration: a sandbox of its own, selecting the
// network with its address.
func npwgPod(sandbox, netNS string) nri.Pod {
	return nri.Pod{UID: types.UID("pod-" + sandbox), Namespace: npwgNamespace, Name: "web-" + sandbox, SandboxID: sandbox, NetNS: netNS,
		Networks: fmt.Sprintf(`[{"name": %q, "ips": [%q]}]`, npwgNetwork, npwgAddress), IPs: []string{"10.244.0.5"}}
}

// npwgNADs is the daemon's getter (watch.NADCache) over a client holding
// nad, once its watch has listed it: what a pod's hook reads its network
// with. Reading from the watch, the hook makes no round trip to the API
// server.
func npwgNADs(b *testing.B, nad *nadv1.NetworkAttachmentDefinition) watch.NADCache {
	b.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(nad)
	if err != nil {
		b.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion("k8s.cni.cncf.io/v1")
	u.SetKind("NetworkAttachmentDefinition")
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{watch.NADResource: "NetworkAttachmentDefinitionList"})
	// By its resource: the kind's guessed plural is not the CRD's.
	if err := client.Tracker().Create(watch.NADResource, u, nad.Namespace); err != nil {
		b.Fatal(err)
	}
	nads, err := watch.NewNADCache(client)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go nads.Run(ctx)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := nads.GetNAD(ctx, nad.Namespace, nad.Name)
		return nads.HasSynced() && err == nil, nil
	}); err != nil {
		b.Fatalf("the NetworkAttachmentDefinition's watch: %v", err)
	}
	return nads
}

// npwgPatcher takes the pod's network-status and drops it: the daemon
// writes it to the API server in the background, after the hook.
type npwgPatcher struct{}

func (npwgPatcher) PatchNetworkStatus(context.Context, string, string, types.UID, []nadv1.NetworkStatus) error {
	return nil
}

// npwgMaster is an up veth (its peer up) for the network's macvlans.
func npwgMaster(b *testing.B) string {
	b.Helper()
	// Unique on the machine: another run of these benchmarks may be going on.
	id := fmt.Sprintf("%sn%d", benchPrefix, os.Getpid()%100000)
	netnstest.Veth(b, id+"a", id+"b")
	for _, n := range []string{id + "b", id + "a"} {
		l, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	return id + "a"
}

// BenchmarkNPWGAttach is the NRI plugin's RunPodSandbox hook (AttachPod)
// for a pod that selects one network with the Network Plumbing WG
// annotation: the annotation parsed, the NetworkAttachmentDefinition read
// (from the daemon's watch of them) and its configuration loaded and checked, the pod's record
// written (the checkpoint's pending file, its networks marked added; the
// file's sync and rename over the checkpoint run beside ADD, and the hook
// waits for them before it returns), STATUS and ADD through libcni, and
// the pod's network-status made from libcni's cache.
// Compare with BenchmarkNPWGLibcni, the same ADD through libcni alone: the
// difference is what the NPWG layer costs. The pod's StopPodSandbox hook
// (DetachPod: DEL, the record dropped) is not timed.
//
// It also reports that difference as each hook saw it, which the spread of
// the plugins' fork and exec does not blur: the hook's time less the time
// of the ADD in it (dataplane.CNI.Add: the conflist parsed, libcni's
// AddNetworkList, its result converted), at the median ("npwg-ns/attach"),
// and the part of it spent writing the record before ADD
// ("checkpoint-ns/attach"), on the disk of the machine as the daemon's
// state directory is.
func BenchmarkNPWGAttach(b *testing.B) {
	master := npwgMaster(b)
	store, writing := timedStore(b)
	plugins := []string{"macvlan", "static"}
	nad := &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: npwgNamespace, Name: npwgNetwork, UID: "nad-uid", ResourceVersion: "1"},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: string(npwgConflist(master))}}
	cni := &timedCNI{CNI: dataplane.NewCNI([]string{cniBinDir(b, plugins...)}, b.TempDir(), nil)}
	plugin := nri.New(nri.Options{Store: store, Attacher: benchAttacher(b), Status: status.NewWriter(fake.NewClientset()), CNI: cni,
		NPWG: &nri.NPWGOptions{NADs: npwgNADs(b, nad), ConfDir: b.TempDir(), Plugins: plugins, Status: npwgPatcher{}, Policy: npwg.Policy{HostDevices: []string{master}},
			DefaultNetwork: "default/cluster-network", DefaultInterface: "eth0"}})
	var layer, checkpoint []time.Duration
	npwgRoundTrips(b, func(ctx context.Context, sandbox, netNS string) error {
		cni.adds, *writing = 0, 0
		start := time.Now()
		err := plugin.AttachPod(ctx, npwgPod(sandbox, netNS))
		layer = append(layer, time.Since(start)-cni.adds)
		checkpoint = append(checkpoint, *writing)
		return err
	}, func(ctx context.Context, sandbox, netNS string) error {
		pod := npwgPod(sandbox, netNS)
		if err := plugin.DetachPod(ctx, pod); err != nil {
			return err
		}
		if cls := store.PodClaims(pod.UID); len(cls) > 0 {
			return fmt.Errorf("the pod's records are left after its stop: %+v", cls)
		}
		return nil
	})
	b.ReportMetric(median(layer), "npwg-ns/attach")
	b.ReportMetric(median(checkpoint), "checkpoint-ns/attach")
}

// timedStore is a claim store in a temporary directory on the machine's
// disk, as the daemon's state directory is, that adds the time of its
// checkpoint writes and journal appends to *writing. The journal's syncs,
// which the store's syncer runs for the appends of a round together, are
// not counted.
func timedStore(b *testing.B) (_ *claims.Store, writing *time.Duration) {
	b.Helper()
	store, err := claims.Open(filepath.Join(b.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		b.Fatal(err)
	}
	writing = new(time.Duration)
	write := store.WriteFile
	store.WriteFile = func(path string, data []byte, sync bool) error {
		start := time.Now()
		defer func() { *writing += time.Since(start) }()
		return write(path, data, sync)
	}
	appendFile := store.Append
	store.Append = func(path string, data []byte, sync bool, at int64) error {
		start := time.Now()
		defer func() { *writing += time.Since(start) }()
		return appendFile(path, data, sync, at)
	}
	return store, writing
}

// median is the median of d in nanoseconds.
func median(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Nanoseconds())
}

// timedCNI is the plugin's libcni, timing its ADDs.
type timedCNI struct {
	*dataplane.CNI
	adds time.Duration // the time in Add since it was last zeroed
}

func (c *timedCNI) Add(ctx context.Context, n dataplane.CNINetwork) (dataplane.CNIResult, error) {
	start := time.Now()
	defer func() { c.adds += time.Since(start) }()
	return c.CNI.Add(ctx, n)
}

// BenchmarkNPWGLibcni is BenchmarkNPWGAttach's ADD straight through
// libcni's AddNetworkList: the same configuration, the same runtime
// configuration (container, namespace, interface, CNI_ARGS, the address
// as runtimeConfig "ips"), as a runtime or Multus runs it. DEL is not
// timed.
func BenchmarkNPWGLibcni(b *testing.B) {
	master := npwgMaster(b)
	cni := libcni.NewCNIConfigWithCacheDir([]string{cniBinDir(b, "macvlan", "static")}, b.TempDir(), nil)
	list, err := libcni.ConfListFromBytes(npwgConflist(master))
	if err != nil {
		b.Fatal(err)
	}
	rt := func(sandbox, netNS string) *libcni.RuntimeConf {
		pod := npwgPod(sandbox, netNS)
		return &libcni.RuntimeConf{ContainerID: sandbox, NetNS: netNS, IfName: npwgIfName,
			Args: [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", pod.Namespace}, {"K8S_POD_NAME", pod.Name},
				{"K8S_POD_INFRA_CONTAINER_ID", sandbox}, {"K8S_POD_UID", string(pod.UID)}},
			CapabilityArgs: map[string]any{"ips": []string{npwgAddress}}}
	}
	npwgRoundTrips(b, func(ctx context.Context, sandbox, netNS string) error {
		_, err := cni.AddNetworkList(ctx, list, rt(sandbox, netNS))
		return err
	}, func(ctx context.Context, sandbox, netNS string) error {
		return cni.DelNetworkList(ctx, list, rt(sandbox, netNS))
	})
}

// npwgRoundTrips gives every iteration a new sandbox in a new network
// namespace, times attach in it, checks the pod's interface, then runs
// detach and deletes the namespace; only attach is timed. It reports the
// attach's latency at the median and the 99th percentile.
func npwgRoundTrips(b *testing.B, attach, detach func(ctx context.Context, sandbox, netNS string) error) {
	b.Helper()
	ctx := klog.NewContext(b.Context(), logr.Discard())
	var lat []time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		name := fmt.Sprintf("%s-n%d-%d", benchPrefix, os.Getpid(), i)
		netNS := netnstest.New(b, name)
		sandbox := fmt.Sprintf("sandbox-%d", i)
		b.StartTimer()
		start := time.Now()
		err := attach(ctx, sandbox, netNS)
		took := time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatalf("attach: %v", err)
		}
		lat = append(lat, took)
		if err := npwgCheck(netNS); err != nil {
			b.Fatal(err)
		}
		if err := detach(ctx, sandbox, netNS); err != nil {
			b.Fatalf("detach: %v", err)
		}
		if err := netns.DeleteNamed(name); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Nanoseconds()) }
	b.ReportMetric(at(0.5), "p50-ns/attach")
	b.ReportMetric(at(0.99), "p99-ns/attach")
}

// npwgCheck says whether the namespace at netNS has the network's
// interface with its address.
func npwgCheck(netNS string) error {
	ns, err := netns.GetFromPath(netNS)
	if err != nil {
		return err
	}
	defer func() { _ = ns.Close() }()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(npwgIfName)
	if err != nil {
		return fmt.Errorf("the pod's %s: %w", npwgIfName, err)
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	if len(addrs) != 1 || addrs[0].IPNet.String() != npwgAddress {
		return fmt.Errorf("the pod's %s has addresses %v, want %s", npwgIfName, addrs, npwgAddress)
	}
	return nil
}
