package watch

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// IPAMClaimResource is the Network Plumbing WG's IPAMClaim resource.
var IPAMClaimResource = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1alpha1", Resource: "ipamclaims"}

// IPAMClaims reads IPAMClaims and writes their status, one call at a
// time, and reads the pods that hold them: a node's daemon looks only at
// the IPAMClaims its pods name.
type IPAMClaims struct {
	Dynamic dynamic.Interface
	Client  kubernetes.Interface
}

// GetIPAMClaim reads the object namespace/name.
func (c IPAMClaims) GetIPAMClaim(ctx context.Context, namespace, name string) (*npwg.IPAMClaim, error) {
	u, err := c.Dynamic.Resource(IPAMClaimResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var claim npwg.IPAMClaim
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &claim); err != nil {
		return nil, fmt.Errorf("decode IPAMClaim %s/%s: %w", namespace, name, err)
	}
	return &claim, nil
}

// UpdateIPAMClaimStatus writes the claim's status subresource, at the
// claim's resourceVersion.
func (c IPAMClaims) UpdateIPAMClaimStatus(ctx context.Context, claim *npwg.IPAMClaim) error {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(claim)
	if err != nil {
		return fmt.Errorf("encode IPAMClaim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(npwg.IPAMClaimGroupVersion)
	u.SetKind(npwg.IPAMClaimKind)
	_, err = c.Dynamic.Resource(IPAMClaimResource).Namespace(claim.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}

// GetPod reads a pod.
func (c IPAMClaims) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}
