package dataplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// sriovKernel plays the kernel's part in sriov_numvfs for one PF of a
// fixture: it watches the file and, as the kernel does on a write, adds
// VFs (a function directory, bus/pci/devices and physfn links, and the
// PF's virtfnN links) or removes them all. Like the kernel it refuses to go
// from one non-zero count to another (EBUSY): the file then reads the
// count there is again. A write of the count there is already goes
// unnoticed; the tests look at the file's modification time for those.
type sriovKernel struct {
	b  PCIBinder
	pf string

	mu     sync.Mutex
	n      int      // VFs there are now
	writes []string // counts taken, and "refused <n>", in order
}

// startSRIOVKernel starts a kernel for the PF at pf, which has no VFs yet.
func startSRIOVKernel(t *testing.T, b PCIBinder, pf string) *sriovKernel {
	t.Helper()
	k := &sriovKernel{b: b, pf: pf}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Returns only when the test ends: the condition never holds.
		_ = wait.PollUntilContextCancel(ctx, time.Millisecond, true, func(context.Context) (bool, error) {
			k.step(t)
			return false, nil
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return k
}

func (k *sriovKernel) step(t *testing.T) {
	path := k.b.device(k.pf, "sriov_numvfs")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("the kernel reads %s: %v", path, err)
		return
	}
	// "" is a write caught between its truncation and its data.
	want, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	k.mu.Lock()
	defer k.mu.Unlock()
	if err != nil || want == k.n {
		return
	}
	if want != 0 && k.n != 0 {
		k.writes = append(k.writes, fmt.Sprintf("refused %d", want))
		if err := os.WriteFile(path, []byte(strconv.Itoa(k.n)+"\n"), 0o644); err != nil {
			t.Errorf("the kernel restores %s: %v", path, err)
		}
		return
	}
	k.writes = append(k.writes, strconv.Itoa(want))
	if err := k.setLocked(want); err != nil {
		t.Errorf("the kernel makes %d VFs of %s: %v", want, k.pf, err)
	}
}

// vfAddress is the address the kernel gives VF i.
func (k *sriovKernel) vfAddress(i int) string {
	return sysfsfixture.Address(0, 0x3d, 1+i/8, i%8)
}

func (k *sriovKernel) setLocked(n int) error {
	pfDir, err := filepath.EvalSymlinks(k.b.device(k.pf))
	if err != nil {
		return err
	}
	for i := range k.n {
		addr := k.vfAddress(i)
		for _, p := range []string{filepath.Join(pfDir, "virtfn"+strconv.Itoa(i)), k.b.device(addr), filepath.Join(filepath.Dir(pfDir), addr)} {
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		}
	}
	k.n = 0
	for i := range n {
		addr := k.vfAddress(i)
		dir := filepath.Join(filepath.Dir(pfDir), addr)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for link, target := range map[string]string{
			filepath.Join(dir, "physfn"):                   filepath.Join("..", k.pf),
			k.b.device(addr):                               dir,
			filepath.Join(pfDir, "virtfn"+strconv.Itoa(i)): filepath.Join("..", addr),
		} {
			if err := os.Symlink(target, link); err != nil {
				return err
			}
		}
	}
	k.n = n
	return nil
}

// Writes are the counts the kernel took, and those it refused, in order,
// since the last call.
func (k *sriovKernel) Writes() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	w := k.writes
	k.writes = nil
	return w
}

func (k *sriovKernel) addresses(n int) []string {
	addrs := []string{}
	for i := range n {
		addrs = append(addrs, k.vfAddress(i))
	}
	return addrs
}

func writeFixtureFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTotalVFs: a PF's VF limit is its sriov_totalvfs; a function without
// one (a VF, a bridge, a function gone) has none; a file the kernel would
// never write is an error naming it.
func TestTotalVFs(t *testing.T) {
	b, _, vfs := e810(t)
	total := b.device("0000:3b:00.1", "sriov_totalvfs")
	for _, tc := range []struct {
		name, addr, write string
		want              int
		wantErr           string
	}{
		{name: "PF with VFs", addr: "0000:3b:00.0", want: 128},
		{name: "PF without VFs", addr: "0000:3b:00.1", want: 128},
		{name: "VF", addr: vfs[0], want: 0},
		{name: "bridge", addr: "0000:3a:00.0", want: 0},
		{name: "no such function", addr: "0000:99:00.0", want: 0},
		{name: "garbage", addr: "0000:3b:00.1", write: "many", wantErr: total},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.write != "" {
				writeFixtureFile(t, total, tc.write)
			}
			n, err := b.TotalVFs(tc.addr)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("TotalVFs(%s) = %d, %v; want an error naming %s", tc.addr, n, err, tc.wantErr)
				}
			case err != nil || n != tc.want:
				t.Errorf("TotalVFs(%s) = %d, %v; want %d", tc.addr, n, err, tc.want)
			}
		})
	}
}

// TestVFAddresses: the VFs are listed in VF index order as their virtfnN
// links give them; virtfn10 comes after virtfn9, not after virtfn1.
func TestVFAddresses(t *testing.T) {
	b, _, vfs := e810(t)
	got, err := b.VFAddresses("0000:3b:00.0")
	if err != nil || !slices.Equal(got, vfs) {
		t.Errorf("VFAddresses of the PF with VFs = %q, %v; want %q", got, err, vfs)
	}
	if got, err := b.VFAddresses("0000:3b:00.1"); err != nil || len(got) != 0 {
		t.Errorf("VFAddresses of the PF without VFs = %q, %v; want none", got, err)
	}
	if got, err := b.VFAddresses(vfs[0]); err != nil || len(got) != 0 {
		t.Errorf("VFAddresses of a VF = %q, %v; want none", got, err)
	}
	if _, err := b.VFAddresses("0000:99:00.0"); !errors.Is(err, ErrDeviceGone) || !strings.Contains(err.Error(), "0000:99:00.0") {
		t.Errorf("VFAddresses of a function gone: %v, want ErrDeviceGone naming it", err)
	}

	k := startSRIOVKernel(t, b, "0000:3b:00.1")
	b.Timeout = 5 * time.Second
	if err := b.SetNumVFs(context.Background(), "0000:3b:00.1", 12); err != nil {
		t.Fatal(err)
	}
	if got, err := b.VFAddresses("0000:3b:00.1"); err != nil || !slices.Equal(got, k.addresses(12)) {
		t.Errorf("VFAddresses = %q, %v; want %q", got, err, k.addresses(12))
	}
}

