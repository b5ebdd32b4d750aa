// Package claimspec reads what a ResourceClaim asks of fastpath's drivers,
// without side effects: the one pod it serves, exactly one device per
// request from this node's pool, and the opaque config each request's
// device gets (class and claim configs merged, defaulted and checked
// against the device). Both kubelet drivers and fastpathd validate use it;
// it imports no kubelet plugin, runtime hook or API client.
package claimspec
