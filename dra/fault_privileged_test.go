//go:build privileged && faultinject

package dra_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/cnidriver"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/dratest"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/dra/watch"
	"github.com/fastpath-dra/fastpath/test/netnstest"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// The fault suite runs the daemon's parts in a worker process (see
// runWorker) on a node of stand-ins, kills it at every fault point, starts
// it again on the same state and replays what the kubelet and the runtime
// can do next. Every run must end with the node exactly as an
// uninterrupted run leaves it.

func init() { addWorker[job]("node") }

// job is what a worker does: start as the daemon does (the runtime's
// Synchronize with the pods it runs, then the driver's Reconcile), then one
// operation.
type job struct {
	Rig rig
	// Sync: the runtime connects and synchronizes at start; Running says
	// whether the pod runs then.
	Sync, Running bool
	Op            string // prepare | unprepare | run | create | stop | health | none
}

// rig is the node the suite plays on, shared by the test and its workers.
type rig struct {
	Dir, StateDir, CDIDir, BPFDir, MemifDir, SysfsRoot string
	PFFile, ChannelsFile                               string
	// APIFile holds the API server's objects (apiObjects); the kubelet
	// plugin registers in RegistryDir.
	APIFile, RegistryDir      string
	CNIBin, CNICache, IPAMDir string
	Inventory                 []devices.Device
	Claim, CNIClaim           *resourceapi.ResourceClaim
	Pod                       nri.Pod
	BootID                    string
	// The veths standing in for the VF's netdev, the afxdp netdev, the
	// CNI network's macvlan master and a shared NIC.
	VFLink, XSKLink, MasterLink, SharedLink string
	// PFDown: the VF's PF has lost its link (after the node's devices
	// were first published), and discovery says so.
	PFDown bool
}

// inventory is the rig's node as discovery saw it before any claim, but
// for the VF's health: unhealthy while its PF is down.
func (r rig) inventory() devices.Inventory {
	inv := devices.Inventory{Devices: slices.Clone(r.Inventory)}
	for i, dev := range inv.Devices {
		if r.PFDown && dev.Name == vfNetdev {
			inv.Devices[i].Health = devices.Health{Reason: devices.ReasonPFLinkDown, Message: "the link of PF ens1f0 is down"}
		}
	}
	return inv
}

// discovered is the rig's node as discovery sees it now: the inventory
// with its PCI functions on the drivers they are bound to (a prepared
// function on vfio-pci, as health expects it).
func (r rig) discovered() devices.Inventory {
	inv := r.inventory()
	for i, dev := range inv.Devices {
		if dev.PCI == nil {
			continue
		}
		pci := *dev.PCI
		if drv, err := (dataplane.PCIBinder{SysfsRoot: r.SysfsRoot, DevRoot: r.SysfsRoot}).Driver(pci.Address); err == nil {
			pci.Driver = drv
		}
		inv.Devices[i].PCI = &pci
	}
	return inv
}

// faultPools is the rig's node IP pool, from which the shared device's
// sub-interface gets its address.
var faultPools = dra.IPPools{"fast": {Name: "fast", Subnet: "10.93.0.0/29", Gateway: "10.93.0.1",
	Routes: []v1alpha1.Route{{Destination: "10.94.0.0/16"}}}}

func (j job) run() error {
	r := j.Rig
	ctx := klog.NewContext(context.Background(), logr.Discard())
	store, err := claims.Open(filepath.Join(r.StateDir, "checkpoint.json"), claims.Legacy{})
	if err != nil {
		return err
	}
	client, dyn, err := openAPI(r.APIFile)
	if err != nil {
		return err
	}
	slow, openClaims := slowClaims(client)
	writer := status.NewWriter(slow)
	// A write the fake API server refuses is a bug of the rig: given up
	// soon, it shows as a difference in the API's objects.
	writer.Attempts = 3
	attacher, err := dataplane.NewAttacher()
	if err != nil {
		return err
	}
	defer func() { _ = attacher.Close() }()
	// The pod also selects a network with the NPWG annotation: a macvlan
	// on the rig's master, its addresses in the rig's directory and kept
	// by an IPAMClaim; its network-status is written to the pod.
	nad := newFaultNAD(r)
	plugin := nri.New(nri.Options{Store: store, Attacher: attacher, Status: writer,
		CNI: dataplane.NewCNI([]string{r.CNIBin}, r.CNICache, nil),
		NPWG: &nri.NPWGOptions{NADs: nad, ConfDir: r.Dir, Plugins: []string{"macvlan", "host-local"}, DefaultInterface: "eth0",
			Policy:     npwg.Policy{HostDevices: []string{r.MasterLink}, HostPaths: []string{r.Dir}},
			Status:     status.PodNetworkStatus{Client: client},
			IPAMClaims: nri.NewIPAMClaimOptions(watch.IPAMClaims{Dynamic: dyn, Client: client}, testNode, nil, time.Minute)}})
	// The writer's claims are answered once the operation returned
	// (slowClaims), and the writes left to the background end before the
	// worker does, as they would in a daemon that lives on.
	defer func() {
		openClaims()
		writer.Wait()
		plugin.WaitReports()
	}()
	m := metrics.New()
	d, err := dra.New(dra.Options{NodeName: testNode, Client: client, PluginDir: filepath.Join(r.Dir, "plugin"), RegistryDir: r.RegistryDir, StateDir: r.StateDir,
		CDIDir: r.CDIDir, BPFDir: r.BPFDir, MemifDir: r.MemifDir, Store: store, Status: writer, Runtime: plugin, BootID: r.BootID, Metrics: m,
		PF: filePF(r.PFFile), Channels: fileChannels(r.ChannelsFile), PCI: dataplane.PCIBinder{SysfsRoot: r.SysfsRoot, DevRoot: r.SysfsRoot},
		IPPools: faultPools})
	if err != nil {
		return err
	}
	d.UseInventory(r.inventory())
	cniDriver, err := cnidriver.New(cnidriver.Options{NodeName: testNode, Client: client, PluginDir: filepath.Join(r.Dir, "cniplugin"), Devices: 4,
		Store: store, Status: writer, Runtime: plugin, Attributes: map[string]string{"name": r.MasterLink},
		Policy: cnipolicy.Options{Plugins: []string{"macvlan", "host-local"}}, Approved: r.approvedCNIConfigs()})
	if err != nil {
		return err
	}
	if j.Sync {
		var running []*api.PodSandbox
		if j.Running {
			running = append(running, &api.PodSandbox{Uid: string(r.Pod.UID), Id: r.Pod.SandboxID, Name: r.Pod.Name, Namespace: r.Pod.Namespace,
				Annotations: map[string]string{nadv1.NetworkAttachmentAnnot: r.Pod.Networks},
				Linux:       &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: r.Pod.NetNS}}}})
		}
		plugin.Synchronize(ctx, running)
	}
	if err := d.Reconcile(ctx); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	refs := []kubeletplugin.NamespacedObject{{UID: r.Claim.UID}, {UID: r.CNIClaim.UID}}
	switch j.Op {
	case "prepare":
		// The CNI claim first: the last thing Prepare does is the
		// fastpath claim's status write, in the background (phase
		// "prepared").
		cres, _ := cniDriver.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{r.CNIClaim})
		res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{r.Claim})
		return errors.Join(res[r.Claim.UID].Err, cres[r.CNIClaim.UID].Err)
	case "unprepare":
		out, _ := d.UnprepareResourceClaims(ctx, refs[:1])
		cout, _ := cniDriver.UnprepareResourceClaims(ctx, refs[1:])
		return errors.Join(out[r.Claim.UID], cout[r.CNIClaim.UID])
	case "run":
		return plugin.AttachPod(ctx, r.Pod)
	case "create":
		return plugin.EnsurePod(ctx, r.Pod)
	case "stop":
		return plugin.DetachPod(ctx, r.Pod)
	case "health":
		return publish(ctx, d, m, client, r)
	case "none":
		return nil
	}
	return fmt.Errorf("unknown operation %q", j.Op)
}

