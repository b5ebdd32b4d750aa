package nodeconfig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/devices"
	v1alpha1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	fpv1 "github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

type fakeConfigs []*v1alpha1.FastpathNodeConfig

func (f *fakeConfigs) List(context.Context) ([]*v1alpha1.FastpathNodeConfig, error) { return *f, nil }

type fakeDiscovery struct {
	selections  []devices.Selection
	rediscovers int
}

func (f *fakeDiscovery) Rediscover() { f.rediscovers++ }

func (f *fakeDiscovery) Select(s devices.Selection) error {
	if strings.Contains(s.Filter, "((") {
		return fmt.Errorf("%w: filter %q: does not compile", devices.ErrBadOptions, s.Filter)
	}
	f.selections = append(f.selections, s)
	return nil
}

// fakeVFs is one PF's sysfs: its VF count, its total, its VFs' drivers.
type fakeVFs struct {
	num, total int
	drivers    []string
	sets       []int
	binds      int
}

func (f *fakeVFs) NumVFs(string) (int, error)   { return f.num, nil }
func (f *fakeVFs) TotalVFs(string) (int, error) { return f.total, nil }
func (f *fakeVFs) SetNumVFs(_ context.Context, _ string, n int) error {
	if n > f.total {
		return errors.New("too many")
	}
	f.num, f.drivers = n, make([]string, n)
	for i := range f.drivers {
		f.drivers[i] = "igbvf"
	}
	f.sets = append(f.sets, n)
	return nil
}

func (f *fakeVFs) VFAddresses(string) ([]string, error) {
	var out []string
	for i := range f.num {
		out = append(out, fmt.Sprintf("vf%d", i))
	}
	return out, nil
}

func (f *fakeVFs) Driver(addr string) (string, error) {
	var i int
	_, _ = fmt.Sscanf(addr, "vf%d", &i)
	return f.drivers[i], nil
}

func (f *fakeVFs) BindVF(_ context.Context, addr, driver string) error {
	var i int
	_, _ = fmt.Sscanf(addr, "vf%d", &i)
	f.drivers[i] = driver
	f.binds++
	return nil
}

// fakeLinks is the PF netdev ens1f0.
type fakeLinks struct {
	mtu  int
	up   bool
	sets []string
}

func (f *fakeLinks) Link(name string) (int, bool, error) {
	if name != "ens1f0" {
		return 0, false, fmt.Errorf("no netdev %s", name)
	}
	return f.mtu, f.up, nil
}

func (f *fakeLinks) SetMTU(_ string, mtu int) error {
	f.mtu = mtu
	f.sets = append(f.sets, fmt.Sprintf("mtu %d", mtu))
	return nil
}

func (f *fakeLinks) SetUp(_ string, up bool) error {
	f.up = up
	f.sets = append(f.sets, fmt.Sprintf("up %t", up))
	return nil
}

type fakeStatus map[string]*v1alpha1.NodeStatus

func (f fakeStatus) WriteNodeStatus(_ context.Context, config string, st *v1alpha1.NodeStatus) error {
	if st == nil {
		delete(f, config)
		return nil
	}
	f[config] = st
	return nil
}

// applied is the reason and message of the node's condition Applied in
// config's status.
func (f fakeStatus) applied(t *testing.T, config string) (string, string) {
	t.Helper()
	st, ok := f[config]
	if !ok {
		t.Fatalf("no status entry in %s", config)
	}
	c := appliedCondition(st)
	return c.Reason, c.Message
}

func appliedCondition(st *v1alpha1.NodeStatus) metav1.Condition {
	for _, c := range st.Conditions {
		if c.Type == v1alpha1.ConditionApplied {
			return c
		}
	}
	return metav1.Condition{}
}

// pfSysfs is a sysfs with the netdev ens1f0 of PF 0000:3b:00.0.
func pfSysfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dev := filepath.Join(root, "sys", "devices", "pci0000:3a", "0000:3b:00.0")
	for _, dir := range []string{filepath.Join(dev, "net", "ens1f0"), filepath.Join(root, "sys", "class", "net"), filepath.Join(root, "sys", "bus", "pci", "devices")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"sys/class/net/ens1f0":             "../../devices/pci0000:3a/0000:3b:00.0/net/ens1f0",
		"sys/bus/pci/devices/0000:3b:00.0": "../../../devices/pci0000:3a/0000:3b:00.0",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func config(name string, gen int64, labels map[string]string, spec v1alpha1.FastpathNodeConfigSpec) *v1alpha1.FastpathNodeConfig {
	spec.NodeSelector = metav1.LabelSelector{MatchLabels: labels}
	return &v1alpha1.FastpathNodeConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: gen}, Spec: spec}
}

