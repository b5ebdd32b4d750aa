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

	"k8s.io/klog/v2"
)

// ErrTooManyVFs is returned when a PF is asked for more VFs than its
// sriov_totalvfs allows.
var ErrTooManyVFs = errors.New("more VFs than the PF supports")

// TotalVFs is how many VFs the PF at addr can have at most, as its
// sriov_totalvfs says; 0 for a function without SR-IOV (no such file).
func (b PCIBinder) TotalVFs(addr string) (int, error) {
	return b.count(addr, "sriov_totalvfs")
}

// SetNumVFs makes the PF at addr have exactly n VFs and waits until the
// kernel shows them (virtfn0 to virtfn<n-1> in the PF's directory, and no
// more), so that the caller finds them. A PF that has n already is left
// alone. The kernel refuses to change one non-zero count to another, so the
// VFs there are removed first: every VF of the PF goes, with whatever used
// it.
func (b PCIBinder) SetNumVFs(ctx context.Context, addr string, n int) error {
	if n < 0 {
		return fmt.Errorf("PF %s: cannot have %d VFs", addr, n)
	}
	total, err := b.TotalVFs(addr)
	if err != nil {
		return err
	}
	if n > total {
		return fmt.Errorf("%w: PF %s: %d VFs asked, sriov_totalvfs is %d", ErrTooManyVFs, addr, n, total)
	}
	cur, err := b.NumVFs(addr)
	if err != nil {
		return err
	}
	if cur == n {
		return nil
	}
	if cur != 0 && n != 0 {
		if err := b.writeNumVFs(ctx, addr, 0); err != nil {
			return err
		}
	}
	if err := b.writeNumVFs(ctx, addr, n); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Set the PF's VF count", "pci", addr, "numVFs", n, "numVFsBefore", cur)
	return nil
}

// writeNumVFs writes n to the PF's sriov_numvfs and waits until its VFs
// are n.
func (b PCIBinder) writeNumVFs(ctx context.Context, addr string, n int) error {
	if err := b.write(b.device(addr, "sriov_numvfs"), strconv.Itoa(n)); err != nil {
		return fmt.Errorf("PF %s: %w", addr, err)
	}
	var have []string
	err := b.wait(ctx, func() bool {
		var err error
		have, err = b.VFAddresses(addr)
		if err != nil || len(have) != n {
			return false
		}
		// n links, and each of virtfn0 to virtfn<n-1> among them: no
		// other index.
		for i := range n {
			if _, err := os.Lstat(b.device(addr, "virtfn"+strconv.Itoa(i))); err != nil {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("PF %s has %d VFs, not %d, %s after writing sriov_numvfs: %w", addr, len(have), n, b.timeout(), err)
	}
	return nil
}

// VFAddresses are the PCI addresses of the PF's VFs as its virtfnN links
// show them now, in VF index order; none for a function without VFs.
func (b PCIBinder) VFAddresses(addr string) ([]string, error) {
	entries, err := os.ReadDir(b.device(addr))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: PCI function %s: %w", ErrDeviceGone, addr, err)
	}
	if err != nil {
		return nil, fmt.Errorf("PCI function %s: %w", addr, err)
	}
	type vf struct {
		index int
		addr  string
	}
	var vfs []vf
	for _, e := range entries {
		idx, ok := strings.CutPrefix(e.Name(), "virtfn")
		if !ok {
			continue
		}
		i, err := strconv.Atoi(idx)
		if err != nil {
			continue
		}
		target, err := os.Readlink(b.device(addr, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("PF %s: %w", addr, err)
		}
		vfs = append(vfs, vf{i, filepath.Base(target)})
	}
	slices.SortFunc(vfs, func(a, b vf) int { return a.index - b.index })
	addrs := make([]string, 0, len(vfs))
	for _, v := range vfs {
		addrs = append(addrs, v.addr)
	}
	return addrs, nil
}

// BindVFs binds every VF of the PF at addr to driver, as BindVFIO does:
// driver_override, unbind, drivers_probe, and a wait until it is bound. The
// driver_override stays, so the VF stays on driver when it is probed again.
// A VF already on driver is left as it is; driver "" leaves every VF to the
// kernel's choice. The VFs are bound one after the other: the first that
// fails goes back to the driver it had, and the error names it; the VFs
// before it stay on driver.
func (b PCIBinder) BindVFs(ctx context.Context, addr, driver string) error {
	if driver == "" {
		return nil
	}
	vfs, err := b.VFAddresses(addr)
	if err != nil {
		return err
	}
	for i, vf := range vfs {
		if err := b.bindDriver(ctx, vf, driver); err != nil {
			return fmt.Errorf("VF %d (%s) of PF %s: %w", i, vf, addr, err)
		}
	}
	return nil
}

// BindVF binds the VF at addr to driver, as BindVFs binds each; driver ""
// leaves it as it is.
func (b PCIBinder) BindVF(ctx context.Context, addr, driver string) error {
	if driver == "" {
		return nil
	}
	return b.bindDriver(ctx, addr, driver)
}