// publish serves as the daemon does (its kubelet plugin, the publisher of
// its slices, its health loop), publishes the node's devices as the rig
// has them now, and returns once the node's slices show them, the
// unhealthy ones tainted, and the publisher has reported a sync begun
// after (the one that wrote them has ended: a kill after its write is not
// outrun by the worker's exit). The first time, the devices are published
// healthy before: the PF goes down while the daemon runs.
func publish(ctx context.Context, d *dra.Driver, m *metrics.Metrics, client kubernetes.Interface, r rig) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		return err
	}
	defer d.Stop()
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if len(list.Items) == 0 {
		healthy := r
		healthy.PFDown = false
		inv := healthy.discovered()
		d.Publish(ctx, inv)
		if err := waitSlices(ctx, client, inv); err != nil {
			return err
		}
	}
	inv := r.discovered()
	d.Publish(ctx, inv)
	if err := waitSlices(ctx, client, inv); err != nil {
		return err
	}
	// The publisher syncs one at a time: a result after this Publish
	// comes after that of the sync that wrote the slices.
	synced := publishResults(m)
	d.Publish(ctx, inv)
	if !poll(func() bool { return publishResults(m) > synced }) {
		return errors.New("the publisher reports no sync of the devices published again")
	}
	return nil
}

// publishResults is how many syncs of the node's slices the publisher
// has reported, as its metrics say.
func publishResults(m *metrics.Metrics) float64 {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var n float64
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, "fastpath_publish_total{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			n += v
		}
	}
	return n
}

// poll reports whether done holds within 30 seconds, asking it every
// 20 milliseconds.
func poll(done func() bool) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for !done() {
		select {
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
	return true
}

// waitSlices waits until the node's slices publish devices, those inv says
// unhealthy tainted, and no other.
func waitSlices(ctx context.Context, client kubernetes.Interface, inv devices.Inventory) error {
	want := map[string][]string{}
	for _, dev := range inv.Devices {
		if !dev.Health.Healthy() {
			want[dev.Name] = []string{fmt.Sprintf("%s=%s:%s", dra.TaintKey, dev.Health.Reason, resourceapi.DeviceTaintEffectNoSchedule)}
		}
	}
	var (
		taints map[string][]string
		err    error
	)
	if poll(func() bool {
		var list *resourceapi.ResourceSliceList
		if list, err = client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{}); err != nil {
			return false
		}
		var devs []string
		devs, taints = sliceDevices(list.Items)
		return len(devs) > 0 && maps.EqualFunc(taints, want, slices.Equal)
	}) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list the node's slices: %w", err)
	}
	return fmt.Errorf("the node's slices do not show its devices' health: taints %v, want %v", taints, want)
}

// faultNAD is the rig's NetworkAttachmentDefinition, default/fault-net:
// its addresses can be given (capability "ips"), as an IPAMClaim's are.
type faultNAD struct {
	nad *nadv1.NetworkAttachmentDefinition
}

func newFaultNAD(r rig) faultNAD {
	return faultNAD{&nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fault-net"},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: fmt.Sprintf(`{"cniVersion": "1.0.0", "type": "macvlan", "master": %q, "mode": "bridge",
			"capabilities": {"ips": true}, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.95.0.0/24"}]], "dataDir": %q}}`, r.MasterLink, r.IPAMDir)}}}
}

func (f faultNAD) GetNAD(_ context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error) {
	if namespace != f.nad.Namespace || name != f.nad.Name {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "k8s.cni.cncf.io", Resource: "network-attachment-definitions"}, name)
	}
	return f.nad.DeepCopy(), nil
}

// filePF keeps VF settings in a file, so that they outlive a killed worker
// as a PF's do.
type filePF string

func (f filePF) load() map[string]dataplane.VFState {
	m := map[string]dataplane.VFState{}
	if data, err := os.ReadFile(string(f)); err == nil {
		_ = json.Unmarshal(data, &m)
	}
	return m
}

func (f filePF) change(pf string, vf int, set func(*dataplane.VFState)) error {
	m := f.load()
	k := fmt.Sprintf("%s/%d", pf, vf)
	st, ok := m[k]
	if !ok {
		return fmt.Errorf("%w: PF %s has no VF %d", dataplane.ErrDeviceGone, pf, vf)
	}
	set(&st)
	m[k] = st
	data, _ := json.Marshal(m)
	return claims.WriteFileAtomic(string(f), data, 0o600)
}