// TestReconcile walks a node through the objects selecting it: one
// applied (filter, pools, VFs), its VFs kept while a claim holds one and
// changed after, an overlap that applies neither, a request for more VFs
// than the PF has and a filter that does not compile (nothing changes), and
// the object gone (the flags again, the entry removed).
func TestReconcile(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	labels := map[string]string{"pool": "a"}
	configs := &fakeConfigs{}
	disc := &fakeDiscovery{}
	vfs := &fakeVFs{total: 7}
	st := fakeStatus{}
	var pools [][]fpv1.IPPool
	var holders []string
	base := devices.Selection{Filter: "flags"}
	c := New(Options{NodeName: "node-a", Configs: configs, NodeLabels: func() (map[string]string, bool) { return labels, true },
		Base: base, Discovery: disc, SetPools: func(p []fpv1.IPPool) { pools = append(pools, p) }, VFs: vfs, SysfsRoot: pfSysfs(t),
		Prepared: func(string) []string { return holders }, Status: st})

	c.Reconcile(ctx)
	if len(disc.selections) != 0 || len(st) != 0 {
		t.Fatalf("no object: selections %v, status %v; want the flags left as they are", disc.selections, st)
	}

	filter := `device.attributes["fastpath.dev"].pfName == "ens1f0"`
	a := config("a", 1, labels, v1alpha1.FastpathNodeConfigSpec{Filter: &filter, IPPools: []fpv1.IPPool{{Name: "p", Subnet: "10.9.0.0/24"}},
		VFs: []v1alpha1.VFs{{PF: v1alpha1.PFSelector{Name: "ens1f0"}, NumVFs: 4, Driver: "vfio-pci"}}})
	*configs = fakeConfigs{a}
	c.Reconcile(ctx)
	if reason, msg := st.applied(t, "a"); reason != v1alpha1.ReasonApplied {
		t.Fatalf("applied: %s: %s", reason, msg)
	}
	if len(disc.selections) != 1 || disc.selections[0].Filter != filter || len(pools) != 1 || pools[0][0].Subnet != "10.9.0.0/24" {
		t.Errorf("selections %v, pools %v", disc.selections, pools)
	}
	if vfs.num != 4 || vfs.drivers[3] != "vfio-pci" || st["a"].VFs[0].NumVFs != 4 || st["a"].VFs[0].PCIAddress != "0000:3b:00.0" {
		t.Errorf("VFs %d on %v, status %+v", vfs.num, vfs.drivers, st["a"].VFs)
	}
	c.Reconcile(ctx)
	if len(disc.selections) != 1 || len(vfs.sets) != 1 {
		t.Errorf("the same object applied twice: selections %d, VF changes %d", len(disc.selections), len(vfs.sets))
	}

	// 4 VFs to 6 while a claim holds one: all but the VFs; then the VFs.
	a = config("a", 2, labels, a.Spec)
	a.Spec.VFs = []v1alpha1.VFs{{PF: v1alpha1.PFSelector{PCIAddress: "0000:3b:00.0"}, NumVFs: 6}}
	*configs = fakeConfigs{a}
	holders = []string{"default/web"}
	c.Reconcile(ctx)
	if reason, msg := st.applied(t, "a"); reason != v1alpha1.ReasonVFsInUse || !strings.Contains(msg, "default/web") || vfs.num != 4 {
		t.Errorf("with a VF prepared: %s: %s; %d VFs", reason, msg, vfs.num)
	}
	holders = nil
	c.Reconcile(ctx)
	if reason, msg := st.applied(t, "a"); reason != v1alpha1.ReasonApplied || vfs.num != 6 || st["a"].ObservedGeneration != 2 {
		t.Errorf("once none is prepared: %s: %s; %d VFs, generation %d", reason, msg, vfs.num, st["a"].ObservedGeneration)
	}

	// A second object selects the node: neither applies.
	other := "true"
	b := config("b", 1, labels, v1alpha1.FastpathNodeConfigSpec{Filter: &other})
	*configs = fakeConfigs{a, b}
	c.Reconcile(ctx)
	for name, want := range map[string]string{"a": "FastpathNodeConfig b", "b": "FastpathNodeConfig a"} {
		if reason, msg := st.applied(t, name); reason != v1alpha1.ReasonConflict || !strings.Contains(msg, want) {
			t.Errorf("%s: %s: %s, want a conflict naming %s", name, reason, msg, want)
		}
	}
	if len(disc.selections) != 1 {
		t.Errorf("an overlap changed the selection: %v", disc.selections[1:])
	}

	// More VFs than the PF has, and a filter that does not compile:
	// nothing changes.
	bad := "(("
	for _, spec := range []v1alpha1.FastpathNodeConfigSpec{
		{Filter: &other, VFs: []v1alpha1.VFs{{PF: v1alpha1.PFSelector{Name: "ens1f0"}, NumVFs: 64}}},
		{Filter: &bad},
		{VFs: []v1alpha1.VFs{{PF: v1alpha1.PFSelector{Name: "ens9"}, NumVFs: 1}}},
	} {
		*configs = fakeConfigs{config("a", 3, labels, spec)}
		c.Reconcile(ctx)
		reason, msg := st.applied(t, "a")
		if reason != v1alpha1.ReasonInvalid || !strings.Contains(msg, "nothing applied") {
			t.Errorf("%+v: %s: %s, want Invalid", spec, reason, msg)
		}
		if len(disc.selections) != 1 || vfs.num != 6 {
			t.Errorf("%+v changed the node: selections %v, %d VFs", spec, disc.selections, vfs.num)
		}
		t.Logf("%s", msg)
	}
	if _, msg := st.applied(t, "a"); !strings.Contains(msg, "no netdev ens9") {
		t.Errorf("a PF that is not there: %s", msg)
	}

	// The node leaves the pool: the flags again, the entry gone.
	labels = map[string]string{}
	c.Reconcile(ctx)
	if _, ok := st["a"]; ok {
		t.Errorf("the entry of a node the object no longer selects stays: %+v", st["a"])
	}
	if last := disc.selections[len(disc.selections)-1]; last.Filter != "flags" || len(pools[len(pools)-1]) != 0 {
		t.Errorf("after the object: filter %q, pools %v; want the flags'", last.Filter, pools[len(pools)-1])
	}
}

