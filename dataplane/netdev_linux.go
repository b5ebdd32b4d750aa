package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/dataplane/nldump"
)

// Netdev says which host interface goes into a pod and how it looks there.
type Netdev struct {
	// The device as the host had it before; restored on detach.
	HostName  string
	HostMTU   int
	HostMAC   string
	HostAlias string
	// HostUp is the device's admin state before (see HostUp).
	HostUp bool
	// PCIAddress finds a VF's netdev when neither its name nor its alias
	// does (the kernel renamed it on its way back).
	PCIAddress string
	// The interface in the pod.
	Name string
	MTU  int    // 0: keep
	MAC  string // "": keep
	// MACFromPF: the VF's PF set MAC as the VF's MAC (Prepare did). Some
	// VF drivers refuse to be asked for it (igbvf, unless the VF is
	// trusted) but take it when they reset: Attach resets the VF's netdev
	// rather than ask, and Detach gives the netdev its MAC back only if
	// the driver lets it, else leaves that to Unprepare
	// (RestoreVFAndNetdev).
	MACFromPF bool
	Addresses []string
	Routes    []Route
	// Rules, VRF, Neighbors and Sysctls are made in the pod with the
	// interface (multinic_linux.go).
	Rules     []Rule
	VRF       *VRF
	Neighbors []Neighbor
	Sysctls   map[string]string
	// XDP is the program to attach in the pod (afxdp mode), nil for none.
	XDP *XDP
	// RDMA is the RDMA device that goes with the netdev, nil for none.
	RDMA *RDMA
}

// XDP is a program Prepare loaded and pinned, to attach to the interface
// once it is in the pod.
type XDP struct {
	Dir      string // where Prepare pinned it; the attachment is pinned there too
	Mode     bpf.Mode
	Fallback bool // generic mode when the driver has no native XDP
}

// Route is a route through the pod's interface.
type Route struct {
	Destination string
	Gateway     string
	// Table (0: main), Source (the preferred source address), Scope
	// (universe, link or host; "": universe) and Metric.
	Table  int64
	Source string
	Scope  string
	Metric int64
}

// Attached is the interface as it ended up in the pod.
type Attached struct {
	Name      string
	MAC       string
	MTU       int
	Addresses []string
	// XDPMode is how the XDP program got attached, "" without one.
	XDPMode bpf.Mode
	// RDMAFiles are the character devices of a software RDMA device made
	// again in the pod (their numbers change with it), nil otherwise.
	RDMAFiles []CharDevice
}

// Attacher moves netdevs between the host network namespace and pods'. Make
// one with NewAttacher in the host namespace; Close it when done.
type Attacher struct {
	host netns.NsHandle
	// sysfsRoot is where sys/ is ("/"); tests point it at a fixture.
	sysfsRoot string
}

// NewAttacher remembers the calling thread's network namespace as the host's.
func NewAttacher() (*Attacher, error) {
	h, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("open the host network namespace: %w", err)
	}
	return &Attacher{host: h, sysfsRoot: "/"}, nil
}

// Close releases the host namespace handle.
func (a *Attacher) Close() error { return a.host.Close() }

// podHandle opens the pod's network namespace and a netlink handle in it.
func podHandle(path string) (netns.NsHandle, *netlink.Handle, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return 0, nil, fmt.Errorf("open pod network namespace %s: %w", path, err)
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		_ = ns.Close()
		return 0, nil, fmt.Errorf("netlink in pod network namespace %s: %w", path, err)
	}
	return ns, h, nil
}