func (f filePF) VFState(pf string, vf int) (dataplane.VFState, error) {
	st, ok := f.load()[fmt.Sprintf("%s/%d", pf, vf)]
	if !ok {
		return st, fmt.Errorf("%w: PF %s has no VF %d", dataplane.ErrDeviceGone, pf, vf)
	}
	return st, nil
}
func (f filePF) SetVLAN(pf string, vf, vlan, qos int, proto string) error {
	return f.change(pf, vf, func(s *dataplane.VFState) { s.VLAN, s.QoS, s.VLANProto = vlan, qos, proto })
}
func (f filePF) SetMAC(pf string, vf int, mac net.HardwareAddr) error {
	return f.change(pf, vf, func(s *dataplane.VFState) { s.MAC = mac.String() })
}
func (f filePF) SetRate(pf string, vf, lo, hi int) error {
	return f.change(pf, vf, func(s *dataplane.VFState) { s.MinTxRate, s.MaxTxRate = lo, hi })
}
func (f filePF) SetSpoofChk(pf string, vf int, on bool) error {
	return f.change(pf, vf, func(s *dataplane.VFState) { s.SpoofChk = on })
}
func (f filePF) SetTrust(pf string, vf int, on bool) error {
	return f.change(pf, vf, func(s *dataplane.VFState) { s.Trust = on })
}
func (f filePF) SetLinkState(pf string, vf int, state string) error {
	return f.change(pf, vf, func(s *dataplane.VFState) { s.LinkState = state })
}

// fileChannels keeps combined channel counts in a file (veths have none).
type fileChannels string

func (f fileChannels) Combined(string) (int, int, error) {
	data, err := os.ReadFile(string(f))
	if err != nil {
		return 0, 0, err
	}
	var n int
	_, err = fmt.Sscan(string(data), &n)
	return n, 8, err
}

func (f fileChannels) SetCombined(_ string, n int) error {
	return claims.WriteFileAtomic(string(f), fmt.Appendf(nil, "%d", n), 0o600)
}

var macRE = regexp.MustCompile(`mac=[0-9a-f:]+`)

// faultPrefix starts the names of the rig's links and namespaces.
const faultPrefix = "fpf"

// rigs numbers the rigs, for their links' names.
var rigs atomic.Int32

// newRig makes the node: veths standing in for a VF netdev, an afxdp
// netdev and the CNI network's macvlan master; a fixture E810 with a
// kernel for the vfio device; a PF and channels in files; a directory
// for the bpffs the daemon mounts; the API server's objects (the claims,
// the pod, an IPAMClaim); and the pod's network namespace.
func newRig(t *testing.T) *rig {
	t.Helper()
	cniBin := os.Getenv("FASTPATH_CNI_BIN")
	if _, err := os.Stat(filepath.Join(cniBin, "macvlan")); err != nil {
		t.Fatalf("the fault suite runs the reference CNI plugins from $FASTPATH_CNI_BIN (make faults sets it): %v", err)
	}
	dir, err := os.MkdirTemp("", "fpf") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	r := &rig{Dir: dir, StateDir: filepath.Join(dir, "state"), CDIDir: filepath.Join(dir, "cdi"), BPFDir: filepath.Join(dir, "bpf", "fastpath"),
		MemifDir: filepath.Join(dir, "memif"), SysfsRoot: filepath.Join(dir, "sysfs"), PFFile: filepath.Join(dir, "pf.json"),
		ChannelsFile: filepath.Join(dir, "channels"), CNIBin: cniBin, CNICache: filepath.Join(dir, "state", "cni", "cache"),
		IPAMDir: filepath.Join(dir, "ipam"), APIFile: filepath.Join(dir, "api.json"), RegistryDir: filepath.Join(dir, "registry"), BootID: "boot-1"}
	// Unique on the machine: another run of the suite may be going on.
	id := fmt.Sprintf("%s%d-%d", faultPrefix, os.Getpid()%100000, rigs.Add(1))
	r.VFLink, r.XSKLink, r.MasterLink, r.SharedLink = id+"v", id+"x", id+"m", id+"s"
	for _, d := range []string{r.MemifDir, r.IPAMDir, filepath.Dir(r.BPFDir), r.RegistryDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The daemon mounts a bpffs on its BPF directory at its first afxdp
	// claim (fault point bpffs.mounted); the rig unmounts it.
	t.Cleanup(func() { _ = syscall.Unmount(r.BPFDir, syscall.MNT_DETACH) })
	if err := sysfsfixture.E810().Write(r.SysfsRoot); err != nil {
		t.Fatal(err)
	}
	kernel, err := sysfsfixture.StartKernel(r.SysfsRoot, r.SysfsRoot, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kernel.Stop)
	vf := netnstest.Veth(t, r.VFLink, r.VFLink+"p")
	xsk := netnstest.Veth(t, r.XSKLink, r.XSKLink+"p")
	netnstest.Veth(t, r.MasterLink, r.MasterLink+"p")
	shared := netnstest.Veth(t, r.SharedLink, r.SharedLink+"p")
	// Fixed MACs, the same in every rig; one link up, one down: the admin
	// state is given back as it was.
	for l, mac := range map[netlink.Link]string{vf: "02:fa:f0:00:00:01", xsk: "02:fa:f0:00:00:02", shared: "02:fa:f0:00:00:03"} {
		hw, _ := net.ParseMAC(mac)
		if err := netlink.LinkSetHardwareAddr(l, hw); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []netlink.Link{vf, shared} {
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	vf, _ = netlink.LinkByName(r.VFLink)
	xsk, _ = netlink.LinkByName(r.XSKLink)
	pf := map[string]dataplane.VFState{"ens1f0/0": {VLANProto: "802.1q", MAC: "00:00:00:00:00:00", LinkState: "auto"}}
	data, _ := json.Marshal(pf)
	writeTestFile(t, r.PFFile, data)
	writeTestFile(t, r.ChannelsFile, []byte("4"))

	fixture := inventoryMap(testInventory(t))
	vfDev := fixture[vfNetdev]
	vfDev.Netdev = &devices.Netdev{Name: r.VFLink, MTU: vf.Attrs().MTU, MAC: vf.Attrs().HardwareAddr.String(), MinMTU: 68, MaxMTU: 9000}
	xskDev := devices.Device{Name: "netdev-" + r.XSKLink, Kind: devices.KindNetdev, Netdev: &devices.Netdev{Name: r.XSKLink, MTU: xsk.Attrs().MTU,
		MAC: xsk.Attrs().HardwareAddr.String(), MaxCombinedChannels: 8, XDP: devices.XDP{Supported: new(true), ZeroCopy: new(false)}}}
	vfioDev := fixture[dratest.VFNetdev2]
	vfioDev.Netdev = nil
	memifDev := devices.Device{Name: memifMaster, Kind: devices.KindMemif, Memif: &devices.Memif{Role: devices.MemifRoleMaster,
		Mode: devices.MemifModeIP, SocketPath: filepath.Join(r.MemifDir, "vpp1.sock"), Source: "config", Healthy: true}}
	sharedDev := devices.Device{Name: "netdev-" + r.SharedLink, Kind: devices.KindNetdev, Netdev: &devices.Netdev{Name: r.SharedLink, MTU: 1500},
		Share: &devices.Share{Interfaces: 8}}
	r.Inventory = []devices.Device{vfDev, xskDev, vfioDev, memifDev, sharedDev}

	r.Claim = testClaim("all", []alloc{{Request: "nic", Device: vfNetdev}, {Request: "xsk", Device: xskDev.Name}, {Request: "dpdk", Device: dratest.VFNetdev2}, {Request: "vs", Device: memifMaster}, {Request: "fast", Device: sharedDev.Name}},
		fromClaimFor("nic", config(`"interface": {"name": "net1", "mtu": 9000, "mac": "02:00:00:fa:0f:01", "addresses": ["10.90.1.2/24"],
			"routes": [{"destination": "10.91.0.0/16", "gateway": "10.90.1.1"}, {"destination": "10.92.0.0/16", "gateway": "10.90.1.1", "table": 100}],
			"rules": [{"priority": 100, "from": "10.90.1.2/32", "table": 100}], "sysctls": {"ipv4.arp_ignore": "1"},
			"ethtool": {"features": {"generic-receive-offload": true}}, "gsoMaxSize": 131072}, "vf": {"vlan": 100, "spoofChk": true}`)),
		fromClaimFor("xsk", config(`"mode": "afxdp", "interface": {"name": "xsk0"}, "xdp": {"attachMode": "native", "queues": 2}`)),
		fromClaimFor("dpdk", config(`"mode": "vfio"`)),
		fromClaimFor("fast", config(`"mode": "macvlan", "interface": {"name": "fast0"}, "ipam": {"pool": "fast"}`)))
	r.Claim.Status.Allocation.Devices.Results[4].ShareID = new(types.UID("0a1b2c3d-0000-4000-8000-000000000001"))
	r.Claim.Status.ReservedFor[0].UID = "pod-fault"
	// The operator's approved config: its master from the device, its
	// IPAM directory the rig's (approvedCNIConfigs).
	cniCfg, _ := json.Marshal(v1alpha1.CNIConfig{IfName: "net2", ConfigName: faultCNIConfig})
	r.CNIClaim = cniTestClaim([]string{"macvlan"}, fromClaim(string(cniCfg)))
	r.CNIClaim.Name, r.CNIClaim.UID = "cni", "uid-cni"
	r.CNIClaim.Status.ReservedFor[0].UID = "pod-fault"
	// Its NPWG network is the pod's default route (made after the
	// network's ADD: fault point npwg.route), its addresses kept by an
	// IPAMClaim (fault points ipamclaim.status.*).
	r.Pod = nri.Pod{UID: "pod-fault", Namespace: "default", Name: "pod-fault", SandboxID: "sandbox-1",
		Networks: `[{"name": "fault-net", "interface": "net3", "ipam-claim-reference": "fault-ipc", "default-route": ["10.95.0.1"]}]`}
	api := apiObjects{Nodes: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "uid-" + testNode}}},
		Claims: []resourceapi.ResourceClaim{*r.Claim, *r.CNIClaim},
		Pods: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: r.Pod.Namespace, Name: r.Pod.Name, UID: r.Pod.UID,
			Annotations: map[string]string{nadv1.NetworkAttachmentAnnot: r.Pod.Networks}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}},
		IPAMClaims: []npwg.IPAMClaim{{TypeMeta: metav1.TypeMeta{APIVersion: npwg.IPAMClaimGroupVersion, Kind: npwg.IPAMClaimKind},
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fault-ipc", UID: "uid-fault-ipc"},
			Spec:       npwg.IPAMClaimSpec{Network: "default/fault-net", Interface: "net3"}}}}
	if err := writeAPI(r.APIFile, api); err != nil {
		t.Fatal(err)
	}
	return r
}

func writeTestFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// sandbox creates the pod's network namespace: the sandbox starts.
func (r *rig) sandbox(t *testing.T) {
	t.Helper()
	if r.Pod.NetNS != "" {
		t.Fatal("the rig's pod already has a sandbox")
	}
	r.Pod.NetNS = netnstest.New(t, fmt.Sprintf("%s-%d-%s", faultPrefix, os.Getpid(), r.VFLink))
}

// sandboxGone plays the runtime removing the pod's sandbox while fastpath
// is down, and the kernel returning its devices to the host under other
// names (as it returns a VF's netdev; a veth would die with its namespace).
func (r *rig) sandboxGone(t *testing.T) {
	t.Helper()
	ns, err := netns.GetFromPath(r.Pod.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(ns)
	ns.Close()
	if err != nil {
		t.Fatal(err)
	}
	links, _ := h.LinkList()
	host, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range links {
		if l.Attrs().Alias != r.VFLink && l.Attrs().Alias != r.XSKLink {
			continue
		}
		_ = h.LinkSetDown(l)
		if err := h.LinkSetName(l, fmt.Sprintf("%sr%d", r.VFLink, i)); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetNsFd(l, int(host)); err != nil {
			t.Fatal(err)
		}
	}
	host.Close()
	h.Close()
	if err := netns.DeleteNamed(filepath.Base(r.Pod.NetNS)); err != nil {
		t.Fatal(err)
	}
	r.Pod.NetNS = ""
}

// do runs a job in a worker; killed reports whether SIGKILL ended it.
func (r *rig) do(t *testing.T, op string, sync, running bool, fault string) (killed bool, err error) {
	t.Helper()
	return runWorker("node", op, job{Rig: *r, Sync: sync, Running: running, Op: op}, fault)
}

// must runs a job that has to succeed.
func (r *rig) must(t *testing.T, op string, sync, running bool) {
	t.Helper()
	if killed, err := r.do(t, op, sync, running, ""); err != nil || killed {
		t.Fatalf("%s: killed %v, %v", op, killed, err)
	}
}

// snapshot is everything of the node that fastpath changes.
type snapshot map[string]string

func (r *rig) snapshot(t *testing.T) snapshot {
	t.Helper()
	s := snapshot{}
	for _, name := range []string{r.VFLink, r.XSKLink, r.SharedLink} {
		s["host link "+name[len(name)-1:]] = linkState(netlink.LinkByName(name))
	}
	if gro, err := dataplane.ReadOffloads(r.VFLink, dataplane.Offloads{Features: map[string]bool{"rx-gro": true}}); err == nil {
		s["host gro "+r.VFLink[len(r.VFLink)-1:]] = fmt.Sprint(gro.Features["rx-gro"])
	}
	if r.Pod.NetNS != "" {
		ns, err := netns.GetFromPath(r.Pod.NetNS)
		if err != nil {
			t.Fatal(err)
		}
		h, err := netlink.NewHandleAt(ns)
		ns.Close()
		if err != nil {
			t.Fatal(err)
		}
		links, _ := h.LinkList()
		for _, l := range links {
			if l.Attrs().Name == "lo" {
				continue
			}
			st := linkStateIn(h, l)
			if l.Type() == "macvlan" {
				// The CNI network's macvlan gets a new MAC each time.
				st = macRE.ReplaceAllString(st, "mac=random")
			}
			s["pod link "+l.Attrs().Name] = st
			routes, _ := h.RouteList(l, netlink.FAMILY_V4)
			var rs []string
			for _, rt := range routes {
				switch {
				case rt.Gw == nil:
				case rt.Dst == nil || rt.Dst.String() == "0.0.0.0/0":
					rs = append(rs, "default via "+rt.Gw.String())
				default:
					rs = append(rs, rt.Dst.String()+" via "+rt.Gw.String())
				}
			}
			s["pod routes "+l.Attrs().Name] = strings.Join(rs, ",")
		}
		// The claim's rule, and its table's routes.
		rules, _ := h.RuleList(netlink.FAMILY_V4)
		var rs []string
		for _, r := range rules {
			if r.Table == 100 {
				rs = append(rs, r.String())
			}
		}
		s["pod rules"] = strings.Join(rs, ",")
		table, _ := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 100}, netlink.RT_FILTER_TABLE)
		var ts []string
		for _, rt := range table {
			ts = append(ts, rt.Dst.String()+" via "+rt.Gw.String())
		}
		s["pod table 100"] = strings.Join(ts, ",")
		h.Close()
	}
	pf, _ := os.ReadFile(r.PFFile)
	s["pf"] = string(pf)
	ch, _ := os.ReadFile(r.ChannelsFile)
	s["channels"] = string(ch)
	drv, _ := dataplane.PCIBinder{SysfsRoot: r.SysfsRoot, DevRoot: r.SysfsRoot}.Driver("0000:3b:01.1")
	s["vfio function driver"] = drv
	override, _ := os.ReadFile(filepath.Join(r.SysfsRoot, "sys", "bus", "pci", "devices", "0000:3b:01.1", "driver_override"))
	// The kernel shows a cleared override as "(null)"; the fixture keeps
	// what was written.
	s["vfio function driver_override"] = strings.TrimSuffix(strings.TrimSpace(string(override)), "(null)")
	all := func(string, fs.DirEntry) bool { return true }
	var fsStat unix.Statfs_t
	s["bpffs"] = fmt.Sprint(unix.Statfs(r.BPFDir, &fsStat) == nil && fsStat.Type == unix.BPF_FS_MAGIC)
	// The kernel's own files of a bpffs (bpf_preload's) are not pins.
	s["pins"] = tree(r.BPFDir, func(rel string, _ fs.DirEntry) bool { return rel != "maps.debug" && rel != "progs.debug" })
	s["cdi"] = tree(r.CDIDir, all)
	s["memif"] = tree(r.MemifDir, all)
	// libcni keeps its cache directories; the results in them must go.
	// The claims directory holds the claims' directories. The store's
	// lock file, made when a pending write is adopted, is kept as
	// host-local's is (fastpathd cleanup removes it).
	s["state"] = tree(r.StateDir, func(rel string, d fs.DirEntry) bool {
		return (!d.IsDir() && rel != "checkpoint.json.lock") || (d.IsDir() && !strings.HasPrefix(rel, "cni") && rel != "claims")
	})
	// host-local keeps its lock and last reserved address; the
	// reservations (files named by address) must go.
	s["ipam reservations"] = tree(r.IPAMDir, func(_ string, d fs.DirEntry) bool { return !d.IsDir() && net.ParseIP(d.Name()) != nil })
	cp, err := claims.Open(filepath.Join(r.StateDir, "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cp.Claims() {
		c.BootID = ""
		for i := range c.Networks {
			c.Networks[i].NetNS = ""
		}
		for i := range c.Devices {
			if a := c.Devices[i].Attached; a != nil {
				a.NetNS = ""
			}
		}
		data, _ := json.Marshal(c)
		s["claim "+c.Key().String()] = string(data)
	}
	if err := r.apiSnapshot(s); err != nil {
		t.Fatal(err)
	}
	// What differs from rig to rig: its directory and its links' names.
	names := strings.NewReplacer(r.Dir, "$RIG", r.VFLink, "$VF", r.XSKLink, "$XSK", r.MasterLink, "$MASTER", r.SharedLink, "$SHARED")
	for k, v := range s {
		s[k] = names.Replace(v)
	}
	return s
}

