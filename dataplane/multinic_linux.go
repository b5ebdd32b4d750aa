package dataplane

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dataplane/nldump"
)

// What a pod of several interfaces needs besides addresses and routes:
// policy-routing rules, a VRF, static neighbours and the interface's own
// sysctls, made in the pod's namespace by Attach. The rules and the VRF
// are removed by Detach (the pod's namespace keeps them otherwise); the
// neighbours, routes and sysctls leave with the interface (a netdev's
// per-namespace settings are made anew in the namespace it enters).

// Rule is a policy-routing rule of the pod's namespace.
type Rule struct {
	Priority int
	From, To string
	IIF, OIF string
	FWMark   *uint32
	FWMask   *uint32
	Table    int64
}

// VRF is a VRF device in the pod, the interface enslaved to it.
type VRF struct {
	Name  string
	Table int64
}

// Neighbor is a static neighbour entry on the interface.
type Neighbor struct {
	Address string
	MAC     string
}

// setSysctls writes the interface's sysctls ("ipv4.arp_ignore") in the
// pod's network namespace.
func setSysctls(podNetNS, ifName string, sysctls map[string]string) error {
	if len(sysctls) == 0 {
		return nil
	}
	return bpf.InNetns(podNetNS, func() error {
		for _, k := range slices.Sorted(maps.Keys(sysctls)) {
			family, name, ok := strings.Cut(k, ".")
			if !ok || strings.ContainsAny(name, "/.") || (family != "ipv4" && family != "ipv6") {
				return fmt.Errorf("sysctl %q: not an interface sysctl", k)
			}
			path := filepath.Join("/proc/sys/net", family, "conf", ifName, name)
			if err := os.WriteFile(path, []byte(sysctls[k]), 0); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("sysctl net.%s.conf.%s.%s: the kernel has no such setting", family, ifName, name)
				}
				return fmt.Errorf("sysctl net.%s.conf.%s.%s = %s: %w", family, ifName, name, sysctls[k], err)
			}
		}
		return nil
	})
}

// sysctlsSet says whether the interface's sysctls have the values.
func sysctlsSet(podNetNS, ifName string, sysctls map[string]string) (bool, error) {
	if len(sysctls) == 0 {
		return true, nil
	}
	ok := true
	err := bpf.InNetns(podNetNS, func() error {
		for k, v := range sysctls {
			family, name, _ := strings.Cut(k, ".")
			data, err := os.ReadFile(filepath.Join("/proc/sys/net", family, "conf", ifName, name))
			if err != nil {
				return err
			}
			ok = ok && strings.TrimSpace(string(data)) == v
		}
		return nil
	})
	return ok, err
}

// enslaveVRF makes the VRF in the pod (if it is not there) and enslaves
// the interface to it.
func enslaveVRF(pod *netlink.Handle, link netlink.Link, v *VRF) error {
	vrf, err := pod.LinkByName(v.Name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		if err := pod.LinkAdd(&netlink.Vrf{LinkAttrs: netlink.LinkAttrs{Name: v.Name}, Table: uint32(v.Table)}); err != nil {
			if errors.Is(err, unix.EOPNOTSUPP) {
				return fmt.Errorf("make VRF %s (table %d) in the pod: the node's kernel has no VRF devices (CONFIG_NET_VRF, module vrf): %w", v.Name, v.Table, err)
			}
			return fmt.Errorf("make VRF %s (table %d) in the pod: %w", v.Name, v.Table, err)
		}
		if vrf, err = pod.LinkByName(v.Name); err != nil {
			return fmt.Errorf("find VRF %s in the pod: %w", v.Name, err)
		}
	case err != nil:
		return fmt.Errorf("find VRF %s in the pod: %w", v.Name, err)
	}
	if got, ok := vrf.(*netlink.Vrf); !ok || int64(got.Table) != v.Table {
		return fmt.Errorf("VRF %s: the pod has a %s of that name, not a VRF of table %d", v.Name, vrf.Type(), v.Table)
	}
	if err := pod.LinkSetUp(vrf); err != nil {
		return fmt.Errorf("set VRF %s up: %w", v.Name, err)
	}
	if link.Attrs().MasterIndex != vrf.Attrs().Index {
		if err := pod.LinkSetMasterByIndex(link, vrf.Attrs().Index); err != nil {
			return fmt.Errorf("enslave %s to VRF %s: %w", link.Attrs().Name, v.Name, err)
		}
	}
	return nil
}

// setNeighbors adds the static neighbour entries on the interface.
func setNeighbors(pod *netlink.Handle, link netlink.Link, ns []Neighbor) error {
	for _, n := range ns {
		neigh, err := podNeighbor(link.Attrs().Index, n)
		if err != nil {
			return err
		}
		if err := pod.NeighSet(neigh); err != nil {
			return fmt.Errorf("neighbour %s (%s) on %s: %w", n.Address, n.MAC, link.Attrs().Name, err)
		}
	}
	return nil
}

