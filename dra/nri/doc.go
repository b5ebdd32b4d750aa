// Package nri is fastpath's NRI plugin: when the container runtime starts
// a pod sandbox it puts the pod's prepared devices into the pod's network
// namespace and runs the CNI networks of its claims and (with NPWG) of the
// NetworkAttachmentDefinitions the pod selects, and when the sandbox stops
// it takes them back. It works from the claim store, acts through
// package dataplane and reports through package status; it holds no state
// of its own but locks.
package nri
