// Package v1alpha1 is fastpath's configuration API as Go types: the opaque
// parameters of DeviceClasses and claims for driver fastpath.dev
// (InterfaceConfig), the operator's file of static memif endpoints
// (MemifConfig), and the parameters of the CNI DRA driver (CNIConfig, kind
// CNI). It holds their defaults, their static validation (what can be
// checked without the allocated device) and the one strict decoder every
// reader of a config uses. It imports no kubelet plugin, netlink, BPF or
// NRI package, so that workloads, tests and tools can import it.
package v1alpha1
