package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

// PodNetworkControllerOptions configure a PodNetworkController.
type PodNetworkControllerOptions struct {
	// Client reads and writes PodNetworks, PodNetworkAttachments and the
	// parameters objects their refs name.
	Client dynamic.Interface
	// Pods lists the pods, whose network annotation keeps objects InUse.
	Pods kubernetes.Interface
	// Policy judges CNIConfigs named by parametersRefs, as the CNIConfig
	// controller does.
	Policy cnipolicy.Options
	// AllowedNamespaces are the namespaces whose NetworkAttachmentDefinitions
	// a PodNetworkAttachment of any namespace may name, as the nodes'
	// --npwg-allowed-namespaces (npwg.AllNamespaces: all); those of its own
	// namespace it always may. One of another namespace is never read.
	AllowedNamespaces []string
	// Resync reconciles every object again this often.
	Resync time.Duration
	// ParamsRecheck reads the parameters objects of an object with
	// parametersRefs again this often: the controller does not watch them.
	ParamsRecheck time.Duration
	// NoDefault leaves the default PodNetwork to the operator (the KEP's
	// disable-default-podnetwork-creation).
	NoDefault bool
	// Events records why a gated pod stays gated; nil records none.
	Events record.EventRecorder
}

// PodNetworkController is the KEP-3698 PodNetwork controller: it writes
// the Ready and ParamsReady conditions of PodNetworks and
// PodNetworkAttachments, keeps the InUse finalizer on those pods (through
// the network.fastpath.dev/networks annotation) or attachments reference,
// and creates the default PodNetwork, again when it is deleted. It also
// lifts the scheduling gates of pods whose networks pass the KEP's active
// validation (gates.go). One runs in the cluster (fastpathd controller,
// leader-elected).
//
// The default PodNetwork gets no InUse finalizer: the KEP keeps it from
// deletion, and a controller cannot refuse a delete, so it creates it again
// instead.
type PodNetworkController struct {
	o      PodNetworkControllerOptions
	params paramsJudge
	queue  workqueue.TypedRateLimitingInterface[objectKey]

	networks    cache.Indexer
	attachments cache.Indexer
	pods        cache.Indexer
	nodes       cache.Store
	synced      []cache.InformerSynced
}

// objectKey names a PodNetwork (no namespace), a PodNetworkAttachment or
// a gated pod.
type objectKey struct {
	attachment, pod bool
	namespace, name string
}

func (k objectKey) String() string {
	switch {
	case k.attachment:
		return "PodNetworkAttachment " + k.namespace + "/" + k.name
	case k.pod:
		return "pod " + k.namespace + "/" + k.name
	}
	return "PodNetwork " + k.name
}

// Index names: pods and attachments by the PodNetworks and attachments
// they reference.
const (
	indexByReference = "reference"
	fieldManager     = "fastpath-controller"
)

func podNetworkRef(name string) string            { return "pn/" + name }
func attachmentRef(namespace, name string) string { return "pna/" + namespace + "/" + name }

// NewPodNetworkController returns a controller not running yet.
func NewPodNetworkController(o PodNetworkControllerOptions) *PodNetworkController {
	return &PodNetworkController{o: o, params: paramsJudge{client: o.Client, policy: o.Policy, allowedNamespaces: o.AllowedNamespaces}}
}

// Synced says whether the controller has seen every object once, or why
// not.
func (c *PodNetworkController) Synced() error {
	if len(c.synced) == 0 {
		return fmt.Errorf("the PodNetworks are not listed yet")
	}
	for _, s := range c.synced {
		if !s() {
			return fmt.Errorf("the PodNetworks, PodNetworkAttachments and pods are not listed yet")
		}
	}
	return nil
}

