// Package controller is fastpathd's cluster-level process (fastpathd
// controller): the CNIConfig controller, which writes each approved CNI
// config's Accepted condition, and the PodNetwork controller, which writes
// the Ready and ParamsReady conditions of PodNetworks and
// PodNetworkAttachments, their in-use finalizers and the default
// PodNetwork, and lifts the scheduling gates of pods whose networks pass
// the KEP's active validation, with node affinity to the nodes that attach
// them; and the IPAMClaim controller, which lets go, for a node, of the
// IPAMClaims whose node or holding pod is gone. It runs once per cluster and touches no node: it imports no
// netlink, eBPF, runtime hook or kubelet plugin package (make lint checks).
package controller
