package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of PodNetwork and PodNetworkAttachment (KEP-3698).
const (
	// ConditionReady says the object is valid, its ParamsReady condition
	// (when it has parametersRefs) is true and, for a
	// PodNetworkAttachment, its PodNetwork is Ready. Pods cannot attach to
	// an object that is not Ready.
	ConditionReady = "Ready"
	// ConditionParamsReady says the objects in parametersRefs are ready for
	// use. The owner of those objects' kinds sets it.
	ConditionParamsReady = "ParamsReady"
)

// Reasons of the Ready condition when it is false (KEP-3698).
const (
	// ReasonParamsNotReady: ParamsReady is absent or false; only when
	// parametersRefs is not empty.
	ReasonParamsNotReady = "ParamsNotReady"
	// ReasonAdministrativelyDisabled: the PodNetwork's enabled is false.
	ReasonAdministrativelyDisabled = "AdministrativelyDisabled"
	// ReasonPodNetworkNotReady: a PodNetworkAttachment's PodNetwork is
	// missing or not Ready.
	ReasonPodNetworkNotReady = "PodNetworkNotReady"
)

// Reasons fastpath gives where the KEP leaves them to the implementation.
const (
	// ReasonReady: Ready is true.
	ReasonReady = "Ready"
	// ReasonParamsReady: every object in parametersRefs exists and is
	// ready for use.
	ReasonParamsReady = "ParamsReady"
	// ReasonParamsMissing: an object in parametersRefs does not exist.
	ReasonParamsMissing = "ParamsMissing"
	// ReasonParamsInvalid: an object in parametersRefs exists but is not
	// usable (a CNIConfig fastpathd does not accept).
	ReasonParamsInvalid = "ParamsInvalid"
)

// DefaultPodNetworkName is the cluster default PodNetwork, which always
// exists: the controller creates it and creates it again when it is
// deleted. A pod with no networks attaches to it.
const DefaultPodNetworkName = "default"

// FastpathProvider is the provider fastpath is (domain-prefixed, as the
// KEP has providers): fastpathd attaches the PodNetworks that name it, or
// none.
const FastpathProvider = "fastpath.dev/fastpathd"

// FinalizerInUse is the InUse finalizer: on a PodNetwork while a
// PodNetworkAttachment or a pod not Succeeded or Failed references it, on
// a PodNetworkAttachment while such a pod references it.
const FinalizerInUse = Group + "/in-use"

// PodNetwork represents a logical network in Kubernetes Cluster.
type PodNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodNetworkSpec   `json:"spec"`
	Status PodNetworkStatus `json:"status,omitempty"`
}

// PodNetworkSpec contains the specifications for podNetwork object. It is
// immutable but for Enabled.
type PodNetworkSpec struct {
	// Enabled is used to administratively enable/disable a PodNetwork.
	// When set to false, PodNetwork Ready condition will be set to False.
	// Defaults to True.
	//
	// The KEP's Go type is a bool with omitempty and a default of true:
	// a client writing false would send nothing and get true. A pointer
	// keeps the KEP's JSON and lets false through; IsEnabled reads it.
	//
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// ParametersRefs points to the vendor or implementation specific parameters
	// objects for the PodNetwork.
	//
	// +optional
	ParametersRefs []ParametersRef `json:"parametersRefs,omitempty"`

	// Provider specifies the provider implementing this PodNetwork.
	// Has to be in domain-prefixed string identifier form (like `acme.io/foo`)
	//
	// +optional
	Provider string `json:"provider,omitempty"`
}

// ParametersRef points to a resource containing additional
// parameters for the PodNetwork.
type ParametersRef struct {
	// Group is the API group of k8s resource e.g. k8s.cni.cncf.io
	Group string `json:"group"`

	// Kind is the API name of k8s resource e.g. network-attachment-definitions
	Kind string `json:"kind"`

	// Name of the resource.
	Name string `json:"name"`

	// Namespace of the resource.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// NamesNAD says whether the ref names a NetworkAttachmentDefinition
// (k8s.cni.cncf.io), by kind or, as the KEP's example does, by resource.
func (r ParametersRef) NamesNAD() bool {
	return r.Group == "k8s.cni.cncf.io" && (r.Kind == "NetworkAttachmentDefinition" || r.Kind == "network-attachment-definitions")
}

// IsEnabled says whether the PodNetwork is enabled: Enabled, true when
// absent.
func (s *PodNetworkSpec) IsEnabled() bool { return s.Enabled == nil || *s.Enabled }

// PodNetworkStatus contains the status information related to the PodNetwork.
type PodNetworkStatus struct {
	// Conditions describe the current conditions of the PodNetwork.
	//
	// Known condition types are:
	// * "Ready"
	// * "ParamsReady"
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodNetworkList is a list of PodNetworks.
type PodNetworkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []PodNetwork `json:"items"`
}

// PodNetworkAttachment provides optional pod-level configuration of PodNetwork.
type PodNetworkAttachment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodNetworkAttachmentSpec   `json:"spec,omitempty"`
	Status PodNetworkAttachmentStatus `json:"status,omitempty"`
}

// PodNetworkAttachmentSpec is the specification for the PodNetworkAttachment
// resource. It is immutable.
type PodNetworkAttachmentSpec struct {
	// PodNetworkName refers to a PodNetwork object that this PodNetworkAttachment is
	// connected to.
	//
	// +required
	PodNetworkName string `json:"podNetworkName"`

	// ParametersRefs points to the vendor or implementation specific parameters
	// object for the PodNetworkAttachment.
	//
	// +optional
	ParametersRefs []ParametersRef `json:"parametersRefs,omitempty"`
}

// PodNetworkAttachmentStatus is the status for the PodNetworkAttachment resource.
type PodNetworkAttachmentStatus struct {
	// Conditions describe the current conditions of the PodNetworkAttachment.
	//
	// Known condition types are:
	// * "Ready"
	// * "ParamsReady"
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodNetworkAttachmentList is a list of PodNetworkAttachments.
type PodNetworkAttachmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []PodNetworkAttachment `json:"items"`
}