// activePod is a pod as the controller keeps it: what says which networks
// it references and, while it carries fastpath's scheduling gate, its
// gates, required node affinity and PodScheduled condition; nothing else.
func activePod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	kept := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion}}
	if v, ok := pod.Annotations[pnv1.AnnotationNetworks]; ok {
		kept.Annotations = map[string]string{pnv1.AnnotationNetworks: v}
	}
	kept.Spec.HostNetwork = pod.Spec.HostNetwork
	kept.Status.Phase = pod.Status.Phase
	if gated(pod) {
		// What lifting the gate rewrites, so that it is one patch.
		kept.Spec.SchedulingGates = slices.Clone(pod.Spec.SchedulingGates)
		if na := pod.Spec.Affinity; na != nil && na.NodeAffinity != nil && na.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			kept.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: na.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.DeepCopy()}}
		}
		if c := podScheduled(pod); c != nil {
			kept.Status.Conditions = []corev1.PodCondition{*c}
		}
	}
	return kept, nil
}

// nodeLabels is a node as the controller keeps it: its name and the
// labels of the PodNetworks it attaches.
func nodeLabels(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	kept := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion}}
	for k, v := range node.Labels {
		if pnv1.IsNodeLabel(k) {
			if kept.Labels == nil {
				kept.Labels = map[string]string{}
			}
			kept.Labels[k] = v
		}
	}
	return kept, nil
}

// podReferences are the index keys of what a pod not Succeeded or Failed
// references through its annotation. A pod without the annotation
// references the default PodNetwork, which needs no finalizer; a pod whose
// annotation does not parse references nothing. An invalid list (a
// duplicate, say) still references what it names: the pod may run.
func podReferences(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil, nil
	}
	value, ok := pod.Annotations[pnv1.AnnotationNetworks]
	if !ok {
		return nil, nil
	}
	nets, err := pnv1.ParseNetworks(value)
	if err != nil {
		return nil, nil
	}
	var keys []string
	for _, n := range nets {
		switch {
		case n.PodNetworkName != "":
			keys = append(keys, podNetworkRef(n.PodNetworkName))
		case n.PodNetworkAttachmentName != "":
			keys = append(keys, attachmentRef(pod.Namespace, n.PodNetworkAttachmentName))
		}
	}
	return keys, nil
}

// attachmentReferences is the index key of an attachment's PodNetwork.
func attachmentReferences(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	name, _, _ := unstructured.NestedString(u.Object, "spec", "podNetworkName")
	if name == "" {
		return nil, nil
	}
	return []string{podNetworkRef(name)}, nil
}

// Run reconciles until ctx ends.
func (c *PodNetworkController) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[objectKey](),
		workqueue.TypedRateLimitingQueueConfig[objectKey]{Name: "podnetworks"})
	defer c.queue.ShutDown()

	dyn := dynamicinformer.NewDynamicSharedInformerFactory(c.o.Client, c.o.Resync)
	pnInformer := dyn.ForResource(pnv1.PodNetworkResource).Informer()
	pnaInformer := dyn.ForResource(pnv1.PodNetworkAttachmentResource).Informer()
	if err := pnaInformer.AddIndexers(cache.Indexers{indexByReference: attachmentReferences}); err != nil {
		return err
	}
	typed := informers.NewSharedInformerFactory(c.o.Pods, c.o.Resync)
	podInformer := typed.Core().V1().Pods().Informer()
	if err := podInformer.SetTransform(activePod); err != nil {
		return err
	}
	if err := podInformer.AddIndexers(cache.Indexers{indexByReference: podReferences, indexGated: gatedIndex}); err != nil {
		return err
	}
	nodeInformer := typed.Core().V1().Nodes().Informer()
	if err := nodeInformer.SetTransform(nodeLabels); err != nil {
		return err
	}
	c.networks, c.attachments, c.pods, c.nodes = pnInformer.GetIndexer(), pnaInformer.GetIndexer(), podInformer.GetIndexer(), nodeInformer.GetStore()

	if _, err := pnInformer.AddEventHandler(handler(func(obj any) { c.enqueueNetwork(objectName(obj)) })); err != nil {
		return err
	}
	if _, err := pnaInformer.AddEventHandler(handler(func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			c.queue.Add(objectKey{attachment: true, namespace: u.GetNamespace(), name: u.GetName()})
			keys, _ := attachmentReferences(u)
			c.enqueueRefs(u.GetNamespace(), keys)
			pods, _ := c.pods.ByIndex(indexByReference, attachmentRef(u.GetNamespace(), u.GetName()))
			c.enqueueGated(pods)
		}
	})); err != nil {
		return err
	}
	if _, err := podInformer.AddEventHandler(handler(func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			// A pod that ended or went references nothing now: what it
			// referenced is in its annotation, whatever its phase.
			keys, _ := podReferences(&corev1.Pod{ObjectMeta: pod.ObjectMeta})
			c.enqueueRefs(pod.Namespace, keys)
			c.enqueueGated([]any{pod})
		}
	})); err != nil {
		return err
	}
	if _, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.enqueueAllGated() },
		UpdateFunc: func(old, obj any) {
			o, n := old.(*corev1.Node), obj.(*corev1.Node)
			if !maps.Equal(o.Labels, n.Labels) {
				c.enqueueAllGated()
			}
		},
		// A node that goes takes nothing a gated pod waits for.
	}); err != nil {
		return err
	}
	c.synced = []cache.InformerSynced{pnInformer.HasSynced, pnaInformer.HasSynced, podInformer.HasSynced, nodeInformer.HasSynced}
	dyn.Start(ctx.Done())
	typed.Start(ctx.Done())
	defer dyn.Shutdown()
	defer typed.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return ctx.Err()
	}
	if !c.o.NoDefault {
		c.queue.Add(objectKey{name: pnv1.DefaultPodNetworkName})
	}
	logger.Info("Reconciling PodNetworks and PodNetworkAttachments", "default", !c.o.NoDefault, "paramsRecheck", c.o.ParamsRecheck)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	wg.Wait()
	return nil
}

