package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
)

// The KEP's active validation before scheduling. A pod that lists
// PodNetworks gets the scheduling gate pnv1.SchedulingGate at admission
// (fastpath's mutating webhook). The controller lifts it once every
// PodNetwork and PodNetworkAttachment the pod lists exists, is Ready and
// enabled, and no PodNetwork is attached twice; first it requires, by
// node affinity, the node labels (pnv1.NodeLabel) of the PodNetworks
// fastpath attaches, which each node's fastpathd keeps on its Node, so
// the pod goes only to a node that has them. Until then the pod stays
// Pending: its PodScheduled condition (False, SchedulingGated) and a
// Warning event say which network, and why.

// Reasons a pod stays gated: the KEP's Ready reasons of the PodNetwork
// or PodNetworkAttachment that is not Ready, or one of these.
const (
	ReasonNetworksInvalid      = "NetworksInvalid"
	ReasonPodNetworkMissing    = "PodNetworkNotFound"
	ReasonAttachmentMissing    = "PodNetworkAttachmentNotFound"
	ReasonNotReady             = "NotReady"
	ReasonPodNetworkReferenced = "PodNetworkReferencedTwice"
	ReasonNoNode               = "NoNodeAttaches"
)

// indexGated indexes the pods that carry the scheduling gate.
const (
	indexGated = "gated"
	gatedKey   = "gated"
)

// gated says whether a pod carries fastpath's scheduling gate.
func gated(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == pnv1.SchedulingGate })
}

func gatedIndex(obj any) ([]string, error) {
	if pod, ok := obj.(*corev1.Pod); ok && gated(pod) {
		return []string{gatedKey}, nil
	}
	return nil, nil
}

// gateProblem is why a pod stays gated.
type gateProblem struct {
	reason, message string
}

// enqueueGated queues the gated pods among objs.
func (c *PodNetworkController) enqueueGated(objs []any) {
	for _, obj := range objs {
		if pod, ok := obj.(*corev1.Pod); ok && gated(pod) {
			c.queue.Add(objectKey{pod: true, namespace: pod.Namespace, name: pod.Name})
		}
	}
}

// enqueueAllGated queues every gated pod: a node's labels changed.
func (c *PodNetworkController) enqueueAllGated() {
	objs, _ := c.pods.ByIndex(indexGated, gatedKey)
	c.enqueueGated(objs)
}

// reconcilePod lifts a gated pod's gate once its networks pass, or says
// why it does not.
func (c *PodNetworkController) reconcilePod(ctx context.Context, namespace, name string) error {
	obj, exists, err := c.pods.GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return err
	}
	pod := obj.(*corev1.Pod)
	if !gated(pod) {
		return nil
	}
	labels, problem := c.judgeNetworks(pod)
	if problem != nil {
		return c.keepGated(ctx, pod, problem)
	}
	return c.lift(ctx, pod, labels)
}

// judgeNetworks runs the active validation of a pod's networks: the node
// labels its PodNetworks need, or why it may not be scheduled yet.
func (c *PodNetworkController) judgeNetworks(pod *corev1.Pod) ([]string, *gateProblem) {
	value, ok := pod.Annotations[pnv1.AnnotationNetworks]
	if !ok {
		return nil, nil
	}
	nets, err := pnv1.ParseNetworks(value)
	if err != nil {
		return nil, &gateProblem{ReasonNetworksInvalid, err.Error()}
	}
	var labels []string
	by := map[string]string{} // PodNetwork: the element that attaches it
	for i, n := range nets {
		element := fmt.Sprintf("%s[%d]", pnv1.AnnotationNetworks, i)
		pnName := n.PodNetworkName
		if n.PodNetworkAttachmentName != "" {
			pna, problem := c.readyAttachment(pod.Namespace, n.PodNetworkAttachmentName)
			if problem != nil {
				problem.message = element + ": " + problem.message
				return nil, problem
			}
			pnName = pna.Spec.PodNetworkName
			element += " (PodNetworkAttachment " + n.PodNetworkAttachmentName + ")"
		}
		if first, ok := by[pnName]; ok {
			return nil, &gateProblem{ReasonPodNetworkReferenced, fmt.Sprintf("%s and %s both attach PodNetwork %s: a pod attaches a PodNetwork once", first, element, pnName)}
		}
		by[pnName] = element
		pn, problem := c.readyNetwork(pnName)
		if problem != nil {
			problem.message = element + ": " + problem.message
			return nil, problem
		}
		if pn.Name != pnv1.DefaultPodNetworkName && (pn.Spec.Provider == "" || pn.Spec.Provider == pnv1.FastpathProvider) {
			labels = append(labels, pnv1.NodeLabel(pn.Name))
		}
	}
	if len(labels) > 0 && !c.someNodeHas(labels) {
		return nil, &gateProblem{ReasonNoNode, fmt.Sprintf("no node attaches every PodNetwork the pod lists (no node has all the labels %s; "+
			"a node's fastpathd sets the label of each PodNetwork whose configuration it can run)", strings.Join(labels, ", "))}
	}
	return labels, nil
}

