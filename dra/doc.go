// Package dra is fastpath's DRA driver: the kubelet plugin, ResourceSlice
// publishing, the config API and its validation, Prepare and Unprepare with
// their checkpoint, CDI specs and the claim status writer. It reaches the
// network only through package dataplane, never through netlink directly.
package dra