// Attach moves the host interface into the pod's network namespace with one
// RTM_NEWLINK that carries the target namespace, final name, MTU, MAC and an
// alias holding the host name (each namespace move costs a kernel RCU grace
// period: there is no second one). Then it adds addresses, sets the link up
// and adds routes. A retry after success, or after a partial attach, finds
// the interface already in the pod and completes it. On failure the
// interface is moved back and restored.
func (a *Attacher) Attach(ctx context.Context, podNetNS string, nd Netdev) (_ Attached, err error) {
	logger := klog.FromContext(ctx).WithValues("hostInterface", nd.HostName, "netns", podNetNS)
	ns, pod, err := podHandle(podNetNS)
	if err != nil {
		return Attached{}, err
	}
	defer ns.Close()
	defer pod.Close()

	link, err := findInPod(pod, nd)
	if err != nil {
		return Attached{}, err
	}
	if link == nil {
		host, err := netlink.LinkByName(nd.HostName)
		if err != nil {
			return Attached{}, fmt.Errorf("host interface %s: %w", nd.HostName, err)
		}
		var mac net.HardwareAddr
		if nd.MAC != "" {
			if mac, err = net.ParseMAC(nd.MAC); err != nil {
				return Attached{}, fmt.Errorf("MAC %q: %w", nd.MAC, err)
			}
		}
		if nd.MACFromPF && mac != nil && !bytes.Equal(mac, host.Attrs().HardwareAddr) {
			if host, err = takePFMAC(host); err != nil {
				return Attached{}, err
			}
		}
		alias := nd.HostName
		mtu, mac := changed(host, nd.MTU, mac)
		if err := a.rdmaLeaveHost(nd.RDMA); err != nil {
			return Attached{}, err
		}
		if err := setLink(a.host, host.Attrs().Index, &ns, nd.Name, mtu, mac, &alias); err != nil {
			err = fmt.Errorf("move %s into the pod as %s: %w", nd.HostName, nd.Name, err)
			if rbErr := a.undoPartialMove(pod, ns, host, nd); rbErr != nil {
				err = fmt.Errorf("%w; moving it back also failed: %w", err, rbErr)
			} else if rbErr := a.rdmaRestore(ctx, nd); rbErr != nil {
				err = fmt.Errorf("%w; %w", err, rbErr)
			}
			return Attached{}, err
		}
		logger.V(2).Info("Moved interface into pod", "name", nd.Name)
		fault.Point("attach.moved")
	}
	defer func() {
		if err != nil {
			if rbErr := a.Detach(ctx, podNetNS, nd); rbErr != nil {
				err = fmt.Errorf("%w; rolling back also failed: %w", err, rbErr)
			}
		}
	}()
	// The index may change with the namespace: look the link up again.
	link, err = pod.LinkByName(nd.Name)
	if err != nil {
		return Attached{}, fmt.Errorf("find %s in the pod: %w", nd.Name, err)
	}
	// Its own settings before it is up (arp_ignore before it answers).
	if err := setSysctls(podNetNS, nd.Name, nd.Sysctls); err != nil {
		return Attached{}, err
	}
	if nd.VRF != nil {
		// Enslaved before its addresses: their routes go to the VRF's
		// table.
		if err := enslaveVRF(pod, link, nd.VRF); err != nil {
			return Attached{}, err
		}
	}
	for _, a := range nd.Addresses {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			return Attached{}, fmt.Errorf("address %s: %w", a, err)
		}
		if nd := addr.IP.To4(); nd == nil {
			// Usable at once: no duplicate address detection wait.
			addr.Flags |= unix.IFA_F_NODAD
		}
		if err := pod.AddrReplace(link, addr); err != nil {
			return Attached{}, fmt.Errorf("add address %s to %s: %w", a, nd.Name, err)
		}
	}
	fault.Point("attach.addressed")
	if err := pod.LinkSetUp(link); err != nil {
		return Attached{}, fmt.Errorf("set %s up: %w", nd.Name, err)
	}
	if err := setNeighbors(pod, link, nd.Neighbors); err != nil {
		return Attached{}, err
	}
	for _, r := range nd.Routes {
		route, err := podRoute(link.Attrs().Index, r)
		if err != nil {
			return Attached{}, err
		}
		if err := pod.RouteReplace(route); err != nil {
			return Attached{}, fmt.Errorf("add route to %s via %s on %s: %w", r.Destination, r.Gateway, nd.Name, err)
		}
	}
	if err := addRules(pod, nd.Rules); err != nil {
		return Attached{}, err
	}
	if len(nd.Rules) > 0 || nd.VRF != nil || len(nd.Neighbors) > 0 || len(nd.Sysctls) > 0 {
		fault.Point("attach.routed")
	}
	var rdmaFiles []CharDevice
	if nd.RDMA != nil {
		if err := a.attachRDMA(ns, nd); err != nil {
			return Attached{}, err
		}
		if nd.RDMA.Link != "" {
			if rdmaFiles, err = a.rdmaFilesIn(ns, nd); err != nil {
				return Attached{}, fmt.Errorf("RDMA device %s in the pod: %w", nd.RDMA.Device, err)
			}
		}
		logger.V(2).Info("RDMA device in the pod", "rdmaDevice", nd.RDMA.Device, "exclusive", nd.RDMA.Exclusive)
	}
	var xdpMode bpf.Mode
	if nd.XDP != nil {
		if xdpMode, err = attachXDP(podNetNS, nd); err != nil {
			return Attached{}, err
		}
		logger.V(2).Info("Attached XDP program", "name", nd.Name, "mode", xdpMode)
	}
	link, err = pod.LinkByName(nd.Name)
	if err != nil {
		return Attached{}, fmt.Errorf("find %s in the pod: %w", nd.Name, err)
	}
	return Attached{Name: nd.Name, MAC: link.Attrs().HardwareAddr.String(), MTU: link.Attrs().MTU, Addresses: nd.Addresses, XDPMode: xdpMode, RDMAFiles: rdmaFiles}, nil
}

