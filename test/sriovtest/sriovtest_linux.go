package sriovtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// PCI IDs of the 82576 and its VFs.
const (
	Vendor   = "8086"
	PFDevice = "10c9"
	VFDevice = "10ca"
)

// Prefix starts the names of the network namespaces, links and files the
// sriov tests create.
const Prefix = "fpv"

// PF is the igb physical function.
type PF struct {
	Address string // 0000:01:00.0
	Name    string // its netdev
}

// VF is one of its virtual functions.
type VF struct {
	ID      int
	Address string
	Netdev  string // "" while it has none (bound to vfio-pci, or in a pod)
	Group   int    // IOMMU group
}

// RequirePF finds the igb PF, sets its link up (igb takes VF settings such
// as a TX rate only with the link up, and VFs made while it is down start
// without a MAC) and waits for its carrier.
func RequirePF(t testing.TB) PF {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the sriov tests run as root in the SR-IOV VM: make e2e-sriov")
	}
	devs, _ := filepath.Glob("/sys/bus/pci/devices/*")
	for _, d := range devs {
		if read(t, d, "vendor") != "0x"+Vendor || read(t, d, "device") != "0x"+PFDevice {
			continue
		}
		pf := PF{Address: filepath.Base(d)}
		if drv := Driver(pf.Address); drv != "igb" {
			t.Fatalf("the 82576 at %s is bound to %q, not igb", pf.Address, drv)
		}
		pf.Name = Netdev(pf.Address)
		if pf.Name == "" {
			t.Fatalf("the igb PF %s has no netdev", pf.Address)
		}
		l, err := netlink.LinkByName(pf.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatalf("set %s up: %v", pf.Name, err)
		}
		WaitFor(t, 10*time.Second, "carrier on "+pf.Name, func() bool {
			return read(t, "/sys/class/net", pf.Name, "carrier") == "1"
		})
		return pf
	}
	t.Fatalf("no Intel 82576 (%s:%s) here: the sriov tests run only in the SR-IOV VM (make e2e-sriov)", Vendor, PFDevice)
	return PF{}
}

// Dir is the PF's sysfs directory.
func (pf PF) Dir(elem ...string) string {
	return filepath.Join(append([]string{"/sys/bus/pci/devices", pf.Address}, elem...)...)
}

// SetNumVFs makes the PF have n VFs (through 0: igb refuses to change a
// non-zero count directly) and waits until each has its driver and netdev.
func (pf PF) SetNumVFs(t testing.TB, n int) []VF {
	t.Helper()
	cur, err := strconv.Atoi(read(t, pf.Dir(), "sriov_numvfs"))
	if err != nil {
		t.Fatal(err)
	}
	if cur != n {
		if cur != 0 {
			write(t, pf.Dir("sriov_numvfs"), "0")
		}
		if n != 0 {
			write(t, pf.Dir("sriov_numvfs"), strconv.Itoa(n))
		}
	}
	var vfs []VF
	WaitFor(t, 30*time.Second, fmt.Sprintf("%d VFs of %s on igbvf with netdevs", n, pf.Address), func() bool {
		vfs = pf.VFs(t)
		if len(vfs) != n {
			return false
		}
		for _, vf := range vfs {
			if Driver(vf.Address) != "igbvf" || vf.Netdev == "" {
				return false
			}
		}
		return true
	})
	return vfs
}

// VFs lists the PF's VFs as sysfs shows them now.
func (pf PF) VFs(t testing.TB) []VF {
	t.Helper()
	var vfs []VF
	for i := 0; ; i++ {
		target, err := os.Readlink(pf.Dir(fmt.Sprintf("virtfn%d", i)))
		if err != nil {
			return vfs
		}
		vf := VF{ID: i, Address: filepath.Base(target), Group: -1}
		vf.Netdev = Netdev(vf.Address)
		if g, err := os.Readlink(filepath.Join("/sys/bus/pci/devices", vf.Address, "iommu_group")); err == nil {
			vf.Group, _ = strconv.Atoi(filepath.Base(g))
		}
		vfs = append(vfs, vf)
	}
}

