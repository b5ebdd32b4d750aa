package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The API group and version of PodNetwork and PodNetworkAttachment.
const (
	Group   = "network.fastpath.dev"
	Version = "v1alpha1"
)

// Kinds and resources.
const (
	KindPodNetwork                = "PodNetwork"
	KindPodNetworkAttachment      = "PodNetworkAttachment"
	ResourcePodNetworks           = "podnetworks"
	ResourcePodNetworkAttachments = "podnetworkattachments"
)

var (
	// SchemeGroupVersion is the group and version of the objects.
	SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}
	// PodNetworkResource is the resource of PodNetworks.
	PodNetworkResource = SchemeGroupVersion.WithResource(ResourcePodNetworks)
	// PodNetworkAttachmentResource is the resource of PodNetworkAttachments.
	PodNetworkAttachmentResource = SchemeGroupVersion.WithResource(ResourcePodNetworkAttachments)

	// SchemeBuilder registers the types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&PodNetwork{}, &PodNetworkList{},
		&PodNetworkAttachment{}, &PodNetworkAttachmentList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
