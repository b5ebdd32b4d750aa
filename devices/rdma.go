package devices

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// rdmaDevices maps netdev names to the RDMA device (class/infiniband) on
// top of each. A software RDMA device (rdma_rxe) names its netdev in its
// parent file; a hardware one's device is the PCI function, whose net/
// lists the netdevs it shares the function with. Where a netdev has more
// than one, the first by name is kept. A node without RDMA devices (no
// class/infiniband) has none.
func rdmaDevices(s sysfs) (map[string]string, error) {
	dir := s.path("class", "infiniband")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	byNetdev := map[string]string{}
	add := func(netdev, ibdev string) {
		if _, taken := byNetdev[netdev]; !taken && netdev != "" {
			byNetdev[netdev] = ibdev
		}
	}
	for _, e := range entries { // sorted by name
		ibdev := e.Name()
		if parent, err := readTrimmed(filepath.Join(dir, ibdev, "parent")); err == nil {
			add(parent, ibdev)
			continue
		}
		netdevs, _ := os.ReadDir(filepath.Join(dir, ibdev, "device", "net"))
		for _, n := range netdevs {
			add(n.Name(), ibdev)
		}
	}
	return byNetdev, nil
}