// workers is how many objects the controller reconciles at once (never
// one object twice at once: the queue sees to it). A gate lifted is one
// request: with one worker a burst of gated pods goes at the pace of the
// API server's answers, with several at the client's --kube-api-qps.
const workers = 4

// handler calls f with the object of every event, the last known state of
// a deleted one.
func handler(f func(obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: f,
		UpdateFunc: func(old, obj any) {
			f(old)
			f(obj)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			f(obj)
		},
	}
}

func objectName(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, err := meta.Accessor(obj); err == nil {
		return m.GetName()
	}
	return ""
}

// enqueueNetwork queues a PodNetwork and the attachments of it, whose
// Ready follows its.
func (c *PodNetworkController) enqueueNetwork(name string) {
	if name == "" {
		return
	}
	c.queue.Add(objectKey{name: name})
	objs, _ := c.attachments.ByIndex(indexByReference, podNetworkRef(name))
	for _, obj := range objs {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			c.queue.Add(objectKey{attachment: true, namespace: u.GetNamespace(), name: u.GetName()})
			pods, _ := c.pods.ByIndex(indexByReference, attachmentRef(u.GetNamespace(), u.GetName()))
			c.enqueueGated(pods)
		}
	}
	pods, _ := c.pods.ByIndex(indexByReference, podNetworkRef(name))
	c.enqueueGated(pods)
}

// enqueueRefs queues the objects index keys of namespace name.
func (c *PodNetworkController) enqueueRefs(namespace string, keys []string) {
	for _, k := range keys {
		if name, ok := strings.CutPrefix(k, "pn/"); ok {
			c.queue.Add(objectKey{name: name})
		} else if rest, ok := strings.CutPrefix(k, "pna/"+namespace+"/"); ok {
			c.queue.Add(objectKey{attachment: true, namespace: namespace, name: rest})
		}
	}
}

func (c *PodNetworkController) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	logger := klog.FromContext(ctx)
	recheck, err := c.reconcile(ctx, key)
	if err != nil {
		logger.Error(err, "Reconciling; retrying", "object", key.String())
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	if recheck && c.o.ParamsRecheck > 0 {
		c.queue.AddAfter(key, c.o.ParamsRecheck)
	}
	return true
}

