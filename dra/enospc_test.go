package dra

import (
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/test/fulldisk"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// statePF is a PF that keeps its VFs' settings, as a real one does across
// a restart of the daemon.
type statePF struct {
	mu  sync.Mutex
	vfs map[string]dataplane.VFState
}

func newStatePF() *statePF {
	return &statePF{vfs: map[string]dataplane.VFState{
		"ens1f0/0": {VLANProto: "802.1q", MAC: "00:00:00:00:00:00", LinkState: "auto"},
		"ens1f0/1": {VLANProto: "802.1q", MAC: "00:00:00:00:00:00", LinkState: "auto"},
	}}
}

func (p *statePF) set(pf string, vf int, f func(*dataplane.VFState)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := fmt.Sprintf("%s/%d", pf, vf)
	st, ok := p.vfs[k]
	if !ok {
		return fmt.Errorf("%w: PF %s has no VF %d", dataplane.ErrDeviceGone, pf, vf)
	}
	f(&st)
	p.vfs[k] = st
	return nil
}

func (p *statePF) snapshot() map[string]dataplane.VFState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.vfs)
}

func (p *statePF) VFState(pf string, vf int) (dataplane.VFState, error) {
	var st dataplane.VFState
	err := p.set(pf, vf, func(s *dataplane.VFState) { st = *s })
	return st, err
}
func (p *statePF) SetVLAN(pf string, vf, vlan, qos int, proto string) error {
	return p.set(pf, vf, func(s *dataplane.VFState) { s.VLAN, s.QoS, s.VLANProto = vlan, qos, proto })
}
func (p *statePF) SetMAC(pf string, vf int, mac net.HardwareAddr) error {
	return p.set(pf, vf, func(s *dataplane.VFState) { s.MAC = mac.String() })
}
func (p *statePF) SetRate(pf string, vf, lo, hi int) error {
	return p.set(pf, vf, func(s *dataplane.VFState) { s.MinTxRate, s.MaxTxRate = lo, hi })
}
func (p *statePF) SetSpoofChk(pf string, vf int, on bool) error {
	return p.set(pf, vf, func(s *dataplane.VFState) { s.SpoofChk = on })
}
func (p *statePF) SetTrust(pf string, vf int, on bool) error {
	return p.set(pf, vf, func(s *dataplane.VFState) { s.Trust = on })
}
func (p *statePF) SetLinkState(pf string, vf int, state string) error {
	return p.set(pf, vf, func(s *dataplane.VFState) { s.LinkState = state })
}

// diskNode is a node whose checkpoint writes fail from the n-th on, as
// they do when the disk fills up, and whose daemon can be started again
// on the same state.
type diskNode struct {
	dir, sysfs string
	pf         *statePF
	kernel     *sysfsfixture.Kernel
	client     *fake.Clientset
	fulldisk.Disk
}

func newDiskNode(t *testing.T, claim *resourceapi.ResourceClaim) *diskNode {
	t.Helper()
	n := &diskNode{dir: t.TempDir(), sysfs: sysfsfixture.TempDir(t), pf: newStatePF(), client: fake.NewClientset(claim)}
	if err := sysfsfixture.E810().Write(n.sysfs); err != nil {
		t.Fatal(err)
	}
	kernel, err := sysfsfixture.StartKernel(n.sysfs, n.sysfs, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kernel.Stop)
	n.kernel = kernel
	return n
}

