package cnipolicy

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// AllowAll in a Policy's lists allows every device ("*"), or every host
// option ("*").
const AllowAll = "*"

// Policy is what the operator lets a tenant's configuration take from or
// change on the host. The zero Policy allows nothing.
type Policy struct {
	// Devices are the host devices (interface names, PCI addresses, MACs:
	// what master, bridge, device or pciBusID hold) a configuration may
	// name, as shell patterns ("ens1f*"). A default is allowed as its
	// value (bridge's cni0) would be; the node's default-route interface,
	// which macvlan, ipvlan and vlan take when master is left out, only by
	// AllowAll.
	Devices []string
	// Paths are the directories of the host under which a configuration
	// may name files; "/" allows all.
	Paths []string
	// Options are the host-changing options allowed, as patterns of
	// "<plugin type>.<option>" ("bridge.ipMasq", "bridge.*", "tuning.sysctl");
	// AllowAll allows all. A mode that takes the master whole is an
	// option named as the mode ("macvlan.passthru").
	Options []string
	// VLANIDs are the VLANs of their master a configuration may make its
	// interface on (vlan's vlanId, 0 when left out), as IDs ("100") and
	// ranges ("100-199") from 0 to 4094.
	VLANIDs []string
}

// Validate says why the policy is not one an operator can mean, or nil.
func (p Policy) Validate() error {
	var errs []error
	for _, pat := range p.Devices {
		if _, err := path.Match(pat, ""); err != nil || pat == "" {
			errs = append(errs, fmt.Errorf("host device %q: not a shell pattern", pat))
		}
	}
	for _, dir := range p.Paths {
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			errs = append(errs, fmt.Errorf("host path %q: not a clean absolute path", dir))
		}
	}
	for _, pat := range p.Options {
		if _, err := path.Match(pat, ""); err != nil || pat == "" || (pat != AllowAll && !strings.Contains(pat, ".")) {
			errs = append(errs, fmt.Errorf("host option %q: not a pattern of <plugin type>.<option>", pat))
		}
	}
	errs = append(errs, ValidateVLANIDs(p.VLANIDs))
	return errors.Join(errs...)
}

// ValidateVLANIDs says why a list of VLAN IDs and ranges is not one an
// operator can mean, or nil.
func ValidateVLANIDs(ids []string) error {
	var errs []error
	for _, s := range ids {
		if _, err := v1alpha1.ParseVLANRange(s, 0); err != nil {
			errs = append(errs, fmt.Errorf("VLAN IDs %q: %w", s, err))
		}
	}
	return errors.Join(errs...)
}

// allowsVLAN says whether the VLAN ID id (a Ref's value) is among ids.
func allowsVLAN(ids []string, id string) bool {
	n, err := strconv.Atoi(id)
	return err == nil && v1alpha1.VLANIDsAllow(ids, 0, n)
}

// Allows says whether the policy lets a configuration of a plugin of
// type pluginType take or change r.
func (p Policy) Allows(pluginType string, r Ref) bool {
	switch r.Kind {
	case HostDevice:
		if r.Value == DefaultRouteLink && r.Omitted {
			return slices.Contains(p.Devices, AllowAll)
		}
		return matchAny(p.Devices, r.Value)
	case HostPath:
		return p.allowsPath(r.Value)
	case HostVLAN:
		return allowsVLAN(p.VLANIDs, r.Value)
	}
	return matchAny(p.Options, pluginType+"."+r.Field) || slices.Contains(p.Options, AllowAll)
}

// allowsPath: an absolute path under one of Paths once cleaned (a
// relative one is the plugin's working directory's, the runtime's).
func (p Policy) allowsPath(name string) bool {
	if !filepath.IsAbs(name) {
		return false
	}
	clean := filepath.Clean(name)
	return slices.ContainsFunc(p.Paths, func(dir string) bool {
		return dir == "/" || clean == dir || strings.HasPrefix(clean, dir+"/")
	})
}

func matchAny(patterns []string, s string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool {
		ok, _ := path.Match(pat, s)
		return ok
	})
}

// Faults are what a plugin's view holds that the policy does not allow:
// its problems, then each refused Ref, saying what the operator allows.
// The first of the view's types is the plugin's.
func (p Policy) Faults(v View) []string {
	faults := slices.Clone(v.Problems)
	pluginType := ""
	if len(v.Types) > 0 {
		pluginType = v.Types[0].Name
	}
	for _, r := range v.Refs {
		if !p.Allows(pluginType, r) {
			faults = append(faults, p.Refusal(pluginType, r))
		}
	}
	return faults
}

// Refusal says why the policy refuses r, and what it allows.
func (p Policy) Refusal(pluginType string, r Ref) string {
	at := r.Path
	if r.Field != "" && !r.Omitted && r.Kind != HostOption && Fold(LastKey(r.Path)) == Fold(r.Field) && LastKey(r.Path) != r.Field {
		at = fmt.Sprintf("%s (read by the plugin as %s)", r.Path, r.Field)
	}
	switch {
	case r.Kind == HostDevice && r.Omitted && r.Value == DefaultRouteLink:
		return fmt.Sprintf("%s is left out, so %s takes %s: allowed only when the operator allows every host device (*); "+
			"name an allowed device, or take it from the allocated device", r.Field, pluginType, DefaultRouteLink)
	case r.Kind == HostDevice && r.Omitted:
		return fmt.Sprintf("%s is left out, so %s takes %q, which is not one of the host devices the operator allows (%s)", r.Field, pluginType, r.Value, listOrNone(p.Devices))
	case r.Kind == HostDevice:
		return fmt.Sprintf("%s %q is not one of the host devices the operator allows (%s)", at, r.Value, listOrNone(p.Devices))
	case r.Kind == HostPath:
		return fmt.Sprintf("%s %q is not under a host directory the operator allows (%s)", at, r.Value, listOrNone(p.Paths))
	case r.Kind == HostVLAN && r.Omitted:
		return fmt.Sprintf("%s is left out, so %s makes VLAN 0 of its master (priority tags on its untagged network), which is not among the VLAN IDs the operator allows (%s): "+
			"a VLAN of a host device is a network of the node's", r.Field, pluginType, listOrNone(p.VLANIDs))
	case r.Kind == HostVLAN:
		return fmt.Sprintf("%s %s is not among the VLAN IDs the operator allows (%s): a VLAN of a host device is a network of the node's", at, r.Value, listOrNone(p.VLANIDs))
	case r.Why != "":
		return fmt.Sprintf("%s %q changes the node (%s's %s: %s), and is not among the host options the operator allows (%s)", at, r.Value, pluginType, r.Field, r.Why, listOrNone(p.Options))
	}
	return fmt.Sprintf("%s %q changes the node (%s's %s), and is not among the host options the operator allows (%s)", at, r.Value, pluginType, r.Field, listOrNone(p.Options))
}

// LastKey is the last key of a dotted path, without a list index.
func LastKey(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		path = path[i+1:]
	}
	if i := strings.IndexByte(path, '['); i >= 0 {
		path = path[:i]
	}
	return path
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}
