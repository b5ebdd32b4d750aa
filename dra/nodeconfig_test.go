package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	ncv1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	fpv1 "github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/nodeconfig"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// readHookPF is a PF that runs onRead when Prepare reads a VF's state.
type readHookPF struct {
	*fakePF
	onRead func()
}

func (p *readHookPF) VFState(pf string, vf int) (dataplane.VFState, error) {
	if f := p.onRead; f != nil {
		p.onRead = nil
		f()
	}
	return p.fakePF.VFState(pf, vf)
}

// fixtureVFs are the VFs of the E810 fixture's PF 0000:3b:00.0 as the
// node's configuration changes them: fewer VFs remove the others from the
// fixture's sysfs, after which onSet runs.
type fixtureVFs struct {
	sysfs string
	num   int
	onSet func()
}

const fixturePF = "0000:3b:00.0"

func (f *fixtureVFs) NumVFs(string) (int, error)   { return f.num, nil }
func (f *fixtureVFs) TotalVFs(string) (int, error) { return 4, nil }
func (f *fixtureVFs) SetNumVFs(_ context.Context, _ string, n int) error {
	for i := n; i < f.num; i++ {
		if err := os.Remove(filepath.Join(f.sysfs, "sys", "bus", "pci", "devices", fmt.Sprintf("0000:3b:01.%d", i))); err != nil {
			return err
		}
	}
	f.num = n
	if set := f.onSet; set != nil {
		f.onSet = nil
		set()
	}
	return nil
}
func (f *fixtureVFs) VFAddresses(string) ([]string, error) { return nil, nil }
func (f *fixtureVFs) Driver(string) (string, error)        { return "iavf", nil }
func (f *fixtureVFs) BindVF(context.Context, string, string) error {
	return errors.New("not asked for")
}

type nodeConfigStatus map[string]*ncv1.NodeStatus

func (s nodeConfigStatus) WriteNodeStatus(_ context.Context, config string, st *ncv1.NodeStatus) error {
	s[config] = st
	return nil
}

func (s nodeConfigStatus) applied() (reason, msg string) {
	for _, c := range s["pool"].Conditions {
		if c.Type == ncv1.ConditionApplied {
			return c.Reason, c.Message
		}
	}
	return "", ""
}

type oneConfig []*ncv1.FastpathNodeConfig

func (c oneConfig) List(context.Context) ([]*ncv1.FastpathNodeConfig, error) { return c, nil }

type anySelection struct{}

func (anySelection) Select(devices.Selection) error { return nil }
func (anySelection) Rediscover()                    {}

// TestNodeConfigVFsWhilePreparing: the node's configuration asks for no
// VFs on the PF while a claim on one of them is being prepared, at the
// moment Prepare has read the VF and not yet recorded the claim: the PF
// keeps its VFs, and the configuration's status says a claim on it is
// being prepared, then, once it is prepared, names the claim. The other
// way round, a Prepare that comes while the VFs are being changed waits
// for the change, and then refuses the VF that went, recording nothing.
func TestNodeConfigVFsWhilePreparing(t *testing.T) {
	sysfs := sysfsfixture.TempDir(t)
	if err := sysfsfixture.E810().Write(sysfs); err != nil {
		t.Fatal(err)
	}
	pf := &readHookPF{fakePF: &fakePF{}}
	first := testClaim("first", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"name": "net1"}, "vf": {"vlan": 10}`)))
	second := testClaim("second", []alloc{{Request: "nic", Device: vfNetdev2}}, fromClaim(config(`"interface": {"name": "net1"}, "vf": {"vlan": 20}`)))
	d, _, ctx := startDriver(t, pf, dataplane.PCIBinder{SysfsRoot: sysfs, DevRoot: sysfs, Timeout: 2 * time.Second}, testInventory(t),
		&fakeObject{first}, &fakeObject{second})
	prepare := func(ctx context.Context, c *resourceapi.ResourceClaim) error {
		res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
		return res[c.UID].Err
	}

	vfs := &fixtureVFs{sysfs: sysfs, num: 4}
	st := nodeConfigStatus{}
	cfg := &ncv1.FastpathNodeConfig{ObjectMeta: metav1.ObjectMeta{Name: "pool", Generation: 1}, Spec: ncv1.FastpathNodeConfigSpec{
		NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "e810"}},
		VFs:          []ncv1.VFs{{PF: ncv1.PFSelector{PCIAddress: fixturePF}, NumVFs: 0}}}}
	nc := nodeconfig.New(nodeconfig.Options{NodeName: testNode, Configs: oneConfig{cfg},
		NodeLabels: func() (map[string]string, bool) { return map[string]string{"pool": "e810"}, true },
		Discovery:  anySelection{}, SetPools: func([]fpv1.IPPool) {}, VFs: vfs, SysfsRoot: sysfs,
		Prepared: func(addr string) []string {
			var out []string
			for _, c := range d.store.Claims() {
				for _, dev := range c.Devices {
					if dev.PFPCIAddress == addr || dev.PCIAddress == addr {
						out = append(out, c.String())
					}
				}
			}
			return out
		},
		LockPF: func(addr string) (func(), bool) { return TryLockPF(d.store, addr) },
		Status: st})

	// The node's configuration looks while Prepare reads the VF.
	pf.onRead = func() { nc.Reconcile(ctx) }
	if err := prepare(ctx, first); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	reason, msg := st.applied()
	t.Logf("while %s was being prepared: %s: %s", first.Name, reason, msg)
	if vfs.num != 4 {
		t.Fatalf("the PF's VFs went to %d while a claim on one was being prepared; %s is recorded prepared on VF %s, which is gone",
			vfs.num, first.Name, vfNetdev)
	}
	if reason != ncv1.ReasonVFsInUse || !strings.Contains(msg, "a claim on it is being prepared") {
		t.Errorf("while a claim was being prepared: %s: %s", reason, msg)
	}
	nc.Reconcile(ctx)
	if reason, msg := st.applied(); reason != ncv1.ReasonVFsInUse || !strings.Contains(msg, "claim default/first holds") || vfs.num != 4 {
		t.Errorf("once prepared: %s: %s; the PF has %d VFs, want 4", reason, msg, vfs.num)
	}

	// Unprepared, the VFs change; a Prepare that comes meanwhile waits.
	unprepareDirect(t, ctx, d, first)
	var waited error
	vfs.onSet = func() {
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		waited = prepare(short, second)
	}
	nc.Reconcile(ctx)
	if reason, msg := st.applied(); reason != ncv1.ReasonApplied || vfs.num != 0 {
		t.Fatalf("with no claim: %s: %s; the PF has %d VFs", reason, msg, vfs.num)
	}
	if !errors.Is(waited, context.DeadlineExceeded) {
		t.Errorf("a Prepare while the VFs changed: %v, want it to wait for the change", waited)
	}
	err := prepare(ctx, second)
	if err == nil || !errors.Is(err, dataplane.ErrDeviceGone) || !strings.Contains(err.Error(), "claim default/second") {
		t.Errorf("a Prepare after the VFs changed: %v, want the VF gone", err)
	}
	if _, ok := d.store.Get(claims.Key{Driver: claims.DriverFastpath, UID: second.UID}); ok {
		t.Error("the claim on a VF that went is recorded")
	}
}

func unprepareDirect(t *testing.T, ctx context.Context, d *testDriver, c *resourceapi.ResourceClaim) {
	t.Helper()
	if err := d.unprepare(ctx, claims.Key{Driver: claims.DriverFastpath, UID: c.UID}); err != nil {
		t.Fatal(err)
	}
}
