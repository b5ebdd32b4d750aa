// Package kubelet is what fastpath's two kubelet drivers (fastpath.dev and
// the CNI DRA driver) share: starting the kubelet plugin helper and its
// registration, the result of a prepared claim, the ResourceSlice
// publisher, and the logging of background errors.
package kubelet
