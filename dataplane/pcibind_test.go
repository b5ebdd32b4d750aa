package dataplane

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// e810 writes the E810 fixture with a kernel playing its part. Its first
// PF has VFs 0 and 1 on iavf (netdevs ens1f0v0, ens1f0v1) and 2 and 3 on
// vfio-pci.
func e810(t *testing.T) (PCIBinder, *sysfsfixture.Kernel, []string) {
	t.Helper()
	root := sysfsfixture.TempDir(t)
	tree := sysfsfixture.E810()
	if err := tree.Write(root); err != nil {
		t.Fatal(err)
	}
	k, err := sysfsfixture.StartKernel(root, root, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	var vfs []string
	for _, vf := range tree.Functions[1].VFs {
		vfs = append(vfs, vf.Address)
	}
	return PCIBinder{SysfsRoot: root, DevRoot: root, Timeout: 2 * time.Second}, k, vfs
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

func exists(path string) bool { _, err := os.Lstat(path); return err == nil }

func TestBindVFIOAndRestore(t *testing.T) {
	b, k, vfs := e810(t)
	ctx := context.Background()
	vf := vfs[0]
	netdev := filepath.Join(b.SysfsRoot, "sys", "class", "net", "ens1f0v0")
	group := 41

	if err := b.BindVFIO(ctx, vf, group); err != nil {
		t.Fatal(err)
	}
	if got := k.Driver(vf); got != VFIODriver {
		t.Fatalf("driver after BindVFIO = %q, want vfio-pci", got)
	}
	if !exists(b.GroupNode(group)) {
		t.Errorf("%s missing after BindVFIO", b.GroupNode(group))
	}
	if exists(netdev) {
		t.Errorf("the VF's netdev is still there on vfio-pci")
	}
	// Each control file has its own reader in the test kernel, so the
	// writes are compared as a set; the driver bound shows their order.
	want := []string{"drivers/iavf/unbind " + vf, "drivers_probe " + vf}
	if got := sorted(k.Writes()); !slices.Equal(got, sorted(want)) {
		t.Errorf("kernel writes = %q, want %q", got, want)
	}
	if override, _ := os.ReadFile(filepath.Join(b.SysfsRoot, "sys", "bus", "pci", "devices", vf, "driver_override")); string(override) != "vfio-pci\n" {
		t.Errorf("driver_override = %q, want vfio-pci", override)
	}

	for range 2 { // twice: the second time there is nothing to do
		if err := b.Restore(ctx, vf, "iavf"); err != nil {
			t.Fatal(err)
		}
	}
	if got := k.Driver(vf); got != "iavf" {
		t.Fatalf("driver after Restore = %q, want iavf", got)
	}
	if !exists(netdev) {
		t.Errorf("the VF's netdev did not come back with iavf")
	}
	if exists(b.GroupNode(group)) {
		t.Errorf("%s still there after the VF left vfio-pci", b.GroupNode(group))
	}
	want = append(want, "drivers/vfio-pci/unbind "+vf, "drivers/iavf/bind "+vf)
	if got := sorted(k.Writes()); !slices.Equal(got, sorted(want)) {
		t.Errorf("kernel writes = %q, want %q", got, want)
	}
	if override, _ := os.ReadFile(filepath.Join(b.SysfsRoot, "sys", "bus", "pci", "devices", vf, "driver_override")); string(override) != "\n" {
		t.Errorf("driver_override = %q, want it cleared", override)
	}
}

// A VF already on vfio-pci stays there, untouched.
func TestBindVFIOAlreadyBound(t *testing.T) {
	b, k, vfs := e810(t)
	if err := b.BindVFIO(context.Background(), vfs[2], 43); err != nil {
		t.Fatal(err)
	}
	if w := k.Writes(); len(w) != 0 {
		t.Errorf("kernel writes for a VF already on vfio-pci: %q", w)
	}
	if err := b.Restore(context.Background(), vfs[2], VFIODriver); err != nil {
		t.Fatal(err)
	}
	if got := k.Driver(vfs[2]); got != VFIODriver {
		t.Errorf("driver = %q, want vfio-pci", got)
	}
}

// When vfio-pci does not take the VF, the VF goes back to its driver and
// the error says what happened.
func TestBindVFIOFailureRollsBack(t *testing.T) {
	b, k, vfs := e810(t)
	b.Timeout = 200 * time.Millisecond
	k.Refuse(VFIODriver)
	err := b.BindVFIO(context.Background(), vfs[1], 42)
	if err == nil {
		t.Fatal("BindVFIO with vfio-pci refusing: no error")
	}
	t.Log(err)
	if got := k.Driver(vfs[1]); got != "iavf" {
		t.Errorf("driver after the failed bind = %q, want iavf back", got)
	}
	if !exists(filepath.Join(b.SysfsRoot, "sys", "class", "net", "ens1f0v1")) {
		t.Errorf("the VF's netdev did not come back")
	}
}

func TestBindVFIONoDriver(t *testing.T) {
	root := sysfsfixture.TempDir(t)
	tree := sysfsfixture.E810()
	if err := tree.Write(root); err != nil {
		t.Fatal(err)
	}
	// No kernel, and no vfio-pci driver directory: nothing is written.
	if err := os.RemoveAll(filepath.Join(root, "sys", "bus", "pci", "drivers", "vfio-pci")); err != nil {
		t.Fatal(err)
	}
	b := PCIBinder{SysfsRoot: root, DevRoot: root}
	err := b.BindVFIO(context.Background(), tree.Functions[1].VFs[0].Address, 41)
	if !errors.Is(err, ErrNoVFIO) {
		t.Fatalf("err = %v, want ErrNoVFIO", err)
	}
}

// TestNumVFs: a PF's VF count is its sriov_numvfs as it is now; a function
// without SR-IOV (a VF, a function gone) has none; a file the kernel would
// never write is an error naming it.
func TestNumVFs(t *testing.T) {
	b, _, vfs := e810(t)
	numVFs := filepath.Join(b.SysfsRoot, "sys", "bus", "pci", "devices", "0000:3b:00.1", "sriov_numvfs")
	for _, tc := range []struct {
		name, addr, write string
		want              int
		wantErr           string
	}{
		{name: "PF with VFs", addr: "0000:3b:00.0", want: 4},
		{name: "PF without VFs", addr: "0000:3b:00.1", want: 0},
		{name: "VFs made since", addr: "0000:3b:00.1", write: "2\n", want: 2},
		{name: "VF", addr: vfs[0], want: 0},
		{name: "no such function", addr: "0000:99:00.0", want: 0},
		{name: "garbage", addr: "0000:3b:00.1", write: "two", wantErr: numVFs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.write != "" {
				if err := os.WriteFile(numVFs, []byte(tc.write), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			n, err := b.NumVFs(tc.addr)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("NumVFs(%s) = %d, %v; want an error naming %s", tc.addr, n, err, tc.wantErr)
				}
			case err != nil || n != tc.want:
				t.Errorf("NumVFs(%s) = %d, %v; want %d", tc.addr, n, err, tc.want)
			}
		})
	}
}
