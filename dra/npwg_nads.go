package dra

import (
	"context"
	"fmt"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/fastpath-dra/fastpath/dra/nri"
)

// NADResource is the NetworkAttachmentDefinition resource of the Network
// Plumbing WG.
var NADResource = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// NADs reads NetworkAttachmentDefinitions from the API server, one GET
// per attachment: a pod's networks are read as they are when it starts.
type NADs struct{ Client dynamic.Interface }

var _ nri.NADGetter = NADs{}

// GetNAD reads the object namespace/name.
func (n NADs) GetNAD(ctx context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error) {
	u, err := n.Client.Resource(NADResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var nad nadv1.NetworkAttachmentDefinition
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &nad); err != nil {
		return nil, fmt.Errorf("decode NetworkAttachmentDefinition %s/%s: %w", namespace, name, err)
	}
	return &nad, nil
}
