package devices

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// pciNetworkClass is the PCI base class of network controllers.
const pciNetworkClass = "02"

// discoverPCI enumerates the PCI network functions below the sysfs root.
// A function whose sysfs files are unreadable or malformed is skipped with a
// warning naming the path.
func discoverPCI(_ context.Context, s sysfs, names *pciNames, netdevs map[string]string) ([]Device, []error, error) {
	entries, err := os.ReadDir(s.path("bus", "pci", "devices"))
	if err != nil {
		return nil, nil, fmt.Errorf("list PCI devices: %w", err)
	}
	type result struct {
		id   modalias
		dev  *Device
		warn error
	}
	results := make([]result, len(entries))
	parallel(len(entries), func(i int) {
		addr := entries[i].Name()
		raw, err := readTrimmed(s.pciDevice(addr, "modalias"))
		if err != nil {
			results[i].warn = fmt.Errorf("skipping PCI device %s: %w", addr, err)
			return
		}
		id, ok := parseModalias(raw)
		if !ok {
			results[i].warn = fmt.Errorf("skipping PCI device %s: %s: malformed modalias %q", addr, s.pciDevice(addr, "modalias"), raw)
			return
		}
		if id.class == pciNetworkClass {
			results[i].id = id
		}
	})
	var ids []modalias
	for _, r := range results {
		if r.id.class != "" {
			ids = append(ids, r.id)
		}
	}
	var warnings []error
	if err := names.resolve(ids); err != nil {
		warnings = append(warnings, fmt.Errorf("PCI devices are published without vendor and device names: %w", err))
	}
	vfIDs := &vfIndexes{ids: map[string]int{}}
	parallel(len(entries), func(i int) {
		if results[i].id.class == "" {
			return
		}
		d, err := pciFunction(s, entries[i].Name(), results[i].id, names, netdevs, vfIDs)
		if err != nil {
			results[i].warn = fmt.Errorf("skipping PCI device %s: %w", entries[i].Name(), err)
			return
		}
		results[i].dev = &d
	})
	var devs []Device
	for _, r := range results {
		if r.warn != nil {
			warnings = append(warnings, r.warn)
		}
		if r.dev != nil {
			devs = append(devs, *r.dev)
		}
	}
	return devs, warnings, nil
}

func pciFunction(s sysfs, addr string, id modalias, names *pciNames, netdevs map[string]string, vfIDs *vfIndexes) (Device, error) {
	p := &PCI{
		Address:         addr,
		Driver:          linkBase(s.pciDevice(addr, "driver")),
		NUMANode:        -1,
		Vendor:          id.vendor,
		Device:          id.device,
		SubsystemVendor: id.subVendor,
		SubsystemDevice: id.subDevice,
	}
	p.VendorName, p.DeviceName = names.names(id)
	var err error
	if p.NUMANode, err = readOptionalInt(s.pciDevice(addr, "numa_node"), -1); err != nil {
		return Device{}, err
	}
	if group := linkBase(s.pciDevice(addr, "iommu_group")); group != "" {
		g, err := strconv.Atoi(group)
		if err != nil {
			return Device{}, fmt.Errorf("%s: malformed IOMMU group %q", s.pciDevice(addr, "iommu_group"), group)
		}
		p.IOMMUGroup = &g
	}
	if p.PCIeRoot, err = pcieRoot(s, addr); err != nil {
		return Device{}, err
	}

	d := Device{Name: PCIDeviceName(addr), Kind: KindNIC, PCI: p}
	if pfAddr := linkBase(s.pciDevice(addr, "physfn")); pfAddr != "" {
		id, err := vfIndex(s, pfAddr, addr, vfIDs)
		if err != nil {
			return Device{}, err
		}
		d.Kind = KindSRIOVVF
		d.VF = &VF{ID: id, PFPCIAddress: pfAddr, PFName: netdevs[pfAddr]}
	} else if total, err := readOptionalInt(s.pciDevice(addr, "sriov_totalvfs"), 0); err != nil {
		return Device{}, err
	} else if total > 0 {
		num, err := readInt(s.pciDevice(addr, "sriov_numvfs"))
		if err != nil {
			return Device{}, err
		}
		d.PF = &PF{TotalVFs: total, NumVFs: num}
	}
	if ifName := netdevs[addr]; ifName != "" {
		d.Netdev = &Netdev{Name: ifName}
	}
	return d, nil
}

// vfIndexes maps VF addresses to their index on their PF, read from the
// PFs' virtfnN links once per PF and discovery.
type vfIndexes struct {
	mu     sync.Mutex
	ids    map[string]int
	readPF map[string]bool
}

