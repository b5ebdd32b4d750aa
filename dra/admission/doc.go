// Package admission is fastpathd controller's validating admission
// webhook: it judges ResourceClaims, ResourceClaimTemplates, DeviceClasses,
// CNIConfigs, NetworkAttachmentDefinitions, PodNetworks,
// PodNetworkAttachments, FastpathNodeConfigs and the network selection
// annotations of Pods with
// the rules of fastpathd validate (package validate), so that a mistake is
// refused when the object is written rather than found on a node at the
// pod's sandbox creation; and, as a mutating webhook, gives a pod that
// lists PodNetworks the scheduling gate the controller lifts once its
// networks can be attached. It serves the reviews over TLS with
// certificates it reloads when they change, and keeps those certificates,
// and the CA bundles of its webhook configurations, made and rotated
// (cert-controller).
package admission
