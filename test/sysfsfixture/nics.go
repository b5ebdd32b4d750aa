package sysfsfixture

import "fmt"

const (
	intel    = 0x8086
	mellanox = 0x15b3
	ethernet = 0x020000
)

func nic(name string, index int, up bool, speed int) *Netdev {
	state := "down"
	if up {
		state = "up"
	}
	if !up {
		speed = -1
	}
	return &Netdev{Name: name, MAC: MAC(index), MTU: 1500, OperState: state, Speed: speed, IfIndex: index}
}

// sriovPF is a PF with numVFs VFs of vfDevice on the same bus; vfNetdev
// says, per VF index, whether the VF has a netdev (its driver bound) or is
// bound to vfio-pci.
func sriovPF(pf Function, ifPrefix string, vfDevice uint16, vfDriver string, numVFs int, firstIndex int, vfNetdev func(i int) bool) Function {
	var bus, dev, fn int
	if _, err := fmt.Sscanf(pf.Address, "0000:%x:%x.%x", &bus, &dev, &fn); err != nil {
		panic(fmt.Sprintf("fixture PF address %q: %v", pf.Address, err))
	}
	for i := range numVFs {
		vf := Function{
			Address: vfAddress(bus, i+fn*numVFs), Vendor: pf.Vendor, Device: vfDevice,
			SubVendor: pf.SubVendor, SubDev: pf.SubDev, Class: ethernet, NUMANode: pf.NUMANode, IOMMUGroup: -1,
		}
		if pf.IOMMUGroup >= 0 {
			vf.IOMMUGroup = pf.IOMMUGroup + 1 + i
		}
		if vfNetdev(i) {
			vf.Driver = vfDriver
			vf.Netdev = nic(fmt.Sprintf("%sv%d", ifPrefix, i), firstIndex+i, true, 100000)
		} else {
			vf.Driver = "vfio-pci"
		}
		pf.VFs = append(pf.VFs, vf)
	}
	return pf
}

// E810 is an Intel E810 (8086:1592, ice) with two ports: the first with
// four VFs (8086:1889), two on iavf with netdevs and two bound to vfio-pci,
// the second with SR-IOV capable but sriov_numvfs 0.
func E810() Tree {
	root, port := "pci0000:3a", "0000:3a:00.0"
	pf0 := Function{Address: "0000:3b:00.0", Root: root, Port: port, Vendor: intel, Device: 0x1592,
		SubVendor: intel, SubDev: 0x0002, Class: ethernet, Driver: "ice", NUMANode: 0, IOMMUGroup: 40,
		TotalVFs: 128, Netdev: nic("ens1f0", 10, true, 100000)}
	pf1 := pf0
	pf1.Address, pf1.IOMMUGroup, pf1.Netdev = "0000:3b:00.1", 60, nic("ens1f1", 11, false, 0)
	return Tree{Functions: []Function{
		bridge(root, port),
		sriovPF(pf0, "ens1f0", 0x1889, "iavf", 4, 20, func(i int) bool { return i < 2 }),
		pf1,
	}}
}

// X710 is an Intel X710 (8086:1572, i40e) on NUMA node 1 with two iavf VFs
// (8086:154c).
func X710() Tree {
	root, port := "pci0000:5d", "0000:5d:00.0"
	pf := Function{Address: "0000:5e:00.0", Root: root, Port: port, Vendor: intel, Device: 0x1572,
		SubVendor: intel, SubDev: 0x0007, Class: ethernet, Driver: "i40e", NUMANode: 1, IOMMUGroup: 70,
		TotalVFs: 64, Netdev: nic("ens2f0", 30, true, 10000)}
	return Tree{Functions: []Function{
		bridge(root, port),
		sriovPF(pf, "ens2f0", 0x154c, "iavf", 2, 31, func(int) bool { return true }),
	}}
}

