package v1alpha1

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DefaultSharedMacvlanModes are the macvlan modes a claim may use on a
// shared device when its DeviceClass's sharedParent lists none: all but
// passthru.
var DefaultSharedMacvlanModes = []string{MacvlanBridge, MacvlanPrivate, MacvlanVEPA}

// DefaultSharedVLANProtocols are the VLAN protocols a claim may use on a
// shared device when its DeviceClass's sharedParent lists none.
var DefaultSharedVLANProtocols = []string{VLANProto8021Q}

// VLANProtocols are the VLAN protocols a config may name.
var VLANProtocols = []string{VLANProto8021Q, VLANProto8021AD}

// MaxVLANID is the highest VLAN ID (4095 is reserved).
const MaxVLANID = 4094

// VLANRange is the VLAN IDs from First to Last.
type VLANRange struct{ First, Last int }

// ParseVLANRange reads a VLAN ID ("100") or a range of them ("100-199"),
// each between lowest and MaxVLANID, a range from its lower end.
func ParseVLANRange(s string, lowest int) (VLANRange, error) {
	first, last, isRange := strings.Cut(s, "-")
	a, err := parseVLANID(first, lowest)
	if err != nil {
		return VLANRange{}, err
	}
	if !isRange {
		return VLANRange{a, a}, nil
	}
	b, err := parseVLANID(last, lowest)
	switch {
	case err != nil:
		return VLANRange{}, err
	case b < a:
		return VLANRange{}, fmt.Errorf("the range %s ends below its start", s)
	}
	return VLANRange{a, b}, nil
}

func parseVLANID(s string, lowest int) (int, error) {
	id, err := strconv.Atoi(s)
	switch {
	case err != nil || s != strconv.Itoa(id):
		return 0, fmt.Errorf("%q is not a VLAN ID: write an ID (100) or a range (100-199)", s)
	case id < lowest || id > MaxVLANID:
		return 0, fmt.Errorf("VLAN ID %d is not between %d and %d", id, lowest, MaxVLANID)
	}
	return id, nil
}

// VLANIDsAllow says whether id is one of the IDs or ranges of list (as
// ParseVLANRange reads them, from lowest); an entry that does not parse
// allows none.
func VLANIDsAllow(list []string, lowest, id int) bool {
	return slices.ContainsFunc(list, func(s string) bool {
		r, err := ParseVLANRange(s, lowest)
		return err == nil && r.First <= id && id <= r.Last
	})
}

// validateSharedParent checks a sharedParent section: known macvlan modes
// and VLAN protocols, each once; VLAN IDs and ranges within 1-4094.
func validateSharedParent(path *field.Path, p *SharedParent) field.ErrorList {
	if p == nil {
		return nil
	}
	var errs field.ErrorList
	for _, l := range []struct {
		name  string
		list  []string
		known []string
	}{{"macvlanModes", p.MacvlanModes, MacvlanModes}, {"vlanProtocols", p.VLANProtocols, VLANProtocols}} {
		for i, v := range l.list {
			switch {
			case !slices.Contains(l.known, v):
				errs = append(errs, field.NotSupported(path.Child(l.name).Index(i), v, l.known))
			case slices.Contains(l.list[:i], v):
				errs = append(errs, field.Duplicate(path.Child(l.name).Index(i), v))
			}
		}
	}
	for i, s := range p.VLANIDs {
		if _, err := ParseVLANRange(s, 1); err != nil {
			errs = append(errs, field.Invalid(path.Child("vlanIDs").Index(i), s, err.Error()))
		}
	}
	return errs
}

// sharedParentFields are the fields a sharedParent judges, as paths of
// the config.
var sharedParentFields = []string{"macvlan.mode", "vlan.id", "vlan.protocol", "rdma.umad"}