// TestVFsWaitForPrepare: while a Prepare holds the PF's lock (a claim on
// one of its VFs is being prepared), its VFs are left as they are and the
// status says why; they change once the lock is free, under it.
func TestVFsWaitForPrepare(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	labels := map[string]string{"pool": "a"}
	vfs := &fakeVFs{num: 2, total: 7, drivers: []string{"igbvf", "igbvf"}}
	st := fakeStatus{}
	preparing, locked := true, false
	c := New(Options{NodeName: "node-a", Configs: &fakeConfigs{config("a", 1, labels, v1alpha1.FastpathNodeConfigSpec{
		VFs: []v1alpha1.VFs{{PF: v1alpha1.PFSelector{Name: "ens1f0"}, NumVFs: 4}}})},
		NodeLabels: func() (map[string]string, bool) { return labels, true }, Discovery: &fakeDiscovery{}, SetPools: func([]fpv1.IPPool) {},
		VFs: vfs, SysfsRoot: pfSysfs(t),
		Prepared: func(string) []string {
			if !locked {
				t.Error("the claims on the PF were looked at without its lock")
			}
			return nil
		},
		LockPF: func(addr string) (func(), bool) {
			if addr != "0000:3b:00.0" || preparing {
				return nil, false
			}
			locked = true
			return func() { locked = false }, true
		},
		Status: st})
	c.Reconcile(ctx)
	if reason, msg := st.applied(t, "a"); reason != v1alpha1.ReasonVFsInUse || !strings.Contains(msg, "being prepared") || len(vfs.sets) != 0 {
		t.Errorf("while a claim is being prepared: %s: %s; VF counts written %v", reason, msg, vfs.sets)
	}
	preparing = false
	c.Reconcile(ctx)
	if reason, msg := st.applied(t, "a"); reason != v1alpha1.ReasonApplied || vfs.num != 4 || locked {
		t.Errorf("once prepared: %s: %s; %d VFs, lock held %t", reason, msg, vfs.num, locked)
	}
}

