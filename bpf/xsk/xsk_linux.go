// Package xsk is a small AF_XDP socket: one RX queue, a UMEM of its own,
// frames received counted and given back to the kernel. It is what the
// example consumer and the tests use to show packets reaching userspace
// through xsk-redirect.
package xsk

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

const (
	frameSize = 2048
	// defaultRing is the ring size, and the number of frames, of a socket
	// whose Options say none.
	defaultRing = 64
)

// Options of a socket.
type Options struct {
	Ifindex int
	Queue   int
	// ZeroCopy asks for zero-copy (XDP_ZEROCOPY); otherwise copy mode.
	ZeroCopy bool
	// Ring is the size of the fill and RX rings, and the number of
	// frames of the UMEM: a power of two, 64 when zero. A consumer that
	// takes packets in bursts wants more, so that the kernel does not drop
	// while it is busy.
	Ring int
}

// Socket is an AF_XDP socket bound to one RX queue.
type Socket struct {
	fd       int
	size     uint32 // of the rings, and the UMEM's frames
	umem     []byte
	fill, rx ring
	maps     [][]byte
	received uint64
}

type ring struct {
	prod, cons *uint32
	descs      unsafe.Pointer
	mask       uint32
}

// Open creates the socket, registers its UMEM and rings, gives the kernel
// every frame to fill and binds it to the queue.
func Open(o Options) (_ *Socket, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_XDP socket: %w", err)
	}
	if o.Ring == 0 {
		o.Ring = defaultRing
	}
	if o.Ring < 0 || o.Ring&(o.Ring-1) != 0 {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("ring size %d: not a power of two", o.Ring)
	}
	s := &Socket{fd: fd, size: uint32(o.Ring)}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	if s.umem, err = unix.Mmap(-1, 0, o.Ring*frameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return nil, fmt.Errorf("UMEM: %w", err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)), Size: frameSize}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("register the UMEM: %w", err)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, o.Ring); err != nil {
			return nil, fmt.Errorf("ring size (option %d): %w", opt, err)
		}
	}
	var offs unix.XDPMmapOffsets
	size := uint32(unsafe.Sizeof(offs))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&offs)), uintptr(unsafe.Pointer(&size)), 0); e != 0 {
		return nil, fmt.Errorf("ring offsets: %w", e)
	}
	if s.fill, err = s.mmapRing(offs.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, 8); err != nil {
		return nil, err
	}
	if s.rx, err = s.mmapRing(offs.Rx, unix.XDP_PGOFF_RX_RING, unsafe.Sizeof(unix.XDPDesc{})); err != nil {
		return nil, err
	}
	for i := range s.size {
		*(*uint64)(unsafe.Add(s.fill.descs, uintptr(i)*8)) = uint64(i) * frameSize
	}
	atomic.StoreUint32(s.fill.prod, s.size)
	flags := uint16(unix.XDP_COPY)
	if o.ZeroCopy {
		flags = unix.XDP_ZEROCOPY
	}
	if err := unix.Bind(fd, &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(o.Ifindex), QueueID: uint32(o.Queue)}); err != nil {
		mode := "copy"
		if o.ZeroCopy {
			mode = "zero-copy"
		}
		return nil, fmt.Errorf("bind to ifindex %d queue %d in %s mode: %w", o.Ifindex, o.Queue, mode, err)
	}
	return s, nil
}

func setsockopt(fd, opt int, p unsafe.Pointer, l uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), l, 0); e != 0 {
		return e
	}
	return nil
}

func (s *Socket) mmapRing(off unix.XDPRingOffset, pgoff int64, descSize uintptr) (ring, error) {
	b, err := unix.Mmap(s.fd, pgoff, int(off.Desc+uint64(s.size)*uint64(descSize)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ring{}, fmt.Errorf("map a ring: %w", err)
	}
	s.maps = append(s.maps, b)
	base := unsafe.Pointer(&b[0])
	return ring{
		prod:  (*uint32)(unsafe.Add(base, off.Producer)),
		cons:  (*uint32)(unsafe.Add(base, off.Consumer)),
		descs: unsafe.Add(base, off.Desc),
		mask:  s.size - 1,
	}, nil
}

// FD is the socket's descriptor.
func (s *Socket) FD() int { return s.fd }

// Register puts the socket in an XSKMAP at its queue.
func (s *Socket) Register(xsks *ebpf.Map, queue int) error {
	if err := xsks.Put(uint32(queue), uint32(s.fd)); err != nil {
		return fmt.Errorf("register the socket in the XSKMAP at queue %d: %w", queue, err)
	}
	return nil
}

// Receive waits up to timeout for frames, takes what arrived, gives the
// frames back to the kernel and returns how many there were.
func (s *Socket) Receive(timeout time.Duration) (int, error) {
	fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, int(timeout.Milliseconds())); err != nil && !errors.Is(err, unix.EINTR) {
		return 0, fmt.Errorf("poll: %w", err)
	}
	return s.Take(nil), nil
}

// Take takes the frames that arrived, without waiting or a system call:
// each is passed to each, if not nil, then given back to the kernel. It
// returns how many there were. A consumer that spins on Take receives
// with the least latency, at the cost of a CPU.
func (s *Socket) Take(each func(frame []byte)) int {
	prod := atomic.LoadUint32(s.rx.prod)
	cons := atomic.LoadUint32(s.rx.cons)
	n := prod - cons
	if n == 0 {
		return 0
	}
	// Each received frame goes straight back to the fill ring.
	fillProd := atomic.LoadUint32(s.fill.prod)
	for i := uint32(0); i < n; i++ {
		d := (*unix.XDPDesc)(unsafe.Add(s.rx.descs, uintptr((cons+i)&s.rx.mask)*unsafe.Sizeof(unix.XDPDesc{})))
		if each != nil {
			each(s.umem[d.Addr : d.Addr+uint64(d.Len)])
		}
		addr := d.Addr - d.Addr%frameSize
		*(*uint64)(unsafe.Add(s.fill.descs, uintptr((fillProd+i)&s.fill.mask)*8)) = addr
	}
	atomic.StoreUint32(s.fill.prod, fillProd+n)
	atomic.StoreUint32(s.rx.cons, prod)
	s.received += uint64(n)
	return int(n)
}

// Received is the number of frames received so far.
func (s *Socket) Received() uint64 { return s.received }

// Close releases the socket, its rings and its UMEM.
func (s *Socket) Close() error {
	var errs []error
	for _, m := range s.maps {
		errs = append(errs, unix.Munmap(m))
	}
	s.maps = nil
	if s.fd >= 0 {
		errs = append(errs, unix.Close(s.fd))
		s.fd = -1
	}
	if s.umem != nil {
		errs = append(errs, unix.Munmap(s.umem))
		s.umem = nil
	}
	return errors.Join(errs...)
}