// checkSharedParent is the errors of a config of a shared mode that asks
// for what its DeviceClass's sharedParent (c.SharedParent; nil: the
// defaults) does not allow. A field is judged as Default leaves it (a
// macvlan mode left out is bridge, a VLAN protocol 802.1q), and only when
// it is valid otherwise (Validate says what is wrong with it); at is
// where each field was last set, for the error's path.
func checkSharedParent(c *InterfaceConfig, class string, at map[string]*field.Path) field.ErrorList {
	// An invalid sharedParent allows nothing it says: Validate says why.
	if !Shared(c.Mode) || len(validateSharedParent(field.NewPath("sharedParent"), c.SharedParent)) > 0 {
		return nil
	}
	p := c.SharedParent
	if p == nil {
		p = &SharedParent{}
	}
	where := func(f string) *field.Path {
		parts := strings.Split(f, ".")
		if base := at[f]; base != nil {
			return base.Child(parts[0], parts[1:]...)
		}
		return field.NewPath(parts[0], parts[1:]...)
	}
	who := "its DeviceClass"
	if class != "" {
		who = "DeviceClass " + class
	}
	var errs field.ErrorList
	switch {
	case c.Mode == ModeMacvlan:
		mode := MacvlanBridge
		if c.Macvlan != nil {
			mode = orDefault(c.Macvlan.Mode, MacvlanBridge)
		}
		allowed := orDefaults(p.MacvlanModes, DefaultSharedMacvlanModes)
		if !slices.Contains(MacvlanModes, mode) || slices.Contains(allowed, mode) {
			break
		}
		why := ""
		if mode == MacvlanPassthru {
			why = ": a passthru macvlan takes the device from every claim sharing it (the device turns promiscuous, its MAC is the pod's to change, and no other macvlan can be made on it)"
		}
		errs = append(errs, field.Forbidden(where("macvlan.mode"), fmt.Sprintf("macvlan mode %s is not among those %s allows on its shared devices (%s)%s; use one of them, or %s",
			mode, who, strings.Join(allowed, ", "), why, operatorAllows("macvlanModes"))))
	case c.Mode == ModeVLAN && c.VLAN != nil:
		if id := c.VLAN.ID; id >= 1 && id <= MaxVLANID && !VLANIDsAllow(p.VLANIDs, 1, id) {
			errs = append(errs, field.Forbidden(where("vlan.id"), fmt.Sprintf("VLAN %d is not among the VLAN IDs %s allows on its shared devices (%s): a VLAN of a shared device is a network of the node's, "+
				"the operator's to give; %s", id, who, listOrNone(p.VLANIDs), operatorAllows("vlanIDs"))))
		}
		proto := orDefault(c.VLAN.Protocol, VLANProto8021Q)
		if allowed := orDefaults(p.VLANProtocols, DefaultSharedVLANProtocols); slices.Contains(VLANProtocols, proto) && !slices.Contains(allowed, proto) {
			errs = append(errs, field.Forbidden(where("vlan.protocol"), fmt.Sprintf("VLAN protocol %s is not among those %s allows on its shared devices (%s): "+
				"an 802.1ad sub-interface carries every VLAN inside its own; use one of them, or %s", proto, who, strings.Join(allowed, ", "), operatorAllows("vlanProtocols"))))
		}
	}
	if c.RDMA != nil && c.RDMA.UMAD && !p.RDMAUMAD {
		errs = append(errs, field.Forbidden(where("rdma.umad"), fmt.Sprintf("%s does not allow the management datagram devices (umadN) of its shared devices' RDMA devices: "+
			"every claim on the device would hold them, and with them InfiniBand management of its ports; leave umad out, or %s", who, operatorAllows("rdmaUMAD"))))
	}
	return errs
}

// operatorAllows says how the operator allows what a sharedParent field
// does not.
func operatorAllows(f string) string {
	return fmt.Sprintf("ask the operator for a DeviceClass whose config allows it (sharedParent.%s; for the chart's shared.fastpath.dev, value share.class.%s)", f, f)
}

func orDefaults(l, def []string) []string {
	if len(l) == 0 {
		return def
	}
	return l
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}