// InPod says whether an Attach into the pod's network namespace
// completed: the interface is there under its pod name, moved there by an
// Attach (it carries the host name as alias), and is up with its
// addresses, routes and XDP program. An Attach cut short after the move
// (a crash) left it there without them.
func (a *Attacher) InPod(podNetNS string, nd Netdev) (bool, error) {
	ns, pod, err := podHandle(podNetNS)
	if err != nil {
		return false, err
	}
	defer ns.Close()
	defer pod.Close()
	l, err := findInPod(pod, nd)
	if l == nil || err != nil {
		return false, err
	}
	if ok, err := configured(pod, l, nd); !ok || err != nil {
		return ok, err
	}
	return a.rdmaInPod(ns, nd)
}

// Present says whether the netdev is on the node where an Attach may
// have it: in the pod's namespace under its pod name or its host name
// (moved, not yet renamed), or still in the host's under its host name
// (not yet moved, or given back). An Attach under way has it in one of
// them at every moment; a netdev deleted, or gone with its namespace,
// is in none.
func (a *Attacher) Present(podNetNS string, nd Netdev) (bool, error) {
	ns, pod, err := podHandle(podNetNS)
	if err != nil {
		return false, err
	}
	defer ns.Close()
	defer pod.Close()
	host, err := netlink.NewHandleAt(a.host, unix.NETLINK_ROUTE)
	if err != nil {
		return false, fmt.Errorf("netlink in the host's network namespace: %w", err)
	}
	defer host.Close()
	for _, look := range []struct {
		h    *netlink.Handle
		name string
	}{{pod, nd.Name}, {pod, nd.HostName}, {host, nd.HostName}} {
		if look.name == "" {
			continue
		}
		if there, err := hasLink(look.h, look.name); there || err != nil {
			return there, err
		}
	}
	return false, nil
}

// InHost says whether an interface of the name is in the host's network
// namespace.
func (a *Attacher) InHost(name string) (bool, error) {
	host, err := netlink.NewHandleAt(a.host, unix.NETLINK_ROUTE)
	if err != nil {
		return false, fmt.Errorf("netlink in the host's network namespace: %w", err)
	}
	defer host.Close()
	return hasLink(host, name)
}

// hasLink says whether the namespace of h has an interface of the name.
func hasLink(h *netlink.Handle, name string) (bool, error) {
	_, err := h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &notFound):
		return false, nil
	}
	return false, fmt.Errorf("look for %s: %w", name, err)
}

