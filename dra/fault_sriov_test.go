//go:build sriov && faultinject

package dra_test

// The fault suite's kills on the VF paths, on the VM's igb PF (make
// e2e-sriov): a worker runs the driver as the daemon builds it (VF
// settings through the PF with netlink, vfio-pci binding on this node's
// sysfs and /dev) on a state directory, and is killed in Prepare between
// two VF settings or with the VF unbound from igbvf and not yet on
// vfio-pci. A worker started again on the same state then gets the
// kubelet's retried Prepare, or its Unprepare.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/test/netnstest"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

func init() { addWorker[vfJob]("vf") }

// vfJob is one life of the daemon on the real PF: it starts on the state
// below Dir (Reconcile undoes an interrupted Prepare), then prepares or
// unprepares the claim, or does nothing more.
type vfJob struct {
	Dir       string
	Inventory devices.Inventory
	Claim     *resourceapi.ResourceClaim
	Op        string // prepare | unprepare | none
}

func (j vfJob) run() error {
	ctx := klog.NewContext(context.Background(), logr.Discard())
	d, _, err := workerDriver(ctx, j.Dir, j.Inventory, j.Claim, false)
	if err != nil {
		return err
	}
	switch j.Op {
	case "prepare":
		res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{j.Claim})
		return res[j.Claim.UID].Err
	case "unprepare":
		out, _ := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: j.Claim.UID}})
		return out[j.Claim.UID]
	case "none":
		return nil
	}
	return fmt.Errorf("unknown operation %q", j.Op)
}

// workerDriver is the driver of a worker's life on the state below dir,
// as the daemon builds it (VF settings through the PF with netlink,
// vfio-pci binding on this node's sysfs and /dev), with the claim in a
// fake API server, reconciled; with hooks, it has the runtime's hooks too.
func workerDriver(ctx context.Context, dir string, inv devices.Inventory, claim *resourceapi.ResourceClaim, hooks bool) (*dra.Driver, *nri.Plugin, error) {
	store, err := claims.Open(filepath.Join(dir, "state", "checkpoint.json"), claims.Legacy{})
	if err != nil {
		return nil, nil, err
	}
	client := fake.NewClientset(claim)
	opts := dra.Options{NodeName: testNode, Client: client, PluginDir: filepath.Join(dir, "plugin"),
		StateDir: filepath.Join(dir, "state"), CDIDir: filepath.Join(dir, "cdi"), BPFDir: filepath.Join(dir, "bpf"),
		MemifDir: filepath.Join(dir, "memif"), Store: store, Status: status.NewWriter(client),
		PCI: dataplane.PCIBinder{SysfsRoot: "/", DevRoot: "/"}}
	var plugin *nri.Plugin
	if hooks {
		attacher, err := dataplane.NewAttacher()
		if err != nil {
			return nil, nil, err
		}
		plugin = nri.New(nri.Options{Store: store, Attacher: attacher, Status: opts.Status, WriteCDI: dra.WriteCDISpec})
		opts.Runtime = plugin
	}
	d, err := dra.New(opts)
	if err != nil {
		return nil, nil, err
	}
	d.UseInventory(inv)
	if err := d.Reconcile(ctx); err != nil {
		return nil, nil, fmt.Errorf("reconcile: %w", err)
	}
	return d, plugin, nil
}

// vfNode is what fastpath changes of one VF and of its state directory.
type vfNode struct {
	VF                kernelVF // as the PF reports it
	Driver            string
	Netdev, NetdevMAC string // "" while it has none in the host
	VFIOGroup         bool   // /dev/vfio/<group> is there
	// State is the checkpoint's records (but their boot) and the CDI
	// specs, with the state directory as $DIR.
	State string
}

// vfLives runs the lives of the daemon on one VF, each on a state
// directory of its own.
type vfLives struct {
	pf    sriovtest.PF
	vf    sriovtest.VF
	inv   devices.Inventory
	claim *resourceapi.ResourceClaim
}

func (l vfLives) dir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", sriovtest.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// do runs op in a worker on dir, killed at point if it is not "".
func (l vfLives) do(t *testing.T, dir, op, point string) {
	t.Helper()
	killed, err := runWorker("vf", op, vfJob{Dir: dir, Inventory: l.inv, Claim: l.claim, Op: op}, point)
	if err != nil {
		t.Fatal(err)
	}
	if killed != (point != "") {
		t.Fatalf("%s with the fault point %q armed: killed %v", op, point, killed)
	}
}

