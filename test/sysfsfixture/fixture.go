// Package sysfsfixture writes sysfs trees laid out as the kernel lays them
// out for SR-IOV NICs: PCI functions under sys/devices/pciDDDD:BB/<port>/,
// bus/pci/devices and class/net symlinks, driver and iommu_group links,
// virtfnN and physfn links between PFs and VFs. Discovery tests and
// benchmarks read them through a sysfs root.
package sysfsfixture

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Function is one PCI function of a fixture tree.
type Function struct {
	Address string // 0000:3b:00.0
	// Port is the upstream port (a bridge function) the function hangs off,
	// e.g. 0000:3a:00.0 below root pci0000:3a. Empty: directly on the root.
	Port              string
	Root              string // pci0000:3a
	Vendor, Device    uint16
	SubVendor, SubDev uint16
	Class             uint32 // 0x020000 for Ethernet
	Driver            string // "" for none bound
	NUMANode          int
	IOMMUGroup        int // -1: no IOMMU
	Netdev            *Netdev
	TotalVFs          int // > 0 makes it a PF
	VFs               []Function
	NoSRIOVFiles      bool
	// RDMA is the function's RDMA device (mlx5_0), below its directory
	// and in class/infiniband; "" for none.
	RDMA      string
	Overrides map[string]string // file name -> raw content, to break things on purpose
}

// Unreadable as an override content makes the file a directory: reading it
// fails, as an unreadable sysfs attribute does.
const Unreadable = "\x00unreadable"

// Netdev is the interface of a function, as class/net shows it.
type Netdev struct {
	Name      string
	MAC       string
	MTU       int
	OperState string
	Speed     int // Mb/s; -1 unknown
	IfIndex   int
	Alias     string
	Overrides map[string]string // file name -> raw content
}

// Virtual is a virtual netdev (below devices/virtual/net).
type Virtual struct{ Netdev }

// SoftRDMA is a software RDMA device (rdma_rxe) on a netdev: below
// devices/virtual/infiniband, naming the netdev in its parent file.
type SoftRDMA struct{ Name, Netdev string }

// NUMANode is a NUMA node below devices/system/node: its row of the
// firmware's distance table, its CPUs (one each here) and their socket.
type NUMANode struct {
	Distances []int
	CPU       int
	Socket    int
}

// Tree is a whole fixture.
type Tree struct {
	Functions []Function
	Virtual   []Virtual
	SoftRDMA  []SoftRDMA
	// NUMA are the machine's NUMA nodes, node0 first; none: the machine
	// reports none.
	NUMA []NUMANode
}

// SubNUMA is a machine of two sockets, each split in two NUMA nodes
// (sub-NUMA clustering): nodes 0 and 1 on socket 0, 2 and 3 on socket 1,
// the nodes of a socket nearer each other (11) than the other socket's
// (21).
func SubNUMA() []NUMANode {
	return []NUMANode{
		{Distances: []int{10, 11, 21, 21}, CPU: 0, Socket: 0},
		{Distances: []int{11, 10, 21, 21}, CPU: 1, Socket: 0},
		{Distances: []int{21, 21, 10, 11}, CPU: 2, Socket: 1},
		{Distances: []int{21, 21, 11, 10}, CPU: 3, Socket: 1},
	}
}