// configured says whether the interface in the pod has what Attach gives
// it after the move.
func configured(pod *netlink.Handle, l netlink.Link, nd Netdev) (bool, error) {
	if l.Attrs().Flags&net.FlagUp == 0 {
		return false, nil
	}
	if nd.XDP != nil && (l.Attrs().Xdp == nil || !l.Attrs().Xdp.Attached) {
		return false, nil
	}
	if len(nd.Addresses) > 0 {
		addrs, err := nldump.Read(func() ([]netlink.Addr, error) { return pod.AddrList(l, netlink.FAMILY_ALL) })
		if err != nil {
			return false, fmt.Errorf("addresses of %s in the pod: %w", nd.Name, err)
		}
		for _, want := range nd.Addresses {
			addr, err := netlink.ParseAddr(want)
			if err != nil {
				return false, fmt.Errorf("address %s: %w", want, err)
			}
			if !slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IPNet.String() == addr.IPNet.String() }) {
				return false, nil
			}
		}
	}
	if len(nd.Routes) > 0 {
		routes, err := nldump.Read(func() ([]netlink.Route, error) {
			return pod.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: l.Attrs().Index, Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
		})
		if err != nil {
			return false, fmt.Errorf("routes of %s in the pod: %w", nd.Name, err)
		}
		for _, r := range nd.Routes {
			want, err := podRoute(l.Attrs().Index, r)
			if err != nil {
				return false, err
			}
			if !slices.ContainsFunc(routes, func(rt netlink.Route) bool {
				return rt.Dst != nil && rt.Dst.String() == want.Dst.String() && rt.Gw.Equal(want.Gw) && (want.Table == 0 || rt.Table == want.Table)
			}) {
				return false, nil
			}
		}
	}
	if v := nd.VRF; v != nil {
		vrf, err := pod.LinkByName(v.Name)
		if err != nil || l.Attrs().MasterIndex != vrf.Attrs().Index {
			return false, nil
		}
	}
	// The neighbours come before the routes and the rules: with either,
	// they are there too.
	if len(nd.Routes) == 0 && len(nd.Rules) == 0 && len(nd.Neighbors) > 0 {
		have, err := nldump.Read(func() ([]netlink.Neigh, error) { return pod.NeighList(l.Attrs().Index, netlink.FAMILY_ALL) })
		if err != nil {
			return false, fmt.Errorf("neighbours of %s in the pod: %w", nd.Name, err)
		}
		for _, n := range nd.Neighbors {
			want, err := podNeighbor(l.Attrs().Index, n)
			if err != nil {
				return false, err
			}
			if !slices.ContainsFunc(have, func(h netlink.Neigh) bool { return h.IP.Equal(want.IP) }) {
				return false, nil
			}
		}
	}
	return rulesThere(pod, nd.Rules)
}

// attachXDP attaches the program pinned in nd.XDP.Dir to the interface in
// the pod; an attachment pinned there already (a retried hook) stands.
func attachXDP(podNetNS string, nd Netdev) (bpf.Mode, error) {
	if _, err := os.Stat(filepath.Join(nd.XDP.Dir, bpf.PinLink)); err == nil {
		if id, err := bpf.Attached(podNetNS, nd.Name); err == nil && id != 0 {
			return nd.XDP.Mode, nil
		}
		if err := bpf.Detach(nd.XDP.Dir); err != nil {
			return "", err
		}
	}
	prog, err := bpf.LoadPinned(nd.XDP.Dir)
	if err != nil {
		return "", err
	}
	defer func() { _ = prog.Close() }()
	return prog.Attach(podNetNS, nd.Name, nd.XDP.Mode, nd.XDP.Fallback, nd.XDP.Dir)
}

// takePFMAC makes a VF's netdev take the MAC its PF set, by a reset of its
// driver (a close, after an open if it is down: igbvf resets as it goes
// down). A driver that takes the MAC at once, or that does not reset so,
// is left as it is: the MAC is then asked for in the move. The interface
// is left down, as a move leaves it.
func takePFMAC(host netlink.Link) (netlink.Link, error) {
	name := host.Attrs().Name
	if host.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(host); err != nil {
			return nil, fmt.Errorf("set %s up to reset it for the MAC its PF set: %w", name, err)
		}
	}
	if err := netlink.LinkSetDown(host); err != nil {
		return nil, fmt.Errorf("set %s down to reset it for the MAC its PF set: %w", name, err)
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("host interface %s: %w", name, err)
	}
	return l, nil
}

