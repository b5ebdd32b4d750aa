package sriovtest

import (
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// VFIO's ioctls (linux/vfio.h): _IO(';', 100 + n).
const (
	vfioGetAPIVersion   = 0x3b64
	vfioCheckExtension  = 0x3b65
	vfioSetIOMMU        = 0x3b66
	vfioGroupGetStatus  = 0x3b67
	vfioGroupSetContain = 0x3b68
	vfioGroupGetDevFD   = 0x3b6a
	vfioDeviceGetInfo   = 0x3b6b

	vfioAPIVersion       = 0
	vfioType1v2IOMMU     = 3
	vfioGroupFlagsViable = 1
	vfioDeviceFlagsPCI   = 1 << 1
)

func ioctl(fd int, req uintptr, arg unsafe.Pointer) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

func ioctlValue(fd int, req, arg uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// OpenVFIODevice does what DPDK does with a VF handed over in vfio mode:
// open the container and the IOMMU group, check the group is viable, put
// it in the container with a type 1 IOMMU, and get the device. It returns
// the device's number of regions.
func OpenVFIODevice(t testing.TB, group int, addr string) int {
	t.Helper()
	container, err := unix.Open("/dev/vfio/vfio", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/vfio/vfio: %v", err)
	}
	defer func() { _ = unix.Close(container) }()
	if v, err := ioctlValue(container, vfioGetAPIVersion, 0); err != nil || v != vfioAPIVersion {
		t.Fatalf("VFIO API version %d, %v", v, err)
	}
	if ok, err := ioctlValue(container, vfioCheckExtension, vfioType1v2IOMMU); err != nil || ok == 0 {
		t.Fatalf("no VFIO type 1 v2 IOMMU: %v", err)
	}
	g, err := unix.Open(fmt.Sprintf("/dev/vfio/%d", group), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/vfio/%d: %v", group, err)
	}
	defer func() { _ = unix.Close(g) }()
	status := struct{ argsz, flags uint32 }{argsz: 8}
	if _, err := ioctl(g, vfioGroupGetStatus, unsafe.Pointer(&status)); err != nil {
		t.Fatalf("VFIO_GROUP_GET_STATUS: %v", err)
	}
	if status.flags&vfioGroupFlagsViable == 0 {
		t.Fatalf("IOMMU group %d is not viable (flags %#x): a device in it is bound to a host driver", group, status.flags)
	}
	c := int32(container)
	if _, err := ioctl(g, vfioGroupSetContain, unsafe.Pointer(&c)); err != nil {
		t.Fatalf("VFIO_GROUP_SET_CONTAINER: %v", err)
	}
	if _, err := ioctlValue(container, vfioSetIOMMU, vfioType1v2IOMMU); err != nil {
		t.Fatalf("VFIO_SET_IOMMU: %v", err)
	}
	name, err := unix.BytePtrFromString(addr)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := ioctl(g, vfioGroupGetDevFD, unsafe.Pointer(name))
	if err != nil {
		t.Fatalf("VFIO_GROUP_GET_DEVICE_FD %s: %v", addr, err)
	}
	defer func() { _ = unix.Close(int(dev)) }()
	info := struct{ argsz, flags, regions, irqs uint32 }{argsz: 16}
	if _, err := ioctl(int(dev), vfioDeviceGetInfo, unsafe.Pointer(&info)); err != nil {
		t.Fatalf("VFIO_DEVICE_GET_INFO: %v", err)
	}
	if info.flags&vfioDeviceFlagsPCI == 0 {
		t.Errorf("VFIO device %s is not PCI (flags %#x)", addr, info.flags)
	}
	return int(info.regions)
}
