// Package validate is fastpathd validate's judgement of manifests, offline:
// ResourceClaims, ResourceClaimTemplates, DeviceClasses, CNIConfigs, Pods,
// NetworkAttachmentDefinitions, PodNetworks and PodNetworkAttachments
// checked as fastpathd would check them, short of what needs the allocated
// devices or the cluster; each problem names its file, line, object,
// request and field. It imports no kubelet plugin, runtime hook or API
// client.
package validate
