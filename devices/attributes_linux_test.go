package devices

import (
	"path/filepath"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// TestNUMANodeMatchesHelper: every PCI device of every fixture tree
// publishes the standard resource.kubernetes.io/numaNode the
// deviceattribute helper reads from the same tree, and the deprecated
// fastpath.dev/numaNode with the same value; where the helper refuses
// (numa_node -1), the device publishes neither.
func TestNUMANodeMatchesHelper(t *testing.T) {
	names := make([]string, 0, len(sysfsfixture.Named()))
	for name := range sysfsfixture.Named() {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			root := fixture(name)
			sys := deviceattribute.WithFSFromRoot(filepath.Join(root, "sys"))
			for _, d := range discover(t, Options{SysfsRoot: root}).Devices {
				if d.PCI == nil {
					continue
				}
				a := d.Attributes()
				std, hasStd := a[deviceattribute.StandardDeviceAttributeNUMANode]
				alias, hasAlias := a["numaNode"]
				want, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(d.PCI.Address, deviceattribute.ScalarAttribute, sys)
				if err != nil {
					if hasStd || hasAlias {
						t.Errorf("%s: numaNode published (standard %v, alias %v), the helper says %v", d.Name, hasStd, hasAlias, err)
					}
					continue
				}
				if !hasStd || !sameInt(std, want.Value) {
					t.Errorf("%s: %s = %v, the helper says %v", d.Name, want.Name, intOf(std), intOf(want.Value))
				}
				if !hasAlias || !sameInt(alias, want.Value) {
					t.Errorf("%s: the alias fastpath.dev/numaNode = %v, want %v", d.Name, intOf(alias), intOf(want.Value))
				}
			}
		})
	}
}

func sameInt(a, b resourceapi.DeviceAttribute) bool {
	return a.IntValue != nil && b.IntValue != nil && *a.IntValue == *b.IntValue && a.IntValues == nil && b.IntValues == nil
}

func intOf(a resourceapi.DeviceAttribute) any {
	if a.IntValue == nil {
		return "<not an int>"
	}
	return *a.IntValue
}