// TestPFSettings: a PF's MTU and link state are set before its VFs are
// made, VFs by index range go to their range's driver and the others to
// the PF's, all said in the status; looked at again, nothing is written
// twice; while a claim holds a VF, a lower MTU and a link taken down wait
// as the VFs do; a spec asking for switchdev or an externally managed PF
// is refused by name, the node as it was.
func TestPFSettings(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	labels := map[string]string{"pool": "a"}
	vfs := &fakeVFs{total: 7}
	links := &fakeLinks{mtu: 1500}
	st := fakeStatus{}
	configs := &fakeConfigs{}
	disc := &fakeDiscovery{}
	var holders []string
	c := New(Options{NodeName: "node-a", Configs: configs, NodeLabels: func() (map[string]string, bool) { return labels, true },
		Discovery: disc, SetPools: func([]fpv1.IPPool) {}, VFs: vfs, Links: links, SysfsRoot: pfSysfs(t),
		Prepared: func(string) []string { return holders }, Status: st})
	spec := v1alpha1.FastpathNodeConfigSpec{VFs: []v1alpha1.VFs{{PF: v1alpha1.PFSelector{PCIAddress: "0000:3b:00.0"}, NumVFs: 6, MTU: 9000, LinkState: "up",
		Ranges: []v1alpha1.VFRange{{First: 2, Last: 3, Driver: "vfio-pci"}, {First: 4, Last: 5, Driver: "igbvf"}}}}}
	*configs = fakeConfigs{config("a", 1, labels, spec)}
	c.Reconcile(ctx)
	if reason, msg := st.applied(t, "a"); reason != v1alpha1.ReasonApplied {
		t.Fatalf("applied: %s: %s", reason, msg)
	}
	if want := []string{"mtu 9000", "up true"}; !slices.Equal(links.sets, want) {
		t.Errorf("PF link changes %v, want %v", links.sets, want)
	}
	if want := []string{"igbvf", "igbvf", "vfio-pci", "vfio-pci", "igbvf", "igbvf"}; !slices.Equal(vfs.drivers, want) {
		t.Errorf("VF drivers %v, want %v", vfs.drivers, want)
	}
	if got := st["a"].VFs[0]; got.MTU != 9000 || got.LinkState != "up" || got.NumVFs != 6 {
		t.Errorf("status %+v, want 6 VFs, MTU 9000, up", got)
	}
	if disc.rediscovers != 1 {
		t.Errorf("the devices were looked at again %d times after the PF changed, want 1", disc.rediscovers)
	}
	c.Reconcile(ctx)
	if len(links.sets) != 2 || len(vfs.sets) != 1 || vfs.binds != 2 || disc.rediscovers != 1 {
		t.Errorf("looked at again: link changes %v, VF counts %v, %d binds, %d rediscoveries; want nothing more", links.sets, vfs.sets, vfs.binds, disc.rediscovers)
	}

	// A lower MTU and the link down wait while a claim holds a VF.
	spec.VFs[0].MTU, spec.VFs[0].LinkState = 1500, "down"
	*configs = fakeConfigs{config("a", 2, labels, spec)}
	holders = []string{"default/dpdk"}
	c.Reconcile(ctx)
	if reason, msg := st.applied(t, "a"); reason != v1alpha1.ReasonVFsInUse || !strings.Contains(msg, "default/dpdk") || links.mtu != 9000 || !links.up {
		t.Errorf("with a VF prepared: %s: %s; MTU %d, up %t", reason, msg, links.mtu, links.up)
	}
	holders = nil
	c.Reconcile(ctx)
	if reason, msg := st.applied(t, "a"); reason != v1alpha1.ReasonApplied || links.mtu != 1500 || links.up {
		t.Errorf("once none is prepared: %s: %s; MTU %d, up %t", reason, msg, links.mtu, links.up)
	}

	for field, v := range map[string]v1alpha1.VFs{
		"eSwitchMode":       {PF: v1alpha1.PFSelector{Name: "ens1f0"}, NumVFs: 2, ESwitchMode: "switchdev"},
		"externallyManaged": {PF: v1alpha1.PFSelector{Name: "ens1f0"}, NumVFs: 2, ExternallyManaged: true},
		"ranges[0].last":    {PF: v1alpha1.PFSelector{Name: "ens1f0"}, NumVFs: 2, Ranges: []v1alpha1.VFRange{{First: 0, Last: 2, Driver: "vfio-pci"}}},
		"ranges[1]":         {PF: v1alpha1.PFSelector{Name: "ens1f0"}, NumVFs: 4, Ranges: []v1alpha1.VFRange{{First: 0, Last: 2}, {First: 2, Last: 3}}},
		"mtu":               {PF: v1alpha1.PFSelector{Name: "ens1f0"}, NumVFs: 2, MTU: 20},
	} {
		*configs = fakeConfigs{config("a", 3, labels, v1alpha1.FastpathNodeConfigSpec{VFs: []v1alpha1.VFs{v}})}
		c.Reconcile(ctx)
		reason, msg := st.applied(t, "a")
		if reason != v1alpha1.ReasonInvalid || !strings.Contains(msg, "spec.vfs[0]."+field) {
			t.Errorf("%s: %s: %s, want Invalid naming spec.vfs[0].%s", field, reason, msg, field)
		}
		if vfs.num != 6 || links.mtu != 1500 {
			t.Errorf("%s changed the node: %d VFs, MTU %d", field, vfs.num, links.mtu)
		}
	}
}
