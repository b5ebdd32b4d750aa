// Package attach says what a prepared claim's device puts into the pod:
// the attach plan of a netdev handed over, or of a sub-interface of a
// shared device (dataplane.Netdev, dataplane.SubInterface), from the
// claim's record; and whether a PodNetwork may be attached now (the
// KEP-3698 active validation). The fastpath.dev driver and the runtime
// hooks (nri) both use it without importing each other.
package attach
