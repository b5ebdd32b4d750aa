package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/watch"
)

// IPAMClaimController lets go, for a node, of the IPAMClaims that node
// can no longer let go of itself. A node's fastpathd names itself in the
// status of each IPAMClaim a pod of it holds (npwg.IPAMClaimNodeCondition)
// and lets go once no pod of it does; until then the admission policies
// keep every other node's fastpathd from writing it. When the node is
// gone, or the pod that holds the IPAMClaim (status.ownerPod) is gone,
// finished or of another node, the controller writes the condition False
// (npwg.ReasonHolderGone), so that a pod of another node may take it. One
// runs in the cluster (fastpathd controller, leader-elected).
type IPAMClaimController struct {
	client dynamic.Interface
	kube   kubernetes.Interface
	// resync looks at every IPAMClaim again this often: a node or pod
	// that goes is not watched.
	resync time.Duration
	synced cache.InformerSynced
}

// NewIPAMClaimController returns a controller not running yet.
func NewIPAMClaimController(client dynamic.Interface, kube kubernetes.Interface, resync time.Duration) *IPAMClaimController {
	return &IPAMClaimController{client: client, kube: kube, resync: resync}
}

// Synced says whether the controller has seen every IPAMClaim once, or
// why not.
func (c *IPAMClaimController) Synced() error {
	if c.synced == nil || !c.synced() {
		return fmt.Errorf("the IPAMClaims are not listed yet")
	}
	return nil
}

// Run reconciles until ctx ends.
func (c *IPAMClaimController) Run(ctx context.Context) error {
	return objectLoop{client: c.client, resource: watch.IPAMClaimResource, resync: c.resync, queue: "ipamclaims", kind: "ipamClaim",
		started: "Letting go of the IPAMClaims whose holder is gone", startedKV: []any{"resync", c.resync},
		retrying: "Letting go of an IPAMClaim; retrying", reconcile: c.reconcile}.run(ctx, &c.synced)
}

// reconcile lets go of the IPAMClaim for the node that holds it when its
// holder is gone: its status written at the resourceVersion judged, so
// that a node's write meanwhile conflicts and is judged again.
func (c *IPAMClaimController) reconcile(ctx context.Context, u *unstructured.Unstructured) error {
	var claim npwg.IPAMClaim
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &claim); err != nil {
		return fmt.Errorf("IPAMClaim %s/%s does not decode: %w", u.GetNamespace(), u.GetName(), err)
	}
	node := npwg.HeldOn(&claim)
	if node == "" {
		return nil
	}
	why, err := c.holderGone(ctx, &claim, node)
	if err != nil || why == "" {
		return err
	}
	st, changed := npwg.Released(&claim, node, npwg.ReasonHolderGone)
	if !changed {
		return nil
	}
	conditions, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&npwg.IPAMClaimStatus{Conditions: st.Conditions})
	if err != nil {
		return err
	}
	u = u.DeepCopy()
	if err := unstructured.SetNestedField(u.Object, conditions["conditions"], "status", "conditions"); err != nil {
		return err
	}
	_, err = c.client.Resource(watch.IPAMClaimResource).Namespace(u.GetNamespace()).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("IPAMClaim %s/%s: let go for node %s (%s): %w", u.GetNamespace(), u.GetName(), node, why, err)
	}
	klog.FromContext(ctx).Info("Let go of an IPAMClaim for its node", "ipamClaim", klog.KObj(u), "node", node, "reason", why)
	return nil
}

// holderGone says why node no longer holds the claim, "" when it may: the
// node is gone, or the claim's owner pod is gone, finished or of another
// node.
func (c *IPAMClaimController) holderGone(ctx context.Context, claim *npwg.IPAMClaim, node string) (string, error) {
	_, err := c.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "node " + node + " is gone", nil
	case err != nil:
		return "", fmt.Errorf("node %s: %w", node, err)
	}
	owner := claim.Status.OwnerPod
	if owner == nil || owner.Name == "" {
		return "it names no owner pod", nil
	}
	pod, err := c.kube.CoreV1().Pods(claim.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "its owner pod " + owner.Name + " is gone", nil
	case err != nil:
		return "", fmt.Errorf("pod %s/%s: %w", claim.Namespace, owner.Name, err)
	case pod.Spec.NodeName != node:
		return "its owner pod " + owner.Name + " is not of node " + node, nil
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return "its owner pod " + owner.Name + " has finished", nil
	}
	return "", nil
}
