package bench

import (
	"testing"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// BenchmarkDiscover is one discovery of a node with an E810 PF and 1024 VFs
// (half on iavf with netdevs, half on vfio-pci), from a sysfs fixture tree.
func BenchmarkDiscover(b *testing.B) {
	root := sysfsfixture.TempDir(b)
	if err := sysfsfixture.Generated(1024).Write(root); err != nil {
		b.Fatal(err)
	}
	d, err := devices.New(devices.Options{SysfsRoot: root})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		inv, err := d.Discover(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		if len(inv.Devices) != 1025 {
			b.Fatalf("discovered %d devices, want 1025", len(inv.Devices))
		}
	}
}
