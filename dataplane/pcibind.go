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
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
)

// VFIODriver is the kernel driver that hands PCI functions to userspace.
const VFIODriver = "vfio-pci"

// ErrNoVFIO is returned when the node cannot give a function to vfio-pci:
// the driver is missing, or the IOMMU group's device node never appears.
var ErrNoVFIO = errors.New("vfio-pci unavailable")

// PCIBinder binds PCI functions to drivers through sysfs, the way
// driverctl and dpdk-devbind do: driver_override, unbind, drivers_probe.
// Every path is below SysfsRoot and DevRoot, so tests run it against a
// fixture tree where the test plays the kernel.
type PCIBinder struct {
	SysfsRoot string // holds sys/; "/" on a node
	DevRoot   string // holds dev/; "/" on a node
	// Timeout bounds each wait for the kernel (a driver to bind, a device
	// node to appear). Default 10s.
	Timeout time.Duration
}

func (b PCIBinder) sys(parts ...string) string {
	return filepath.Join(append([]string{b.SysfsRoot, "sys"}, parts...)...)
}

func (b PCIBinder) device(addr string, parts ...string) string {
	return b.sys(append([]string{"bus", "pci", "devices", addr}, parts...)...)
}

// NumVFs is how many VFs the function at addr has enabled now, as its
// sriov_numvfs says; 0 for a function without SR-IOV (no such file).
func (b PCIBinder) NumVFs(addr string) (int, error) {
	return b.count(addr, "sriov_numvfs")
}

// count is the number in the function's sysfs file, 0 when the function
// has no such file.
func (b PCIBinder) count(addr, file string) (int, error) {
	path := b.device(addr, file)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("PCI function %s: %w", addr, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return 0, fmt.Errorf("PCI function %s: %s: %w", addr, path, err)
	}
	return n, nil
}

// GroupDevices are the PCI functions of IOMMU group group, by address,
// in order.
func (b PCIBinder) GroupDevices(group int) ([]string, error) {
	entries, err := os.ReadDir(b.sys("kernel", "iommu_groups", strconv.Itoa(group), "devices"))
	if err != nil {
		return nil, fmt.Errorf("IOMMU group %d: %w", group, err)
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out, nil
}

// GroupNode is the device node of IOMMU group group.
func (b PCIBinder) GroupNode(group int) string {
	return filepath.Join(b.DevRoot, "dev", "vfio", strconv.Itoa(group))
}

// ContainerNode is the VFIO container device node.
func (b PCIBinder) ContainerNode() string { return filepath.Join(b.DevRoot, "dev", "vfio", "vfio") }

// Driver is the driver bound to the function at addr, "" when none.
func (b PCIBinder) Driver(addr string) (string, error) {
	if _, err := os.Stat(b.device(addr)); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: PCI function %s: %w", ErrDeviceGone, addr, err)
	} else if err != nil {
		return "", fmt.Errorf("PCI function %s: %w", addr, err)
	}
	target, err := os.Readlink(b.device(addr, "driver"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("PCI function %s: driver: %w", addr, err)
	}
	return filepath.Base(target), nil
}

// BindVFIO binds the function at addr, of IOMMU group group, to vfio-pci
// and waits for the group's device node. A function already bound to
// vfio-pci stays as it is. On failure the function is given back to the
// driver it had.
func (b PCIBinder) BindVFIO(ctx context.Context, addr string, group int) error {
	if err := b.bindDriver(ctx, addr, VFIODriver); err != nil {
		return err
	}
	for _, node := range []string{b.GroupNode(group), b.ContainerNode()} {
		if err := b.wait(ctx, func() bool { _, err := os.Stat(node); return err == nil }); err != nil {
			return fmt.Errorf("%w: %s did not appear after binding %s to vfio-pci: %w", ErrNoVFIO, node, addr, err)
		}
	}
	return nil
}

// bindDriver binds the function at addr to driver unless it is bound to it
// already. On failure the function is given back to the driver it had.
func (b PCIBinder) bindDriver(ctx context.Context, addr, driver string) (err error) {
	before, err := b.Driver(addr)
	if err != nil || before == driver {
		return err
	}
	if _, err := os.Stat(b.sys("bus", "pci", "drivers", driver)); err != nil {
		if driver == VFIODriver {
			return fmt.Errorf("%w: no driver %s on this node (load the vfio-pci module): %w", ErrNoVFIO, driver, err)
		}
		return fmt.Errorf("no driver %s on this node: %w", driver, err)
	}
	defer func() {
		if err != nil {
			if rErr := b.Restore(ctx, addr, before); rErr != nil {
				err = fmt.Errorf("%w (and giving %s back to %s: %w)", err, addr, driverName(before), rErr)
			}
		}
	}()
	if err := b.write(b.device(addr, "driver_override"), driver); err != nil {
		return err
	}
	if driver == VFIODriver {
		fault.Point("vfio.override")
	}
	if before != "" {
		if err := b.write(b.sys("bus", "pci", "drivers", before, "unbind"), addr); err != nil {
			return err
		}
	}
	if driver == VFIODriver {
		fault.Point("vfio.unbound")
	}
	if err := b.write(b.sys("bus", "pci", "drivers_probe"), addr); err != nil {
		return err
	}
	if err := b.waitDriver(ctx, addr, driver); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Bound PCI function", "pci", addr, "driver", driver, "driverBefore", before)
	return nil
}

// Restore gives the function at addr back to driver ("" leaves it
// unbound) and clears its driver_override. Restoring what is already so
// is harmless.
func (b PCIBinder) Restore(ctx context.Context, addr, driver string) error {
	if _, err := b.Driver(addr); errors.Is(err, ErrDeviceGone) {
		return err
	}
	if err := b.write(b.device(addr, "driver_override"), ""); err != nil {
		return err
	}
	cur, err := b.Driver(addr)
	if err != nil || cur == driver {
		return err
	}
	if cur != "" {
		if err := b.write(b.sys("bus", "pci", "drivers", cur, "unbind"), addr); err != nil {
			return err
		}
	}
	if driver != "" {
		if err := b.write(b.sys("bus", "pci", "drivers", driver, "bind"), addr); err != nil {
			return err
		}
	}
	if err := b.waitDriver(ctx, addr, driver); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Gave PCI function back", "pci", addr, "driver", driverName(driver))
	return nil
}

// write writes value to a sysfs attribute, never creating it.
func (b PCIBinder) write(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	_, err = f.WriteString(value + "\n")
	if cErr := f.Close(); err == nil {
		err = cErr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}

func (b PCIBinder) waitDriver(ctx context.Context, addr, driver string) error {
	var cur string
	err := b.wait(ctx, func() bool {
		var err error
		cur, err = b.Driver(addr)
		return err == nil && cur == driver
	})
	if err != nil {
		return fmt.Errorf("PCI function %s is bound to %s, not %s, %s after asking the kernel: %w",
			addr, driverName(cur), driverName(driver), b.timeout(), err)
	}
	return nil
}

func (b PCIBinder) timeout() time.Duration {
	if b.Timeout > 0 {
		return b.Timeout
	}
	return 10 * time.Second
}

func (b PCIBinder) wait(ctx context.Context, done func() bool) error {
	return wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, b.timeout(), true, func(context.Context) (bool, error) {
		return done(), nil
	})
}

func driverName(d string) string {
	if d == "" {
		return "no driver"
	}
	return d
}
