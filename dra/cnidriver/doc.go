// Package cnidriver is the kubelet driver of the CNI DRA driver API
// (cni.dra.networking.x-k8s.io): it publishes the node's CNI devices, and at
// Prepare checks and resolves a claim's CNI config (cnipolicy) and records
// it; the runtime hooks (nri) run it when the pod's sandbox starts and
// undo it when it stops.
package cnidriver
