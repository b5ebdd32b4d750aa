package npwg

import (
	"fmt"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
)

// The limits a node holds pods to by default (Limits).
const (
	DefaultMaxNetworks   = 32
	DefaultMaxInterfaces = 64
)

// Limits bound the work one pod's annotations make a node do at its
// sandbox's creation: each selected network is a record, CNI ADDs and an
// interface in the pod. The zero value holds pods to the defaults.
type Limits struct {
	// Networks is how many networks a pod may select, with
	// k8s.v1.cni.cncf.io/networks and network.fastpath.dev/networks
	// together (fastpathd run --npwg-max-networks).
	Networks int
	// Interfaces is how many interfaces fastpath may give a pod: those of
	// its DRA claims and its selected networks together (fastpathd run
	// --npwg-max-interfaces).
	Interfaces int
}

// withDefaults is l with the defaults where it sets nothing.
func (l Limits) withDefaults() Limits {
	if l.Networks <= 0 {
		l.Networks = DefaultMaxNetworks
	}
	if l.Interfaces <= 0 {
		l.Interfaces = DefaultMaxInterfaces
	}
	return l
}

// Check says whether a pod is within the limits: selected networks it
// selects with the NPWG annotation and podNetworks with the PodNetwork
// one (the default PodNetwork, the runtime's, left out), and claimIfaces
// interfaces its DRA claims give it. An error is at the path of the
// annotation that selects networks (the NPWG one when both do) and says
// the count, the limit and its flag.
func (l Limits) Check(selected, podNetworks, claimIfaces int) field.ErrorList {
	l = l.withDefaults()
	path := NetworksPath()
	if selected == 0 {
		path = field.NewPath("metadata", "annotations").Key(pnv1.AnnotationNetworks)
	}
	networks := selected + podNetworks
	switch ifaces := networks + claimIfaces; {
	case networks > l.Networks:
		return field.ErrorList{tooMany(path, networks, fmt.Sprintf("the pod selects %d networks (%d with %s, %d with %s), more than the %d a pod may select on this node (fastpathd run --npwg-max-networks): select fewer",
			networks, selected, nadv1.NetworkAttachmentAnnot, podNetworks, pnv1.AnnotationNetworks, l.Networks))}
	case networks > 0 && ifaces > l.Interfaces:
		return field.ErrorList{tooMany(path, ifaces, fmt.Sprintf("the pod would have %d interfaces (%d of its networks, %d of its DRA claims), more than the %d a pod may have on this node (fastpathd run --npwg-max-interfaces): select fewer networks",
			ifaces, networks, claimIfaces, l.Interfaces))}
	}
	return nil
}

// tooMany is a TooMany error of count with detail.
func tooMany(path *field.Path, count int, detail string) *field.Error {
	return &field.Error{Type: field.ErrorTypeTooMany, Field: path.String(), BadValue: count, Detail: detail}
}