func podNeighbor(index int, n Neighbor) (*netlink.Neigh, error) {
	ip, err := netip.ParseAddr(n.Address)
	if err != nil {
		return nil, fmt.Errorf("neighbour %q: %w", n.Address, err)
	}
	mac, err := net.ParseMAC(n.MAC)
	if err != nil {
		return nil, fmt.Errorf("neighbour %s MAC %q: %w", n.Address, n.MAC, err)
	}
	family := netlink.FAMILY_V6
	if ip.Is4() {
		family = netlink.FAMILY_V4
	}
	return &netlink.Neigh{LinkIndex: index, Family: family, State: netlink.NUD_PERMANENT, IP: ip.AsSlice(), HardwareAddr: mac}, nil
}

// podRules are the netlink rules of a rule: one, of its prefixes'
// family, or, without prefixes, one per family.
func podRules(r Rule) ([]*netlink.Rule, error) {
	families := []int{netlink.FAMILY_V4, netlink.FAMILY_V6}
	var src, dst *net.IPNet
	for _, p := range []struct {
		v   string
		out **net.IPNet
	}{{r.From, &src}, {r.To, &dst}} {
		if p.v == "" {
			continue
		}
		pre, err := netip.ParsePrefix(p.v)
		if err != nil {
			return nil, fmt.Errorf("rule prefix %q: %w", p.v, err)
		}
		*p.out = &net.IPNet{IP: pre.Addr().AsSlice(), Mask: net.CIDRMask(pre.Bits(), pre.Addr().BitLen())}
		families = []int{netlink.FAMILY_V6}
		if pre.Addr().Is4() {
			families = []int{netlink.FAMILY_V4}
		}
	}
	var out []*netlink.Rule
	for _, f := range families {
		nr := netlink.NewRule()
		nr.Family, nr.Table, nr.Src, nr.Dst, nr.IifName, nr.OifName = f, int(r.Table), src, dst, r.IIF, r.OIF
		if r.Priority != 0 {
			nr.Priority = r.Priority
		}
		if r.FWMark != nil {
			nr.Mark = *r.FWMark
			nr.Mask = r.FWMask
		}
		out = append(out, nr)
	}
	return out, nil
}

// addRules adds the rules to the pod's namespace; one there already is
// left as it is.
func addRules(pod *netlink.Handle, rules []Rule) error {
	for _, r := range rules {
		nrs, err := podRules(r)
		if err != nil {
			return err
		}
		for _, nr := range nrs {
			if err := pod.RuleAdd(nr); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("add rule %s: %w", nr, err)
			}
		}
	}
	return nil
}

// rulesThere says whether the pod's namespace has every rule.
func rulesThere(pod *netlink.Handle, rules []Rule) (bool, error) {
	for _, r := range rules {
		nrs, err := podRules(r)
		if err != nil {
			return false, err
		}
		for _, nr := range nrs {
			mask := uint64(netlink.RT_FILTER_TABLE)
			if nr.Src != nil {
				mask |= netlink.RT_FILTER_SRC
			}
			if nr.Dst != nil {
				mask |= netlink.RT_FILTER_DST
			}
			if nr.Priority >= 0 {
				mask |= netlink.RT_FILTER_PRIORITY
			}
			if nr.Mark != 0 {
				mask |= netlink.RT_FILTER_MARK
			}
			have, err := nldump.Read(func() ([]netlink.Rule, error) { return pod.RuleListFiltered(nr.Family, nr, mask) })
			if err != nil {
				return false, fmt.Errorf("list rules: %w", err)
			}
			if !slices.ContainsFunc(have, func(h netlink.Rule) bool { return h.IifName == nr.IifName && h.OifName == nr.OifName }) {
				return false, nil
			}
		}
	}
	return true, nil
}

// unconfigurePod removes what Attach made in the pod's namespace beside
// the interface: its rules and its VRF. What is not there is fine.
func unconfigurePod(pod *netlink.Handle, nd Netdev) error {
	var errs []error
	for _, r := range nd.Rules {
		nrs, err := podRules(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, nr := range nrs {
			if err := pod.RuleDel(nr); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("delete rule %s: %w", nr, err))
			}
		}
	}
	if v := nd.VRF; v != nil {
		if vrf, err := pod.LinkByName(v.Name); err == nil {
			if _, ok := vrf.(*netlink.Vrf); ok {
				if err := pod.LinkDel(vrf); err != nil {
					errs = append(errs, fmt.Errorf("delete VRF %s: %w", v.Name, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}
