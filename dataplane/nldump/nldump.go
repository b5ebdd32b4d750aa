// Package nldump reads the kernel's netlink tables (links, addresses,
// routes, neighbours, rules) so that what it returns is consistent. A dump
// spans several messages; when another change to the table comes between
// two of them (a pod's interface made, an IPv6 link-local address given to
// a new veth, as on every busy node), the kernel marks the dump
// interrupted (NLM_F_DUMP_INTR) and its entries may miss or repeat some,
// and vishvananda/netlink returns them with netlink.ErrDumpInterrupted.
// Such a dump is read again rather than trusted: a route dump missing the
// default route would make the node's uplink look free, an address dump
// missing an address would leave it on a returned device.
package nldump

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// Tries is how many times a dump is read before an interruption is
// returned as an error: each read takes well under a millisecond, so a
// dump interrupted this many times in a row is one of a table that never
// stops changing.
const Tries = 8

// Read returns what read dumps, read again while the kernel says another
// change interrupted it. After Tries interrupted reads it returns the
// error, wrapping netlink.ErrDumpInterrupted, and no entries.
func Read[T any](read func() ([]T, error)) ([]T, error) {
	for range Tries {
		out, err := read()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return nil, fmt.Errorf("%w: %d reads in a row, each interrupted by another change", netlink.ErrDumpInterrupted, Tries)
}
