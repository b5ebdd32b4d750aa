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
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
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
	logger := klog.FromContext(ctx)
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "cniconfigs"})
	defer queue.ShutDown()
	factory := dynamicinformer.NewDynamicSharedInformerFactory(c.client, c.resync)
	informer := factory.ForResource(watch.CNIConfigResource).Informer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	c.synced = informer.HasSynced
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	logger.Info("Reconciling CNIConfig objects", "plugins", c.policy.Plugins)
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		key, quit := queue.Get()
		if quit {
			return nil
		}
		obj, exists, err := informer.GetIndexer().GetByKey(key)
		if err == nil && exists {
			err = c.reconcile(ctx, obj.(*unstructured.Unstructured))
		}
		if err != nil {
			logger.Error(err, "Writing the status of a CNIConfig; retrying", "cniconfig", key)
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
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