func (l vfLives) node(t *testing.T, dir string) vfNode {
	t.Helper()
	n := vfNode{VF: readVF(t, l.pf.Name, l.vf.ID), Driver: sriovtest.Driver(l.vf.Address), Netdev: sriovtest.Netdev(l.vf.Address)}
	if n.Netdev != "" {
		link, err := netlink.LinkByName(n.Netdev)
		if err != nil {
			t.Fatal(err)
		}
		n.NetdevMAC = link.Attrs().HardwareAddr.String()
	}
	_, err := os.Stat(fmt.Sprintf("/dev/vfio/%d", l.vf.Group))
	n.VFIOGroup = err == nil
	store, err := claims.Open(filepath.Join(dir, "state", "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	var state []string
	for _, c := range store.Claims() {
		c.BootID = ""
		data, _ := json.Marshal(c)
		state = append(state, "claim "+string(data))
	}
	specs, _ := filepath.Glob(filepath.Join(dir, "cdi", "*"))
	for _, s := range specs {
		data, _ := os.ReadFile(s)
		state = append(state, "cdi "+filepath.Base(s)+" "+string(data))
	}
	slices.Sort(state)
	n.State = strings.ReplaceAll(strings.Join(state, "\n"), dir, "$DIR")
	return n
}

func (l vfLives) want(t *testing.T, dir, when string, want vfNode) {
	t.Helper()
	if got := l.node(t, dir); got != want {
		t.Errorf("%s VF %d (%s) is\n  %+v\nwant\n  %+v", when, l.vf.ID, l.vf.Address, got, want)
	}
}

// killed runs a Prepare killed at point on dir, and checks that it left
// the VF half done: in the kernel neither as before nor as prepared.
func (l vfLives) killed(t *testing.T, dir, point string, initial, prepared vfNode) {
	t.Helper()
	l.do(t, dir, "prepare", point)
	half := l.node(t, dir)
	kernel := func(n vfNode) vfNode { n.State = ""; return n }
	if kernel(half) == kernel(initial) || kernel(half) == kernel(prepared) {
		t.Fatalf("killed at %s, VF %d is %+v: not half prepared (before %+v, prepared %+v)", point, l.vf.ID, half, initial, prepared)
	}
	t.Logf("killed at %s: VF %d on %q, netdev %q, %+v", point, l.vf.ID, half.Driver, half.Netdev, half.VF)
}

// fixMAC gives the VF a MAC through the PF and probes igbvf again so that
// its netdev takes it: a VF whose PF set none gets a new random MAC at each
// probe of igbvf, this one keeps its MAC as an operator's VFs do, and the
// runs compare whole.
func fixMAC(t *testing.T, pf sriovtest.PF, vf sriovtest.VF, mac string) {
	t.Helper()
	l, err := netlink.LinkByName(pf.Name)
	if err != nil {
		t.Fatal(err)
	}
	hw, _ := net.ParseMAC(mac)
	if err := netlink.LinkSetVfHardwareAddr(l, vf.ID, hw); err != nil {
		t.Fatalf("set the MAC of VF %d on %s: %v", vf.ID, pf.Name, err)
	}
	sriovtest.Rebind(t, vf.Address, "igbvf")
	sriovtest.WaitFor(t, 10*time.Second, "the netdev of VF "+vf.Address+" with MAC "+mac, func() bool {
		n := sriovtest.Netdev(vf.Address)
		link, err := netlink.LinkByName(n)
		return n != "" && err == nil && link.Attrs().HardwareAddr.String() == mac
	})
}

// TestSRIOVFaults kills the daemon's Prepare on a real VF between two VF
// settings (at the first and the second) and with the VF unbound from
// igbvf on its way to vfio-pci; started again on the same state, the
// kubelet's retried Prepare leaves the VF as an uninterrupted Prepare
// does (VF settings read back through the PF; on vfio-pci with its group's
// device node), and an Unprepare instead leaves it as it was before the
// claim (VF settings, igbvf with its netdev and MAC).
func TestSRIOVFaults(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vfs := pf.VFsReady(t, 4)
	sriovtest.Modprobe(t, "vfio-pci")
	settings, vfio := vfs[0], vfs[3]
	if vfio.Group < 0 {
		t.Fatalf("VF %s has no IOMMU group", vfio.Address)
	}
	t.Cleanup(func() { pf.ResetVF(t, settings); pf.ResetVF(t, vfio) })
	fixMAC(t, pf, settings, "02:fa:57:00:0f:00")
	fixMAC(t, pf, vfio, "02:fa:57:00:0f:03")
	inv := discoverSRIOV(t)

	for _, c := range []struct {
		name   string
		vf     sriovtest.VF
		config string
		// The points to kill at, each followed by a Prepare retried and
		// by an Unprepare.
		points []string
	}{
		// Four settings, made one after another: VLAN and QoS, TX rate,
		// spoof check, trust; killed after the first and the second.
		{"VF settings", settings, `"interface": {"name": "net1"}, "vf": {"vlan": 60, "qos": 2, "spoofChk": false, "trust": true, "maxTxRateMbps": 200}`,
			[]string{"vf.setting", "vf.setting#2"}},
		{"vfio", vfio, `"mode": "vfio", "vf": {"vlan": 50}`, []string{"vfio.override", "vfio.unbound"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := vfLives{pf: pf, vf: c.vf, inv: inv,
				claim: testClaim("fault", []alloc{{Request: "nic", Device: devices.PCIDeviceName(c.vf.Address)}}, fromClaim(config(c.config)))}
			ref := l.dir(t)
			initial := l.node(t, ref)
			l.do(t, ref, "prepare", "")
			prepared := l.node(t, ref)
			l.do(t, ref, "unprepare", "")
			l.want(t, ref, "after an uninterrupted Prepare and Unprepare", initial)
			if c.vf == vfio && (prepared.Driver != dataplane.VFIODriver || !prepared.VFIOGroup || prepared.Netdev != "") {
				t.Fatalf("an uninterrupted Prepare leaves VF %s on %q, group node %v, netdev %q", c.vf.Address, prepared.Driver, prepared.VFIOGroup, prepared.Netdev)
			}
			t.Logf("prepared: %+v", prepared.VF)

			for _, point := range c.points {
				t.Run(point+"/Prepare retried", func(t *testing.T) {
					dir := l.dir(t)
					l.killed(t, dir, point, initial, prepared)
					l.do(t, dir, "prepare", "")
					l.want(t, dir, "killed at "+point+", after the retried Prepare", prepared)
					if c.vf == vfio {
						if regions := sriovtest.OpenVFIODevice(t, c.vf.Group, c.vf.Address); regions < 1 {
							t.Errorf("the VFIO device has %d regions", regions)
						}
					}
					l.do(t, dir, "unprepare", "")
					l.want(t, dir, "killed at "+point+", after the retried Prepare and Unprepare", initial)
				})
				t.Run(point+"/Unprepare", func(t *testing.T) {
					dir := l.dir(t)
					l.killed(t, dir, point, initial, prepared)
					l.do(t, dir, "unprepare", "")
					l.want(t, dir, "killed at "+point+", after Unprepare", initial)
				})
			}
		})
	}
}

func init() { addWorker[rdmaJob]("rdma") }

// rdmaJob is one life of the daemon that prepares a claim and runs its
// pod's RunPodSandbox, in network namespace NetNS.
type rdmaJob struct {
	Dir       string
	Inventory devices.Inventory
	Claim     *resourceapi.ResourceClaim
	NetNS     string
}

func (j rdmaJob) run() error {
	ctx := klog.NewContext(context.Background(), logr.Discard())
	d, plugin, err := workerDriver(ctx, j.Dir, j.Inventory, j.Claim, true)
	if err != nil {
		return err
	}
	res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{j.Claim})
	if err := res[j.Claim.UID].Err; err != nil {
		return err
	}
	return plugin.AttachPod(ctx, nri.Pod{UID: j.Claim.Status.ReservedFor[0].UID, Namespace: j.Claim.Namespace, Name: j.Claim.Status.ReservedFor[0].Name,
		SandboxID: "sb-killed", NetNS: j.NetNS})
}

// TestSRIOVFaultRDMA kills the daemon in a pod's RunPodSandbox once the
// VF's netdev is in the pod and its soft-RoCE device made again on it
// (attach.rdma). The runtime fails the sandbox and its namespace goes,
// which gives the netdev back to the host under its pod name and removes
// the RDMA device. The daemon started again on the same state gives the
// netdev its name back and makes the RDMA device again on it; the pod's
// next sandbox gets both, and the release leaves the host as before.
func TestSRIOVFaultRDMA(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vf := pf.VFsReady(t, 4)[1]
	t.Cleanup(func() { pf.ResetVF(t, vf) })
	sriovtest.Modprobe(t, "rdma_rxe", "rdma_ucm")
	setRDMAMode(t, "shared")
	rxe := sriovtest.Prefix + "rk"
	addRXE(t, rxe, vf.Netdev)
	inv := discoverSRIOV(t)
	claim := testClaim("rdma-kill", []alloc{{Request: "nic", Device: devices.PCIDeviceName(vf.Address)}},
		fromClaim(config(`"interface": {"name": "net1", "addresses": ["10.78.4.2/24"]}, "rdma": {}`)))
	dir := stateDir(t)
	podNS := netnstest.New(t, sriovtest.Prefix+"-rdma-kill")

	killed, err := runWorker("rdma", "prepare and RunPodSandbox", rdmaJob{Dir: dir, Inventory: inv, Claim: claim, NetNS: podNS}, "attach.rdma")
	if err != nil || !killed {
		t.Fatalf("RunPodSandbox was not killed at attach.rdma: %v", err)
	}
	if !rdmaIn(t, podNS, rxe) || rdmaParent(rxe) != "net1" {
		t.Fatalf("killed at attach.rdma, RDMA device %s is not on net1 in the pod (on %q)", rxe, rdmaParent(rxe))
	}
	if err := netns.DeleteNamed(filepath.Base(podNS)); err != nil {
		t.Fatal(err)
	}
	sriovtest.WaitFor(t, 10*time.Second, "the kernel to give the VF back and remove "+rxe, func() bool {
		return sriovtest.Netdev(vf.Address) != "" && !rdmaInHost(t, rxe)
	})
	t.Logf("the pod's namespace gone, the VF is back as %s, RDMA device %s gone", sriovtest.Netdev(vf.Address), rxe)

	d := startSRIOVDaemon(t, dir, 2, fake.NewClientset(claim), inv)
	sriovtest.WaitFor(t, 10*time.Second, "the VF's netdev "+vf.Netdev+" with RDMA device "+rxe+" on it again", func() bool {
		return sriovtest.Netdev(vf.Address) == vf.Netdev && rdmaParent(rxe) == vf.Netdev
	})

	next := netnstest.New(t, sriovtest.Prefix+"-rdma-next")
	pod := nri.Pod{UID: claim.Status.ReservedFor[0].UID, Namespace: claim.Namespace, Name: claim.Status.ReservedFor[0].Name, SandboxID: "sb-next", NetNS: next}
	if err := d.plugin.AttachPod(d.ctx, pod); err != nil {
		t.Fatalf("the next sandbox: %v", err)
	}
	if !rdmaIn(t, next, rxe) || rdmaParent(rxe) != "net1" {
		t.Fatalf("in the next sandbox RDMA device %s is not on net1 (on %q)", rxe, rdmaParent(rxe))
	}
	wantNodes(t, cdiDevice(t, dir, claim, "nic"), uverbsOf(t, rxe), "/dev/infiniband/rdma_cm")
	if err := d.plugin.DetachPod(d.ctx, pod); err != nil {
		t.Fatal(err)
	}
	unprepare(t, d.ctx, d.kubelet, claim)
	if sriovtest.Netdev(vf.Address) != vf.Netdev || rdmaParent(rxe) != vf.Netdev {
		t.Errorf("after the release the VF is %q with RDMA device %s on %q, want %s with it", sriovtest.Netdev(vf.Address), rxe, rdmaParent(rxe), vf.Netdev)
	}
	if specs, _ := os.ReadDir(filepath.Join(dir, "cdi")); len(specs) != 0 {
		t.Errorf("CDI specs left: %v", specs)
	}
}

// TestSRIOVFaultRDMAExclusive kills the daemon in a pod's RunPodSandbox
// with the node's RDMA subsystem in exclusive mode, once the VF's soft-RoCE
// device is made again on the pod's net1 and, as a 7.x kernel makes it,
// left in the host's namespace, not yet moved into the pod's
// (attach.rdma.made). The sandbox goes on (as CRI-O lets it when a plugin
// dies mid-hook): the daemon started again on the same state finds it
// running at Synchronize, finds the device made and moves it in, so that
// the pod sees it alone and the host does not; the release leaves the
// host as before.
func TestSRIOVFaultRDMAExclusive(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vf := pf.VFsReady(t, 4)[1]
	t.Cleanup(func() { pf.ResetVF(t, vf) })
	sriovtest.Modprobe(t, "rdma_rxe", "rdma_ucm")
	// The mode changes only while the host is the one network namespace:
	// this cleanup runs after the namespaces' own.
	t.Cleanup(func() { setRDMAMode(t, "shared") })
	setRDMAMode(t, "exclusive")
	rxe := sriovtest.Prefix + "rk"
	addRXE(t, rxe, vf.Netdev)
	inv := discoverSRIOV(t)
	claim := testClaim("rdma-kill-excl", []alloc{{Request: "nic", Device: devices.PCIDeviceName(vf.Address)}},
		fromClaim(config(`"interface": {"name": "net1", "addresses": ["10.78.5.2/24"]}, "rdma": {}`)))
	dir := stateDir(t)
	podNS := netnstest.New(t, sriovtest.Prefix+"-rdma-kill-excl")

	killed, err := runWorker("rdma", "prepare and RunPodSandbox", rdmaJob{Dir: dir, Inventory: inv, Claim: claim, NetNS: podNS}, "attach.rdma.made")
	if err != nil || !killed {
		t.Fatalf("RunPodSandbox was not killed at attach.rdma.made (this kernel's rdma_rxe may make the device in the pod's namespace): %v", err)
	}
	if rdmaIn(t, podNS, rxe) || !rdmaInHost(t, rxe) || rdmaParent(rxe) != "net1" {
		t.Fatalf("killed at attach.rdma.made, RDMA device %s: seen from the pod %v, from the host %v, on %q; want from the host alone, on net1",
			rxe, rdmaIn(t, podNS, rxe), rdmaInHost(t, rxe), rdmaParent(rxe))
	}

	pod := nri.Pod{UID: claim.Status.ReservedFor[0].UID, Namespace: claim.Namespace, Name: claim.Status.ReservedFor[0].Name, SandboxID: "sb-killed", NetNS: podNS}
	sandbox := &api.PodSandbox{Id: pod.SandboxID, Uid: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name, Pid: uint32(os.Getpid()),
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: podNS}}}}
	d := startSRIOVDaemon(t, dir, 2, fake.NewClientset(claim), inv, sandbox)
	// Seen from the host, a device in the pod's namespace has no parent
	// in exclusive mode: the pod's view says where it is.
	if !rdmaIn(t, podNS, rxe) || rdmaInHost(t, rxe) || sriovtest.Netdev(vf.Address) != "" {
		t.Fatalf("after Synchronize, RDMA device %s: seen from the pod %v, from the host %v (VF's netdev in the host: %q); want from the pod alone",
			rxe, rdmaIn(t, podNS, rxe), rdmaInHost(t, rxe), sriovtest.Netdev(vf.Address))
	}
	out, err := inContainer(t.Context(), podNS, cdiDevice(t, dir, claim, "nic"), "ibv_devinfo -l")
	if err != nil || !strings.Contains(out, rxe) || !strings.Contains(out, "1 HCA found") {
		t.Errorf("ibv_devinfo -l in the pod (%v): want %s alone:\n%s", err, rxe, out)
	}
	if err := d.plugin.DetachPod(d.ctx, pod); err != nil {
		t.Fatal(err)
	}
	unprepare(t, d.ctx, d.kubelet, claim)
	sriovtest.WaitFor(t, 10*time.Second, "RDMA device "+rxe+" again on "+vf.Netdev+" in the host", func() bool {
		return sriovtest.Netdev(vf.Address) == vf.Netdev && rdmaInHost(t, rxe) && rdmaParent(rxe) == vf.Netdev
	})
	if specs, _ := os.ReadDir(filepath.Join(dir, "cdi")); len(specs) != 0 {
		t.Errorf("CDI specs left: %v", specs)
	}
}