func linkState(l netlink.Link, err error) string {
	if err != nil {
		return "absent"
	}
	return linkStateIn(nil, l)
}

func linkStateIn(h *netlink.Handle, l netlink.Link) string {
	a := l.Attrs()
	var addrs []netlink.Addr
	if h != nil {
		addrs, _ = h.AddrList(l, netlink.FAMILY_ALL)
	} else {
		addrs, _ = netlink.AddrList(l, netlink.FAMILY_ALL)
	}
	var as []string
	for _, ad := range addrs {
		if !ad.IP.IsLinkLocalUnicast() {
			as = append(as, ad.IPNet.String())
		}
	}
	sort.Strings(as)
	xdp := a.Xdp != nil && a.Xdp.Attached
	return fmt.Sprintf("mtu=%d mac=%s alias=%q up=%v addrs=%v xdp=%v gso=%d master=%d", a.MTU, a.HardwareAddr, a.Alias, a.Flags&net.FlagUp != 0, as, xdp, a.GSOMaxSize, a.MasterIndex)
}

// tree lists what keep keeps below dir, with the content of small regular
// files and the targets of links; temporary files are listed too: none may
// be left.
func tree(dir string, keep func(rel string, d fs.DirEntry) bool) string {
	var out []string
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == "checkpoint.json" || rel == "checkpoint.json.journal" || !keep(rel, d) {
			return nil // the checkpoint is compared as claims
		}
		entry := rel
		// libcni's cached results hold the macvlan's random MAC: their
		// names say enough.
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() && info.Size() < 4096 && !strings.Contains(rel, "cache") {
			data, _ := os.ReadFile(path)
			entry += "=" + string(data)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(path)
			entry += "->" + target
		}
		out = append(out, entry)
		return nil
	})
	return strings.Join(out, "\n")
}