// reconcile brings one object's status and finalizer to what they should
// be; recheck says it has parametersRefs, to read again later.
func (c *PodNetworkController) reconcile(ctx context.Context, key objectKey) (recheck bool, err error) {
	switch {
	case key.attachment:
		return c.reconcileAttachment(ctx, key.namespace, key.name)
	case key.pod:
		return false, c.reconcilePod(ctx, key.namespace, key.name)
	}
	return c.reconcileNetwork(ctx, key.name)
}

func (c *PodNetworkController) reconcileNetwork(ctx context.Context, name string) (bool, error) {
	logger := klog.FromContext(ctx)
	obj, exists, err := c.networks.GetByKey(name)
	if err != nil {
		return false, err
	}
	if !exists {
		if name == pnv1.DefaultPodNetworkName && !c.o.NoDefault {
			return false, c.createDefault(ctx)
		}
		return false, nil
	}
	u := obj.(*unstructured.Unstructured)
	var pn pnv1.PodNetwork
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pn); err != nil {
		return false, fmt.Errorf("decode PodNetwork %s: %w", name, err)
	}
	inUse, why := c.networkInUse(name)
	if name == pnv1.DefaultPodNetworkName {
		inUse = false
	}
	u, err = c.setFinalizer(ctx, c.o.Client.Resource(pnv1.PodNetworkResource), u, inUse, why)
	if err != nil || u == nil {
		return false, err
	}
	if !pn.DeletionTimestamp.IsZero() {
		return false, nil
	}
	params, err := c.params.paramsReady(ctx, pn.Spec.ParametersRefs, "", pn.Generation)
	if err != nil {
		return false, err
	}
	if params == nil {
		params = meta.FindStatusCondition(pn.Status.Conditions, pnv1.ConditionParamsReady)
	}
	want := []metav1.Condition{podNetworkReady(&pn, params)}
	if params != nil && len(pn.Spec.ParametersRefs) > 0 {
		want = append(want, *params)
	}
	if !setConditions(&pn.Status.Conditions, want...) {
		return len(pn.Spec.ParametersRefs) > 0, nil
	}
	if err := c.writeStatus(ctx, c.o.Client.Resource(pnv1.PodNetworkResource), u, &pn.Status); err != nil {
		return false, err
	}
	logger.Info("PodNetwork status", "podnetwork", name, "ready", want[0].Status, "reason", want[0].Reason, "message", want[0].Message)
	return len(pn.Spec.ParametersRefs) > 0, nil
}

func (c *PodNetworkController) reconcileAttachment(ctx context.Context, namespace, name string) (bool, error) {
	logger := klog.FromContext(ctx)
	obj, exists, err := c.attachments.GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return false, err
	}
	u := obj.(*unstructured.Unstructured)
	var pna pnv1.PodNetworkAttachment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pna); err != nil {
		return false, fmt.Errorf("decode PodNetworkAttachment %s/%s: %w", namespace, name, err)
	}
	pods, _ := c.pods.ByIndex(indexByReference, attachmentRef(namespace, name))
	why := ""
	if len(pods) > 0 {
		why = "pod " + namespace + "/" + objectName(pods[0])
	}
	client := c.o.Client.Resource(pnv1.PodNetworkAttachmentResource).Namespace(namespace)
	u, err = c.setFinalizer(ctx, client, u, len(pods) > 0, why)
	if err != nil || u == nil {
		return false, err
	}
	if !pna.DeletionTimestamp.IsZero() {
		return false, nil
	}
	params, err := c.params.paramsReady(ctx, pna.Spec.ParametersRefs, namespace, pna.Generation)
	if err != nil {
		return false, err
	}
	if params == nil {
		params = meta.FindStatusCondition(pna.Status.Conditions, pnv1.ConditionParamsReady)
	}
	var pn *pnv1.PodNetwork
	var pnReady *metav1.Condition
	if obj, exists, _ := c.networks.GetByKey(pna.Spec.PodNetworkName); exists {
		pn = new(pnv1.PodNetwork)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, pn); err != nil {
			return false, fmt.Errorf("decode PodNetwork %s: %w", pna.Spec.PodNetworkName, err)
		}
		pnReady = meta.FindStatusCondition(pn.Status.Conditions, pnv1.ConditionReady)
		if pnReady != nil && pnReady.ObservedGeneration != pn.Generation {
			// Not judged since its last change: it will be, and this
			// attachment queued again.
			pnReady = nil
		}
	}
	want := []metav1.Condition{podNetworkAttachmentReady(&pna, params, pn, pnReady)}
	if params != nil && len(pna.Spec.ParametersRefs) > 0 {
		want = append(want, *params)
	}
	if !setConditions(&pna.Status.Conditions, want...) {
		return len(pna.Spec.ParametersRefs) > 0, nil
	}
	if err := c.writeStatus(ctx, client, u, &pna.Status); err != nil {
		return false, err
	}
	logger.Info("PodNetworkAttachment status", "podnetworkattachment", klog.KRef(namespace, name),
		"ready", want[0].Status, "reason", want[0].Reason, "message", want[0].Message)
	return len(pna.Spec.ParametersRefs) > 0, nil
}

