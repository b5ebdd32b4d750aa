package dataplane

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
)

// Offloads are a netdev's ethtool features and private flags, by name,
// and its GSO/GRO maximum sizes in bytes (0: not set). They belong to the
// device, and stay with it from one network namespace to another: Prepare
// sets them in the host, Unprepare gives back what ReadOffloads read.
type Offloads struct {
	Features       map[string]bool
	PrivateFlags   map[string]bool
	GSOMaxSize     int
	GROMaxSize     int
	GSOIPv4MaxSize int
	GROIPv4MaxSize int
}

// legacyFeatures are ethtool's older names of features (`ethtool -K gro
// off`, generic-receive-offload), as the kernel names them.
var legacyFeatures = map[string]string{
	"gro": "rx-gro", "generic-receive-offload": "rx-gro",
	"gso": "tx-generic-segmentation", "generic-segmentation-offload": "tx-generic-segmentation",
	"tso": "tx-tcp-segmentation", "tcp-segmentation-offload": "tx-tcp-segmentation",
	"lro": "rx-lro", "large-receive-offload": "rx-lro",
	"rx": "rx-checksum", "rx-checksumming": "rx-checksum",
	"sg": "tx-scatter-gather", "scatter-gather": "tx-scatter-gather",
	"rxvlan": "rx-vlan-hw-parse", "rx-vlan-offload": "rx-vlan-hw-parse",
	"txvlan": "tx-vlan-hw-insert", "tx-vlan-offload": "tx-vlan-hw-insert",
	"ntuple": "rx-ntuple-filter", "ntuple-filters": "rx-ntuple-filter",
	"rxhash": "rx-hashing", "receive-hashing": "rx-hashing",
	"gro-list": "rx-gro-list", "rx-udp-gro-forwarding": "rx-udp-gro-forwarding",
}

// FeatureName is the kernel's name of an ethtool feature given by its
// kernel name or a legacy one.
func FeatureName(name string) string {
	if k, ok := legacyFeatures[name]; ok {
		return k
	}
	return name
}

// ReadOffloads reads what the device has now of what want sets: the
// features and private flags it names, the sizes it sets. A feature or
// flag the device does not have, or a feature it cannot change, is an
// error naming it.
func ReadOffloads(ifName string, want Offloads) (Offloads, error) {
	var out Offloads
	if len(want.Features) > 0 || len(want.PrivateFlags) > 0 {
		et, err := ethtool.NewEthtool()
		if err != nil {
			return Offloads{}, fmt.Errorf("ethtool: %w", err)
		}
		defer et.Close()
		if len(want.Features) > 0 {
			have, err := et.FeaturesWithState(ifName)
			if err != nil {
				return Offloads{}, fmt.Errorf("ethtool features of %s: %w", ifName, err)
			}
			out.Features = map[string]bool{}
			for _, name := range slices.Sorted(maps.Keys(want.Features)) {
				k := FeatureName(name)
				st, ok := have[k]
				switch {
				case !ok:
					return Offloads{}, fmt.Errorf("%s has no ethtool feature %q (it has %s)", ifName, name, some(slices.Sorted(maps.Keys(have))))
				case !st.Available && st.Active != want.Features[name]:
					return Offloads{}, fmt.Errorf("ethtool feature %s of %s is fixed %s by its driver", k, ifName, onOff(st.Active))
				}
				out.Features[k] = st.Active
			}
		}
		if len(want.PrivateFlags) > 0 {
			have, err := et.PrivFlags(ifName)
			if err != nil {
				return Offloads{}, fmt.Errorf("ethtool private flags of %s: %w", ifName, err)
			}
			out.PrivateFlags = map[string]bool{}
			for _, name := range slices.Sorted(maps.Keys(want.PrivateFlags)) {
				v, ok := have[name]
				if !ok {
					if len(have) == 0 {
						return Offloads{}, fmt.Errorf("%s has no private flags: its driver has none", ifName)
					}
					return Offloads{}, fmt.Errorf("%s has no private flag %q (it has %s)", ifName, name, some(slices.Sorted(maps.Keys(have))))
				}
				out.PrivateFlags[name] = v
			}
		}
	}
	if want.GSOMaxSize == 0 && want.GROMaxSize == 0 && want.GSOIPv4MaxSize == 0 && want.GROIPv4MaxSize == 0 {
		return out, nil
	}
	l, err := netlink.LinkByName(ifName)
	if err != nil {
		return Offloads{}, fmt.Errorf("%w: host interface %s: %w", ErrDeviceGone, ifName, err)
	}
	a := l.Attrs()
	for _, s := range []struct {
		name      string
		want      int
		have      uint32
		out       *int
		segmenter bool
	}{{"gsoMaxSize", want.GSOMaxSize, a.GSOMaxSize, &out.GSOMaxSize, true}, {"groMaxSize", want.GROMaxSize, a.GROMaxSize, &out.GROMaxSize, false},
		{"gsoIPv4MaxSize", want.GSOIPv4MaxSize, a.GSOIPv4MaxSize, &out.GSOIPv4MaxSize, true}, {"groIPv4MaxSize", want.GROIPv4MaxSize, a.GROIPv4MaxSize, &out.GROIPv4MaxSize, false}} {
		if s.want == 0 {
			continue
		}
		if s.segmenter && a.TSOMaxSize != 0 && uint32(s.want) > a.TSOMaxSize {
			return Offloads{}, fmt.Errorf("%s %d: %s segments at most %d bytes (its tso_max_size)", s.name, s.want, ifName, a.TSOMaxSize)
		}
		if s.have == 0 {
			return Offloads{}, fmt.Errorf("%s: the kernel does not say %s's (it has no BIG TCP)", s.name, ifName)
		}
		*s.out = int(s.have)
	}
	return out, nil
}

