package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/watch"
)

// CNIConfigController says in the status of each CNIConfig object whether
// fastpathd accepts it: the condition Accepted (cnipolicy.Accept) for the
// object's generation. One runs in the cluster (fastpathd controller,
// leader-elected): the node daemons, each writing its own view, would
// race.
type CNIConfigController struct {
	client dynamic.Interface
	policy cnipolicy.Options
	// Resync re-checks every object this often (a changed allowlist takes
	// effect with a restart, which lists every object anyway).
	resync time.Duration
	synced cache.InformerSynced
}

// NewCNIConfigController returns a controller not running yet.
func NewCNIConfigController(client dynamic.Interface, policy cnipolicy.Options, resync time.Duration) *CNIConfigController {
	return &CNIConfigController{client: client, policy: policy, resync: resync}
}

// Synced says whether the controller has seen every object once, or why
// not.
func (c *CNIConfigController) Synced() error {
	if c.synced == nil || !c.synced() {
		return fmt.Errorf("the CNIConfig objects are not listed yet")
	}
	return nil
}

// Run reconciles until ctx ends.
func (c *CNIConfigController) Run(ctx context.Context) error {
	return objectLoop{client: c.client, resource: watch.CNIConfigResource, resync: c.resync, queue: "cniconfigs", kind: "cniconfig",
		started: "Reconciling CNIConfig objects", startedKV: []any{"plugins", c.policy.Plugins},
		retrying: "Writing the status of a CNIConfig; retrying", reconcile: c.reconcile}.run(ctx, &c.synced)
}

// reconcile writes the object's Accepted condition if it changed.
func (c *CNIConfigController) reconcile(ctx context.Context, u *unstructured.Unstructured) error {
	var cond metav1.Condition
	o, err := cnipolicy.FromUnstructured(u)
	if err != nil {
		cond = metav1.Condition{Type: v1alpha1.CNIConfigAccepted, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonCNIConfigInvalid,
			Message: err.Error(), ObservedGeneration: u.GetGeneration()}
		o = &v1alpha1.CNIConfigObject{}
		if conds, ok, _ := unstructured.NestedSlice(u.Object, "status", "conditions"); ok {
			var st v1alpha1.CNIConfigStatus
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"conditions": conds}, &st)
			o.Status = st
		}
	} else {
		cond = cnipolicy.Accept(o, c.policy)
	}
	if old := meta.FindStatusCondition(o.Status.Conditions, cond.Type); old != nil && old.Status == cond.Status &&
		old.Reason == cond.Reason && old.Message == cond.Message && old.ObservedGeneration == cond.ObservedGeneration {
		return nil
	}
	meta.SetStatusCondition(&o.Status.Conditions, cond)
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&o.Status)
	if err != nil {
		return err
	}
	u = u.DeepCopy()
	u.Object["status"] = status
	_, err = c.client.Resource(watch.CNIConfigResource).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: "fastpath-controller"})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		klog.FromContext(ctx).Info("CNIConfig status", "cniconfig", u.GetName(), "accepted", cond.Status, "reason", cond.Reason, "generation", cond.ObservedGeneration)
	}
	return err
}
