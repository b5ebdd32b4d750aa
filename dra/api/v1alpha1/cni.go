package v1alpha1

import (
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The CNI DRA driver's API group: the kind of its parameters (CNI) and the
// cluster-scoped kind of the operator's approved configs (CNIConfig).
const (
	CNIGroup = "cni.networking.x-k8s.io"
	// CNIDriver is the DRA driver of the CNI DRA driver API.
	CNIDriver         = "cni.dra.networking.x-k8s.io"
	CNIVersion        = "v1alpha1"
	KindCNIConfig     = "CNIConfig"
	CNIConfigResource = "cniconfigs"
)

// CNISliceFields are the ResourceSlice fields an argument may read
// (resourceSliceFieldRef.fieldPath).
var CNISliceFields = []string{"spec.nodeName", "spec.pool.name", "spec.driver"}

// CNISliceAPIVersion is the only apiVersion a resourceSliceFieldRef may
// name.
const CNISliceAPIVersion = "resource.k8s.io/v1"

// CNIConfig is the opaque parameters of a request of the CNI DRA driver
// (DeviceClass cni.networking.x-k8s.io), and the spec of an approved
// config (CNIConfigObject).
//
//	apiVersion: cni.networking.x-k8s.io/v1alpha1
//	kind: CNI
//	ifName: net1
//	cniVersion: 1.0.0
//	plugins:
//	- type: macvlan
//	  config: {mode: bridge, ipam: {type: host-local, ranges: [[{subnet: 10.10.1.0/24}]]}}
//	  arguments:
//	  - fieldPath: master
//	    valueFrom: {attributeRef: name}
//
// or, instead of plugins, configName: the name of a CNIConfig object the
// operator approved, whose ifName applies unless the claim sets one. A
// claim's parameters may leave out apiVersion and kind (the opaque
// config's driver says what they are); if they give them, they must be
// these.
type CNIConfig struct {
	APIVersion string      `json:"apiVersion,omitempty"`
	Kind       string      `json:"kind,omitempty"`
	IfName     string      `json:"ifName,omitempty"`
	CNIVersion string      `json:"cniVersion,omitempty"`
	Plugins    []CNIPlugin `json:"plugins,omitempty"`
	ConfigName string      `json:"configName,omitempty"`

	// Upstream: read from the upstream driver's form (CNIDRAGroupVersion),
	// which has no arguments: a host device a plugin takes when its field
	// is left out (macvlan's master) comes from the allocated device.
	Upstream bool `json:"-"`
}

// CNIPlugin is one plugin of the chain.
type CNIPlugin struct {
	Type string `json:"type"`
	// Config is the plugin's own configuration, without type.
	Config map[string]any `json:"config,omitempty"`
	// Arguments set fields of Config when the claim is prepared.
	Arguments []CNIArgument `json:"arguments,omitempty"`
}

// CNIArgument sets the field at FieldPath (dot-separated, into Config) to a
// constant or to a value found when the claim is prepared: exactly one of
// Value, ValueFrom and AttributeRef.
type CNIArgument struct {
	FieldPath string `json:"fieldPath"`
	// Value is any JSON value.
	Value     json.RawMessage `json:"value,omitempty"`
	ValueFrom *CNIValueSource `json:"valueFrom,omitempty"`
	// AttributeRef is valueFrom.attributeRef one level up, as the CNI DRA
	// driver design's CNIConfig example writes it.
	AttributeRef string `json:"attributeRef,omitempty"`
}

// CNIValueSource is where an argument's value comes from: exactly one of
// an attribute of the allocated device, a field of its ResourceSlice, or
// a ConfigMap key.
type CNIValueSource struct {
	// AttributeRef names an attribute of the allocated device; an
	// unqualified name is the driver's (cni.dra.networking.x-k8s.io/...).
	AttributeRef string `json:"attributeRef,omitempty"`
	// ResourceSliceFieldRef selects a field of the device's ResourceSlice:
	// fieldPath spec.nodeName, spec.pool.name or spec.driver.
	ResourceSliceFieldRef *corev1.ObjectFieldSelector `json:"resourceSliceFieldRef,omitempty"`
	// ConfigMapKeyRef selects a key of a ConfigMap in the claim's
	// namespace (for an approved config: fastpathd's
	// --cni-config-namespace).
	ConfigMapKeyRef *CNIConfigMapKeyRef `json:"configMapKeyRef,omitempty"`
}

// CNIConfigMapKeyRef selects a key of a ConfigMap: exactly one of a
// constant Key, the value of a device attribute (Attribute), or a field of
// the device's ResourceSlice.
type CNIConfigMapKeyRef struct {
	Name                  string                      `json:"name"`
	Key                   string                      `json:"key,omitempty"`
	Attribute             string                      `json:"attribute,omitempty"`
	ResourceSliceFieldRef *corev1.ObjectFieldSelector `json:"resourceSliceFieldRef,omitempty"`
}

// CNIConfigObject is the cluster-scoped object (kind CNIConfig, resource
// cniconfigs.cni.networking.x-k8s.io) holding a config the operator
// approved: claims name it with configName. Its spec is a CNIConfig with
// plugins; its status says whether fastpathd accepts it.
//
//	apiVersion: cni.networking.x-k8s.io/v1alpha1
//	kind: CNIConfig
//	metadata: {name: macvlan-host-local}
//	spec:
//	  ifName: net1
//	  cniVersion: 1.0.0
//	  plugins: [...]
type CNIConfigObject struct {
	APIVersion        string `json:"apiVersion"`
	Kind              string `json:"kind"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              CNIConfig       `json:"spec"`
	Status            CNIConfigStatus `json:"status,omitzero"`
}

// CNIConfigStatus is what fastpath says of an approved config.
type CNIConfigStatus struct {
	// Conditions: Accepted.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// The condition of a CNIConfig and its reasons.
const (
	// CNIConfigAccepted is True when fastpathd would run the config: it
	// is valid, its plugins are on the allowlist and libcni parses it.
	CNIConfigAccepted = "Accepted"

	ReasonCNIConfigAccepted = "Accepted"
	// ReasonCNIConfigInvalid: the spec breaks a rule of the API, or the
	// conflist it makes does not parse.
	ReasonCNIConfigInvalid = "Invalid"
	// ReasonCNIPluginNotAllowed: a plugin type is not on the allowlist.
	ReasonCNIPluginNotAllowed = "PluginNotAllowed"
)

// MarshalJSON implements json.Marshaler.
func (c CNIConfig) MarshalJSON() ([]byte, error) {
	type plain CNIConfig
	c.APIVersion, c.Kind = orDefault(c.APIVersion, CNIGroupVersion), orDefault(c.Kind, KindCNI)
	return json.Marshal(plain(c))
}

// MarshalJSON implements json.Marshaler.
func (o CNIConfigObject) MarshalJSON() ([]byte, error) {
	type plain CNIConfigObject
	o.APIVersion, o.Kind = orDefault(o.APIVersion, CNIGroupVersion), orDefault(o.Kind, KindCNIConfig)
	return json.Marshal(plain(o))
}