// RestoreVFAndNetdev undoes ApplyVF for a VF whose netdev took the MAC its
// PF set (Netdev.MACFromPF), and gives the netdev its own MAC back. A PF
// reports a VF's own MAC as the VF's, but setting it through the PF locks
// it (igb refuses the VF any other until an all-zero MAC is set through
// the PF): a MAC before that was the netdev's own goes back through the
// netdev, after the PF is given the all-zero one. A VF whose PF keeps a
// MAC takes it by a reset. A netdev that is not in the host has nothing
// more to restore.
func RestoreVFAndNetdev(ctx context.Context, p PF, pf string, vf int, applied VFSettings, was VFState, netdev, hostMAC string) error {
	// direct: the PF keeps no MAC for the VF after the restore, and the
	// netdev may set its own.
	direct := strings.EqualFold(was.MAC, zeroMAC)
	// own: the PF knew the netdev's own MAC from the VF's driver.
	own := applied.MAC != "" && strings.EqualFold(was.MAC, hostMAC)
	if own {
		was.MAC, direct = zeroMAC, true
	}
	if err := RestoreVF(ctx, p, pf, vf, applied, was); err != nil {
		return err
	}
	if applied.MAC == "" {
		return nil
	}
	hw, err := net.ParseMAC(hostMAC)
	if err != nil {
		return fmt.Errorf("host MAC %q: %w", hostMAC, err)
	}
	l, err := netlink.LinkByName(netdev)
	if err != nil {
		return nil
	}
	if bytes.Equal(l.Attrs().HardwareAddr, hw) {
		if !own {
			return nil
		}
		// The netdev kept its MAC (it never took the PF's: not attached,
		// or never reset), but the all-zero MAC made the PF forget it
		// (igb then reports none for the VF): a reset has the VF's
		// driver tell the PF again (igbvf does as it goes down).
		if st, err := p.VFState(pf, vf); err == nil && strings.EqualFold(st.MAC, hostMAC) {
			return nil
		}
		return announceMAC(l)
	}
	if direct {
		if err := netlink.LinkSetHardwareAddr(l, hw); err != nil {
			return fmt.Errorf("restore MAC %s of %s: %w", hostMAC, netdev, err)
		}
		return nil
	}
	// The PF sets a MAC again (the one it set before the claim): the VF
	// takes it when it resets.
	if _, err := takePFMAC(l); err != nil {
		return err
	}
	return nil
}

const zeroMAC = "00:00:00:00:00:00"

// announceMAC resets a VF's netdev (takePFMAC) so that its driver tells the
// PF its MAC again, and leaves it up or down as it was.
func announceMAC(host netlink.Link) error {
	up := host.Attrs().Flags&net.FlagUp != 0
	l, err := takePFMAC(host)
	if err != nil || !up {
		return err
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up again after its reset: %w", l.Attrs().Name, err)
	}
	return nil
}

// changed returns the MTU and MAC to set on l: those it does not have
// already (0 and nil for the others). Asking a VF's driver for the MAC it
// has is no harm on most NICs, but a VF whose PF set its MAC refuses any
// MAC it is asked for unless trusted.
func changed(l netlink.Link, mtu int, mac net.HardwareAddr) (int, net.HardwareAddr) {
	if mtu == l.Attrs().MTU {
		mtu = 0
	}
	if mac != nil && bytes.Equal(mac, l.Attrs().HardwareAddr) {
		mac = nil
	}
	return mtu, mac
}

// undoPartialMove brings the interface back to the host after an
// RTM_NEWLINK that failed part-way: the kernel applies its attributes one
// after another, so the move into the pod may have been made when a later
// one was refused (a VF whose PF set its MAC refuses another one). The
// interface is in the pod under the pod's name or its own, with its index
// or, for a PCI function, its PCI address; the pod had no interface of the
// pod's name before (findInPod).
func (a *Attacher) undoPartialMove(pod *netlink.Handle, podNS netns.NsHandle, host netlink.Link, nd Netdev) error {
	links, err := nldump.Read(pod.LinkList)
	if err != nil {
		return fmt.Errorf("list the pod's interfaces: %w", err)
	}
	for _, l := range links {
		ours := l.Attrs().Index == host.Attrs().Index && (l.Attrs().Name == nd.Name || l.Attrs().Name == nd.HostName)
		if nd.PCIAddress != "" {
			ours = l.Attrs().ParentDev == nd.PCIAddress
		}
		if !ours {
			continue
		}
		mtu, mac := changed(l, host.Attrs().MTU, host.Attrs().HardwareAddr)
		alias := host.Attrs().Alias
		if err := setLink(podNS, l.Attrs().Index, &a.host, nd.HostName, mtu, mac, &alias); err != nil {
			return fmt.Errorf("return %s from the pod to the host as %s: %w", l.Attrs().Name, nd.HostName, err)
		}
		// A move takes the interface down.
		if host.Attrs().Flags&net.FlagUp != 0 {
			back, err := netlink.LinkByName(nd.HostName)
			if err == nil {
				err = netlink.LinkSetUp(back)
			}
			if err != nil {
				return fmt.Errorf("set %s up again: %w", nd.HostName, err)
			}
		}
		return nil
	}
	return nil
}

// findInPod returns the interface if an earlier attach already moved it into
// the pod (it carries the host name as alias), or nil.
func findInPod(pod *netlink.Handle, nd Netdev) (netlink.Link, error) {
	l, err := pod.LinkByName(nd.Name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("look for %s in the pod: %w", nd.Name, err)
	case l.Attrs().Alias != nd.HostName:
		return nil, fmt.Errorf("the pod already has an interface %s (not host interface %s)", nd.Name, nd.HostName)
	}
	return l, nil
}