// networkInUse says whether an attachment or an active pod references the
// PodNetwork name, and which.
func (c *PodNetworkController) networkInUse(name string) (bool, string) {
	if objs, _ := c.attachments.ByIndex(indexByReference, podNetworkRef(name)); len(objs) > 0 {
		u := objs[0].(*unstructured.Unstructured)
		return true, "PodNetworkAttachment " + u.GetNamespace() + "/" + u.GetName()
	}
	if objs, _ := c.pods.ByIndex(indexByReference, podNetworkRef(name)); len(objs) > 0 {
		pod := objs[0].(*corev1.Pod)
		return true, "pod " + pod.Namespace + "/" + pod.Name
	}
	return false, ""
}

// setFinalizer adds the InUse finalizer to u while it is in use (why
// says by what) and removes it when not, which lets a deletion proceed.
// It returns the object as written, or nil when it is gone.
func (c *PodNetworkController) setFinalizer(ctx context.Context, client dynamic.ResourceInterface, u *unstructured.Unstructured, inUse bool, why string) (*unstructured.Unstructured, error) {
	finalizers := u.GetFinalizers()
	has := slices.Contains(finalizers, pnv1.FinalizerInUse)
	deleting := u.GetDeletionTimestamp() != nil
	switch {
	case inUse == has, inUse && deleting:
		// Nothing to change; a finalizer cannot be added once the object
		// is being deleted.
		return u, nil
	case inUse:
		finalizers = append(slices.Clone(finalizers), pnv1.FinalizerInUse)
	default:
		finalizers = slices.DeleteFunc(slices.Clone(finalizers), func(f string) bool { return f == pnv1.FinalizerInUse })
	}
	u = u.DeepCopy()
	u.SetFinalizers(finalizers)
	out, err := client.Update(ctx, u, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("set the finalizer %s of %s %s: %w", pnv1.FinalizerInUse, u.GetKind(), u.GetName(), err)
	}
	logger := klog.FromContext(ctx)
	if inUse {
		logger.Info("In use: deletion waits", "kind", u.GetKind(), "object", klog.KObj(u), "by", why)
	} else {
		logger.Info("Not in use: deletion may proceed", "kind", u.GetKind(), "object", klog.KObj(u), "deleting", deleting)
	}
	return out, nil
}

func (c *PodNetworkController) writeStatus(ctx context.Context, client dynamic.ResourceInterface, u *unstructured.Unstructured, status any) error {
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return err
	}
	u = u.DeepCopy()
	u.Object["status"] = st
	_, err = client.UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("write the status of %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// createDefault creates the default PodNetwork, the KEP's exact object.
func (c *PodNetworkController) createDefault(ctx context.Context) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": pnv1.SchemeGroupVersion.String(),
		"kind":       pnv1.KindPodNetwork,
		"metadata":   map[string]any{"name": pnv1.DefaultPodNetworkName},
		"spec":       map[string]any{"enabled": true},
	}}
	_, err := c.o.Client.Resource(pnv1.PodNetworkResource).Create(ctx, u, metav1.CreateOptions{FieldManager: fieldManager})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create the default PodNetwork: %w", err)
	}
	klog.FromContext(ctx).Info("Created the default PodNetwork")
	return nil
}
