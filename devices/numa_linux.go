package devices

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// NUMANodeLists is, for each NUMA node of the machine below root (a sysfs
// root: "/" on a live host), the list form of resource.kubernetes.io/numaNode
// for a device on that node (DRAListTypeAttributes): the node first, then
// the nodes of its socket at the nearest distance, as the deviceattribute
// helper reads them from the firmware's distance table. A device on node 1
// of a socket split in two (sub-NUMA clustering) is then near 1 and 0, and
// a matchAttribute with a device on either is met. A machine that reports
// no NUMA node has none.
func NUMANodeLists(root string) (map[int64][]int64, error) {
	sys := filepath.Join(root, "sys")
	entries, err := os.ReadDir(filepath.Join(sys, "devices", "system", "node"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("NUMA nodes: %w", err)
	}
	out := map[int64][]int64{}
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "node"))
		if !strings.HasPrefix(e.Name(), "node") || err != nil {
			continue
		}
		attr, err := deviceattribute.GetNUMANodeAttribute(n, deviceattribute.ListAttribute, deviceattribute.WithFSFromRoot(sys))
		if err != nil {
			// Beyond the kernel's 1024 nodes: no device can be on it.
			continue
		}
		out[int64(n)] = attr.Value.IntValues
	}
	return out, nil
}
