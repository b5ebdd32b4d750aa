package dra

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/nri"
)

// PodNetworks reads PodNetworks and PodNetworkAttachments from the API
// server, one GET each: a pod's networks are judged as they are when its
// sandbox is made.
type PodNetworks struct{ Client dynamic.Interface }

var _ nri.PodNetworkGetter = PodNetworks{}

// GetPodNetwork reads the PodNetwork name.
func (p PodNetworks) GetPodNetwork(ctx context.Context, name string) (*pnv1.PodNetwork, error) {
	u, err := p.Client.Resource(pnv1.PodNetworkResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var pn pnv1.PodNetwork
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pn); err != nil {
		return nil, fmt.Errorf("decode PodNetwork %s: %w", name, err)
	}
	return &pn, nil
}

// GetPodNetworkAttachment reads the PodNetworkAttachment namespace/name.
func (p PodNetworks) GetPodNetworkAttachment(ctx context.Context, namespace, name string) (*pnv1.PodNetworkAttachment, error) {
	u, err := p.Client.Resource(pnv1.PodNetworkAttachmentResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var pna pnv1.PodNetworkAttachment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pna); err != nil {
		return nil, fmt.Errorf("decode PodNetworkAttachment %s/%s: %w", namespace, name, err)
	}
	return &pna, nil
}