// TestSetNumVFs: the PF gets the VF count asked for, through 0 when it has
// VFs already, as the kernel wants; when SetNumVFs returns the VFs are
// there. A count it has already is not written again; one above
// sriov_totalvfs, or below 0, is refused before the kernel hears of it.
func TestSetNumVFs(t *testing.T) {
	b, _, _ := e810(t)
	_, ctx := ktesting.NewTestContext(t)
	pf := "0000:3b:00.1"
	k := startSRIOVKernel(t, b, pf)
	numVFs := b.device(pf, "sriov_numvfs")
	for _, tc := range []struct {
		name       string
		n          int
		wantWrites []string // the kernel's, nil for none
		wantErr    string   // in the error, and the VFs stay as they were
		wantIs     error    // wrapped in the error
		want       int      // VFs after
	}{
		{name: "from none", n: 2, wantWrites: []string{"2"}, want: 2},
		{name: "more", n: 4, wantWrites: []string{"0", "4"}, want: 4},
		{name: "as many", n: 4, want: 4},
		{name: "fewer", n: 3, wantWrites: []string{"0", "3"}, want: 3},
		{name: "above the total", n: 129, wantErr: "129 VFs asked, sriov_totalvfs is 128", wantIs: ErrTooManyVFs, want: 3},
		{name: "the total", n: 128, wantWrites: []string{"0", "128"}, want: 128},
		{name: "negative", n: -1, wantErr: "-1 VFs", want: 128},
		{name: "none", n: 0, wantWrites: []string{"0"}, want: 0},
		{name: "none again", n: 0, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := os.Stat(numVFs)
			if err != nil {
				t.Fatal(err)
			}
			err = b.SetNumVFs(ctx, pf, tc.n)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && err == nil:
				t.Errorf("SetNumVFs(%d): no error", tc.n)
			case tc.wantErr != "":
				t.Log(err)
				if !strings.Contains(err.Error(), pf) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("SetNumVFs(%d): %v; want an error naming %s and saying %q", tc.n, err, pf, tc.wantErr)
				}
				if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
					t.Errorf("SetNumVFs(%d): %v; want it to wrap %v", tc.n, err, tc.wantIs)
				}
			}
			if got := k.Writes(); !slices.Equal(got, tc.wantWrites) {
				t.Errorf("the kernel took %q, want %q", got, tc.wantWrites)
			}
			if tc.wantWrites == nil {
				if after, err := os.Stat(numVFs); err != nil || !after.ModTime().Equal(before.ModTime()) {
					t.Errorf("sriov_numvfs written with nothing to change (%v)", err)
				}
			}
			// No wait: the VFs are there when SetNumVFs returns.
			if n, err := b.NumVFs(pf); err != nil || n != tc.want {
				t.Errorf("NumVFs = %d, %v; want %d", n, err, tc.want)
			}
			if got, err := b.VFAddresses(pf); err != nil || !slices.Equal(got, k.addresses(tc.want)) {
				t.Errorf("VFAddresses = %q, %v; want %q", got, err, k.addresses(tc.want))
			}
		})
	}
}

// TestSetNumVFsNotSRIOV: a function without SR-IOV can have no VF, and
// has none already.
func TestSetNumVFsNotSRIOV(t *testing.T) {
	b, _, vfs := e810(t)
	if err := b.SetNumVFs(context.Background(), vfs[0], 1); !errors.Is(err, ErrTooManyVFs) || !strings.Contains(err.Error(), vfs[0]) {
		t.Errorf("SetNumVFs(1) of a VF: %v, want ErrTooManyVFs naming it", err)
	}
	if err := b.SetNumVFs(context.Background(), vfs[0], 0); err != nil {
		t.Errorf("SetNumVFs(0) of a VF: %v", err)
	}
}

// TestSetNumVFsKernelSilent: VFs that never appear fail SetNumVFs once its
// timeout is up, with an error naming the PF and what it has.
func TestSetNumVFsKernelSilent(t *testing.T) {
	b, _, _ := e810(t) // no sriovKernel: nobody makes the VFs
	b.Timeout = 100 * time.Millisecond
	err := b.SetNumVFs(context.Background(), "0000:3b:00.1", 2)
	if err == nil || !strings.Contains(err.Error(), "PF 0000:3b:00.1 has 0 VFs, not 2") {
		t.Fatalf("SetNumVFs with no VF appearing: %v, want an error naming the PF and the counts", err)
	}
	t.Log(err)
}

