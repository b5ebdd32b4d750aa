// Package sharedl2 says which addresses the node's records give pods on
// each shared parent (a host link many pods' sub-interfaces share: the
// macvlan, ipvlan and vlan of fastpath.dev claims, of CNI claims and of
// the networks pods select), and refuses a static address another record
// holds on the same link, the parent's own or a node pool's gateway. Both
// kubelet drivers and the runtime hooks use it, under the claim store's
// lock, so that no address is given twice.
//
// It is pure: the callers read the parents' addresses from the host.
package sharedl2
