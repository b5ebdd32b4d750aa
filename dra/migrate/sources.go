package migrate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsjson "sigs.k8s.io/json"
)

// The source objects' groups and versions.
const (
	OperatorGroupVersion = "sriovnetwork.openshift.io/v1"
	DRAGroupVersion      = "sriovnetwork.k8snetworkplumbingwg.io/v1alpha1"
)

// SourceKind is a kind migrate reads and its resource, for a dynamic
// client.
type SourceKind struct {
	Kind     string
	Resource schema.GroupVersionResource
}

// SourceKinds are the six kinds migrate reads.
var SourceKinds = []SourceKind{
	{"SriovNetworkNodePolicy", operatorResource("sriovnetworknodepolicies")},
	{"SriovNetwork", operatorResource("sriovnetworks")},
	{"SriovIBNetwork", operatorResource("sriovibnetworks")},
	{"SriovNetworkPoolConfig", operatorResource("sriovnetworkpoolconfigs")},
	{"SriovResourcePolicy", draResource("sriovresourcepolicies")},
	{"DeviceAttributes", draResource("deviceattributes")},
}

func operatorResource(r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "sriovnetwork.openshift.io", Version: "v1", Resource: r}
}

func draResource(r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "sriovnetwork.k8snetworkplumbingwg.io", Version: "v1alpha1", Resource: r}
}

// The source types are written from the operators' API references, with
// the fields migrate judges; status is whatever the cluster wrote.

type nodePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		ResourceName string            `json:"resourceName"`
		NodeSelector map[string]string `json:"nodeSelector"`
		Priority     int               `json:"priority,omitempty"`
		MTU          int               `json:"mtu,omitempty"`
		NumVFs       int               `json:"numVfs"`
		NicSelector  struct {
			Vendor      string   `json:"vendor,omitempty"`
			DeviceID    string   `json:"deviceID,omitempty"`
			RootDevices []string `json:"rootDevices,omitempty"`
			PFNames     []string `json:"pfNames,omitempty"`
			NetFilter   string   `json:"netFilter,omitempty"`
		} `json:"nicSelector"`
		DeviceType        string         `json:"deviceType,omitempty"`
		IsRdma            bool           `json:"isRdma,omitempty"`
		NeedVhostNet      bool           `json:"needVhostNet,omitempty"`
		LinkType          string         `json:"linkType,omitempty"`
		ESwitchMode       string         `json:"eSwitchMode,omitempty"`
		VdpaType          string         `json:"vdpaType,omitempty"`
		ExcludeTopology   bool           `json:"excludeTopology,omitempty"`
		ExternallyManaged bool           `json:"externallyManaged,omitempty"`
		Bridge            map[string]any `json:"bridge,omitempty"`
		ESwitchParams     map[string]any `json:"eSwitchParams,omitempty"`
	} `json:"spec"`
	Status json.RawMessage `json:"status,omitempty"`
}

type sriovNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		NetworkNamespace  string `json:"networkNamespace,omitempty"`
		ResourceName      string `json:"resourceName"`
		Capabilities      string `json:"capabilities,omitempty"`
		IPAM              string `json:"ipam,omitempty"`
		Vlan              int    `json:"vlan,omitempty"`
		VlanQoS           int    `json:"vlanQoS,omitempty"`
		VlanProto         string `json:"vlanProto,omitempty"`
		SpoofChk          string `json:"spoofChk,omitempty"`
		Trust             string `json:"trust,omitempty"`
		LinkState         string `json:"linkState,omitempty"`
		MinTxRate         *int   `json:"minTxRate,omitempty"`
		MaxTxRate         *int   `json:"maxTxRate,omitempty"`
		MetaPluginsConfig string `json:"metaPlugins,omitempty"`
		LogLevel          string `json:"logLevel,omitempty"`
		LogFile           string `json:"logFile,omitempty"`
	} `json:"spec"`
	Status json.RawMessage `json:"status,omitempty"`
}

type sriovIBNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		NetworkNamespace  string `json:"networkNamespace,omitempty"`
		ResourceName      string `json:"resourceName"`
		Capabilities      string `json:"capabilities,omitempty"`
		IPAM              string `json:"ipam,omitempty"`
		LinkState         string `json:"linkState,omitempty"`
		MetaPluginsConfig string `json:"metaPlugins,omitempty"`
	} `json:"spec"`
	Status json.RawMessage `json:"status,omitempty"`
}

type poolConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		OvsHardwareOffloadConfig map[string]any        `json:"ovsHardwareOffloadConfig,omitempty"`
		NodeSelector             *metav1.LabelSelector `json:"nodeSelector,omitempty"`
		MaxUnavailable           *intstr.IntOrString   `json:"maxUnavailable,omitempty"`
		RdmaMode                 string                `json:"rdmaMode,omitempty"`
	} `json:"spec"`
	Status json.RawMessage `json:"status,omitempty"`
}