// start is the daemon starting on the node's state: the store opened from
// its file, and the driver reconciling it.
func (n *diskNode) start(t *testing.T) *Driver {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	store, err := claims.Open(filepath.Join(n.dir, "state", "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatalf("the daemon does not start on what a full disk left: %v", err)
	}
	n.Wrap(store)
	d, err := New(Options{NodeName: testNode, Client: n.client, PluginDir: filepath.Join(n.dir, "plugin"), StateDir: filepath.Join(n.dir, "state"),
		CDIDir: filepath.Join(n.dir, "cdi"), Store: store, Status: status.NewWriter(n.client), PF: n.pf, BootID: "boot-1",
		PCI: dataplane.PCIBinder{SysfsRoot: n.sysfs, DevRoot: n.sysfs, Timeout: 2 * time.Second}, MemifDir: filepath.Join(n.dir, "memif")})
	if err != nil {
		t.Fatal(err)
	}
	d.UseInventory(testInventory(t))
	if err := d.Reconcile(ctx); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return d
}

// state is what Prepare changes on the node.
func (n *diskNode) state(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("vfs=%v vfio=%s cdi=%s claims=%s", n.pf.snapshot(), n.kernel.Driver("0000:3b:01.1"),
		listDir(filepath.Join(n.dir, "cdi")), listDir(filepath.Join(n.dir, "state", "claims")))
}

func listDir(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && path != dir {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// TestFullDisk fails every checkpoint write of a claim's Prepare and
// Unprepare in turn, as a full disk would (ENOSPC), from that write on:
// the call fails, and the daemon started again on what is on the disk,
// with room again, prepares and unprepares the claim exactly as without
// the failure.
func TestFullDisk(t *testing.T) {
	claim := testClaim("disk", []alloc{{Request: "nic", Device: vfNetdev}, {Request: "dpdk", Device: vfNetdev2}},
		fromClaimFor("nic", config(`"interface": {"name": "net1", "mac": "02:00:00:00:00:0a"}, "vf": {"vlan": 10, "spoofChk": true}`)),
		fromClaimFor("dpdk", config(`"mode": "vfio", "vf": {"vlan": 20}`)))
	_, ctx := ktesting.NewTestContext(t)
	refs := []kubeletplugin.NamespacedObject{{UID: claim.UID}}
	prepare := func(d *Driver) error {
		res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
		return res[claim.UID].Err
	}
	unprepare := func(d *Driver) error {
		out, _ := d.UnprepareResourceClaims(ctx, refs)
		return out[claim.UID]
	}

	// Uninterrupted: the states to reach, and how many writes it takes.
	ref := newDiskNode(t, claim)
	d := ref.start(t)
	initial := ref.state(t)
	if err := prepare(d); err != nil {
		t.Fatal(err)
	}
	prepared, prepareWrites := ref.state(t), ref.Writes
	if err := unprepare(d); err != nil {
		t.Fatal(err)
	}
	if got := ref.state(t); got != initial {
		t.Fatalf("an uninterrupted Prepare and Unprepare leave %s, not %s", got, initial)
	}
	total := ref.Writes
	t.Logf("Prepare writes the checkpoint %d times, Unprepare %d", prepareWrites, total-prepareWrites)

	for fail := 1; fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d", fail), func(t *testing.T) {
			n := newDiskNode(t, claim)
			d := n.start(t)
			n.Writes = 0
			if fail <= prepareWrites {
				n.FailFrom = fail
				if err := prepare(d); err == nil {
					t.Fatalf("Prepare succeeded with write %d failing", fail)
				}
				n.FailFrom = 0
				d = n.start(t)
				if err := prepare(d); err != nil {
					t.Fatalf("Prepare after a restart: %v", err)
				}
				if got := n.state(t); got != prepared {
					t.Fatalf("prepared after a restart: %s, want %s", got, prepared)
				}
			} else {
				if err := prepare(d); err != nil {
					t.Fatal(err)
				}
				n.FailFrom = fail
				if err := unprepare(d); err == nil {
					t.Fatalf("Unprepare succeeded with write %d failing", fail)
				}
				n.FailFrom = 0
				// The kubelet calls Unprepare again until it succeeds.
				d = n.start(t)
			}
			if err := unprepare(d); err != nil {
				t.Fatalf("Unprepare: %v", err)
			}
			if got := n.state(t); got != initial {
				t.Fatalf("unprepared: %s, want %s", got, initial)
			}
		})
	}
}
