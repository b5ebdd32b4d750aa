// Package memif speaks enough of the memif control protocol (libmemif,
// VPP, DPDK's net_memif) to probe an endpoint and to greet one: the HELLO a
// master sends on every new connection, and the INIT and ACK that follow.
// Messages are 128 bytes in host byte order on a SOCK_SEQPACKET socket.
package memif

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

// Message types.
const (
	MsgAck   = 1
	MsgHello = 2
	MsgInit  = 3
)

// Version is the protocol version this package speaks: 2.0.
const Version = 2 << 8 // major 2, minor 0

const (
	msgSize = 128
	nameLen = 32
)

// ErrNotMemif is returned when the peer does not speak memif as expected.
var ErrNotMemif = errors.New("not a memif endpoint")

// Hello is what a master announces.
type Hello struct {
	Name                   string
	MinVersion, MaxVersion uint16
	MaxRegion              uint16
	MaxM2SRing, MaxS2MRing uint16
	MaxLog2RingSize        uint8
}

// Init is a slave's answer to Hello.
type Init struct {
	Version uint16
	ID      uint32
	Mode    uint8 // 0 ethernet, 1 ip, 2 punt/inject
	Name    string
}

func (h Hello) marshal() []byte {
	b := make([]byte, msgSize)
	binary.NativeEndian.PutUint16(b[0:], MsgHello)
	copy(b[2:2+nameLen-1], h.Name)
	binary.NativeEndian.PutUint16(b[34:], h.MinVersion)
	binary.NativeEndian.PutUint16(b[36:], h.MaxVersion)
	binary.NativeEndian.PutUint16(b[38:], h.MaxRegion)
	binary.NativeEndian.PutUint16(b[40:], h.MaxM2SRing)
	binary.NativeEndian.PutUint16(b[42:], h.MaxS2MRing)
	b[44] = h.MaxLog2RingSize
	return b
}

func (i Init) marshal() []byte {
	b := make([]byte, msgSize)
	binary.NativeEndian.PutUint16(b[0:], MsgInit)
	binary.NativeEndian.PutUint16(b[2:], i.Version)
	binary.NativeEndian.PutUint32(b[4:], i.ID)
	b[8] = i.Mode
	copy(b[33:33+nameLen-1], i.Name)
	return b
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// read reads one message and checks its type.
func read(c *net.UnixConn, want uint16) ([]byte, error) {
	b := make([]byte, msgSize+1)
	n, _, _, _, err := c.ReadMsgUnix(b, make([]byte, 256))
	if err != nil {
		return nil, err
	}
	if n != msgSize {
		return nil, fmt.Errorf("%w: a message of %d bytes, want %d", ErrNotMemif, n, msgSize)
	}
	if t := binary.NativeEndian.Uint16(b); t != want {
		return nil, fmt.Errorf("%w: message type %d, want %d", ErrNotMemif, t, want)
	}
	return b[:msgSize], nil
}

func parseHello(b []byte) Hello {
	return Hello{
		Name:            cString(b[2 : 2+nameLen]),
		MinVersion:      binary.NativeEndian.Uint16(b[34:]),
		MaxVersion:      binary.NativeEndian.Uint16(b[36:]),
		MaxRegion:       binary.NativeEndian.Uint16(b[38:]),
		MaxM2SRing:      binary.NativeEndian.Uint16(b[40:]),
		MaxS2MRing:      binary.NativeEndian.Uint16(b[42:]),
		MaxLog2RingSize: b[44],
	}
}

func parseInit(b []byte) Init {
	return Init{
		Version: binary.NativeEndian.Uint16(b[2:]),
		ID:      binary.NativeEndian.Uint32(b[4:]),
		Mode:    b[8],
		Name:    cString(b[33 : 33+nameLen]),
	}
}

func dial(ctx context.Context, path string) (*net.UnixConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, err
	}
	uc := c.(*net.UnixConn)
	if dl, ok := ctx.Deadline(); ok {
		_ = uc.SetDeadline(dl)
	}
	return uc, nil
}

// hello connects to the endpoint at path and reads its HELLO.
func hello(ctx context.Context, path string) (*net.UnixConn, Hello, error) {
	c, err := dial(ctx, path)
	if err != nil {
		return nil, Hello{}, err
	}
	b, err := read(c, MsgHello)
	if err != nil {
		_ = c.Close()
		return nil, Hello{}, fmt.Errorf("memif endpoint %s: %w", path, err)
	}
	return c, parseHello(b), nil
}

// Probe connects to the endpoint at path and reads its HELLO: the endpoint
// is healthy when it answers with one whose version range holds Version.
func Probe(ctx context.Context, path string) (Hello, error) {
	c, h, err := hello(ctx, path)
	if err != nil {
		return Hello{}, err
	}
	_ = c.Close()
	if h.MinVersion > Version || h.MaxVersion < Version {
		return h, fmt.Errorf("memif endpoint %s speaks versions %#x-%#x, not %#x", path, h.MinVersion, h.MaxVersion, Version)
	}
	return h, nil
}

// Greet connects to the endpoint at path as a slave: it reads the HELLO,
// answers with init and waits for the ACK.
func Greet(ctx context.Context, path string, init Init) (Hello, error) {
	c, h, err := hello(ctx, path)
	if err != nil {
		return Hello{}, err
	}
	defer func() { _ = c.Close() }()
	if init.Version == 0 {
		init.Version = Version
	}
	if _, err := c.Write(init.marshal()); err != nil {
		return h, fmt.Errorf("memif endpoint %s: send INIT: %w", path, err)
	}
	if _, err := read(c, MsgAck); err != nil {
		return h, fmt.Errorf("memif endpoint %s: after INIT: %w", path, err)
	}
	return h, nil
}

// Answer plays the master's side of a new connection: it sends hello,
// reads the slave's INIT and acknowledges it.
func Answer(c *net.UnixConn, hello Hello, timeout time.Duration) (Init, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if hello.MaxVersion == 0 {
		hello.MinVersion, hello.MaxVersion = Version, Version
	}
	if _, err := c.Write(hello.marshal()); err != nil {
		return Init{}, fmt.Errorf("send HELLO: %w", err)
	}
	b, err := read(c, MsgInit)
	if err != nil {
		return Init{}, err
	}
	ack := make([]byte, msgSize)
	binary.NativeEndian.PutUint16(ack, MsgAck)
	if _, err := c.Write(ack); err != nil {
		return Init{}, fmt.Errorf("send ACK: %w", err)
	}
	return parseInit(b), nil
}

// Serve answers every connection to l as a master announcing hello, until
// l is closed, and hands each slave's INIT to inits (nil: dropped). It is a
// stand-in for a vswitch's control channel.
func Serve(l *net.UnixListener, hello Hello, inits func(Init)) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			if in, err := Answer(c, hello, 10*time.Second); err == nil && inits != nil {
				inits(in)
			}
		}()
	}
}

// ListenAndServe listens on a SOCK_SEQPACKET socket at path and serves it
// as Serve does, until the returned listener is closed.
func ListenAndServe(path string, hello Hello, inits func(Init)) (*net.UnixListener, error) {
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	go Serve(l, hello, inits)
	return l, nil
}
