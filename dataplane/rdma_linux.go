package dataplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
)

// RDMA is the RDMA device that goes into a pod with its netdev (Netdev).
type RDMA struct {
	// Device is its name (mlx5_0, rxe0).
	Device string
	// Link is the link type of a software device (RDMADevice.Link): the
	// kernel removes such a device when its netdev leaves the host's
	// namespace, so Attach makes it again on the netdev in the pod, and
	// Detach on the host's. "" for a hardware device.
	Link string
	// Exclusive: the node's RDMA subsystem is in exclusive namespace mode,
	// and the device is to be in the pod's namespace. In shared mode a
	// hardware device stays where it is.
	Exclusive bool
	// UMAD: the pod gets the device's management datagram files.
	UMAD bool
}

// RDMANetnsMode is the network namespace mode of the node's RDMA
// subsystem (RDMANetnsShared or RDMANetnsExclusive).
func RDMANetnsMode() (string, error) {
	mode, err := netlink.RdmaSystemGetNetnsMode()
	if err != nil {
		return "", fmt.Errorf("read the RDMA subsystem's network namespace mode: %w", err)
	}
	return mode, nil
}

// rdmaHandle is a netlink handle for the RDMA subsystem in namespace ns.
func rdmaHandle(ns netns.NsHandle) (*netlink.Handle, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_RDMA)
	if err != nil {
		return nil, fmt.Errorf("RDMA netlink: %w", err)
	}
	return h, nil
}

// rdmaLeaveHost removes a software RDMA device before its netdev leaves
// the host: the kernel would remove it anyway, but later, while its name
// is still taken by the device that goes.
func (a *Attacher) rdmaLeaveHost(r *RDMA) error {
	if r == nil || r.Link == "" {
		return nil
	}
	host, err := rdmaHandle(a.host)
	if err != nil {
		return err
	}
	defer host.Close()
	return rdmaRemove(host, r.Device, "the host before its netdev moves")
}

// rdmaRemove removes RDMA device name, seen through h, if h sees it.
func rdmaRemove(h *netlink.Handle, name, from string) error {
	if _, err := h.RdmaLinkByName(name); err != nil {
		return nil
	}
	if err := h.RdmaLinkDel(name); err != nil {
		return fmt.Errorf("remove RDMA device %s from %s: %w", name, from, err)
	}
	return nil
}

// attachRDMA puts the netdev's RDMA device in the pod (the netdev is
// there, named nd.Name): a software device is made again on it from the
// pod's namespace (and, in exclusive mode, moved into it where the kernel
// made it in the host's); a hardware one, in exclusive mode, moves into
// it. In exclusive mode the device must then be seen from the pod: a
// kernel whose software device stays in the host's namespace, and cannot
// be moved, cannot give it.
// Done already, it does nothing.
func (a *Attacher) attachRDMA(ns netns.NsHandle, nd Netdev) error {
	r := nd.RDMA
	pod, err := rdmaHandle(ns)
	if err != nil {
		return err
	}
	defer pod.Close()
	_, inPod := pod.RdmaLinkByName(r.Device) // nil: seen from the pod
	// The host sees a device of the pod's only where the kernel left it
	// in the host's namespace (exclusive mode) or shares it (shared).
	onPodNetdev := a.rdmaFiles().RDMAParent(r.Device) == nd.Name
	switch {
	case r.Link != "" && r.Exclusive && inPod != nil && onPodNetdev:
		// Made on the pod's interface before a crash, and not moved in.
		if err := a.moveSoftRDMAIn(ns, nd); err != nil {
			return err
		}
	case r.Link != "" && (inPod != nil || !onPodNetdev):
		if err := a.rdmaLeaveHost(r); err != nil {
			return err
		}
		if err := pod.RdmaLinkAdd(r.Device, r.Link, nd.Name); err != nil {
			return fmt.Errorf("make RDMA device %s (%s) on %s in the pod: %w", r.Device, r.Link, nd.Name, err)
		}
		if _, err := pod.RdmaLinkByName(r.Device); err != nil && r.Exclusive {
			// A kernel makes a software device in the initial
			// namespace whoever asks (7.x): in exclusive mode it moves
			// into the pod's, as a hardware one does. Killed here, the
			// next attach finds it made and moves it (the first case).
			fault.Point("attach.rdma.made")
			if err := a.moveSoftRDMAIn(ns, nd); err != nil {
				return err
			}
		}
	case r.Link == "" && r.Exclusive && inPod != nil:
		if err := a.moveRDMAIn(ns, r.Device); err != nil {
			return err
		}
	}
	fault.Point("attach.rdma")
	if r.Link != "" && r.Exclusive {
		if _, err := pod.RdmaLinkByName(r.Device); err != nil {
			return fmt.Errorf("RDMA device %s (%s), made on %s in the pod, is not in the pod's network namespace: this kernel's %s keeps its devices in the host's, "+
				"so with the node's RDMA subsystem in exclusive mode no pod can use it (set it to shared: rdma system set netns shared)", r.Device, r.Link, nd.Name, r.Link)
		}
	}
	return nil
}