// without is s without the keys starting with one of prefixes.
func (s snapshot) without(prefixes ...string) snapshot {
	out := maps.Clone(s)
	maps.DeleteFunc(out, func(k, _ string) bool {
		return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) })
	})
	return out
}

func (s snapshot) diff(want snapshot) string {
	var keys []string
	for k := range s {
		keys = append(keys, k)
	}
	for k := range want {
		if _, ok := s[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		if s[k] != want[k] {
			fmt.Fprintf(&b, "  %s:\n    got  %q\n    want %q\n", k, s[k], want[k])
		}
	}
	return b.String()
}

// references are the node's states along an uninterrupted life: before,
// prepared, the pod running, the pod stopped, unprepared; and, on a node
// of its own, the pod running when the VF's PF has lost its link and the
// node's devices are published (unhealthy).
type references struct{ initial, prepared, running, unhealthy, stopped, final snapshot }

// elsewhere are the fault points of hardware the stand-ins lack, and the
// test that kills there.
var elsewhere = map[string]string{
	"attach.rdma":      "TestSRIOVFaultRDMA (fault_sriov_test.go, in the SR-IOV VM: soft-RoCE on a VF)",
	"attach.rdma.made": "TestSRIOVFaultRDMAExclusive (fault_sriov_test.go, in the SR-IOV VM: soft-RoCE on a VF in exclusive mode)",
	// An admin-access claim's life is its own: no step of the store's, no
	// pod's hooks.
	"admin.recorded":      "TestFaultAdmin (fault_admin_privileged_test.go)",
	"admin.cdi":           "TestFaultAdmin (fault_admin_privileged_test.go)",
	"admin.unprepare.cdi": "TestFaultAdmin (fault_admin_privileged_test.go)",
}

// phases of a claim's life, in order, and the points each may be killed
// at. In phase "prepared" Prepare has returned, and the claim's status is
// being written in the background.
var phases = map[string][]string{
	"prepare":  {"ipam.assigned", "prepare.recorded", "prepare.files.before", "prepare.files.applied", "prepare.vf.before", "vf.setting", "vf.setting#2", "prepare.vf.applied", "prepare.channels.before", "prepare.channels.applied", "prepare.offloads.before", "prepare.offloads.applied", "prepare.xdp.before", "bpffs.mounted", "prepare.xdp.applied", "prepare.vfio.before", "vfio.override", "vfio.unbound", "prepare.vfio.applied", "prepare.cdi.before", "prepare.cdi.applied"},
	"prepared": {"claim.status.before", "claim.status.written"},
	"run": {"npwg.admitted", "ipamclaim.status.before", "ipamclaim.status.written", "attach.recorded", "attach.moved", "attach.moved#2", "attach.addressed", "attach.routed", "attach.shared.created", "cni.add.recorded", "cni.add.done", "cni.add.done#2", "npwg.route",
		"claim.status.before", "claim.status.written", "ipamclaim.status.before#2", "ipamclaim.status.written#2", "annotation.before", "annotation.written"},
	// The pod runs; the VF's PF has lost its link. The daemon publishes
	// the node's slices (first hit), then taints the VF (second).
	"health":    {"slice.before", "slice.written", "slice.before#2", "slice.written#2"},
	"stop":      {"detach.moved", "detach.moved#2", "detach.shared.deleted", "detach.returned", "cni.del.done", "cni.del.done#2"},
	"unprepare": {"unprepare.released", "unprepare.undone"},
}

// ipamClaimRecord starts the key of the IPAMClaim's record: it outlives
// the pod that held it, until the IPAMClaim is deleted.
const ipamClaimRecord = "claim " + claims.DriverIPAMClaim + "/"

// orders are what the kubelet and the runtime may do after a kill in each
// phase, as steps: "op" runs op in a restarted worker; "op/nosync" runs it
// without the runtime's Synchronize; "gone" removes the sandbox; "kill:op"
// kills the restarted worker again at the same point during op. Each order
// ends with the node as a reference says, but for the keys (prefixes) of
// loose: an order that ends with the pod or the claim gone, before a
// complete life after the kill, leaves there what was written before the
// kill, which depends on where it fell (the claim's status stays; the
// control plane drops it with the allocation; the bpffs stays mounted;
// the IPAMClaim's record is there if the pod ever started). So does a
// Stop that the restarted daemon's Synchronize, the pod still running,
// preceded: the networks the killed Stop had deleted are added again,
// with new addresses, and the status says so.
var orders = map[string]map[string]struct {
	steps []string
	want  string   // the reference the node ends at
	loose []string // the keys compared with no reference
}{
	"prepare": {
		"Prepare retried":                 {steps: []string{"prepare"}, want: "prepared"},
		"Unprepare":                       {steps: []string{"unprepare"}, want: "final", loose: []string{"api ", "bpffs", ipamClaimRecord}},
		"killed again, Prepare retried":   {steps: []string{"kill:prepare", "prepare"}, want: "prepared"},
		"restart, then Prepare and a pod": {steps: []string{"none", "prepare", "sandbox", "run", "stop", "unprepare"}, want: "final"},
	},
	// The kubelet had Prepare's answer: it does not call it again.
	"prepared": {
		"restart":               {steps: []string{"none"}, want: "prepared"},
		"killed again, restart": {steps: []string{"kill:none", "none"}, want: "prepared"},
		"Prepare retried":       {steps: []string{"prepare"}, want: "prepared"},
		"restart, then the pod": {steps: []string{"none", "sandbox", "run"}, want: "running"},
		"Unprepare":             {steps: []string{"unprepare"}, want: "final", loose: []string{"api ", ipamClaimRecord}},
	},
	"run": {
		"RunPodSandbox retried":             {steps: []string{"run"}, want: "running"},
		"Synchronize, pod running":          {steps: []string{"none/running"}, want: "running"},
		"CreateContainer":                   {steps: []string{"create/running"}, want: "running"},
		"Synchronize, pod gone":             {steps: []string{"gone", "none"}, want: "stopped", loose: []string{"api "}},
		"pod gone, Unprepare before sync":   {steps: []string{"gone", "unprepare/nosync", "none"}, want: "final", loose: []string{"api "}},
		"pod gone, Unprepare after sync":    {steps: []string{"gone", "none", "unprepare"}, want: "final", loose: []string{"api "}},
		"killed again, RunPodSandbox again": {steps: []string{"kill:run", "run"}, want: "running"},
	},
	"health": {
		"restart":               {steps: []string{"health"}, want: "unhealthy"},
		"killed again, restart": {steps: []string{"kill:health", "health"}, want: "unhealthy"},
	},
	"stop": {
		"StopPodSandbox retried":       {steps: []string{"stop"}, want: "stopped", loose: []string{"api "}},
		"Synchronize, pod gone":        {steps: []string{"gone", "none"}, want: "stopped"},
		"Unprepare before Synchronize": {steps: []string{"gone", "unprepare/nosync", "none"}, want: "final"},
		"Unprepare after Synchronize":  {steps: []string{"gone", "none", "unprepare"}, want: "final"},
		"killed again, Stop again":     {steps: []string{"kill:stop", "stop"}, want: "stopped", loose: []string{"api "}},
	},
	"unprepare": {
		"Unprepare retried":               {steps: []string{"unprepare"}, want: "final"},
		"killed again, Unprepare retried": {steps: []string{"kill:unprepare", "unprepare"}, want: "final"},
	},
}

// TestFaults kills the daemon at every fault point of a claim's life and
// replays every order the kubelet and the runtime can produce after it;
// the node always ends as an uninterrupted run leaves it.
func TestFaults(t *testing.T) {
	var listed []string
	for _, pts := range phases {
		for _, p := range pts {
			listed = append(listed, strings.Split(p, "#")[0])
		}
	}
	for _, p := range fault.Points {
		if !slices.Contains(listed, p) && elsewhere[p] == "" {
			t.Errorf("fault point %s is in no phase of the suite", p)
		}
	}
	pick := faultOrders(t)
	refs := referenceRun(t)
	var mu sync.Mutex
	var report []string
	// The group returns when every kill in it has run (in parallel).
	t.Run("kills", func(t *testing.T) { killEverywhere(t, refs, pick, &mu, &report) })
	sort.Strings(report)
	t.Logf("killed at %d points, replayed %d orders (%s):\n%s", len(fault.Points), len(report), pick, strings.Join(report, "\n"))
}

// orderPick chooses the orders replayed after a kill at each point: all of
// them, or n of them (make test's short run), drawn for each point from a
// seed, so that runs with other seeds replay the others.
type orderPick struct {
	n    int // 0: all
	seed uint64
}

// faultOrders is the pick $FASTPATH_FAULT_ORDERS (a number of orders per
// point; all unless set) and $FASTPATH_FAULT_SEED (random unless set) ask
// for.
func faultOrders(t *testing.T) orderPick {
	t.Helper()
	var p orderPick
	if v := os.Getenv("FASTPATH_FAULT_ORDERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FASTPATH_FAULT_ORDERS=%q: want a number of orders per point, 1 or more", v)
		}
		p.n = n
	}
	p.seed = rand.Uint64()
	if v := os.Getenv("FASTPATH_FAULT_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FASTPATH_FAULT_SEED=%q: %v", v, err)
		}
		p.seed = seed
	}
	return p
}

