//go:build sriov

package dra

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	ncv1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	fpv1 "github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/nodeconfig"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

type staticConfigs []*ncv1.FastpathNodeConfig

func (s *staticConfigs) List(context.Context) ([]*ncv1.FastpathNodeConfig, error) { return *s, nil }

type noSelection struct{}

func (noSelection) Select(devices.Selection) error { return nil }

type statusOf map[string]*ncv1.NodeStatus

func (s statusOf) WriteNodeStatus(_ context.Context, config string, st *ncv1.NodeStatus) error {
	s[config] = st
	return nil
}

func (s statusOf) applied(config string) (string, string) {
	for _, c := range s[config].Conditions {
		if c.Type == ncv1.ConditionApplied {
			return c.Reason, c.Message
		}
	}
	return "", ""
}

// TestSRIOVNodeConfigVFs: a FastpathNodeConfig gives the igb PF 2 VFs;
// asked for 4 while a claim holds one of them, the node keeps 2 and says
// which claim it waits for; once the claim is unprepared, it makes 4, on
// vfio-pci as asked, then on igbvf again; 8 (above sriov_totalvfs, 7) is
// refused naming the total, the VFs as they were.
func TestSRIOVNodeConfigVFs(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	sriovtest.Modprobe(t, "vfio-pci")
	pf.SetNumVFs(t, 0)
	t.Cleanup(func() { pf.SetNumVFs(t, 4) }) // as the other sriov tests find the PF
	_, ctx := ktesting.NewTestContext(t)
	configs := &staticConfigs{}
	st := statusOf{}
	var d *testDriver
	c := nodeconfig.New(nodeconfig.Options{NodeName: testNode, Configs: configs,
		NodeLabels: func() (map[string]string, bool) { return map[string]string{"pool": "igb"}, true },
		Discovery:  noSelection{}, SetPools: func([]fpv1.IPPool) {}, VFs: dataplane.PCIBinder{SysfsRoot: "/", DevRoot: "/"}, SysfsRoot: "/",
		Prepared: func(addr string) []string {
			if d == nil {
				return nil
			}
			var out []string
			for _, cl := range d.store.Claims() {
				for _, dev := range cl.Devices {
					if dev.PFPCIAddress == addr {
						out = append(out, cl.String())
					}
				}
			}
			return out
		},
		Status: st})
	set := func(gen int64, n int, driver string) {
		*configs = staticConfigs{{ObjectMeta: metav1.ObjectMeta{Name: "igb", Generation: gen}, Spec: ncv1.FastpathNodeConfigSpec{
			NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "igb"}},
			VFs:          []ncv1.VFs{{PF: ncv1.PFSelector{Name: pf.Name}, NumVFs: n, Driver: driver}}}}}
		c.Reconcile(ctx)
	}

	set(1, 2, "")
	if reason, msg := st.applied("igb"); reason != ncv1.ReasonApplied || len(pf.VFs(t)) != 2 {
		t.Fatalf("2 VFs asked: %s: %s; the PF has %d", reason, msg, len(pf.VFs(t)))
	}
	vfs := pf.SetNumVFs(t, 2) // waits for igbvf and the netdevs
	t.Logf("the object made VFs %s and %s", vfs[0].Address, vfs[1].Address)

	// A claim holds VF 1.
	claim := testClaim("held", []alloc{{Request: "nic", Device: devices.PCIDeviceName(vfs[1].Address)}}, fromClaim(config(`"interface": {"name": "net1"}`)))
	var k *fakeKubelet
	d, k, ctx = startSRIOVDriver(t, &fakeObject{claim})
	if e := prepare(t, ctx, k, claim); e != "" {
		t.Fatalf("prepare: %s", e)
	}
	set(2, 4, "vfio-pci")
	reason, msg := st.applied("igb")
	if reason != ncv1.ReasonVFsInUse || !strings.Contains(msg, claim.Namespace+"/"+claim.Name) || len(pf.VFs(t)) != 2 {
		t.Errorf("4 VFs asked while %s holds one: %s: %s; the PF has %d, want 2 kept", claim.Name, reason, msg, len(pf.VFs(t)))
	}
	t.Logf("while prepared: %s: %s", reason, msg)

	unprepare(t, ctx, k, claim)
	c.Reconcile(ctx)
	now := pf.VFs(t)
	if reason, msg := st.applied("igb"); reason != ncv1.ReasonApplied || len(now) != 4 || st["igb"].VFs[0].NumVFs != 4 {
		t.Fatalf("once unprepared: %s: %s; the PF has %d VFs, status %+v", reason, msg, len(now), st["igb"].VFs)
	}
	for _, vf := range now {
		if drv := sriovtest.Driver(vf.Address); drv != "vfio-pci" {
			t.Errorf("VF %s on %q, want vfio-pci", vf.Address, drv)
		}
	}
	t.Logf("once unprepared: 4 VFs on vfio-pci")

	set(3, 8, "")
	if reason, msg := st.applied("igb"); reason != ncv1.ReasonInvalid || !strings.Contains(msg, "supports 7 VFs") || len(pf.VFs(t)) != 4 {
		t.Errorf("8 VFs asked: %s: %s; the PF has %d, want 4 kept", reason, msg, len(pf.VFs(t)))
	} else {
		t.Logf("8 VFs asked: %s", msg)
	}
	set(4, 4, "igbvf")
	if reason, msg := st.applied("igb"); reason != ncv1.ReasonApplied {
		t.Errorf("back to igbvf: %s: %s", reason, msg)
	}
	pf.SetNumVFs(t, 4) // waits for igbvf and the netdevs
}
