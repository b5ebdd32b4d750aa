// Package dra is fastpath's DRA driver: the kubelet plugins of
// fastpath.dev and of the CNI DRA driver, ResourceSlice publishing, CDI
// specs, and Prepare and Unprepare as lists of steps, each recorded in the
// claim store before it is done and undone in reverse on failure. It
// reaches the network only through package dataplane, never through
// netlink directly. Its subpackages hold the config API (api/v1alpha1), the
// claim store (claims), the runtime's hooks (nri) and the status writer
// (status).
package dra
