package dra

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// groupAlone says why a device cannot be bound to vfio-pci because its
// IOMMU group holds other PCI functions too, nil when it is alone: the
// group is what vfio hands a pod (its device node), and every function in
// it must leave its driver for vfio-pci before the group can be used; the
// pod would reach the others' DMA, or the device would not work.
func groupAlone(dev *claims.Device, group int, pci PCIBinder) (field.ErrorList, error) {
	members, err := pci.GroupDevices(group)
	if err != nil {
		return nil, err
	}
	others := slices.DeleteFunc(members, func(a string) bool { return a == dev.PCIAddress })
	if len(others) == 0 {
		return nil, nil
	}
	return field.ErrorList{field.Invalid(field.NewPath("mode"), dev.Mode, fmt.Sprintf(
		"device %s shares IOMMU group %d with %s: vfio hands a pod the whole group, so it would reach them too; claim a device alone in its group "+
			"(a slot behind a port with ACS, or a VF of a PF whose root port has it), or use mode netdev or afxdp",
		dev.Device, group, strings.Join(others, ", ")))}, nil
}

// pfWithVFs says why a device cannot be handed over whole because it is a
// PF with VFs now (its sriov_numvfs, read at Prepare: VFs made since the
// device was published count), "" when it can. Whoever holds a PF's
// netdev, directly or through a delegate plugin, sets every VF's MAC, VLAN
// and trust, and the VFs are other pods'; so the whole modes refuse it
// unless the operator allows it (allowed). Bound to vfio-pci, the PF would
// take its VFs away: mode vfio refuses it always. Sub-interfaces made on a
// shared PF leave it as it is.
func pfWithVFs(dev *claims.Device, vfs VFCounter, allowed bool) (field.ErrorList, error) {
	if dev.Kind != string(devices.KindNIC) || dev.PCIAddress == "" {
		return nil, nil
	}
	switch dev.Mode {
	case v1alpha1.ModeVFIO:
	case v1alpha1.ModeNetdev, v1alpha1.ModeAFXDP, v1alpha1.ModeDelegate:
		if allowed {
			return nil, nil
		}
	default:
		return nil, nil
	}
	n, err := vfs.NumVFs(dev.PCIAddress)
	if err != nil {
		return nil, fmt.Errorf("read the VF count of PF %s: %w", dev.PCIAddress, err)
	}
	if n == 0 {
		return nil, nil
	}
	mode := field.NewPath("mode")
	if dev.Mode == v1alpha1.ModeVFIO {
		return field.ErrorList{field.Invalid(mode, dev.Mode, fmt.Sprintf(
			"device %s is a PF with %d VFs (sriov_numvfs): binding it to vfio-pci would take them away; claim one of its VFs", dev.Device, n))}, nil
	}
	return field.ErrorList{field.Invalid(mode, dev.Mode, fmt.Sprintf(
		"device %s is a PF with %d VFs (sriov_numvfs): whoever holds it whole sets every VF's MAC, VLAN and trust, and its VFs are other pods'; "+
			"claim one of its VFs, share it (--share), or let this node hand PFs with VFs over whole (fastpathd run --allow-pf-with-vfs, chart value allowPFWithVFs)",
		dev.Device, n))}, nil
}
