// Package dra is fastpath's fastpath.dev kubelet driver: it publishes the
// node's devices, and runs Prepare and Unprepare as lists of steps, each
// recorded in the claim store before it is done and undone in reverse on
// failure, with CDI specs, IP pools and device health. It reaches the
// network only through package dataplane, never through netlink directly,
// and runs without the runtime's hooks (nri): what a claim's device puts
// into the pod is package attach's. What both kubelet drivers share is in
// kubelet, what a claim asks in claimspec.
package dra