// CX5 is a Mellanox ConnectX-5 (15b3:1017, mlx5_core) with two VFs
// (15b3:1018) on a host without an IOMMU and without NUMA information
// (numa_node -1). Each function has its RDMA device, mlx5_0 the PF's.
func CX5() Tree {
	root, port := "pci0000:ae", "0000:ae:00.0"
	pf := Function{Address: "0000:af:00.0", Root: root, Port: port, Vendor: mellanox, Device: 0x1017,
		SubVendor: mellanox, SubDev: 0x0007, Class: ethernet, Driver: "mlx5_core", NUMANode: -1, IOMMUGroup: -1,
		TotalVFs: 8, Netdev: nic("enp175s0f0np0", 40, true, 25000), RDMA: "mlx5_0"}
	pf = sriovPF(pf, "enp175s0f0", 0x1018, "mlx5_core", 2, 41, func(int) bool { return true })
	for i := range pf.VFs {
		pf.VFs[i].RDMA = fmt.Sprintf("mlx5_%d", i+1)
	}
	return Tree{Functions: []Function{bridge(root, port), pf}}
}

// Plain is a NIC without SR-IOV (Intel I210, igb) with soft-RoCE (rdma_rxe)
// on it, a SATA controller that is no network device, and a veth, which is
// published only when a filter admits it.
func Plain() Tree {
	return Tree{
		Functions: []Function{
			{Address: "0000:02:00.0", Root: "pci0000:00", Vendor: intel, Device: 0x1533, SubVendor: intel,
				SubDev: 0x0001, Class: ethernet, Driver: "igb", NUMANode: 0, IOMMUGroup: 5, NoSRIOVFiles: true,
				Netdev: nic("eno1", 2, true, 1000)},
			{Address: "0000:00:1f.2", Root: "pci0000:00", Vendor: intel, Device: 0xa102, SubVendor: intel,
				SubDev: 0x0001, Class: 0x010601, Driver: "ahci", NUMANode: 0, IOMMUGroup: 6},
		},
		Virtual:  []Virtual{{Netdev: *nic("veth0", 3, true, 10000)}},
		SoftRDMA: []SoftRDMA{{Name: "rxe0", Netdev: "eno1"}},
	}
}

// Broken holds one good NIC and functions whose sysfs files are malformed
// or unreadable: discovery must skip each with a warning and go on.
func Broken() Tree {
	good := Plain().Functions[0]
	badNUMA := good
	badNUMA.Address, badNUMA.Netdev = "0000:03:00.0", nic("eno2", 4, true, 1000)
	badNUMA.Overrides = map[string]string{"numa_node": "zero"}
	unreadable := good
	unreadable.Address, unreadable.Netdev = "0000:04:00.0", nic("eno3", 5, true, 1000)
	unreadable.NoSRIOVFiles = false
	unreadable.TotalVFs = 8
	unreadable.Overrides = map[string]string{"sriov_numvfs": Unreadable}
	badMTU := good
	badMTU.Address, badMTU.Netdev = "0000:05:00.0", nic("eno4", 6, true, 1000)
	badMTU.Netdev.Overrides = map[string]string{"mtu": "1500 bytes"}
	t := Tree{Functions: []Function{good, badNUMA, unreadable, badMTU}}
	return t
}

// Generated is an E810 PF with n VFs, half with netdevs and half bound to
// vfio-pci: the scale fixture.
func Generated(n int) Tree {
	root, port := "pci0000:3a", "0000:3a:00.0"
	pf := Function{Address: "0000:3b:00.0", Root: root, Port: port, Vendor: intel, Device: 0x1592,
		SubVendor: intel, SubDev: 0x0002, Class: ethernet, Driver: "ice", NUMANode: 0, IOMMUGroup: 40,
		TotalVFs: n, Netdev: nic("ens1f0", 10, true, 100000)}
	return Tree{Functions: []Function{
		bridge(root, port),
		sriovPF(pf, "ens1f0", 0x1889, "iavf", n, 100, func(i int) bool { return i%2 == 0 }),
	}}
}

// Named are the fixtures committed under devices/testdata.
func Named() map[string]Tree {
	return map[string]Tree{"e810": E810(), "x710": X710(), "cx5": CX5(), "plain": Plain(), "broken": Broken()}
}
