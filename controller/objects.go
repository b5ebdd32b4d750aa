package controller

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// objectLoop reconciles each object of a resource that a dynamic client
// serves: when it is added or changed, and every resync, one object at a
// time, a failure retried with the default rate limits.
type objectLoop struct {
	client   dynamic.Interface
	resource schema.GroupVersionResource
	resync   time.Duration
	// queue names the queue (its metrics'); kind, an object's key in the
	// log.
	queue, kind string
	// started is logged, with startedKV, once the objects are listed;
	// retrying with a failure.
	started   string
	startedKV []any
	retrying  string
	reconcile func(context.Context, *unstructured.Unstructured) error
}

// run runs the loop until ctx ends. synced is set, before the informer
// starts, to say whether it has listed the objects.
func (l objectLoop) run(ctx context.Context, synced *cache.InformerSynced) error {
	logger := klog.FromContext(ctx)
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: l.queue})
	defer queue.ShutDown()
	factory := dynamicinformer.NewDynamicSharedInformerFactory(l.client, l.resync)
	informer := factory.ForResource(l.resource).Informer()
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
	*synced = informer.HasSynced
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	logger.Info(l.started, l.startedKV...)
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
			err = l.reconcile(ctx, obj.(*unstructured.Unstructured))
		}
		if err != nil {
			logger.Error(err, l.retrying, l.kind, key)
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
}