// vfIndex finds the N of the PF's virtfnN link that points at the VF.
func vfIndex(s sysfs, pfAddr, vfAddr string, v *vfIndexes) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.readPF[pfAddr] {
		links, err := filepath.Glob(s.pciDevice(pfAddr, "virtfn*"))
		if err != nil {
			return 0, err
		}
		for _, l := range links {
			n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(l), "virtfn"))
			if err != nil {
				return 0, fmt.Errorf("%s: malformed virtfn link name", l)
			}
			if vf := linkBase(l); vf != "" {
				v.ids[vf] = n
			}
		}
		if v.readPF == nil {
			v.readPF = map[string]bool{}
		}
		v.readPF[pfAddr] = true
	}
	if id, ok := v.ids[vfAddr]; ok {
		return id, nil
	}
	return 0, fmt.Errorf("%s: no virtfn link points at VF %s", s.pciDevice(pfAddr), vfAddr)
}

// pcieRoot is the PCIe root complex of a function, e.g. pci0000:3a: what the
// standard resource.kubernetes.io/pcieRoot attribute holds. On a live host
// the deviceattribute helper finds it; below a fixture root (which the helper
// cannot read) the same rule is applied here: the first element below
// sys/devices of the function's real path.
func pcieRoot(s sysfs, addr string) (string, error) {
	if s.live() {
		attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(addr)
		if err != nil {
			return "", err
		}
		return *attr.Value.StringValue, nil
	}
	return pcieRootBelow(s, addr)
}

// standardNUMANode is the standard resource.kubernetes.io/numaNode
// attribute of a function on NUMA node n, in the scalar form every cluster
// accepts (the list form needs the DRAListTypeAttributes feature gate). It
// is not there (ok false) for a node the platform does not report (-1) or
// beyond the kernel's 1024: a device with no NUMA affinity must not publish
// it, or it would match every other such device under matchAttribute.
func standardNUMANode(n int) (attr resourceapi.DeviceAttribute, ok bool) {
	a, err := deviceattribute.GetNUMANodeAttribute(n, deviceattribute.ScalarAttribute)
	if err != nil {
		return resourceapi.DeviceAttribute{}, false
	}
	return a.Value, true
}

func pcieRootBelow(s sysfs, addr string) (string, error) {
	link := s.pciDevice(addr)
	dest, err := os.Readlink(link)
	if err != nil {
		return "", fmt.Errorf("%s: %w", link, err)
	}
	if !filepath.IsAbs(dest) {
		dest = filepath.Join(filepath.Dir(link), dest)
	}
	rel, err := filepath.Rel(s.path("devices"), dest)
	if err != nil || strings.HasPrefix(rel, "..") || filepath.Base(dest) != addr {
		return "", fmt.Errorf("%s: points to %s, not below %s", link, dest, s.path("devices"))
	}
	root := strings.Split(rel, string(filepath.Separator))[0]
	if !strings.HasPrefix(root, "pci") {
		return "", fmt.Errorf("%s: %s is not a PCI root", link, root)
	}
	return root, nil
}

// classNet maps PCI addresses to the netdev whose sysfs device path runs
// through them (class/net/X -> .../0000:3b:00.0/net/X, or a virtual
// function's .../0000:00:03.0/virtio2/net/X; the nearest PCI function wins),
// and lists the virtual netdevs (below devices/virtual/net), loopback aside.
func classNet(s sysfs) (byPCI map[string]string, virtual []string, err error) {
	entries, err := os.ReadDir(s.path("class", "net"))
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", s.path("class", "net"), err)
	}
	byPCI = map[string]string{}
	for _, e := range entries { // sorted by name
		name := e.Name()
		dest, err := os.Readlink(s.path("class", "net", name))
		if err != nil {
			continue
		}
		dest = filepath.ToSlash(dest)
		if strings.Contains(dest, "/devices/virtual/net/") {
			if name != "lo" {
				virtual = append(virtual, name)
			}
			continue
		}
		parts := strings.Split(dest, "/")
		for i := len(parts) - 1; i >= 0; i-- {
			if isPCIAddress(parts[i]) {
				if _, taken := byPCI[parts[i]]; !taken {
					byPCI[parts[i]] = name
				}
				break
			}
		}
	}
	return byPCI, virtual, nil
}

func isPCIAddress(s string) bool {
	// dddd:bb:dd.f
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return false
	}
	for i, c := range s {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}
