// Package admission is fastpathd controller's validating admission
// webhook: it judges ResourceClaims, ResourceClaimTemplates, DeviceClasses,
// CNIConfigs, NetworkAttachmentDefinitions, PodNetworks,
// PodNetworkAttachments and the network selection annotations of Pods with
// the rules of fastpathd validate (package validate), so that a mistake is
// refused when the object is written rather than found on a node at the
// pod's sandbox creation. It serves the reviews over TLS with certificates
// it reloads when they change, and keeps those certificates, and the CA
// bundle of its ValidatingWebhookConfiguration, made and rotated
// (cert-controller).
package admission
