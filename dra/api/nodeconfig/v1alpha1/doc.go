// Package v1alpha1 is the FastpathNodeConfig API (fastpath.dev/v1alpha1):
// a cluster-scoped object that selects nodes by label and sets, for that
// pool of nodes, what the daemon's flags set for every node (the devices
// published and shared, their resource names, the IP pools, the memif
// endpoints) and the SR-IOV VFs to make on their PFs. Each node's
// fastpathd applies the one object that selects it and says in its
// status what it applied.
package v1alpha1
