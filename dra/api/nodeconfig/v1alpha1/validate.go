package v1alpha1

import (
	"fmt"
	"regexp"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fpv1 "github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// pciAddress is a PCI function's address in full, as sysfs names it.
var pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// driverName is a kernel driver's name (a directory of
// /sys/bus/pci/drivers).
var driverName = regexp.MustCompile(`^[a-z0-9_][a-z0-9_.-]{0,63}$`)

// Validate checks what the spec says by itself; what a node has (its PFs,
// their VFs, whether a filter compiles) it checks when it applies it.
// Every error names the field.
func (s *FastpathNodeConfigSpec) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if _, err := metav1.LabelSelectorAsSelector(&s.NodeSelector); err != nil {
		errs = append(errs, field.Invalid(path.Child("nodeSelector"), s.NodeSelector, err.Error()))
	}
	if s.Share != nil {
		p := path.Child("share")
		if s.Share.Filter == "" {
			errs = append(errs, field.Required(p.Child("filter"), "the devices to share"))
		}
		if s.Share.Interfaces < 0 {
			errs = append(errs, field.Invalid(p.Child("interfaces"), s.Share.Interfaces, "must be at least 1 (0: the default)"))
		}
		if s.Share.BandwidthMbps < 0 {
			errs = append(errs, field.Invalid(p.Child("bandwidthMbps"), s.Share.BandwidthMbps, "must not be negative"))
		}
	}
	for i, rn := range s.ResourceNames {
		p := path.Child("resourceNames").Index(i)
		if rn.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		if rn.Filter == "" {
			errs = append(errs, field.Required(p.Child("filter"), `"true" for every device`))
		}
	}
	if s.IPPools != nil {
		cfg := fpv1.IPPoolConfig{APIVersion: fpv1.GroupVersion, Kind: fpv1.KindIPPoolConfig, Pools: s.IPPools}
		for _, e := range cfg.Validate(path) {
			// The config's pools are the spec's ipPools.
			e.Field = path.Child("ipPools").String() + e.Field[len(path.Child("pools").String()):]
			errs = append(errs, e)
		}
	}
	if len(s.MemifEndpoints) > 0 {
		cfg := s.Memif()
		for _, e := range cfg.Validate(path) {
			e.Field = path.Child("memifEndpoints").String() + e.Field[len(path.Child("endpoints").String()):]
			errs = append(errs, e)
		}
	}
	seen := map[string]bool{}
	for i, v := range s.VFs {
		p := path.Child("vfs").Index(i)
		switch {
		case (v.PF.Name == "") == (v.PF.PCIAddress == ""):
			errs = append(errs, field.Invalid(p.Child("pf"), v.PF, "name the PF by exactly one of name (its netdev) and pciAddress"))
		case v.PF.PCIAddress != "" && !pciAddress.MatchString(v.PF.PCIAddress):
			errs = append(errs, field.Invalid(p.Child("pf", "pciAddress"), v.PF.PCIAddress, "must be a PCI address in full, like 0000:3b:00.0"))
		case seen[v.PF.String()]:
			errs = append(errs, field.Duplicate(p.Child("pf"), v.PF.String()))
		}
		seen[v.PF.String()] = true
		if v.NumVFs < 0 {
			errs = append(errs, field.Invalid(p.Child("numVfs"), v.NumVFs, "must not be negative"))
		}
		if v.Driver != "" && !driverName.MatchString(v.Driver) {
			errs = append(errs, field.Invalid(p.Child("driver"), v.Driver, "must be a kernel driver's name, like vfio-pci"))
		}
		for j, r := range v.Ranges {
			rp := p.Child("ranges").Index(j)
			switch {
			case r.First < 0 || r.First > r.Last:
				errs = append(errs, field.Invalid(rp, fmt.Sprintf("%d-%d", r.First, r.Last), "first must be at least 0 and at most last"))
			case r.Last >= v.NumVFs:
				errs = append(errs, field.Invalid(rp.Child("last"), r.Last, fmt.Sprintf("the PF has %d VFs (numVfs): VF indexes are 0 to %d", v.NumVFs, v.NumVFs-1)))
			}
			for k, o := range v.Ranges[:j] {
				if r.First <= o.Last && o.First <= r.Last {
					errs = append(errs, field.Invalid(rp, fmt.Sprintf("%d-%d", r.First, r.Last), fmt.Sprintf("overlaps ranges[%d] (%d-%d): a VF has one driver", k, o.First, o.Last)))
				}
			}
			if r.Driver != "" && !driverName.MatchString(r.Driver) {
				errs = append(errs, field.Invalid(rp.Child("driver"), r.Driver, "must be a kernel driver's name, like vfio-pci"))
			}
		}
		if v.MTU != 0 && (v.MTU < 68 || v.MTU > 65535) {
			errs = append(errs, field.Invalid(p.Child("mtu"), v.MTU, "must be 68 to 65535 (0 leaves the PF's MTU as it is)"))
		}
		if v.LinkState != "" && v.LinkState != LinkUp && v.LinkState != LinkDown {
			errs = append(errs, field.NotSupported(p.Child("linkState"), v.LinkState, []string{LinkUp, LinkDown}))
		}
		if v.ESwitchMode != "" && v.ESwitchMode != "legacy" {
			errs = append(errs, field.Invalid(p.Child("eSwitchMode"), v.ESwitchMode, "fastpath keeps a PF's eswitch in legacy mode: it does not make switchdev representors; leave the PF to the tool that does"))
		}
		if v.ExternallyManaged {
			errs = append(errs, field.Invalid(p.Child("externallyManaged"), true, "fastpath changes nothing of a PF this list leaves out: remove the entry, and the VFs the PF's own tool makes are published as they are"))
		}
	}
	return errs
}

// Expression is a CEL expression of the spec and where it is.
type Expression struct {
	Path *field.Path
	Expr string
}

// Filters are the spec's CEL expressions: filter, share's, the resource
// names'.
func (s *FastpathNodeConfigSpec) Filters() []Expression {
	var out []Expression
	if s.Filter != nil && *s.Filter != "" {
		out = append(out, Expression{field.NewPath("spec", "filter"), *s.Filter})
	}
	if s.Share != nil && s.Share.Filter != "" {
		out = append(out, Expression{field.NewPath("spec", "share", "filter"), s.Share.Filter})
	}
	for i, rn := range s.ResourceNames {
		if rn.Filter != "" {
			out = append(out, Expression{field.NewPath("spec", "resourceNames").Index(i).Child("filter"), rn.Filter})
		}
	}
	return out
}

// Memif is the spec's memif endpoints as a memif config, defaulted.
func (s *FastpathNodeConfigSpec) Memif() fpv1.MemifConfig {
	cfg := fpv1.MemifConfig{APIVersion: fpv1.GroupVersion, Kind: fpv1.KindMemifConfig, Endpoints: slices.Clone(s.MemifEndpoints)}
	cfg.Default()
	return cfg
}

// Selects says whether the spec selects a node with nodeLabels.
func (s *FastpathNodeConfigSpec) Selects(nodeLabels map[string]string) (bool, error) {
	sel, err := metav1.LabelSelectorAsSelector(&s.NodeSelector)
	if err != nil {
		return false, fmt.Errorf("nodeSelector: %w", err)
	}
	return sel.Matches(labels.Set(nodeLabels)), nil
}