func (p orderPick) String() string {
	if p.n == 0 {
		return "every order after every kill"
	}
	return fmt.Sprintf("%d orders per point, seed %d: make faults FAULT_ORDERS=%d FASTPATH_FAULT_SEED=%d replays them", p.n, p.seed, p.n, p.seed)
}

// of is the names of the orders replayed after a kill at point in phase.
func (p orderPick) of(phase, point string) []string {
	names := slices.Sorted(maps.Keys(orders[phase]))
	if p.n == 0 || p.n >= len(names) {
		return names
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(phase + "/" + point))
	r := rand.New(rand.NewPCG(p.seed, h.Sum64()))
	r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	return names[:p.n]
}

// killEverywhere runs a kill at each point of each phase, then each order
// the pick chooses after it, in parallel, and reports those that passed.
func killEverywhere(t *testing.T, refs references, pick orderPick, mu *sync.Mutex, report *[]string) {
	for _, phase := range []string{"prepare", "prepared", "run", "health", "stop", "unprepare"} {
		for _, point := range phases[phase] {
			for _, name := range pick.of(phase, point) {
				order := orders[phase][name]
				t.Run(point+"/"+name, func(t *testing.T) {
					// Each rig has its own links, namespaces, files and
					// daemon processes.
					t.Parallel()
					r := newRig(t)
					r.reach(t, phase)
					killed, err := r.do(t, phaseOp(phase), true, phase == "stop" || phase == "run" || phase == "health", point)
					if err != nil || !killed {
						t.Fatalf("%s was not killed at %s: %v", phase, point, err)
					}
					for _, s := range order.steps {
						r.replay(t, s, point)
					}
					if d := r.snapshot(t).without(order.loose...).diff(refs.pick(order.want).without(order.loose...)); d != "" {
						t.Fatalf("killed at %s in %s, then %v: the node is not as an uninterrupted run leaves it (%s):\n%s", point, phase, order.steps, order.want, d)
					}
					mu.Lock()
					*report = append(*report, fmt.Sprintf("%-26s %-9s %s", point, phase, name))
					mu.Unlock()
				})
			}
		}
	}
}

// phaseOp is the operation killed in phase.
func phaseOp(phase string) string {
	if phase == "prepared" {
		return "prepare"
	}
	return phase
}

// reach brings a fresh rig to the start of phase, uninterrupted.
func (r *rig) reach(t *testing.T, phase string) {
	t.Helper()
	steps := map[string][]string{"prepare": nil, "prepared": nil, "run": {"prepare", "sandbox"}, "health": {"prepare", "sandbox", "run", "pfdown"},
		"stop":      {"prepare", "sandbox", "run"},
		"unprepare": {"prepare", "sandbox", "run", "stop", "gone"}}[phase]
	for _, s := range steps {
		r.replay(t, s, "")
	}
}