func podRoute(index int, r Route) (*netlink.Route, error) {
	dst, err := netip.ParsePrefix(r.Destination)
	if err != nil {
		return nil, fmt.Errorf("route destination %q: %w", r.Destination, err)
	}
	route := &netlink.Route{LinkIndex: index, Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())},
		Table: int(r.Table), Priority: int(r.Metric)}
	if r.Gateway != "" {
		gw, err := netip.ParseAddr(r.Gateway)
		if err != nil {
			return nil, fmt.Errorf("route gateway %q: %w", r.Gateway, err)
		}
		route.Gw = gw.AsSlice()
	}
	if r.Source != "" {
		src, err := netip.ParseAddr(r.Source)
		if err != nil {
			return nil, fmt.Errorf("route source %q: %w", r.Source, err)
		}
		route.Src = src.AsSlice()
	}
	switch r.Scope {
	case "", "universe":
		route.Scope = netlink.SCOPE_UNIVERSE
	case "link":
		route.Scope = netlink.SCOPE_LINK
	case "host":
		route.Scope = netlink.SCOPE_HOST
	default:
		return nil, fmt.Errorf("route scope %q: want universe, link or host", r.Scope)
	}
	return route, nil
}

// Detach returns the interface to the host namespace with its host name,
// MTU, MAC and alias, and no addresses. If the pod's namespace is gone, or
// the interface is no longer in it, the kernel has returned it to the host:
// it is found there by name, alias or PCI address and restored in place. Detaching a
// detached interface is harmless.
func (a *Attacher) Detach(ctx context.Context, podNetNS string, nd Netdev) error {
	logger := klog.FromContext(ctx).WithValues("hostInterface", nd.HostName, "netns", podNetNS)
	if nd.XDP != nil {
		if err := bpf.Detach(nd.XDP.Dir); err != nil {
			return fmt.Errorf("detach the XDP program from %s: %w", nd.Name, err)
		}
	}
	var hostMAC net.HardwareAddr
	if nd.HostMAC != "" && !nd.MACFromPF {
		var err error
		if hostMAC, err = net.ParseMAC(nd.HostMAC); err != nil {
			return fmt.Errorf("host MAC %q: %w", nd.HostMAC, err)
		}
	}
	alias := nd.HostAlias
	if ns, pod, err := podHandle(podNetNS); err == nil {
		defer ns.Close()
		defer pod.Close()
		if err := unconfigurePod(pod, nd); err != nil {
			return fmt.Errorf("remove what came with %s from the pod: %w", nd.Name, err)
		}
		if link := findByAlias(pod, nd.HostName); link != nil {
			if err := a.detachRDMA(ns, nd); err != nil {
				return err
			}
			mtu, mac := changed(link, nd.HostMTU, hostMAC)
			if err := setLink(ns, link.Attrs().Index, &a.host, nd.HostName, mtu, mac, &alias); err != nil {
				return fmt.Errorf("return %s from the pod to the host as %s: %w", link.Attrs().Name, nd.HostName, err)
			}
			logger.V(2).Info("Returned interface to the host")
			fault.Point("detach.moved")
			if err := restoreHost(ctx, nd); err != nil {
				return err
			}
			return a.rdmaRestore(ctx, nd)
		}
	}
	// Not in the pod: in the host already, under its name or another.
	link, err := netlink.LinkByName(nd.HostName)
	if err != nil || (link.Attrs().Alias != nd.HostName && link.Attrs().Alias != nd.HostAlias) {
		link = findByAlias(netlinkHost{}, nd.HostName)
	}
	if link == nil {
		link = a.findByPCI(nd.PCIAddress)
	}
	if link == nil {
		return fmt.Errorf("%w: host interface %s is neither in pod network namespace %s nor in the host's", ErrDeviceGone, nd.HostName, podNetNS)
	}
	mtu, mac := changed(link, nd.HostMTU, hostMAC)
	if err := setLink(a.host, link.Attrs().Index, nil, nd.HostName, mtu, mac, &alias); err != nil {
		return fmt.Errorf("restore %s as %s: %w", link.Attrs().Name, nd.HostName, err)
	}
	logger.V(2).Info("Restored interface in the host", "foundAs", link.Attrs().Name)
	if err := restoreHost(ctx, nd); err != nil {
		return err
	}
	return a.rdmaRestore(ctx, nd)
}