// readyNetwork is the PodNetwork name once it exists, is enabled and
// Ready, as the KEP's active validation has it.
func (c *PodNetworkController) readyNetwork(name string) (*pnv1.PodNetwork, *gateProblem) {
	obj, exists, _ := c.networks.GetByKey(name)
	if !exists {
		return nil, &gateProblem{ReasonPodNetworkMissing, "PodNetwork " + name + " does not exist"}
	}
	var pn pnv1.PodNetwork
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, &pn); err != nil {
		return nil, &gateProblem{ReasonNotReady, fmt.Sprintf("PodNetwork %s does not decode: %v", name, err)}
	}
	if !pn.Spec.IsEnabled() {
		return nil, &gateProblem{pnv1.ReasonAdministrativelyDisabled, "PodNetwork " + name + " is not Ready: " + pnv1.ReasonAdministrativelyDisabled + ": spec.enabled is false"}
	}
	if problem := notReady("PodNetwork "+name, pn.Generation, pn.Status.Conditions); problem != nil {
		return nil, problem
	}
	return &pn, nil
}

// readyAttachment is the PodNetworkAttachment namespace/name once it
// exists and is Ready.
func (c *PodNetworkController) readyAttachment(namespace, name string) (*pnv1.PodNetworkAttachment, *gateProblem) {
	what := "PodNetworkAttachment " + namespace + "/" + name
	obj, exists, _ := c.attachments.GetByKey(namespace + "/" + name)
	if !exists {
		return nil, &gateProblem{ReasonAttachmentMissing, what + " does not exist"}
	}
	var pna pnv1.PodNetworkAttachment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, &pna); err != nil {
		return nil, &gateProblem{ReasonNotReady, fmt.Sprintf("%s does not decode: %v", what, err)}
	}
	if problem := notReady(what, pna.Generation, pna.Status.Conditions); problem != nil {
		return nil, problem
	}
	return &pna, nil
}

// notReady says why conditions are not Ready for the object's generation.
func notReady(what string, generation int64, conds []metav1.Condition) *gateProblem {
	ready := meta.FindStatusCondition(conds, pnv1.ConditionReady)
	switch {
	case ready == nil || ready.ObservedGeneration != generation:
		return &gateProblem{ReasonNotReady, what + " is not Ready yet: the controller has not judged it"}
	case ready.Status != metav1.ConditionTrue:
		return &gateProblem{ready.Reason, fmt.Sprintf("%s is not Ready: %s: %s", what, ready.Reason, ready.Message)}
	}
	return nil
}

// someNodeHas says whether a node has every label of labels.
func (c *PodNetworkController) someNodeHas(labels []string) bool {
	for _, obj := range c.nodes.List() {
		m, err := meta.Accessor(obj)
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(labels, func(l string) bool { return m.GetLabels()[l] != "true" }) {
			return true
		}
	}
	return false
}

// keepGated says on the pod why it stays gated: its PodScheduled
// condition, and a Warning event when the reason is new.
func (c *PodNetworkController) keepGated(ctx context.Context, pod *corev1.Pod, p *gateProblem) error {
	message := "fastpath: " + p.message
	cond := podScheduled(pod)
	if cond != nil && cond.Status == corev1.ConditionFalse && cond.Message == message {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated,
		Message: message, LastTransitionTime: metav1.NewTime(time.Now()),
	}}}})
	if err != nil {
		return err
	}
	_, err = c.o.Pods.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pod %s/%s: say why it stays gated: %w", pod.Namespace, pod.Name, err)
	}
	if c.o.Events != nil {
		c.o.Events.Event(pod, corev1.EventTypeWarning, p.reason, message)
	}
	klog.FromContext(ctx).Info("Pod stays gated", "pod", klog.KObj(pod), "reason", p.reason, "message", p.message)
	return nil
}