// moveSoftRDMAIn moves a software RDMA device made on the pod's interface,
// which the kernel left in the host's namespace, into the pod's. A kernel
// that cannot move it (6.12's rdma_rxe) is said to keep its devices in the
// host's, as the check after says.
func (a *Attacher) moveSoftRDMAIn(ns netns.NsHandle, nd Netdev) error {
	r := nd.RDMA
	if err := a.moveRDMAIn(ns, r.Device); err != nil {
		return fmt.Errorf("RDMA device %s (%s), made on %s in the pod, is not in the pod's network namespace: this kernel's %s keeps its devices in the host's, "+
			"so with the node's RDMA subsystem in exclusive mode no pod can use it (set it to shared: rdma system set netns shared): %w", r.Device, r.Link, nd.Name, r.Link, err)
	}
	return nil
}

// moveRDMAIn moves a hardware RDMA device from the host's network
// namespace into the pod's, ns.
func (a *Attacher) moveRDMAIn(ns netns.NsHandle, device string) error {
	host, err := rdmaHandle(a.host)
	if err != nil {
		return err
	}
	defer host.Close()
	link, err := host.RdmaLinkByName(device)
	if err != nil {
		return fmt.Errorf("RDMA device %s is neither in the pod's network namespace nor in the host's: %w", device, err)
	}
	if err := host.RdmaLinkSetNsFd(link, uint32(ns)); err != nil {
		return fmt.Errorf("move RDMA device %s into the pod's network namespace: %w", device, err)
	}
	return nil
}

// rdmaInPod says whether attachRDMA is done.
func (a *Attacher) rdmaInPod(ns netns.NsHandle, nd Netdev) (bool, error) {
	r := nd.RDMA
	if r == nil || (r.Link == "" && !r.Exclusive) {
		return true, nil
	}
	pod, err := rdmaHandle(ns)
	if err != nil {
		return false, err
	}
	defer pod.Close()
	if _, err := pod.RdmaLinkByName(r.Device); err != nil {
		return false, nil
	}
	return r.Link == "" || a.rdmaFiles().RDMAParent(r.Device) == nd.Name, nil
}

// detachRDMA takes the RDMA device back from the pod before its netdev
// leaves it: a software device made on the pod's interface is removed
// (Detach makes it again on the host's netdev, rdmaRestore), a hardware
// one in exclusive mode moves back to the host's namespace. ns is the
// pod's namespace.
func (a *Attacher) detachRDMA(ns netns.NsHandle, nd Netdev) error {
	r := nd.RDMA
	if r == nil || (r.Link == "" && !r.Exclusive) {
		return nil
	}
	pod, err := rdmaHandle(ns)
	if err != nil {
		return err
	}
	defer pod.Close()
	link, inPod := pod.RdmaLinkByName(r.Device)
	if r.Link == "" {
		if inPod != nil {
			return nil
		}
		if err := pod.RdmaLinkSetNsFd(link, uint32(a.host)); err != nil {
			return fmt.Errorf("return RDMA device %s to the host's network namespace: %w", r.Device, err)
		}
		return nil
	}
	// Removed now rather than by the kernel once the netdev leaves, which
	// takes a while, its name held meanwhile. Seen from the pod in
	// exclusive mode, it is the pod's; else it is the one on the pod's
	// interface, which a kernel may have kept in the host's namespace.
	ours := a.rdmaFiles().RDMAParent(r.Device) == nd.Name
	if inPod == nil && (r.Exclusive || ours) {
		return rdmaRemove(pod, r.Device, "the pod")
	}
	if !ours {
		return nil
	}
	host, err := rdmaHandle(a.host)
	if err != nil {
		return err
	}
	defer host.Close()
	return rdmaRemove(host, r.Device, "the host's namespace, where the kernel kept the pod's")
}