// Write lays the tree out below root (root/sys/...).
func (t Tree) Write(root string) error {
	w := writer{root: root}
	for _, fn := range t.Functions {
		if err := w.function(fn, ""); err != nil {
			return err
		}
	}
	for _, v := range t.Virtual {
		dir := filepath.Join("devices", "virtual", "net", v.Name)
		if err := w.netdevFiles(dir, v.Netdev); err != nil {
			return err
		}
		if err := w.link(filepath.Join("class", "net", v.Name), dir); err != nil {
			return err
		}
	}
	for i, n := range t.NUMA {
		dist := make([]string, len(n.Distances))
		for j, d := range n.Distances {
			dist[j] = strconv.Itoa(d)
		}
		node := filepath.Join("devices", "system", "node", fmt.Sprintf("node%d", i))
		w.file(filepath.Join(node, "distance"), strings.Join(dist, " "))
		w.file(filepath.Join(node, "cpulist"), strconv.Itoa(n.CPU))
		w.file(filepath.Join("devices", "system", "cpu", fmt.Sprintf("cpu%d", n.CPU), "topology", "physical_package_id"), strconv.Itoa(n.Socket))
	}
	for _, r := range t.SoftRDMA {
		dir := filepath.Join("devices", "virtual", "infiniband", r.Name)
		w.file(filepath.Join(dir, "parent"), r.Netdev)
		w.file(filepath.Join(dir, "node_type"), "1: CA")
		if err := w.link(filepath.Join("class", "infiniband", r.Name), dir); err != nil {
			return err
		}
	}
	return w.err
}

type writer struct {
	root string
	err  error
}

func (w *writer) sys(rel string) string { return filepath.Join(w.root, "sys", rel) }

func (w *writer) file(rel, content string) {
	if w.err != nil {
		return
	}
	p := w.sys(rel)
	if content == Unreadable {
		// A directory with a file in it, so that git keeps it.
		if w.err = os.MkdirAll(p, 0o755); w.err == nil {
			w.err = os.WriteFile(filepath.Join(p, "unreadable"), nil, 0o644)
		}
		return
	}
	if w.err = os.MkdirAll(filepath.Dir(p), 0o755); w.err != nil {
		return
	}
	w.err = os.WriteFile(p, []byte(content+"\n"), 0o644)
}