// TestBindVFs: every VF of the PF goes to the driver asked for, those on
// it already untouched; "" changes nothing.
func TestBindVFs(t *testing.T) {
	b, k, vfs := e810(t)
	_, ctx := ktesting.NewTestContext(t)
	pf := "0000:3b:00.0"
	drivers := func() []string {
		var d []string
		for _, vf := range vfs {
			d = append(d, k.Driver(vf))
		}
		return d
	}

	if err := b.BindVFs(ctx, pf, VFIODriver); err != nil {
		t.Fatal(err)
	}
	if got, want := drivers(), []string{VFIODriver, VFIODriver, VFIODriver, VFIODriver}; !slices.Equal(got, want) {
		t.Errorf("drivers after BindVFs(vfio-pci) = %q, want %q", got, want)
	}
	want := []string{"drivers/iavf/unbind " + vfs[0], "drivers_probe " + vfs[0], "drivers/iavf/unbind " + vfs[1], "drivers_probe " + vfs[1]}
	if got := sorted(k.Writes()); !slices.Equal(got, sorted(want)) {
		t.Errorf("kernel writes = %q, want %q", got, want)
	}
	for _, name := range []string{"ens1f0v0", "ens1f0v1"} {
		if exists(b.sys("class", "net", name)) {
			t.Errorf("netdev %s still there on vfio-pci", name)
		}
	}

	if err := b.BindVFs(ctx, pf, ""); err != nil {
		t.Fatal(err)
	}
	if err := b.BindVFs(ctx, pf, VFIODriver); err != nil {
		t.Fatal(err)
	}
	if got := sorted(k.Writes()); !slices.Equal(got, sorted(want)) {
		t.Errorf("kernel writes = %q, want only %q: some for VFs on the driver already, or for driver \"\"", got, want)
	}

	if err := b.BindVFs(ctx, pf, "iavf"); err != nil {
		t.Fatal(err)
	}
	if got, want := drivers(), []string{"iavf", "iavf", "iavf", "iavf"}; !slices.Equal(got, want) {
		t.Errorf("drivers after BindVFs(iavf) = %q, want %q", got, want)
	}
	for _, name := range []string{"ens1f0v0", "ens1f0v1"} {
		if !exists(b.sys("class", "net", name)) {
			t.Errorf("netdev %s did not come back with iavf", name)
		}
	}
	for _, vf := range vfs {
		if o, _ := os.ReadFile(b.device(vf, "driver_override")); string(o) != "iavf\n" {
			t.Errorf("driver_override of %s = %q, want iavf", vf, o)
		}
	}
}

// TestBindVFsFailure: the first VF the driver does not take goes back to
// its driver, the error names it, and the VFs after it are not touched.
func TestBindVFsFailure(t *testing.T) {
	b, k, vfs := e810(t)
	b.Timeout = 200 * time.Millisecond
	k.Refuse(VFIODriver)
	err := b.BindVFs(context.Background(), "0000:3b:00.0", VFIODriver)
	if err == nil || !strings.Contains(err.Error(), "VF 0 ("+vfs[0]+") of PF 0000:3b:00.0") {
		t.Fatalf("BindVFs with vfio-pci refusing: %v, want an error naming VF 0 (%s)", err, vfs[0])
	}
	t.Log(err)
	if got := k.Driver(vfs[0]); got != "iavf" {
		t.Errorf("driver of the VF that failed = %q, want iavf back", got)
	}
	for _, w := range k.Writes() {
		if strings.HasSuffix(w, vfs[1]) {
			t.Errorf("kernel write for the VF after the one that failed: %q", w)
		}
	}

	// A driver that is not there at all: nothing is written.
	err = b.BindVFs(context.Background(), "0000:3b:00.0", "igbvf")
	if err == nil || !strings.Contains(err.Error(), "igbvf") || !strings.Contains(err.Error(), vfs[0]) {
		t.Errorf("BindVFs to a driver not there: %v, want an error naming it and %s", err, vfs[0])
	}
	if got := k.Driver(vfs[0]); got != "iavf" {
		t.Errorf("driver of VF 0 = %q, want iavf", got)
	}
}

// TestBindVFsNoVFIO: without vfio-pci on the node, BindVFs says so and
// writes nothing.
func TestBindVFsNoVFIO(t *testing.T) {
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
	vf := tree.Functions[1].VFs[0].Address
	if err := b.BindVFs(context.Background(), tree.Functions[1].Address, VFIODriver); !errors.Is(err, ErrNoVFIO) || !strings.Contains(err.Error(), vf) {
		t.Errorf("BindVFs to vfio-pci not there: %v, want ErrNoVFIO naming %s", err, vf)
	}
	if o, err := os.ReadFile(b.device(vf, "driver_override")); err == nil && len(o) > 0 {
		t.Errorf("driver_override of %s written: %q", vf, o)
	}
}