// VFsReady has the PF keep n VFs for the test: made now unless there are n
// already. When the test ends, every VF must be as the test found it: on
// igbvf, with a netdev in this network namespace.
func (pf PF) VFsReady(t testing.TB, n int) []VF {
	t.Helper()
	vfs := pf.SetNumVFs(t, n)
	t.Cleanup(func() {
		for _, vf := range vfs {
			if d := Driver(vf.Address); d != "igbvf" {
				t.Errorf("VF %d (%s) left on %q, not igbvf", vf.ID, vf.Address, d)
			}
			if Netdev(vf.Address) == "" {
				t.Errorf("VF %d (%s) left without a netdev in the host", vf.ID, vf.Address)
			}
		}
	})
	return vfs
}

// Driver is the driver bound to a PCI function, "" when none.
func Driver(addr string) string {
	target, err := os.Readlink(filepath.Join("/sys/bus/pci/devices", addr, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

// Netdev is the netdev of a PCI function in this network namespace, "" when
// it has none here.
func Netdev(addr string) string {
	entries, _ := os.ReadDir(filepath.Join("/sys/bus/pci/devices", addr, "net"))
	if len(entries) == 0 {
		return ""
	}
	return entries[0].Name()
}

// WaitFor polls cond until it holds, and fails the test after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("no %s within %s", what, timeout)
	}
}

// Modprobe loads kernel modules, as an operator or udev would on a node.
func Modprobe(t testing.TB, modules ...string) {
	t.Helper()
	if out, err := exec.Command("modprobe", append([]string{"-a"}, modules...)...).CombinedOutput(); err != nil {
		t.Fatalf("modprobe %s: %v: %s", strings.Join(modules, " "), err, out)
	}
}

func read(t testing.TB, elem ...string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(elem...))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

func write(t testing.TB, path, value string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		t.Fatalf("write %s to %s: %v", value, path, err)
	}
}

// ResetVF undoes whatever a test set on the VF through the PF, the
// administratively set MAC included (igb keeps that as a flag no netlink
// read shows: only an all-zero MAC clears it), and rebinds igbvf so that
// the VF's netdev starts afresh. It returns the VF's new netdev.
func (pf PF) ResetVF(t testing.TB, vf VF) string {
	t.Helper()
	l, err := netlink.LinkByName(pf.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		netlink.LinkSetVfVlanQosProto(l, vf.ID, 0, 0, int(netlink.VLAN_PROTOCOL_8021Q)),
		netlink.LinkSetVfRate(l, vf.ID, 0, 0),
		netlink.LinkSetVfSpoofchk(l, vf.ID, true),
		netlink.LinkSetVfTrust(l, vf.ID, false),
		netlink.LinkSetVfHardwareAddr(l, vf.ID, make([]byte, 6)),
	} {
		if err != nil {
			t.Fatalf("reset VF %d of %s: %v", vf.ID, pf.Name, err)
		}
	}
	Rebind(t, vf.Address, "igbvf")
	var name string
	WaitFor(t, 10*time.Second, "a netdev for VF "+vf.Address, func() bool { name = Netdev(vf.Address); return name != "" })
	return name
}

// Rebind binds a PCI function to driver, through driver_override as an
// operator would, and waits until it is bound.
func Rebind(t testing.TB, addr, driver string) {
	t.Helper()
	dev := filepath.Join("/sys/bus/pci/devices", addr)
	write(t, filepath.Join(dev, "driver_override"), driver)
	if cur := Driver(addr); cur != "" {
		write(t, filepath.Join(dev, "driver", "unbind"), addr)
	}
	write(t, "/sys/bus/pci/drivers_probe", addr)
	write(t, filepath.Join(dev, "driver_override"), "\n")
	WaitFor(t, 10*time.Second, addr+" bound to "+driver, func() bool { return Driver(addr) == driver })
}

// KernelRelease is the running kernel's release (uname -r).
func KernelRelease(t testing.TB) string {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}

// KernelAtLeast says whether the running kernel is major.minor or newer.
func KernelAtLeast(t testing.TB, major, minor int) bool {
	t.Helper()
	var ma, mi int
	if _, err := fmt.Sscanf(KernelRelease(t), "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("kernel release %q: %v", KernelRelease(t), err)
	}
	return ma > major || (ma == major && mi >= minor)
}
