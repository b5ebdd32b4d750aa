package v1alpha1

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fpv1 "github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

func TestValidate(t *testing.T) {
	good := func() FastpathNodeConfigSpec {
		f := `device.attributes["fastpath.dev"].kind == "sriov-vf"`
		return FastpathNodeConfigSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}, Filter: &f,
			Share:          &Share{Filter: "true", Interfaces: 8},
			ResourceNames:  []ResourceName{{Name: "intel.com/sriov", Filter: "true"}},
			IPPools:        []fpv1.IPPool{{Name: "fast", Subnet: "10.56.0.0/24"}},
			MemifEndpoints: []fpv1.MemifEndpoint{{Name: "vpp", Role: "master"}},
			VFs: []VFs{{PF: PFSelector{Name: "ens1f0"}, NumVFs: 8}, {PF: PFSelector{PCIAddress: "0000:3b:00.1"}, NumVFs: 4, Driver: "vfio-pci",
				Ranges: []VFRange{{First: 0, Last: 1, Driver: "iavf"}}, MTU: 9000, LinkState: "up", ESwitchMode: "legacy"}}}
	}
	if s := good(); len(s.Validate(field.NewPath("spec"))) != 0 {
		t.Fatalf("good spec: %v", s.Validate(field.NewPath("spec")))
	}
	for name, c := range map[string]struct {
		change func(*FastpathNodeConfigSpec)
		want   string
	}{
		"PF by name and address": {func(s *FastpathNodeConfigSpec) { s.VFs[0].PF.PCIAddress = "0000:3b:00.0" }, "spec.vfs[0].pf: Invalid value"},
		"PF by neither":          {func(s *FastpathNodeConfigSpec) { s.VFs[0].PF = PFSelector{} }, "spec.vfs[0].pf: Invalid value"},
		"a short PCI address":    {func(s *FastpathNodeConfigSpec) { s.VFs[1].PF.PCIAddress = "3b:00.1" }, "spec.vfs[1].pf.pciAddress"},
		"a PCI address in CAPS":  {func(s *FastpathNodeConfigSpec) { s.VFs[1].PF.PCIAddress = "0000:3B:00.1" }, "spec.vfs[1].pf.pciAddress"},
		"a PF twice":             {func(s *FastpathNodeConfigSpec) { s.VFs[1].PF = PFSelector{Name: "ens1f0"} }, "spec.vfs[1].pf: Duplicate value"},
		"negative VFs":           {func(s *FastpathNodeConfigSpec) { s.VFs[0].NumVFs = -1 }, "spec.vfs[0].numVfs"},
		"a driver path":          {func(s *FastpathNodeConfigSpec) { s.VFs[1].Driver = "../../bind" }, "spec.vfs[1].driver"},
		"a range past numVfs":    {func(s *FastpathNodeConfigSpec) { s.VFs[1].Ranges[0].Last = 4 }, "spec.vfs[1].ranges[0].last: Invalid value: 4: the PF has 4 VFs"},
		"a range backwards":      {func(s *FastpathNodeConfigSpec) { s.VFs[1].Ranges[0].First = 2 }, "spec.vfs[1].ranges[0]: Invalid value: \"2-1\""},
		"ranges overlapping": {func(s *FastpathNodeConfigSpec) {
			s.VFs[1].Ranges = append(s.VFs[1].Ranges, VFRange{First: 1, Last: 3})
		}, "spec.vfs[1].ranges[1]: Invalid value: \"1-3\": overlaps ranges[0]"},
		"a range's driver path":   {func(s *FastpathNodeConfigSpec) { s.VFs[1].Ranges[0].Driver = "a/b" }, "spec.vfs[1].ranges[0].driver"},
		"an MTU too small":        {func(s *FastpathNodeConfigSpec) { s.VFs[1].MTU = 67 }, "spec.vfs[1].mtu"},
		"a link state in CAPS":    {func(s *FastpathNodeConfigSpec) { s.VFs[1].LinkState = "UP" }, "spec.vfs[1].linkState: Unsupported value"},
		"switchdev":               {func(s *FastpathNodeConfigSpec) { s.VFs[0].ESwitchMode = "switchdev" }, "spec.vfs[0].eSwitchMode: Invalid value: \"switchdev\": fastpath keeps"},
		"externally managed":      {func(s *FastpathNodeConfigSpec) { s.VFs[0].ExternallyManaged = true }, "spec.vfs[0].externallyManaged"},
		"a pool not canonical":    {func(s *FastpathNodeConfigSpec) { s.IPPools[0].Subnet = "10.56.0.1/24" }, "spec.ipPools[0].subnet"},
		"a pool twice":            {func(s *FastpathNodeConfigSpec) { s.IPPools = append(s.IPPools, s.IPPools[0]) }, "spec.ipPools[1].name: Duplicate"},
		"a memif role":            {func(s *FastpathNodeConfigSpec) { s.MemifEndpoints[0].Role = "boss" }, "spec.memifEndpoints[0].role"},
		"share without filter":    {func(s *FastpathNodeConfigSpec) { s.Share.Filter = "" }, "spec.share.filter: Required"},
		"a resource name unnamed": {func(s *FastpathNodeConfigSpec) { s.ResourceNames[0].Name = "" }, "spec.resourceNames[0].name: Required"},
		"a bad selector": {func(s *FastpathNodeConfigSpec) {
			s.NodeSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "pool", Operator: "Near"}}
		}, "spec.nodeSelector"},
	} {
		s := good()
		c.change(&s)
		errs := s.Validate(field.NewPath("spec"))
		if !strings.Contains(errs.ToAggregate().Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, errs, c.want)
		}
	}
}

func TestSelects(t *testing.T) {
	s := FastpathNodeConfigSpec{NodeSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "pool", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}}}
	for labels, want := range map[string]bool{"a": true, "b": true, "c": false, "": false} {
		got, err := s.Selects(map[string]string{"pool": labels})
		if err != nil || got != want {
			t.Errorf("pool=%q: %v, %v; want %v", labels, got, err, want)
		}
	}
	every := FastpathNodeConfigSpec{}
	if ok, _ := every.Selects(nil); !ok {
		t.Error("{} selects no node, want every node")
	}
}
