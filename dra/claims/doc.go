// Package claims is the claim store: every claim prepared on this node, of
// every driver fastpath serves, in memory, written through to one
// versioned checkpoint file with its own persisted types. Reads never touch
// the disk; each claim has its own lock, so that one claim's slow work
// never blocks another claim or a runtime hook. It does no side effect but
// writing the checkpoint.
package claims
