package v1alpha1

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fpv1 "github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// The API group, version, kind and resource.
const (
	Group    = "fastpath.dev"
	Version  = "v1alpha1"
	Kind     = "FastpathNodeConfig"
	Resource = "fastpathnodeconfigs"
)

// GroupVersionResource is the resource of FastpathNodeConfigs.
var GroupVersionResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// FastpathNodeConfig configures the nodes its nodeSelector selects.
type FastpathNodeConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   FastpathNodeConfigSpec   `json:"spec"`
	Status FastpathNodeConfigStatus `json:"status,omitempty"`
}

// FastpathNodeConfigSpec is what the selected nodes apply. A field left
// out keeps what the daemon's flags (the Helm release's values) say; one
// given replaces it. A node selected by two objects applies neither.
type FastpathNodeConfigSpec struct {
	// NodeSelector selects the nodes by label; {} selects every node.
	NodeSelector metav1.LabelSelector `json:"nodeSelector"`
	// Filter is a CEL expression choosing the devices to publish, as
	// --filter.
	Filter *string `json:"filter,omitempty"`
	// Share chooses the netdevs pods share through sub-interfaces, as
	// --share, --share-interfaces and --share-bandwidth-mbps.
	Share *Share `json:"share,omitempty"`
	// ResourceNames name devices for NetworkAttachmentDefinitions, as
	// --resource-name, in order.
	ResourceNames []ResourceName `json:"resourceNames,omitempty"`
	// IPPools are the node's address pools, as --ip-pools; [] for none.
	IPPools []fpv1.IPPool `json:"ipPools,omitempty"`
	// MemifEndpoints are the static memif endpoints, as --memif-config;
	// their sockets are in the daemon's --memif-dir.
	MemifEndpoints []fpv1.MemifEndpoint `json:"memifEndpoints,omitempty"`
	// VFs are the SR-IOV VFs to make, per PF. A PF not named keeps its
	// VFs as they are.
	VFs []VFs `json:"vfs,omitempty"`
}

// Share is the devices shared and what each gives.
type Share struct {
	Filter        string `json:"filter"`
	Interfaces    int    `json:"interfaces,omitempty"`
	BandwidthMbps int    `json:"bandwidthMbps,omitempty"`
}

// ResourceName gives the devices Filter admits the resource name Name.
type ResourceName struct {
	Name   string `json:"name"`
	Filter string `json:"filter"`
}

// VFs are the VFs of one PF.
type VFs struct {
	// PF names the PF by its netdev (name) or PCI address (pciAddress):
	// exactly one.
	PF PFSelector `json:"pf"`
	// NumVFs is how many VFs the PF has: written to its sriov_numvfs,
	// never while one of its VFs is prepared for a claim.
	NumVFs int `json:"numVfs"`
	// Driver binds the VFs to a driver (vfio-pci for DPDK); empty: the
	// kernel's choice (the PF's VF driver).
	Driver string `json:"driver,omitempty"`
	// Ranges bind the VFs of an index range to a driver of their own,
	// over Driver: the SR-IOV Network Operator's pfNames `ens1f0#0-3`.
	Ranges []VFRange `json:"ranges,omitempty"`
	// MTU is the PF netdev's MTU, set before its VFs are made; 0 leaves
	// it as it is.
	MTU int `json:"mtu,omitempty"`
	// LinkState sets the PF netdev "up" or "down"; empty leaves it.
	LinkState string `json:"linkState,omitempty"`
	// ESwitchMode may only be "legacy" (or left out): fastpath does not
	// put a PF in switchdev mode, and says so rather than ignore it.
	ESwitchMode string `json:"eSwitchMode,omitempty"`
	// ExternallyManaged may only be false: a PF whose VFs another tool
	// makes is one this list leaves out.
	ExternallyManaged bool `json:"externallyManaged,omitempty"`
}

// VFRange binds VFs First to Last (indexes, both included) to Driver
// ("": the kernel's choice, the PF's VF driver).
type VFRange struct {
	First  int    `json:"first"`
	Last   int    `json:"last"`
	Driver string `json:"driver,omitempty"`
}

// Link states of a PF.
const (
	LinkUp   = "up"
	LinkDown = "down"
)

// DriverOf is the driver VF index i is bound to: its range's, else
// Driver.
func (v VFs) DriverOf(i int) string {
	for _, r := range v.Ranges {
		if i >= r.First && i <= r.Last {
			return r.Driver
		}
	}
	return v.Driver
}

// PFSelector names a PF.
type PFSelector struct {
	Name       string `json:"name,omitempty"`
	PCIAddress string `json:"pciAddress,omitempty"`
}

func (s PFSelector) String() string {
	if s.Name != "" {
		return s.Name
	}
	return s.PCIAddress
}

// FastpathNodeConfigStatus is what each selected node applied.
type FastpathNodeConfigStatus struct {
	// Nodes has an entry per selected node, written by that node's
	// daemon only.
	Nodes []NodeStatus `json:"nodes,omitempty"`
}

// NodeStatus is what one node applied.
type NodeStatus struct {
	Name string `json:"name"`
	// ObservedGeneration is the generation of the spec the entry is of.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Applied.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// VFs are the node's VFs of the PFs the spec names, as they are.
	VFs []VFStatus `json:"vfs,omitempty"`
}

// VFStatus is how many VFs a PF has now.
type VFStatus struct {
	PF         string `json:"pf"`
	PCIAddress string `json:"pciAddress,omitempty"`
	NumVFs     int    `json:"numVfs"`
	// MTU and LinkState are the PF netdev's, where it has one.
	MTU       int    `json:"mtu,omitempty"`
	LinkState string `json:"linkState,omitempty"`
}

// ConditionApplied says whether the node applies the spec.
const ConditionApplied = "Applied"

// Reasons of the condition Applied.
const (
	// ReasonApplied: the node applies the whole spec (True).
	ReasonApplied = "Applied"
	// ReasonConflict: another object selects the node too; the node
	// applies neither and keeps what it had.
	ReasonConflict = "Conflict"
	// ReasonInvalid: the spec cannot be applied on the node (a filter
	// that does not compile, a PF that is not there, more VFs than it
	// supports); the node changed nothing.
	ReasonInvalid = "Invalid"
	// ReasonVFsInUse: all but the VFs applied; a PF's VFs change once
	// none of them is prepared for a claim.
	ReasonVFsInUse = "VFsInUse"
	// ReasonFailed: all but the VFs applied; the kernel refused a change
	// of a PF's VFs (tried again at the next look).
	ReasonFailed = "Failed"
)

// DeepCopy copies c (the watch cache's copies; the objects are few and
// small).
func (c *FastpathNodeConfig) DeepCopy() *FastpathNodeConfig {
	if c == nil {
		return nil
	}
	data, err := json.Marshal(c)
	if err != nil {
		panic(err) // every field marshals
	}
	out := new(FastpathNodeConfig)
	if err := json.Unmarshal(data, out); err != nil {
		panic(err)
	}
	return out
}