// link makes sys/<rel> a relative symlink to sys/<target>, as the kernel does.
func (w *writer) link(rel, target string) error {
	if w.err != nil {
		return w.err
	}
	p := w.sys(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	dest, err := filepath.Rel(filepath.Dir(p), w.sys(target))
	if err != nil {
		return err
	}
	_ = os.Remove(p)
	return os.Symlink(dest, p)
}

func (fn Function) dir() string {
	parts := []string{"devices", fn.Root}
	if fn.Port != "" {
		parts = append(parts, fn.Port)
	}
	return filepath.Join(append(parts, fn.Address)...)
}

func (w *writer) function(fn Function, pf string) error {
	dir := fn.dir()
	hex4 := func(v uint16) string { return fmt.Sprintf("0x%04x", v) }
	files := map[string]string{
		"vendor":           hex4(fn.Vendor),
		"device":           hex4(fn.Device),
		"subsystem_vendor": hex4(fn.SubVendor),
		"subsystem_device": hex4(fn.SubDev),
		"class":            fmt.Sprintf("0x%06x", fn.Class),
		"revision":         "0x02",
		"numa_node":        strconv.Itoa(fn.NUMANode),
		"modalias": fmt.Sprintf("pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X",
			fn.Vendor, fn.Device, fn.SubVendor, fn.SubDev, fn.Class>>16, (fn.Class>>8)&0xff, fn.Class&0xff),
	}
	if pf == "" && !fn.NoSRIOVFiles && (fn.TotalVFs > 0 || fn.Class>>16 == 0x02) {
		files["sriov_totalvfs"] = strconv.Itoa(fn.TotalVFs)
		files["sriov_numvfs"] = strconv.Itoa(len(fn.VFs))
	}
	for k, v := range fn.Overrides {
		files[k] = v
	}
	for name, content := range files {
		w.file(filepath.Join(dir, name), content)
	}
	if err := w.link(filepath.Join("bus", "pci", "devices", fn.Address), dir); err != nil {
		return err
	}
	if fn.Driver != "" {
		w.file(filepath.Join("bus", "pci", "drivers", fn.Driver, "new_id"), "")
		if err := w.link(filepath.Join(dir, "driver"), filepath.Join("bus", "pci", "drivers", fn.Driver)); err != nil {
			return err
		}
		if err := w.link(filepath.Join("bus", "pci", "drivers", fn.Driver, fn.Address), dir); err != nil {
			return err
		}
	}
	if fn.IOMMUGroup >= 0 {
		group := filepath.Join("kernel", "iommu_groups", strconv.Itoa(fn.IOMMUGroup))
		if err := w.link(filepath.Join(dir, "iommu_group"), group); err != nil {
			return err
		}
		if err := w.link(filepath.Join(group, "devices", fn.Address), dir); err != nil {
			return err
		}
	}
	if pf != "" {
		if err := w.link(filepath.Join(dir, "physfn"), pf); err != nil {
			return err
		}
	}
	if n := fn.Netdev; n != nil {
		ndir := filepath.Join(dir, "net", n.Name)
		if err := w.netdevFiles(ndir, *n); err != nil {
			return err
		}
		if err := w.link(filepath.Join("class", "net", n.Name), ndir); err != nil {
			return err
		}
	}
	if fn.RDMA != "" {
		ib := filepath.Join(dir, "infiniband", fn.RDMA)
		w.file(filepath.Join(ib, "node_type"), "1: CA")
		if err := w.link(filepath.Join(ib, "device"), dir); err != nil {
			return err
		}
		if err := w.link(filepath.Join("class", "infiniband", fn.RDMA), ib); err != nil {
			return err
		}
	}
	for i, vf := range fn.VFs {
		if vf.Root == "" {
			vf.Root, vf.Port = fn.Root, fn.Port
		}
		if err := w.function(vf, dir); err != nil {
			return err
		}
		if err := w.link(filepath.Join(dir, "virtfn"+strconv.Itoa(i)), vf.dir()); err != nil {
			return err
		}
	}
	return w.err
}

func (w *writer) netdevFiles(dir string, n Netdev) error {
	w.file(filepath.Join(dir, "address"), n.MAC)
	w.file(filepath.Join(dir, "mtu"), strconv.Itoa(n.MTU))
	w.file(filepath.Join(dir, "operstate"), n.OperState)
	w.file(filepath.Join(dir, "ifindex"), strconv.Itoa(n.IfIndex))
	w.file(filepath.Join(dir, "speed"), strconv.Itoa(n.Speed))
	w.file(filepath.Join(dir, "ifalias"), n.Alias)
	for name, content := range n.Overrides {
		w.file(filepath.Join(dir, name), content)
	}
	return w.err
}

// MAC returns a locally administered MAC derived from n.
func MAC(n int) string {
	return fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", (n>>24)&0xff, (n>>16)&0xff, (n>>8)&0xff, n&0xff)
}

// Address formats a PCI address.
func Address(domain, bus, dev, fn int) string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, bus, dev, fn)
}

// vfAddress is the address of VF i of a PF on bus b: eight functions per
// device from device 1, continuing on the next buses, as SR-IOV routing IDs
// lay them out.
func vfAddress(bus, i int) string {
	slot := 8 + i // device 1, function 0
	return Address(0, bus+slot/256, (slot%256)/8, slot%8)
}

// bridge is the upstream port of a root, listed as a PCI bridge function.
func bridge(root string, port string) Function {
	return Function{Address: port, Root: root, Vendor: 0x8086, Device: 0x2030, SubVendor: 0x8086, SubDev: 0x0000,
		Class: 0x060400, Driver: "pcieport", NUMANode: 0, IOMMUGroup: -1}
}

// TempDir is a directory for a large fixture tree, removed when the test
// ends: on tmpfs (/dev/shm) where there is one, because creating thousands
// of small files on a disk file system takes seconds.
func TempDir(tb interface {
	TempDir() string
	Cleanup(func())
	Fatal(...any)
}) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "fastpath-sysfs-")
		if err == nil {
			tb.Cleanup(func() { _ = os.RemoveAll(dir) })
			return dir
		}
	}
	return tb.TempDir()
}
