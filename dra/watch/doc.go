// Package watch reads the API objects fastpathd and its controller act
// on: watch caches that serve NetworkAttachmentDefinitions, PodNetworks
// and PodNetworkAttachments without a round trip once listed (and read
// through to the API server until then), IPAMClaims, and the operator's
// approved CNI configs. It knows nothing of the node: no netlink, no
// runtime hooks, no kubelet plugin.
package watch
