// Package admission is fastpathd controller's validating admission
// webhook: it judges ResourceClaims, ResourceClaimTemplates, DeviceClasses,
// CNIConfigs, NetworkAttachmentDefinitions, PodNetworks,
// PodNetworkAttachments, FastpathNodeConfigs and the network selection
// annotations of Pods with the rules of fastpathd validate (package
// validate), so that a mistake is refused when the object is written
// rather than found on a node at the pod's sandbox creation. It judges the
// parts of an object fastpath reads, each held first to what the largest
// object of its kind can have, and says a bounded number of problems: its
// memory and its answers follow its input's bounds, not what a tenant
// writes. As a mutating webhook, it gives a pod that lists PodNetworks the
// scheduling gate the controller lifts once its networks can be attached.
// It serves the reviews over TLS with certificates it reloads when they
// change, and keeps those certificates, and the CA bundles of its webhook
// configurations, made and rotated (cert-controller).
package admission
