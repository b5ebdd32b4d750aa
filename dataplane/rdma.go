package dataplane

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// RDMA namespace modes of the node's RDMA subsystem (rdma system show): in
// shared mode every RDMA device is seen from every network namespace; in
// exclusive mode a device belongs to one namespace, and a pod sees it only
// when it is moved into the pod's.
const (
	RDMANetnsShared    = "shared"
	RDMANetnsExclusive = "exclusive"
)

// RDMADevice is what a pod is given of an RDMA device.
type RDMADevice struct {
	// Link is the link type of a software RDMA device, made on a netdev
	// by `rdma link add NAME type LINK netdev IFNAME`: rxe (soft-RoCE) or
	// siw (soft-iWARP). "" for a hardware one (the PCI function's).
	Link string
	// Files are its character devices: uverbsN, then rdma_cm where the
	// node has it, then umadN when asked for.
	Files []CharDevice
}

// CharDevice is a character device given to a container: Path in the
// container, HostPath on the node.
type CharDevice struct {
	Path, HostPath string
}

// RDMAFiles finds RDMA devices' character devices and link types in
// sysfs. Every path is below SysfsRoot and DevRoot, so tests run it
// against a tree of their own.
type RDMAFiles struct {
	SysfsRoot string // holds sys/; "/" on a node
	DevRoot   string // holds dev/; "/" on a node
}

// Device describes RDMA device name: its link type and the character
// devices a pod needs for it, with the management datagram devices (one
// per port) when umad is set. A device without a verbs device (ib_uverbs
// not loaded) or, with umad, without management datagram devices (an
// iWARP or RoCE device has none) is an error that says so.
func (r RDMAFiles) Device(name string, umad bool) (RDMADevice, error) {
	dir := r.sys("class", "infiniband", name)
	if _, err := os.Stat(dir); err != nil {
		return RDMADevice{}, fmt.Errorf("RDMA device %s: %w", name, err)
	}
	dev := RDMADevice{}
	if _, err := os.Stat(filepath.Join(dir, "parent")); err == nil {
		// A software device names the netdev it was made on. soft-iWARP
		// says it is an RNIC, soft-RoCE a CA.
		dev.Link = "rxe"
		if t, _ := os.ReadFile(filepath.Join(dir, "node_type")); strings.Contains(string(t), "RNIC") {
			dev.Link = "siw"
		}
	}
	verbs, err := r.classFor("infiniband_verbs", "uverbs", name)
	if err != nil {
		return RDMADevice{}, err
	}
	if len(verbs) == 0 {
		return RDMADevice{}, fmt.Errorf("RDMA device %s has no verbs device in %s (is the ib_uverbs module loaded?)", name, r.sys("class", "infiniband_verbs"))
	}
	dev.Files = append(dev.Files, r.node("infiniband", verbs[0]))
	if _, err := os.Stat(filepath.Join(r.DevRoot, "dev", "infiniband", "rdma_cm")); err == nil {
		dev.Files = append(dev.Files, r.node("infiniband", "rdma_cm"))
	}
	if umad {
		mads, err := r.classFor("infiniband_mad", "umad", name)
		if err != nil {
			return RDMADevice{}, err
		}
		if len(mads) == 0 {
			return RDMADevice{}, fmt.Errorf("RDMA device %s has no management datagram device (umad) in %s: an InfiniBand port has one once ib_umad is loaded, a RoCE or iWARP port none", name, r.sys("class", "infiniband_mad"))
		}
		for _, m := range mads {
			dev.Files = append(dev.Files, r.node("infiniband", m))
		}
	}
	return dev, nil
}

// classFor lists the entries of /sys/class/<class> with the given prefix
// whose ibdev file names device, sorted.
func (r RDMAFiles) classFor(class, prefix, device string) ([]string, error) {
	entries, err := os.ReadDir(r.sys("class", class))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		ibdev, err := os.ReadFile(r.sys("class", class, e.Name(), "ibdev"))
		if err == nil && strings.TrimSpace(string(ibdev)) == device {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}

func (r RDMAFiles) sys(parts ...string) string {
	return filepath.Join(append([]string{r.SysfsRoot, "sys"}, parts...)...)
}

func (r RDMAFiles) node(parts ...string) CharDevice {
	in := filepath.Join(append([]string{"/dev"}, parts...)...)
	return CharDevice{Path: in, HostPath: filepath.Join(r.DevRoot, in)}
}

// RDMAParent is the netdev a software RDMA device was made on, as the
// host's sysfs says it, "" for a hardware one or a device that is gone.
func (r RDMAFiles) RDMAParent(name string) string {
	b, err := os.ReadFile(r.sys("class", "infiniband", name, "parent"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