func podScheduled(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// lift requires the node labels and removes the gate: one patch of the
// pod as the cache has it, judged (labels), on the condition that the API
// server has it so too (its resourceVersion); if not, the pod as the API
// server has it is judged again, and lifted with one update at its
// resourceVersion, or kept gated. A scheduling gate's pod may have its
// node affinity tightened, and only then.
func (c *PodNetworkController) lift(ctx context.Context, cached *corev1.Pod, labels []string) error {
	lifted := true
	err := c.liftCached(ctx, cached, labels)
	if apierrors.IsConflict(err) {
		lifted, labels, err = c.liftCurrent(ctx, cached)
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pod %s/%s: lift the scheduling gate %s: %w", cached.Namespace, cached.Name, pnv1.SchedulingGate, err)
	}
	if lifted {
		klog.FromContext(ctx).Info("Networks ready: scheduling gate lifted", "pod", klog.KObj(cached), "nodeLabels", labels)
	}
	return nil
}

// liftCached lifts the gate of the pod as cached, a merge patch that
// replaces its gates and required node affinity, conditional on its
// resourceVersion: the API server refuses it (a conflict) when the pod
// changed since the copy judged.
func (c *PodNetworkController) liftCached(ctx context.Context, cached *corev1.Pod, labels []string) error {
	pod := cached.DeepCopy()
	requireLabels(pod, labels)
	spec := map[string]any{"schedulingGates": slices.DeleteFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == pnv1.SchedulingGate })}
	if pod.Spec.Affinity != nil {
		spec["affinity"] = map[string]any{"nodeAffinity": map[string]any{
			"requiredDuringSchedulingIgnoredDuringExecution": pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution}}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": cached.UID, "resourceVersion": cached.ResourceVersion},
		"spec":     spec,
	})
	if err != nil {
		return err
	}
	_, err = c.o.Pods.CoreV1().Pods(cached.Namespace).Patch(ctx, cached.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
	return err
}

// liftCurrent judges the pod as the API server has it, if it is still
// the cached one and gated, and lifts its gate with the node labels of
// the networks it lists now, in an update at the resourceVersion read
// (a pod changed again meanwhile conflicts, and is judged again from the
// queue); a pod whose networks no longer pass stays gated, saying why.
// The labels of the cached copy are never written to another copy.
func (c *PodNetworkController) liftCurrent(ctx context.Context, cached *corev1.Pod) (lifted bool, labels []string, err error) {
	pods := c.o.Pods.CoreV1().Pods(cached.Namespace)
	pod, err := pods.Get(ctx, cached.Name, metav1.GetOptions{})
	if err != nil {
		return false, nil, err
	}
	if pod.UID != cached.UID || !gated(pod) {
		return false, nil, nil
	}
	labels, problem := c.judgeNetworks(pod)
	if problem != nil {
		return false, nil, c.keepGated(ctx, pod, problem)
	}
	requireLabels(pod, labels)
	pod.Spec.SchedulingGates = slices.DeleteFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == pnv1.SchedulingGate })
	if _, err := pods.Update(ctx, pod, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		return false, nil, err
	}
	return true, labels, nil
}

// requireLabels adds to the pod's required node affinity that the node
// has each label with the value "true": to every term of it (terms are
// ORed; a gated pod's terms may gain requirements, not lose any), or as
// its one term.
func requireLabels(pod *corev1.Pod, labels []string) {
	if len(labels) == 0 {
		return
	}
	sort.Strings(labels)
	var reqs []corev1.NodeSelectorRequirement
	for _, l := range labels {
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: l, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}})
	}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: reqs}}}
		return
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		for _, r := range reqs {
			if !slices.ContainsFunc(terms[i].MatchExpressions, func(e corev1.NodeSelectorRequirement) bool {
				return e.Key == r.Key && e.Operator == r.Operator && slices.Equal(e.Values, r.Values)
			}) {
				terms[i].MatchExpressions = append(terms[i].MatchExpressions, r)
			}
		}
	}
}
