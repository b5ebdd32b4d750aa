//go:build sriov

package dataplane

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// TestSRIOVSetNumVFs: SetNumVFs changes the real igb PF's VF count, from
// one non-zero count to another too, and the VFs are there when it returns;
// a count above sriov_totalvfs is refused and changes nothing. BindVFs
// gives every VF to vfio-pci and back to igbvf. The PF gets the count it
// had back, with fresh VFs on igbvf.
func TestSRIOVSetNumVFs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pf := sriovtest.RequirePF(t)
	b := PCIBinder{SysfsRoot: "/", DevRoot: "/", Timeout: 30 * time.Second}
	was, err := b.NumVFs(pf.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Through 0, so that the VFs come back without the
		// driver_override BindVFs left.
		for _, n := range []int{0, was} {
			if err := b.SetNumVFs(ctx, pf.Address, n); err != nil {
				t.Errorf("give %s its %d VFs back: %v", pf.Address, was, err)
				return
			}
		}
		onIGBVF(t, pf, was)
	})
	total, err := b.TotalVFs(pf.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PF %s (%s): sriov_numvfs %d, sriov_totalvfs %d", pf.Address, pf.Name, was, total)
	if total < 4 {
		t.Fatalf("sriov_totalvfs of the 82576 is %d, want at least 4", total)
	}

	var two []string
	for _, n := range []int{2, 4, 4} {
		if err := b.SetNumVFs(ctx, pf.Address, n); err != nil {
			t.Fatal(err)
		}
		addrs := vfsNow(t, b, pf, n)
		if n == 2 {
			two = addrs
		} else if !slices.Equal(addrs[:2], two) {
			t.Errorf("with 4 VFs the first two are %q, want %q as with 2", addrs[:2], two)
		}
		onIGBVF(t, pf, n)
	}

	err = b.SetNumVFs(ctx, pf.Address, total+1)
	if !errors.Is(err, ErrTooManyVFs) {
		t.Fatalf("SetNumVFs(%d) with sriov_totalvfs %d: %v, want ErrTooManyVFs", total+1, total, err)
	}
	t.Log(err)
	vfs := vfsNow(t, b, pf, 4)

	sriovtest.Modprobe(t, "vfio-pci")
	for range 2 { // twice: the second time there is nothing to do
		if err := b.BindVFs(ctx, pf.Address, VFIODriver); err != nil {
			t.Fatal(err)
		}
	}
	for _, vf := range pf.VFs(t) {
		if d := sriovtest.Driver(vf.Address); d != VFIODriver {
			t.Errorf("VF %d (%s) is on %q after BindVFs(vfio-pci)", vf.ID, vf.Address, d)
		}
		if vf.Netdev != "" {
			t.Errorf("VF %d (%s) still has netdev %s on vfio-pci", vf.ID, vf.Address, vf.Netdev)
		}
		if vf.Group < 0 {
			t.Errorf("VF %d (%s) has no IOMMU group", vf.ID, vf.Address)
			continue
		}
		sriovtest.WaitFor(t, 10*time.Second, b.GroupNode(vf.Group), func() bool {
			st, err := os.Stat(b.GroupNode(vf.Group))
			return err == nil && st.Mode()&os.ModeCharDevice != 0
		})
	}
	t.Logf("PF %s: VFs %q on vfio-pci", pf.Address, vfs)

	if err := b.BindVFs(ctx, pf.Address, "igbvf"); err != nil {
		t.Fatal(err)
	}
	onIGBVF(t, pf, 4)
	if err := b.BindVFs(ctx, pf.Address, ""); err != nil {
		t.Fatal(err)
	}
	onIGBVF(t, pf, 4)
}

// vfsNow checks that the PF has n VFs now, as NumVFs, VFAddresses and
// sriovtest's own reading of the virtfnN links all say, and returns their
// addresses.
func vfsNow(t *testing.T, b PCIBinder, pf sriovtest.PF, n int) []string {
	t.Helper()
	if got, err := b.NumVFs(pf.Address); err != nil || got != n {
		t.Fatalf("NumVFs = %d, %v; want %d", got, err, n)
	}
	addrs, err := b.VFAddresses(pf.Address)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, vf := range pf.VFs(t) {
		want = append(want, vf.Address)
	}
	if len(addrs) != n || !slices.Equal(addrs, want) {
		t.Fatalf("VFAddresses = %q, want %d: %q", addrs, n, want)
	}
	t.Logf("PF %s: %d VFs: %q", pf.Address, n, addrs)
	return addrs
}

// onIGBVF waits until the PF's n VFs are on igbvf, each with a netdev.
func onIGBVF(t *testing.T, pf sriovtest.PF, n int) {
	t.Helper()
	sriovtest.WaitFor(t, 30*time.Second, "VFs on igbvf with netdevs", func() bool {
		vfs := pf.VFs(t)
		if len(vfs) != n {
			return false
		}
		for _, vf := range vfs {
			if sriovtest.Driver(vf.Address) != "igbvf" || vf.Netdev == "" {
				return false
			}
		}
		return true
	})
	var netdevs []string
	for _, vf := range pf.VFs(t) {
		netdevs = append(netdevs, vf.Netdev)
	}
	t.Logf("PF %s: %d VFs on igbvf, netdevs %q", pf.Address, n, netdevs)
}