// replay does one step of an order (see orders).
func (r *rig) replay(t *testing.T, s, point string) {
	t.Helper()
	switch {
	case s == "sandbox":
		r.sandbox(t)
	case s == "pfdown":
		r.PFDown = true
	case s == "gone":
		if r.Pod.NetNS != "" {
			r.sandboxGone(t)
		}
	case strings.HasPrefix(s, "kill:"):
		op := strings.TrimPrefix(s, "kill:")
		if _, err := r.do(t, op, true, r.Pod.NetNS != "" && op != "unprepare", point); err != nil {
			t.Fatalf("%s (killed again at %s): %v", op, point, err)
		}
	default:
		op, mode, _ := strings.Cut(s, "/")
		running := r.Pod.NetNS != "" && (mode == "running" || op == "run" || op == "stop" || op == "create" || op == "health")
		r.must(t, op, mode != "nosync", running)
	}
}

// referenceRun runs a claim's life uninterrupted and records the node at
// each phase.
func referenceRun(t *testing.T) references {
	t.Helper()
	r := newRig(t)
	var refs references
	refs.initial = r.snapshot(t)
	r.must(t, "prepare", true, false)
	refs.prepared = r.snapshot(t)
	r.sandbox(t)
	r.must(t, "run", true, true)
	refs.running = r.snapshot(t)
	if refs.running["pod link net1"] == "" || refs.running["pod link xsk0"] == "" || refs.running["pod link net2"] == "" || refs.running["pod link fast0"] == "" ||
		refs.running["pod link net3"] == "" {
		t.Fatalf("the pod lacks its interfaces: %v", refs.running)
	}
	if !slices.ContainsFunc(slices.Collect(maps.Values(refs.running)), func(v string) bool { return strings.Contains(v, "default via 10.95.0.1") }) {
		t.Fatalf("the pod lacks the default route its NPWG network asks for: %v", refs.running)
	}
	r.must(t, "stop", true, true)
	refs.stopped = r.snapshot(t)
	r.sandboxGone(t)
	r.must(t, "unprepare", true, false)
	refs.final = r.snapshot(t)
	// What outlives a claim's life: the status written to the API (the
	// control plane drops it with the allocation and the pod), the
	// IPAMClaim's record (until the IPAMClaim is deleted), and the bpffs.
	outlives := []string{"api ", ipamClaimRecord, "bpffs"}
	if d := refs.final.without(outlives...).diff(refs.initial.without(outlives...)); d != "" {
		t.Fatalf("an uninterrupted life does not leave the node as it found it:\n%s", d)
	}
	if d := refs.stopped.without(outlives...).diff(refs.prepared.without(outlives...)); d != "" {
		t.Fatalf("a stopped pod does not leave the node as Prepare left it:\n%s", d)
	}
	// What the daemon wrote to the API, as the recovered runs must write
	// it again.
	for _, c := range []struct {
		ref  snapshot
		keys []string
	}{
		{refs.prepared, []string{"api claim all status.devices", "bpffs"}},
		{refs.running, []string{"api claim all status.devices", "api claim cni status.devices", "api pod pod-fault annotations", "api ipamclaim fault-ipc status"}},
	} {
		for _, k := range c.keys {
			if v := c.ref[k]; v == "" || v == "null" || v == "false" || v == "{}" {
				t.Fatalf("the reference run did not write %s: %q", k, v)
			}
		}
	}
	for _, want := range []string{nadv1.NetworkStatusAnnot, "10.95.0."} {
		if !strings.Contains(refs.running["api pod pod-fault annotations"], want) {
			t.Fatalf("the pod's annotations lack %q: %s", want, refs.running["api pod pod-fault annotations"])
		}
	}
	if !strings.Contains(refs.running["api ipamclaim fault-ipc status"], `"ownerPod":{"name":"pod-fault"}`) ||
		!strings.Contains(refs.running["api ipamclaim fault-ipc status"], "10.95.0.") {
		t.Fatalf("the IPAMClaim does not hold the pod's address: %s", refs.running["api ipamclaim fault-ipc status"])
	}
	u := newRig(t)
	u.must(t, "prepare", true, false)
	u.sandbox(t)
	u.must(t, "run", true, true)
	u.PFDown = true
	u.must(t, "health", true, true)
	refs.unhealthy = u.snapshot(t)
	if d := refs.unhealthy.without("api slices").diff(refs.running); d != "" {
		t.Fatalf("publishing the node's devices changes more than its slices:\n%s", d)
	}
	if taints := refs.unhealthy["api slices taints"]; !strings.Contains(taints, vfNetdev) || !strings.Contains(taints, devices.ReasonPFLinkDown) {
		t.Fatalf("the VF is not tainted: %s", taints)
	}
	return refs
}

func (refs references) pick(name string) snapshot {
	return map[string]snapshot{"initial": refs.initial, "prepared": refs.prepared, "running": refs.running,
		"unhealthy": refs.unhealthy, "stopped": refs.stopped, "final": refs.final}[name]
}

// faultCNIConfig is the approved config the rig's CNI claim names.
const faultCNIConfig = "fault-macvlan"

// approvedCNIConfigs are the operator's approved configs of the rig: a
// macvlan on the device's master whose host-local keeps its addresses in
// the rig's IPAM directory, a host path only the operator may name.
func (r *rig) approvedCNIConfigs() cnipolicy.ApprovedSet {
	return cnipolicy.ApprovedSet{faultCNIConfig: &v1alpha1.CNIConfigObject{APIVersion: v1alpha1.CNIGroupVersion, Kind: v1alpha1.KindCNIConfig,
		ObjectMeta: metav1.ObjectMeta{Name: faultCNIConfig},
		Spec: v1alpha1.CNIConfig{CNIVersion: "1.0.0", Plugins: []v1alpha1.CNIPlugin{{Type: "macvlan",
			Config: map[string]any{"mode": "bridge", "ipam": map[string]any{"type": "host-local", "dataDir": r.IPAMDir,
				"ranges": [][]any{{map[string]any{"subnet": "10.92.0.0/24"}}}}},
			Arguments: []v1alpha1.CNIArgument{{FieldPath: "master", ValueFrom: &v1alpha1.CNIValueSource{AttributeRef: "name"}}}}}}}}
}
