package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
)

// netinfoEnd ends the report of workload netinfo.
const netinfoEnd = "-- end of netinfo"

// printNetinfo prints, in one write, what the pod's network namespace
// has beside addresses: per interface but lo its master, GSO/GRO sizes,
// arp_ignore and arp_announce, GRO; the rules of tables but the kernel's;
// the routes of every table.
func printNetinfo() error {
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	byIndex := map[int]string{}
	for _, l := range links {
		byIndex[l.Attrs().Index] = l.Attrs().Name
	}
	var out strings.Builder
	et, err := ethtool.NewEthtool()
	if err != nil {
		return err
	}
	defer et.Close()
	for _, l := range links {
		a := l.Attrs()
		if a.Name == "lo" || l.Type() == "vrf" {
			continue
		}
		sys := func(name string) string {
			data, err := os.ReadFile(filepath.Join("/proc/sys/net/ipv4/conf", a.Name, name))
			if err != nil {
				return "?"
			}
			return strings.TrimSpace(string(data))
		}
		gro := "?"
		if f, err := et.Features(a.Name); err == nil {
			gro = fmt.Sprint(f["rx-gro"])
		}
		fmt.Fprintf(&out, "link %s master=%s gso=%d gro=%d arp_ignore=%s arp_announce=%s rx-gro=%s\n",
			a.Name, byIndex[a.MasterIndex], a.GSOMaxSize, a.GROMaxSize, sys("arp_ignore"), sys("arp_announce"), gro)
	}
	rules, err := netlink.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, r := range rules {
		if r.Table != 253 && r.Table != 254 && r.Table != 255 {
			fmt.Fprintf(&out, "rule %s\n", r)
		}
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return err
	}
	var rs []string
	for _, r := range routes {
		if r.Table == 255 || r.Dst == nil {
			continue
		}
		rs = append(rs, fmt.Sprintf("route table=%d %s via=%s src=%s dev=%s", r.Table, r.Dst, r.Gw, r.Src, byIndex[r.LinkIndex]))
	}
	slices.Sort(rs)
	for _, r := range rs {
		out.WriteString(r + "\n")
	}
	out.WriteString(netinfoEnd + "\n")
	_, err = os.Stdout.WriteString(out.String())
	return err
}

// probe sends, every 300 ms, a UDP datagram from each of the pod's global
// IPv4 addresses to $PROBE_TARGET (port 9): the kernel asks for the
// target's MAC out of the interface the address's route takes.
func probe() {
	target := net.ParseIP(os.Getenv("PROBE_TARGET"))
	if target == nil {
		return
	}
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if a.IP.IsLoopback() {
				continue
			}
			c, err := net.DialUDP("udp4", &net.UDPAddr{IP: a.IP}, &net.UDPAddr{IP: target, Port: 9})
			if err != nil {
				continue
			}
			_, _ = c.Write([]byte("fastpath probe"))
			_ = c.Close()
		}
	}
}