// ApplyOffloads sets the device's features, private flags and sizes to
// set's, and checks that the features took.
func ApplyOffloads(ifName string, set Offloads) error {
	if len(set.Features) > 0 || len(set.PrivateFlags) > 0 {
		et, err := ethtool.NewEthtool()
		if err != nil {
			return fmt.Errorf("ethtool: %w", err)
		}
		defer et.Close()
		if len(set.Features) > 0 {
			want := map[string]bool{}
			for name, on := range set.Features {
				want[FeatureName(name)] = on
			}
			if err := et.Change(ifName, want); err != nil {
				return fmt.Errorf("set ethtool features %v of %s: %w", want, ifName, err)
			}
			have, err := et.Features(ifName)
			if err != nil {
				return fmt.Errorf("ethtool features of %s: %w", ifName, err)
			}
			var missed []string
			for _, k := range slices.Sorted(maps.Keys(want)) {
				if have[k] != want[k] {
					missed = append(missed, k+" "+onOff(want[k]))
				}
			}
			if len(missed) > 0 {
				return fmt.Errorf("%s did not take ethtool features %s (a feature it depends on is off?)", ifName, strings.Join(missed, ", "))
			}
		}
		if len(set.PrivateFlags) > 0 {
			if err := et.UpdatePrivFlags(ifName, set.PrivateFlags); err != nil {
				return fmt.Errorf("set private flags %v of %s: %w", set.PrivateFlags, ifName, err)
			}
		}
	}
	if set.GSOMaxSize == 0 && set.GROMaxSize == 0 && set.GSOIPv4MaxSize == 0 && set.GROIPv4MaxSize == 0 {
		return nil
	}
	l, err := netlink.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("%w: host interface %s: %w", ErrDeviceGone, ifName, err)
	}
	var errs []error
	for _, s := range []struct {
		name string
		v    int
		set  func(netlink.Link, int) error
	}{{"gsoMaxSize", set.GSOMaxSize, netlink.LinkSetGSOMaxSize}, {"groMaxSize", set.GROMaxSize, netlink.LinkSetGROMaxSize},
		{"gsoIPv4MaxSize", set.GSOIPv4MaxSize, netlink.LinkSetGSOIPv4MaxSize}, {"groIPv4MaxSize", set.GROIPv4MaxSize, netlink.LinkSetGROIPv4MaxSize}} {
		if s.v == 0 {
			continue
		}
		if err := s.set(l, s.v); err != nil {
			errs = append(errs, fmt.Errorf("%s %d on %s: %w", s.name, s.v, ifName, err))
		}
	}
	return errors.Join(errs...)
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// some lists the first names of many.
func some(names []string) string {
	if len(names) > 12 {
		return strings.Join(names[:12], ", ") + fmt.Sprintf(" and %d more", len(names)-12)
	}
	return strings.Join(names, ", ")
}
