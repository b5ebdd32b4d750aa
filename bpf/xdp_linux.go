package bpf

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/dataplane/hostdir"
)

// Program is a loaded program and its maps.
type Program struct {
	Name   string
	prog   *ebpf.Program
	xsks   *ebpf.Map // nil for xdp-count
	stats  *ebpf.Map
	closed bool
}

// Load loads a shipped program into the kernel.
func Load(name string) (*Program, error) {
	p := &Program{Name: name}
	var err error
	switch name {
	case XSKRedirect:
		var objs xskRedirectObjects
		err = loadXskRedirectObjects(&objs, nil)
		p.prog, p.xsks, p.stats = objs.XskRedirect, objs.Xsks, objs.XskStats
	case Count:
		var objs xdpCountObjects
		err = loadXdpCountObjects(&objs, nil)
		p.prog, p.stats = objs.XdpCount, objs.CountStats
	default:
		return nil, fmt.Errorf("%w %q (shipped: %v)", ErrUnknownProgram, name, Programs)
	}
	if err != nil {
		return nil, wrapNotSupported(fmt.Errorf("load XDP program %s: %w", name, err))
	}
	return p, nil
}

// LoadPinned opens the program pinned in dir by Pin.
func LoadPinned(dir string) (*Program, error) {
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(dir, PinProgram), nil)
	if err != nil {
		return nil, fmt.Errorf("open the XDP program pinned in %s: %w", dir, err)
	}
	p := &Program{prog: prog}
	info, err := prog.Info()
	if err != nil {
		_ = prog.Close()
		return nil, fmt.Errorf("XDP program pinned in %s: %w", dir, err)
	}
	switch info.Name { // the kernel keeps the C function's name
	case "xsk_redirect":
		p.Name = XSKRedirect
		if p.xsks, err = ebpf.LoadPinnedMap(filepath.Join(dir, PinXSKMap), nil); err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("XDP program pinned in %s: %w", dir, err)
		}
	case "xdp_count":
		p.Name = Count
	default:
		_ = p.Close()
		return nil, fmt.Errorf("%w: %s holds %q", ErrUnknownProgram, dir, info.Name)
	}
	if p.stats, err = ebpf.LoadPinnedMap(filepath.Join(dir, PinStats), nil); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("XDP program pinned in %s: %w", dir, err)
	}
	return p, nil
}

// Pin pins the program and its maps in dir (made with mode 0700), which
// must be on a bpffs. On failure nothing stays pinned.
func (p *Program) Pin(dir string) error {
	if err := hostdir.Make(dir, 0o700); err != nil {
		return err
	}
	pins := []struct {
		name string
		pin  func(string) error
	}{{PinProgram, p.prog.Pin}, {PinStats, p.stats.Pin}}
	if p.xsks != nil {
		pins = append(pins, struct {
			name string
			pin  func(string) error
		}{PinXSKMap, p.xsks.Pin})
	}
	for _, pin := range pins {
		if err := pin.pin(filepath.Join(dir, pin.name)); err != nil {
			return errors.Join(fmt.Errorf("pin %s in %s: %w", pin.name, dir, err), Unpin(dir))
		}
	}
	return nil
}

// XSKMap is the program's XSKMAP, nil for a program without one.
func (p *Program) XSKMap() *ebpf.Map { return p.xsks }

// Stats reads the counters of an RX queue.
func (p *Program) Stats(queue int) (QueueStats, error) {
	var st QueueStats
	var err error
	switch p.Name {
	case XSKRedirect:
		var v xskRedirectQueueStats
		err = p.stats.Lookup(uint32(queue), &v)
		st = QueueStats{Packets: v.Packets, Redirected: v.Redirected, Passed: v.Passed}
	case Count:
		var v xdpCountCount
		err = p.stats.Lookup(uint32(queue), &v)
		st = QueueStats{Packets: v.Packets, Bytes: v.Bytes}
	}
	if err != nil {
		return QueueStats{}, fmt.Errorf("counters of queue %d: %w", queue, err)
	}
	return st, nil
}

