// Package v1alpha1 is KEP-3698 (Multi-Network) as Go types for fastpath:
// the cluster-scoped PodNetwork and the namespaced PodNetworkAttachment,
// field for field as the KEP gives them, with their condition types,
// reasons and static validation; the pod's list of networks (the KEP's Pod.spec.networks),
// carried in the annotation network.fastpath.dev/networks until Pod has the
// field, with its static validation; and the KEP's network status shape,
// written to network.fastpath.dev/network-status.
//
// The API group is network.fastpath.dev, not the KEP's core group nor a
// *.x-k8s.io one: the x-k8s.io groups belong to Kubernetes SIG projects,
// and fastpath, a third party, names its objects under its own domain. The
// fields, condition types and reasons are the KEP's, so that moving to the
// upstream API is a change of group and nothing else.
//
// It holds types, their deep copies, the scheme registration and pure
// functions; it talks to no API server and imports no node-side package.
// The controller (package dra) writes the objects' status; the node daemon
// reads the pod annotation with ParseNetworks and ValidateNetworks.
package v1alpha1
