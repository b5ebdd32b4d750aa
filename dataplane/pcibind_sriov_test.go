//go:build sriov

package dataplane

import (
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// TestSRIOVBindVFIO: BindVFIO gives a real VF, with its real IOMMU group,
// to vfio-pci; the group's device node appears and opens as a userspace
// driver opens it; Restore gives the VF back to igbvf and its netdev
// returns. Binding or restoring twice changes nothing.
func TestSRIOVBindVFIO(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	_, vf := sriovVF(t, 3)
	sriovtest.Modprobe(t, "vfio-pci")
	b := PCIBinder{SysfsRoot: "/", DevRoot: "/"}
	if vf.Group < 0 {
		t.Fatalf("VF %s has no IOMMU group", vf.Address)
	}
	for range 2 {
		if err := b.BindVFIO(ctx, vf.Address, vf.Group); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if d := sriovtest.Driver(vf.Address); d != "igbvf" {
			_ = b.Restore(ctx, vf.Address, "igbvf")
		}
	})
	if d, err := b.Driver(vf.Address); err != nil || d != VFIODriver {
		t.Fatalf("driver after BindVFIO: %q, %v", d, err)
	}
	if n := sriovtest.Netdev(vf.Address); n != "" {
		t.Errorf("the VF still has netdev %s on vfio-pci", n)
	}
	for _, node := range []string{b.GroupNode(vf.Group), b.ContainerNode()} {
		if st, err := os.Stat(node); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("%s: %v, mode %v", node, err, st)
		}
	}
	if regions := sriovtest.OpenVFIODevice(t, vf.Group, vf.Address); regions < 1 {
		t.Errorf("the VFIO device has %d regions", regions)
	}

	for range 2 {
		if err := b.Restore(ctx, vf.Address, "igbvf"); err != nil {
			t.Fatal(err)
		}
	}
	if d := sriovtest.Driver(vf.Address); d != "igbvf" {
		t.Fatalf("driver after Restore: %q", d)
	}
	sriovtest.WaitFor(t, 10*time.Second, "the VF's netdev back on igbvf", func() bool { return sriovtest.Netdev(vf.Address) != "" })
	if _, err := os.Stat(b.GroupNode(vf.Group)); err == nil {
		t.Errorf("%s still there with no device of the group on vfio-pci", b.GroupNode(vf.Group))
	}
	if o, err := os.ReadFile("/sys/bus/pci/devices/" + vf.Address + "/driver_override"); err != nil || string(o) != "(null)\n" {
		t.Errorf("driver_override after Restore: %q, %v", o, err)
	}
}