// HostUp reports the admin state (IFF_UP) of the host interface name, to
// record before Attach and give back at Detach.
func (a *Attacher) HostUp(name string) (bool, error) {
	l, err := netlink.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return false, fmt.Errorf("%w: host interface %s: %w", ErrDeviceGone, name, err)
	case err != nil:
		return false, fmt.Errorf("host interface %s: %w", name, err)
	}
	return l.Attrs().Flags&net.FlagUp != 0, nil
}

// restoreHost finishes a returned interface: no addresses left, and up
// again if it was up before.
func restoreHost(ctx context.Context, nd Netdev) error {
	if err := flushAddresses(nd.HostName); err != nil {
		return err
	}
	if nd.MACFromPF && nd.HostMAC != "" {
		// The VF's driver may refuse while its PF sets a MAC: Unprepare
		// restores it then (RestoreVFAndNetdev).
		if hw, err := net.ParseMAC(nd.HostMAC); err == nil {
			if l, err := netlink.LinkByName(nd.HostName); err == nil && !bytes.Equal(l.Attrs().HardwareAddr, hw) {
				if err := netlink.LinkSetHardwareAddr(l, hw); err != nil {
					klog.FromContext(ctx).V(2).Info("VF netdev keeps the MAC its PF sets until the claim is unprepared", "interface", nd.HostName, "reason", err.Error())
				}
			}
		}
	}
	if !nd.HostUp {
		return nil
	}
	l, err := netlink.LinkByName(nd.HostName)
	if err == nil {
		err = netlink.LinkSetUp(l)
	}
	if err != nil {
		return fmt.Errorf("set %s up again: %w", nd.HostName, err)
	}
	return nil
}

// findByPCI finds the host netdev of a PCI function through sysfs
// (sys/bus/pci/devices/<address>/net/<name>), or nil.
func (a *Attacher) findByPCI(address string) netlink.Link {
	if address == "" {
		return nil
	}
	entries, err := os.ReadDir(filepath.Join(a.sysfsRoot, "sys", "bus", "pci", "devices", address, "net"))
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if l, err := netlink.LinkByName(e.Name()); err == nil {
			return l
		}
	}
	return nil
}

// linkLister is what findByAlias needs of a namespace.
type linkLister interface {
	LinkList() ([]netlink.Link, error)
}

// netlinkHost lists the host namespace's links.
type netlinkHost struct{}

func (netlinkHost) LinkList() ([]netlink.Link, error) { return netlink.LinkList() }

func findByAlias(ns linkLister, alias string) netlink.Link {
	links, err := nldump.Read(ns.LinkList)
	if err != nil {
		return nil
	}
	for _, l := range links {
		if l.Attrs().Alias == alias {
			return l
		}
	}
	return nil
}

// flushAddresses removes the addresses a returned interface still carries.
func flushAddresses(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s: %w", name, err)
	}
	addrs, err := nldump.Read(func() ([]netlink.Addr, error) { return netlink.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", name, err)
	}
	for _, addr := range addrs {
		if addr.IP.IsLinkLocalUnicast() {
			continue
		}
		if err := netlink.AddrDel(link, &addr); err != nil {
			return fmt.Errorf("remove address %s from %s: %w", addr.IPNet, name, err)
		}
	}
	return nil
}

// setLink changes a link with one RTM_NEWLINK, sent from the namespace the
// link is in (from): into namespace to (nil: stay), with name, MTU (0: keep),
// MAC (nil: keep) and alias (nil: keep).
func setLink(from netns.NsHandle, index int, to *netns.NsHandle, name string, mtu int, mac net.HardwareAddr, alias *string) error {
	sock, err := nl.GetNetlinkSocketAt(from, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer sock.Close()
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	if to != nil {
		req.AddData(nl.NewRtAttr(unix.IFLA_NET_NS_FD, nl.Uint32Attr(uint32(*to))))
	}
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	if mtu > 0 {
		req.AddData(nl.NewRtAttr(unix.IFLA_MTU, nl.Uint32Attr(uint32(mtu))))
	}
	if mac != nil {
		req.AddData(nl.NewRtAttr(unix.IFLA_ADDRESS, mac))
	}
	if alias != nil {
		req.AddData(nl.NewRtAttr(unix.IFLA_IFALIAS, []byte(*alias)))
	}
	_, err = req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}