type resourceFilter struct {
	Vendors        []string `json:"vendors,omitempty"`
	Devices        []string `json:"devices,omitempty"`
	PciAddresses   []string `json:"pciAddresses,omitempty"`
	PfNames        []string `json:"pfNames,omitempty"`
	PfPciAddresses []string `json:"pfPciAddresses,omitempty"`
	Drivers        []string `json:"drivers,omitempty"`
	LinkType       string   `json:"linkType,omitempty"`
}

type resourcePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		NodeSelector *corev1.NodeSelector `json:"nodeSelector,omitempty"`
		Configs      []struct {
			DeviceAttributesSelector *metav1.LabelSelector `json:"deviceAttributesSelector,omitempty"`
			ResourceFilters          []resourceFilter      `json:"resourceFilters,omitempty"`
		} `json:"configs,omitempty"`
	} `json:"spec"`
}

type deviceAttributes struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes,omitempty"`
	} `json:"spec"`
}

// Object is one input object, as JSON, and where it was read.
type Object struct {
	// Where is the object's place: file:line, or the cluster.
	Where string
	JSON  []byte
}

// sources are the input objects decoded, each kind in the inputs' order.
type sources struct {
	policies   []*nodePolicy
	networks   []*sriovNetwork
	ibNetworks []*sriovIBNetwork
	pools      []*poolConfig
	draPolicy  []*resourcePolicy
	attributes []*deviceAttributes
}

// decode reads the objects strictly: a field the kind does not have (a
// misspelling, a field of a newer release) is reported, as the API server
// would drop it, and the object read without it; an object that does not
// decode at all is reported and left out.
func decode(objs []Object, r *report) sources {
	var s sources
	for _, o := range objs {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(o.JSON, &meta); err != nil {
			r.add(ref{Kind: "object", Name: o.Where}, "", fmt.Sprintf("not a Kubernetes object: %v: left out", err))
			continue
		}
		at := ref{Kind: meta.Kind, Namespace: meta.Metadata.Namespace, Name: meta.Metadata.Name}
		var into any
		switch gk := meta.APIVersion + " " + meta.Kind; gk {
		case OperatorGroupVersion + " SriovNetworkNodePolicy":
			into = appendNew(&s.policies)
		case OperatorGroupVersion + " SriovNetwork":
			into = appendNew(&s.networks)
		case OperatorGroupVersion + " SriovIBNetwork":
			into = appendNew(&s.ibNetworks)
		case OperatorGroupVersion + " SriovNetworkPoolConfig":
			into = appendNew(&s.pools)
		case DRAGroupVersion + " SriovResourcePolicy":
			into = appendNew(&s.draPolicy)
		case DRAGroupVersion + " DeviceAttributes":
			into = appendNew(&s.attributes)
		default:
			r.add(at, "apiVersion", fmt.Sprintf("%s %s (%s) is not an object of the SR-IOV Network Operator or dra-driver-sriov: left out", meta.APIVersion, meta.Kind, o.Where))
			continue
		}
		strict, err := sigsjson.UnmarshalStrict(o.JSON, into, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
		if err != nil {
			r.add(at, "", fmt.Sprintf("does not decode (%s): %v: left out", o.Where, err))
			s.dropLast(meta.Kind)
			continue
		}
		for _, e := range strict {
			r.add(at, "", fmt.Sprintf("%v (%s): not a field of %s, left out as the API server would; check its spelling and letter case", e, o.Where, meta.Kind))
		}
	}
	slices.SortStableFunc(s.policies, func(a, b *nodePolicy) int {
		// The operator applies its policies by priority, 0 first.
		if a.Spec.Priority != b.Spec.Priority {
			return a.Spec.Priority - b.Spec.Priority
		}
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	// dra-driver-sriov takes its policies, and the DeviceAttributes, by name.
	slices.SortStableFunc(s.draPolicy, func(a, b *resourcePolicy) int { return strings.Compare(a.Name, b.Name) })
	slices.SortStableFunc(s.attributes, func(a, b *deviceAttributes) int { return strings.Compare(a.Name, b.Name) })
	return s
}

func appendNew[T any](list *[]*T) *T {
	v := new(T)
	*list = append(*list, v)
	return v
}

func (s *sources) dropLast(kind string) {
	switch kind {
	case "SriovNetworkNodePolicy":
		s.policies = s.policies[:len(s.policies)-1]
	case "SriovNetwork":
		s.networks = s.networks[:len(s.networks)-1]
	case "SriovIBNetwork":
		s.ibNetworks = s.ibNetworks[:len(s.ibNetworks)-1]
	case "SriovNetworkPoolConfig":
		s.pools = s.pools[:len(s.pools)-1]
	case "SriovResourcePolicy":
		s.draPolicy = s.draPolicy[:len(s.draPolicy)-1]
	case "DeviceAttributes":
		s.attributes = s.attributes[:len(s.attributes)-1]
	}
}
