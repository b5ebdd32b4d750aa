package bpf

import (
	"errors"
	"slices"
)

// The programs shipped: the only ones a claim may ask for.
const (
	// XSKRedirect hands each packet to the AF_XDP socket registered for
	// its RX queue in the XSKMAP, or to the stack when there is none.
	XSKRedirect = "xsk-redirect"
	// Count counts packets and bytes per RX queue and passes them on.
	Count = "xdp-count"
)

// Programs lists the shipped programs.
var Programs = []string{XSKRedirect, Count}

// Errors. Both wrap the cause; ErrNotSupported also matches
// ebpf.ErrNotSupported causes.
var (
	ErrNotSupported   = errors.New("not supported")
	ErrUnknownProgram = errors.New("unknown XDP program")
)

// Mode is how a program is attached.
type Mode string

const (
	// Native runs the program in the driver (XDP_FLAGS_DRV_MODE).
	Native Mode = "native"
	// Generic runs it in the stack, after the skb is built (SKB mode).
	Generic Mode = "generic"
)

// Names of what a program's directory holds.
const (
	PinProgram = "program"
	PinXSKMap  = "xsks"  // the XSKMAP: queue -> AF_XDP socket (xsk-redirect)
	PinStats   = "stats" // per-queue counters
	PinLink    = "link"  // the attachment, while attached
)

// MaxQueues is the number of RX queues the programs' maps have room for.
const MaxQueues = 64

// QueueStats are the counters of one RX queue. Redirected and Passed are
// xsk-redirect's, Bytes xdp-count's.
type QueueStats struct {
	Packets, Redirected, Passed, Bytes uint64
}

// Known reports whether name is a shipped program.
func Known(name string) bool { return slices.Contains(Programs, name) }