// rdmaRestore makes a software RDMA device again on its netdev, back in
// the host, under its name. The name may still be held for a moment by the
// device the kernel removes on its own (its netdev left a namespace, or
// the pod's namespace went away): it tries until rdmaRestoreTimeout.
func (a *Attacher) rdmaRestore(ctx context.Context, nd Netdev) error {
	r := nd.RDMA
	if r == nil || r.Link == "" {
		return nil
	}
	host, err := rdmaHandle(a.host)
	if err != nil {
		return err
	}
	defer host.Close()
	deadline := time.Now().Add(rdmaRestoreTimeout)
	for {
		if _, err := host.RdmaLinkByName(r.Device); err == nil && a.rdmaFiles().RDMAParent(r.Device) == nd.HostName {
			return nil
		}
		err := host.RdmaLinkAdd(r.Device, r.Link, nd.HostName)
		if err == nil {
			klog.FromContext(ctx).V(2).Info("Made the RDMA device again on the host", "rdmaDevice", r.Device, "link", r.Link, "netdev", nd.HostName)
			return nil
		}
		if !errors.Is(err, unix.EEXIST) || time.Now().After(deadline) {
			return fmt.Errorf("make RDMA device %s (%s) again on %s: %w", r.Device, r.Link, nd.HostName, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// rdmaRestoreTimeout bounds the wait for the kernel to let go of a
// software RDMA device's name.
const rdmaRestoreTimeout = 5 * time.Second

func (a *Attacher) rdmaFiles() RDMAFiles {
	return RDMAFiles{SysfsRoot: a.sysfsRoot, DevRoot: "/"}
}

// RDMAFilesNow are the character devices of the netdev's RDMA device as
// they are now (a software device made again has a verbs device of another
// number), nil for none.
func (a *Attacher) RDMAFilesNow(nd Netdev) ([]CharDevice, error) {
	if nd.RDMA == nil {
		return nil, nil
	}
	dev, err := a.rdmaFiles().Device(nd.RDMA.Device, nd.RDMA.UMAD)
	return dev.Files, err
}

// rdmaFilesIn are the character devices of the netdev's RDMA device in the
// pod, ns. In exclusive mode the host's sysfs does not show a device of the
// pod's: its verbs device is asked of the kernel from the pod's namespace.
func (a *Attacher) rdmaFilesIn(ns netns.NsHandle, nd Netdev) ([]CharDevice, error) {
	r := nd.RDMA
	if r == nil || !r.Exclusive || a.rdmaFiles().RDMAParent(r.Device) != "" {
		return a.RDMAFilesNow(nd)
	}
	if r.UMAD {
		return nil, fmt.Errorf("RDMA device %s: a software device has no management datagram device (umad)", r.Device)
	}
	verbs, err := rdmaCharDev(ns, r.Device, "uverbs")
	if err != nil {
		return nil, err
	}
	rf := a.rdmaFiles()
	files := []CharDevice{rf.node("infiniband", verbs)}
	if _, err := os.Stat(filepath.Join(rf.DevRoot, "dev", "infiniband", "rdma_cm")); err == nil {
		files = append(files, rf.node("infiniband", "rdma_cm"))
	}
	return files, nil
}

// The RDMA netlink family's request of a device's character device
// (rdma_netlink.h), which the netlink package does not make.
const (
	rdmaNldevCmdGetChardev   = 15
	rdmaNldevAttrChardevType = 69
	rdmaNldevAttrChardevName = 70
)

// rdmaCharDev is the name under /dev/infiniband of the character device of
// type typ (uverbs) of RDMA device name, asked in network namespace ns.
func rdmaCharDev(ns netns.NsHandle, name, typ string) (string, error) {
	h, err := rdmaHandle(ns)
	if err != nil {
		return "", err
	}
	defer h.Close()
	link, err := h.RdmaLinkByName(name)
	if err != nil {
		return "", fmt.Errorf("RDMA device %s in the pod's network namespace: %w", name, err)
	}
	sock, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_RDMA)
	if err != nil {
		return "", fmt.Errorf("RDMA netlink in the pod's network namespace: %w", err)
	}
	defer sock.Close()
	req := nl.NewNetlinkRequest(nl.RDMA_NL_NLDEV<<nl.RDMA_NL_GET_CLIENT_SHIFT|rdmaNldevCmdGetChardev, 0)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_RDMA: {Socket: sock}}
	index := make([]byte, 4)
	nl.NativeEndian().PutUint32(index, link.Attrs.Index)
	req.AddData(nl.NewRtAttr(nl.RDMA_NLDEV_ATTR_DEV_INDEX, index))
	req.AddData(nl.NewRtAttr(rdmaNldevAttrChardevType, nl.ZeroTerminated(typ)))
	msgs, err := req.Execute(unix.NETLINK_RDMA, 0)
	if err != nil {
		return "", fmt.Errorf("the %s device of RDMA device %s: %w", typ, name, err)
	}
	for _, m := range msgs {
		attrs, err := nl.ParseRouteAttr(m)
		if err != nil {
			return "", fmt.Errorf("the %s device of RDMA device %s: %w", typ, name, err)
		}
		for _, at := range attrs {
			if at.Attr.Type == rdmaNldevAttrChardevName {
				if dev := strings.TrimRight(string(at.Value), "\x00"); dev != "" {
					return dev, nil
				}
			}
		}
	}
	return "", fmt.Errorf("RDMA device %s has no %s device (is the ib_uverbs module loaded?)", name, typ)
}