// Close closes the program's and maps' descriptors. What is pinned or
// attached stays.
func (p *Program) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for _, c := range []interface{ Close() error }{p.prog, p.xsks, p.stats} {
		if c != nil && !isNilCloser(c) {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

func isNilCloser(c interface{ Close() error }) bool {
	switch v := c.(type) {
	case *ebpf.Program:
		return v == nil
	case *ebpf.Map:
		return v == nil
	}
	return false
}

// Attach attaches the program to interface ifName in the network namespace
// at netnsPath ("" for the caller's), in mode; with fallback, in generic
// mode when the driver has no native XDP. The attachment is a bpf_link
// pinned in pinDir, so it outlives this process; Detach ends it. It
// returns the mode used. On failure nothing stays attached.
func (p *Program) Attach(netnsPath, ifName string, mode Mode, fallback bool, pinDir string) (Mode, error) {
	if mode != Native && mode != Generic {
		return "", fmt.Errorf("attach mode %q: want native or generic", mode)
	}
	var used Mode
	err := InNetns(netnsPath, func() error {
		ifc, err := net.InterfaceByName(ifName)
		if err != nil {
			return fmt.Errorf("interface %s: %w", ifName, err)
		}
		l, err := attach(p.prog, ifc.Index, mode)
		if err != nil && mode == Native && fallback && errors.Is(err, ErrNotSupported) {
			mode = Generic
			l, err = attach(p.prog, ifc.Index, mode)
		}
		if err != nil {
			return fmt.Errorf("attach XDP program %s to %s: %w", p.Name, ifName, err)
		}
		defer func() { _ = l.Close() }()
		if err := l.Pin(filepath.Join(pinDir, PinLink)); err != nil {
			return fmt.Errorf("pin the attachment of %s to %s: %w", p.Name, ifName, err)
		}
		used = mode
		return nil
	})
	return used, err
}

func attach(prog *ebpf.Program, ifindex int, mode Mode) (link.Link, error) {
	flags := link.XDPDriverMode
	if mode == Generic {
		flags = link.XDPGenericMode
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
	if err != nil {
		return nil, wrapNotSupported(fmt.Errorf("%s mode: %w", mode, err))
	}
	return l, nil
}

// Detach ends the attachment pinned in dir. No attachment is fine.
func Detach(dir string) error {
	path := filepath.Join(dir, PinLink)
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open the XDP attachment pinned at %s: %w", path, err)
	}
	defer func() { _ = l.Close() }()
	if err := l.Unpin(); err != nil {
		return fmt.Errorf("unpin %s: %w", path, err)
	}
	// The kernel detaches when the last reference, this one, is closed.
	return nil
}

// Unpin detaches what is attached and removes dir with everything pinned
// in it. A missing dir is fine.
func Unpin(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return errors.Join(Detach(dir), os.RemoveAll(dir))
}

// Attached reports the ID of the XDP program attached to ifName in the
// network namespace at netnsPath, 0 for none.
func Attached(netnsPath, ifName string) (int, error) {
	var id int
	err := InNetns(netnsPath, func() error {
		ifc, err := net.InterfaceByName(ifName)
		if err != nil {
			return err
		}
		id, err = attachedID(ifc.Index)
		return err
	})
	return id, err
}

// MountBPFFS makes sure dir is a bpffs, mounting one there if it is not.
func MountBPFFS(dir string) error {
	if err := hostdir.Make(dir, 0o700); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := unix.Mount("bpffs", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs on %s: %w", dir, err)
	}
	fault.Point("bpffs.mounted")
	return nil
}

// InNetns runs fn on a thread in the network namespace at path ("" for the
// caller's own): what resolves by the calling thread's namespace (an
// interface index, /proc/sys/net, an ethtool ioctl) then sees that
// namespace.
func InNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", path, err)
	}
	defer func() { _ = target.Close() }()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer func() { _ = orig.Close() }()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace %s: %w", path, err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread stays locked and dies with this goroutine: it must
		// not run anything else in the wrong namespace.
		return errors.Join(fnErr, fmt.Errorf("return from network namespace %s: %w", path, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

func wrapNotSupported(err error) error {
	if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP) {
		return fmt.Errorf("%w: %w", ErrNotSupported, err)
	}
	return err
}

func attachedID(ifindex int) (int, error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return 0, err
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return int(x.ProgId), nil
	}
	return 0, nil
}
