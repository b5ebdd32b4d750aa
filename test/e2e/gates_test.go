//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// dryRunGates creates pod as a dry run and returns the scheduling gates
// admission gave it.
func dryRunGates(ctx context.Context, t *testing.T, pod *unstructured.Unstructured) ([]string, error) {
	t.Helper()
	out, err := dynamicClient(t).Resource(podsResource).Namespace(pod.GetNamespace()).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return nil, err
	}
	var p corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(out.Object, &p); err != nil {
		return nil, err
	}
	var gates []string
	for _, g := range p.Spec.SchedulingGates {
		gates = append(gates, g.Name)
	}
	return gates, nil
}

// gatedUntilEnabled: with the webhook and PodNetworks on (TestWebhook's
// release), a pod listing a disabled PodNetwork is gated at admission and
// stays Pending, never bound, its PodScheduled condition and an event
// saying AdministrativelyDisabled and naming the network, and no node is
// labelled for it. Enabled, the node's fastpathd labels its Node for the
// PodNetwork (its NAD's master is there), and another Node object, with
// no fastpathd, is not; the pod is kept by node affinity to the labelled
// nodes and runs, with the network attached, within 5 s.
func gatedUntilEnabled(t *testing.T, ctx context.Context) {
	client := bed.Client()
	dyn := dynamicClient(t)
	networks := dyn.Resource(pnv1.PodNetworkResource)
	master := hostVethNamed(t, "fpgate0a", "fpgate0b")
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	other, own := twoNodes(t, ctx)
	const name = "e2e-gate-dataplane"
	label := pnv1.NodeLabel(name)
	createServed(t, ctx, nadsResource, fmt.Sprintf(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: e2e-gate-net, namespace: default}
spec:
  config: '{"cniVersion": "1.0.0", "name": "e2e-gate-net", "plugins": [{"type": "macvlan", "master": %q, "mode": "bridge", "ipam": {"type": "static", "addresses": [{"address": "10.96.7.5/24"}]}}]}'
`, master.Attrs().Name))
	t.Cleanup(func() {
		_ = dyn.Resource(nadsResource).Namespace("default").Delete(context.Background(), "e2e-gate-net", metav1.DeleteOptions{})
	})
	if _, err := createYAML(t, ctx, pnv1.PodNetworkResource, false, `apiVersion: network.fastpath.dev/v1alpha1
kind: PodNetwork
metadata: {name: `+name+`}
spec:
  enabled: false
  provider: fastpath.dev/fastpathd
  parametersRefs:
  - {group: k8s.cni.cncf.io, kind: NetworkAttachmentDefinition, name: e2e-gate-net, namespace: default}
`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = networks.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	waitCondition(t, ctx, networks, name, metav1.ConditionFalse, pnv1.ReasonAdministrativelyDisabled, "")

	pod := testbed.WorkloadPod("default", "e2e-gate-pod", "ifaces")
	pod.Annotations = map[string]string{pnv1.AnnotationNetworks: `[{"name": "` + name + `", "interfaceName": "net1"}]`}
	created, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), pod.Namespace, pod.Name) })
	if !slices.ContainsFunc(created.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == pnv1.SchedulingGate }) {
		t.Fatalf("the pod was admitted with gates %v, want %s", created.Spec.SchedulingGates, pnv1.SchedulingGate)
	}
	// Pending with the reason: its condition and an event.
	var cond *corev1.PodCondition
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("bound to %s while its PodNetwork is disabled", p.Spec.NodeName)
		}
		for i := range p.Status.Conditions {
			if c := p.Status.Conditions[i]; c.Type == corev1.PodScheduled {
				cond = &c
			}
		}
		return cond != nil && strings.Contains(cond.Message, pnv1.ReasonAdministrativelyDisabled) && strings.Contains(cond.Message, name), nil
	})
	if err != nil {
		t.Fatalf("the gated pod's PodScheduled %+v: %v; want False, naming %s and %s", cond, err, name, pnv1.ReasonAdministrativelyDisabled)
	}
	t.Logf("gated: PodScheduled %s %s: %s", cond.Status, cond.Reason, cond.Message)
	if msg, err := waitEvent(ctx, pod.Name, name); err != nil {
		t.Errorf("no event naming %s: %v", name, err)
	} else if !strings.Contains(msg, pnv1.ReasonAdministrativelyDisabled) {
		t.Errorf("event %q does not say %s", msg, pnv1.ReasonAdministrativelyDisabled)
	}
	// It stays so: not bound while the network is disabled.
	deadline := time.Now().Add(3 * time.Second)
	_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && (p.Spec.NodeName != "" || len(p.Spec.SchedulingGates) == 0) {
			t.Errorf("the pod was bound (%q) or ungated (%v) while its PodNetwork is disabled", p.Spec.NodeName, p.Spec.SchedulingGates)
			return true, nil
		}
		return time.Now().After(deadline), nil
	})
	// Disabled, no node is labelled for it: the node's runtime hook would
	// not attach it.
	for _, node := range []*corev1.Node{own, other} {
		n, err := client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil || n.Labels[label] != "" {
			t.Errorf("node %s, the PodNetwork disabled: %v, %v; want no label %s", node.Name, err, n.GetLabels(), label)
		}
	}

	setEnabled(t, ctx, networks, name, true)
	enabled := time.Now()
	var running *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		running = p
		return p.Status.Phase == corev1.PodRunning, nil
	})
	took := time.Since(enabled)
	if err != nil {
		t.Fatalf("the pod is not Running a minute after its PodNetwork was enabled: %s, gates %v, conditions %+v", running.Status.Phase, running.Spec.SchedulingGates, running.Status.Conditions)
	}
	t.Logf("Running %s after the PodNetwork was enabled, on %s", took.Round(time.Millisecond), running.Spec.NodeName)
	if took > 5*time.Second {
		t.Errorf("the pod ran %s after its PodNetwork was enabled, want within 5 s", took.Round(time.Millisecond))
	}
	if running.Spec.NodeName != own.Name {
		t.Errorf("the pod runs on %s, want %s", running.Spec.NodeName, own.Name)
	}
	// The node's fastpathd says it attaches the network; nothing says
	// the other node does.
	if n, err := client.CoreV1().Nodes().Get(ctx, own.Name, metav1.GetOptions{}); err != nil || n.Labels[label] != "true" {
		t.Errorf("node %s, where the pod runs: %v, %v; want the label %s=true", own.Name, err, n.GetLabels(), label)
	}
	if n, err := client.CoreV1().Nodes().Get(ctx, other.Name, metav1.GetOptions{}); err != nil || n.Labels[label] != "" {
		t.Errorf("node %s (no fastpathd): %v, %v; want no label %s", other.Name, err, n.GetLabels(), label)
	}
	var required []corev1.NodeSelectorTerm
	if a := running.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		required = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	}
	if len(required) != 1 || !slices.ContainsFunc(required[0].MatchExpressions, func(e corev1.NodeSelectorRequirement) bool {
		return e.Key == label && e.Operator == corev1.NodeSelectorOpIn && slices.Equal(e.Values, []string{"true"})
	}) {
		t.Errorf("the pod's required node affinity %+v, want %s=true", required, label)
	}
	if _, err := bed.WaitPodLog(ctx, "default", pod.Name, "10.96.7.5/24", 30*time.Second); err != nil {
		t.Errorf("the pod's net1: %v", err)
	}
	// Gone, the PodNetwork's label goes from the node.
	if err := bed.DeletePod(ctx, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	if err := networks.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, own.Name, metav1.GetOptions{})
		_, has := n.Labels[label]
		return err == nil && !has, nil
	})
	if err != nil {
		t.Errorf("node %s kept the label %s after the PodNetwork was deleted", own.Name, label)
	}
}
