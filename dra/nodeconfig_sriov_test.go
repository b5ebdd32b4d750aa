//go:build sriov

package dra

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/devices/filter"
	ncv1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	fpv1 "github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/migrate"
	"github.com/fastpath-dra/fastpath/dra/nodeconfig"
	"github.com/fastpath-dra/fastpath/dra/validate"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

type staticConfigs []*ncv1.FastpathNodeConfig

func (s *staticConfigs) List(context.Context) ([]*ncv1.FastpathNodeConfig, error) { return *s, nil }

type noSelection struct{}

func (noSelection) Select(devices.Selection) error { return nil }
func (noSelection) Rediscover()                    {}

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

// TestSRIOVMigratedPolicy: the SR-IOV Network Operator's policies for the
// igb PF (VFs 0-1 netdevice, 2-3 vfio-pci, MTU 9000), through fastpathd
// migrate, give a FastpathNodeConfig that makes the 4 VFs, binds 2-3 to
// vfio-pci and 0-1 to igbvf, and sets the PF's MTU, said in its status;
// the VFs' resource names are the policies'.
func TestSRIOVMigratedPolicy(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	sriovtest.Modprobe(t, "vfio-pci")
	link, err := netlink.LinkByName(pf.Name)
	if err != nil {
		t.Fatal(err)
	}
	mtu := link.Attrs().MTU
	pf.SetNumVFs(t, 0)
	t.Cleanup(func() {
		if err := netlink.LinkSetMTU(link, mtu); err != nil {
			t.Errorf("MTU of %s back to %d: %v", pf.Name, mtu, err)
		}
		pf.SetNumVFs(t, 0)
		pf.SetNumVFs(t, 4) // as the other sriov tests find the PF
	})
	policies := fmt.Sprintf(`apiVersion: sriovnetwork.openshift.io/v1
kind: SriovNetworkNodePolicy
metadata: {name: igb-netdev, namespace: sriov-network-operator}
spec:
  resourceName: igb_netdev
  nodeSelector: {pool: igb}
  numVfs: 4
  mtu: 9000
  nicSelector: {vendor: "8086", pfNames: ["%[1]s#0-1"]}
  deviceType: netdevice
---
apiVersion: sriovnetwork.openshift.io/v1
kind: SriovNetworkNodePolicy
metadata: {name: igb-dpdk, namespace: sriov-network-operator}
spec:
  resourceName: igb_dpdk
  nodeSelector: {pool: igb}
  numVfs: 4
  mtu: 9000
  nicSelector: {pfNames: ["%[1]s#2-3"]}
  deviceType: vfio-pci
`, pf.Name)
	docs, err := validate.SplitManifests("policies.yaml", []byte(policies))
	if err != nil {
		t.Fatal(err)
	}
	res := migrate.Convert(migrate.InputOf(docs), migrate.Options{})
	if len(res.NodeConfigs) != 1 {
		t.Fatalf("migrate gave %d FastpathNodeConfigs, want 1; report: %v", len(res.NodeConfigs), res.Report)
	}
	cfg := res.NodeConfigs[0]
	cfg.Generation = 1
	t.Logf("migrated: %+v", cfg.Spec.VFs)

	_, ctx := ktesting.NewTestContext(t)
	st := statusOf{}
	c := nodeconfig.New(nodeconfig.Options{NodeName: testNode, Configs: &staticConfigs{cfg},
		NodeLabels: func() (map[string]string, bool) { return map[string]string{"pool": "igb"}, true },
		Discovery:  noSelection{}, SetPools: func([]fpv1.IPPool) {},
		VFs: dataplane.PCIBinder{SysfsRoot: "/", DevRoot: "/"}, Links: dataplane.PFLinks{}, SysfsRoot: "/",
		Prepared: func(string) []string { return nil }, Status: st})
	c.Reconcile(ctx)
	if reason, msg := st.applied(cfg.Name); reason != ncv1.ReasonApplied {
		t.Fatalf("the migrated policy: %s: %s", reason, msg)
	}
	vfs := pf.VFs(t)
	if len(vfs) != 4 {
		t.Fatalf("the PF has %d VFs, want 4", len(vfs))
	}
	for _, vf := range vfs {
		want := "igbvf"
		if vf.ID >= 2 {
			want = "vfio-pci"
		}
		sriovtest.WaitFor(t, 10*time.Second, fmt.Sprintf("VF %d on %s", vf.ID, want), func() bool { return sriovtest.Driver(vf.Address) == want })
	}
	if l, err := netlink.LinkByName(pf.Name); err != nil || l.Attrs().MTU != 9000 {
		t.Errorf("the PF's MTU: %v, want 9000", err)
	}
	if got := st[cfg.Name].VFs; len(got) != 1 || got[0].NumVFs != 4 || got[0].MTU != 9000 {
		t.Errorf("status %+v, want 4 VFs and MTU 9000", got)
	}
	// The VFs' resource names, as the node publishes them.
	names := map[string]string{}
	for _, rn := range cfg.Spec.ResourceNames {
		for _, vf := range vfs {
			f, err := filter.Compile(rn.Filter)
			if err != nil {
				t.Fatal(err)
			}
			dev := devices.Device{Kind: devices.KindSRIOVVF, VF: &devices.VF{PFName: pf.Name, PFPCIAddress: pf.Address, ID: vf.ID}}
			if ok, err := f.Admits(ctx, devices.DriverName, dev.Attributes()); err == nil && ok && names[vf.Address] == "" {
				names[vf.Address] = rn.Name
			}
		}
	}
	for _, vf := range vfs {
		want := "openshift.io/igb_netdev"
		if vf.ID >= 2 {
			want = "openshift.io/igb_dpdk"
		}
		if names[vf.Address] != want {
			t.Errorf("VF %d: resource name %q, want %s", vf.ID, names[vf.Address], want)
		}
	}
}
