package dra

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/devices/filter"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// TestDeployDeviceClasses: every DeviceClass in deploy/ decodes, its config
// is a valid InterfaceConfig setting the mode the name says, and its selector
// picks exactly the E810 fixture devices that can serve that mode.
func TestDeployDeviceClasses(t *testing.T) {
	inv := testInventory(t)
	// The NIC without an IOMMU group is shared (--share): only the shared
	// class selects it.
	// A VF and the shared NIC have an RDMA device: only the VF is the
	// RDMA class's.
	for i := range inv.Devices {
		switch inv.Devices[i].Name {
		case noIOMMU:
			inv.Devices[i].Share = &devices.Share{Interfaces: 8}
			inv.Devices[i].Netdev.RDMADevice = "mlx5_1"
		case vfNetdev2:
			inv.Devices[i].Netdev.RDMADevice = "mlx5_2"
		}
	}
	want := map[string][]string{
		// Not the PF with VFs (allowPFWithVFs is off).
		"netdev.fastpath.dev": {"pci-0000-3b-00-1", vfNetdev, vfNetdev2},
		"shared.fastpath.dev": {noIOMMU},
		"afxdp.fastpath.dev":  {vfNetdev},
		"rdma.fastpath.dev":   {vfNetdev2},
		// Not the PF with VFs, not the NIC without an IOMMU group.
		"vfio.fastpath.dev": {"pci-0000-3b-00-1", vfNetdev, vfNetdev2, vfVFIO, "pci-0000-3b-01-3"},
		// Not the endpoint that does not answer.
		"memif.fastpath.dev": {memifSlave, memifMaster},
		// Every device with a resource name but the shared one and the PF
		// with VFs.
		"delegate.fastpath.dev": {"pci-0000-3b-00-1", vfNetdev, vfNetdev2, vfVFIO, "pci-0000-3b-01-3"},
	}
	modes := map[string]string{"netdev.fastpath.dev": v1alpha1.ModeNetdev, "rdma.fastpath.dev": v1alpha1.ModeNetdev, "afxdp.fastpath.dev": v1alpha1.ModeAFXDP, "vfio.fastpath.dev": v1alpha1.ModeVFIO,
		"shared.fastpath.dev": v1alpha1.ModeMacvlan, "delegate.fastpath.dev": v1alpha1.ModeDelegate}
	classes := deployDeviceClasses(t)
	for _, class := range classes {
		if mode, ok := modes[class.Name]; ok {
			var cfg v1alpha1.InterfaceConfig
			if len(class.Spec.Config) != 1 {
				t.Fatalf("%s: %d configs, want 1", class.Name, len(class.Spec.Config))
			}
			if errs := v1alpha1.DecodeInterfaceConfig(class.Spec.Config[0].Opaque.Parameters.Raw, &cfg, field.NewPath("config")); len(errs) > 0 {
				t.Errorf("%s: %v", class.Name, errs)
			}
			if cfg.Mode != mode {
				t.Errorf("%s sets mode %q, want %q", class.Name, cfg.Mode, mode)
			}
			if (cfg.RDMA != nil) != (class.Name == "rdma.fastpath.dev") {
				t.Errorf("%s sets rdma %+v", class.Name, cfg.RDMA)
			}
			// Its selector is written for its mode: a claim may not
			// change it.
			if !slices.Equal(cfg.Pinned, []string{"mode"}) {
				t.Errorf("%s pins %q, want its mode", class.Name, cfg.Pinned)
			}
			// What takes a shared device from the claims sharing it, only
			// as the API's defaults allow: no sharedParent, which a
			// release older than it would refuse.
			if cfg.SharedParent != nil {
				t.Errorf("%s: sharedParent %+v", class.Name, cfg.SharedParent)
			}
		}
		selector, err := filter.Compile(class.Spec.Selectors[0].CEL.Expression)
		if err != nil {
			t.Fatalf("%s: %v", class.Name, err)
		}
		var got []string
		for _, d := range inv.Devices {
			if ok, _ := selector.Admits(t.Context(), devices.DriverName, d.Attributes()); ok {
				got = append(got, d.Name)
			}
		}
		if len(got) != len(want[class.Name]) {
			t.Errorf("%s selects %v, want %v", class.Name, got, want[class.Name])
			continue
		}
		for i := range got {
			if got[i] != want[class.Name][i] {
				t.Errorf("%s selects %v, want %v", class.Name, got, want[class.Name])
				break
			}
		}
	}
	if len(classes) != len(want) {
		t.Errorf("deploy/deviceclasses.yaml holds %d classes, want %d", len(classes), len(want))
	}
}

// deployDeviceClasses are the DeviceClasses of deploy/deviceclasses.yaml,
// the chart's with its defaults.
func deployDeviceClasses(t *testing.T) []*resourceapi.DeviceClass {
	t.Helper()
	data, err := os.ReadFile("../deploy/deviceclasses.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var classes []*resourceapi.DeviceClass
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return classes
		}
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		class, ok := obj.(*resourceapi.DeviceClass)
		if !ok {
			t.Fatalf("deploy/deviceclasses.yaml holds a %T", obj)
		}
		classes = append(classes, class)
	}
}

// The API names the programs and pins package bpf ships.
func TestAPIMatchesBPF(t *testing.T) {
	if !slices.Equal(v1alpha1.XDPPrograms, bpf.Programs) {
		t.Errorf("the API allows programs %v, package bpf ships %v", v1alpha1.XDPPrograms, bpf.Programs)
	}
	if status.XSKMapPin != bpf.PinXSKMap {
		t.Errorf("status reports the XSKMAP as %q, package bpf pins it as %q", status.XSKMapPin, bpf.PinXSKMap)
	}
}
