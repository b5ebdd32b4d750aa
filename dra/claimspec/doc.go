// Package claimspec reads what a ResourceClaim asks of fastpath's drivers,
// without side effects: the one pod it serves, the devices of each
// request from this node's pool (Count; exactly one for a CNI request),
// and the opaque config each device gets (class and claim configs merged,
// expanded for the devices of a request of several, defaulted and checked
// against the device). Both kubelet drivers and fastpathd validate use it;
// it imports no kubelet plugin, runtime hook or API client.
package claimspec
