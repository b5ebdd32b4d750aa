package controller

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
)

// gateFixture is a pnFixture with pods in a fake clientset, whose gated
// pods the controller lifts or keeps.
type gateFixture struct {
	*pnFixture
	client *fake.Clientset
	events *record.FakeRecorder
}

func newGateFixture(t *testing.T) *gateFixture {
	f := &gateFixture{pnFixture: newPNFixture(t), client: fake.NewClientset(), events: record.NewFakeRecorder(100)}
	f.c.o.Pods, f.c.o.Events = f.client, f.events
	f.network(podNetwork(pnv1.DefaultPodNetworkName, yes))
	return f
}

// network creates a PodNetwork and lets the controller judge it.
func (f *gateFixture) network(pn *unstructured.Unstructured) {
	f.t.Helper()
	f.create(pnv1.PodNetworkResource, pn)
	f.reconcile(objectKey{name: pn.GetName()})
}

func (f *gateFixture) setEnabled(name string, enabled bool) {
	f.t.Helper()
	u := f.get(objectKey{name: name})
	_ = unstructured.SetNestedField(u.Object, enabled, "spec", "enabled")
	f.update(pnv1.PodNetworkResource, u)
	f.reconcile(objectKey{name: name})
}

// pod creates a gated pod listing networks, as admission leaves it.
func (f *gateFixture) pod(name, networks string, affinity *corev1.Affinity) {
	f.t.Helper()
	p := networksPod("ns1", name, corev1.PodPending, networks)
	p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/other"}, {Name: pnv1.SchedulingGate}}
	p.Spec.Affinity = affinity
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated}}
	if _, err := f.client.CoreV1().Pods("ns1").Create(f.ctx, p, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *gateFixture) node(name string, labels map[string]string) {
	f.nodes = append(f.nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
}

// reconcilePod reconciles the pod with caches as the fake has it, and
// returns it as written.
func (f *gateFixture) reconcilePod(name string) *corev1.Pod {
	f.t.Helper()
	list, err := f.client.CoreV1().Pods("ns1").List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.pods = nil
	for i := range list.Items {
		f.pods = append(f.pods, &list.Items[i])
	}
	f.reconcile(objectKey{pod: true, namespace: "ns1", name: name})
	p, err := f.client.CoreV1().Pods("ns1").Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// wantGated checks the pod keeps the gate, its PodScheduled condition
// says why, and an event with reason said it.
func (f *gateFixture) wantGated(p *corev1.Pod, reason string, msgs ...string) {
	f.t.Helper()
	if !gated(p) {
		f.t.Fatalf("pod %s: gate lifted, want it kept (%s)", p.Name, reason)
	}
	c := podScheduled(p)
	if c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonSchedulingGated {
		f.t.Fatalf("pod %s: PodScheduled = %+v, want False SchedulingGated", p.Name, c)
	}
	for _, m := range msgs {
		if !strings.Contains(c.Message, m) {
			f.t.Errorf("pod %s: PodScheduled message %q does not say %q", p.Name, c.Message, m)
		}
	}
	select {
	case e := <-f.events.Events:
		if !strings.HasPrefix(e, corev1.EventTypeWarning+" "+reason+" ") || !strings.Contains(e, msgs[0]) {
			f.t.Errorf("pod %s: event %q, want a Warning %s saying %q", p.Name, e, reason, msgs[0])
		}
	default:
		f.t.Errorf("pod %s: no event, want a Warning %s", p.Name, reason)
	}
}

func wantLifted(t *testing.T, p *corev1.Pod, labels ...string) {
	t.Helper()
	if gated(p) || len(p.Spec.SchedulingGates) != 1 || p.Spec.SchedulingGates[0].Name != "example.com/other" {
		t.Fatalf("pod %s: gates %v, want fastpath's lifted and the other kept", p.Name, p.Spec.SchedulingGates)
	}
	var terms []corev1.NodeSelectorTerm
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		terms = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	}
	if len(labels) == 0 {
		if len(terms) != 0 {
			t.Errorf("pod %s: node affinity %v, want none", p.Name, terms)
		}
		return
	}
	if len(terms) == 0 {
		t.Fatalf("pod %s: no required node affinity, want the labels %v", p.Name, labels)
	}
	for i, term := range terms {
		for _, l := range labels {
			found := false
			for _, e := range term.MatchExpressions {
				found = found || (e.Key == l && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 && e.Values[0] == "true")
			}
			if !found {
				t.Errorf("pod %s: node selector term %d %v does not require %s=true", p.Name, i, term, l)
			}
		}
	}
}

// A disabled PodNetwork keeps the pod gated, saying so; enabled, the gate
// goes and the pod is kept to the nodes that attach the network.
func TestGateDisabledThenEnabled(t *testing.T) {
	f := newGateFixture(t)
	f.node("node-a", map[string]string{pnv1.NodeLabel("dataplane"): "true", "other": "x"})
	f.node("node-b", nil)
	f.network(podNetwork("dataplane", no))
	f.pod("app", `[{"name":"default"},{"name":"dataplane","interfaceName":"net1"}]`, nil)

	p := f.reconcilePod("app")
	f.wantGated(p, pnv1.ReasonAdministrativelyDisabled, "PodNetwork dataplane", "spec.enabled is false", "network.fastpath.dev/networks[1]")
	// Judged again unchanged: no write, no second event.
	if f.reconcilePod("app"); len(f.events.Events) != 0 {
		t.Errorf("a second event for the same reason: %q", <-f.events.Events)
	}

	f.setEnabled("dataplane", true)
	wantLifted(t, f.reconcilePod("app"), pnv1.NodeLabel("dataplane"))
}

// Each reason of the KEP's active validation, and the nodes.
func TestGateReasons(t *testing.T) {
	f := newGateFixture(t)
	f.node("node-a", map[string]string{pnv1.NodeLabel("a"): "true"})
	f.node("node-b", map[string]string{pnv1.NodeLabel("b"): "true"})
	f.network(podNetwork("a", nil))
	f.network(podNetwork("b", nil))
	f.network(podNetwork("nowhere", nil))
	foreign := podNetwork("foreign", nil)
	_ = unstructured.SetNestedField(foreign.Object, "example.com/other", "spec", "provider")
	f.network(foreign)

	cases := []struct {
		name, networks, reason string
		msgs                   []string
	}{
		{"missing", `[{"name":"nope"}]`, ReasonPodNetworkMissing, []string{"PodNetwork nope does not exist"}},
		{"no-attachment", `[{"attachmentName":"fast"}]`, ReasonAttachmentMissing, []string{"PodNetworkAttachment ns1/fast does not exist"}},
		{"twice", `[{"name":"a"},{"attachmentName":"to-a","interfaceName":"net2"}]`, ReasonPodNetworkReferenced,
			[]string{"both attach PodNetwork a", "PodNetworkAttachment to-a"}},
		{"no-node-has-both", `[{"name":"a"},{"name":"b","interfaceName":"net2"}]`, ReasonNoNode,
			[]string{pnv1.NodeLabel("a"), pnv1.NodeLabel("b")}},
		{"no-node", `[{"name":"nowhere"}]`, ReasonNoNode, []string{pnv1.NodeLabel("nowhere")}},
		{"bad-annotation", `{`, ReasonNetworksInvalid, []string{"network.fastpath.dev/networks"}},
	}
	f.create(pnv1.PodNetworkAttachmentResource, podNetworkAttachment("ns1", "to-a", "a"))
	f.reconcile(objectKey{attachment: true, namespace: "ns1", name: "to-a"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.pod(tc.name, tc.networks, nil)
			f.wantGated(f.reconcilePod(tc.name), tc.reason, tc.msgs...)
		})
	}

	// The attachment alone, another provider's network (not fastpath's
	// to place) and default: lifted, kept to the nodes of a.
	f.pod("ok", `[{"name":"default"},{"attachmentName":"to-a","interfaceName":"net1"},{"name":"foreign","interfaceName":"net2"}]`, nil)
	wantLifted(t, f.reconcilePod("ok"), pnv1.NodeLabel("a"))
	f.pod("default-only", `[{"name":"default"}]`, nil)
	wantLifted(t, f.reconcilePod("default-only"))

	// A pod's own required terms each gain the requirement.
	own := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}}}},
			{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-b"}}}},
		}}}}
	f.pod("own-affinity", `[{"name":"b"}]`, own)
	p := f.reconcilePod("own-affinity")
	wantLifted(t, p, pnv1.NodeLabel("b"))
	if terms := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; terms[0].MatchExpressions[0].Key != "zone" ||
		len(terms[1].MatchFields) != 1 {
		t.Errorf("the pod's own terms changed: %v", terms)
	}

	// A node gains the label: the pod that waited for it goes.
	f.nodes[0].Labels[pnv1.NodeLabel("nowhere")] = "true"
	wantLifted(t, f.reconcilePod("no-node"), pnv1.NodeLabel("nowhere"))
}

// Lifting a gate is one patch of the pod as cached, conditional on its
// resourceVersion; a pod changed since (a conflict) is read again and
// updated.
func TestGateLiftRequests(t *testing.T) {
	for _, conflict := range []bool{false, true} {
		t.Run(fmt.Sprintf("conflict=%v", conflict), func(t *testing.T) {
			f := newGateFixture(t)
			f.node("node-a", map[string]string{pnv1.NodeLabel("dataplane"): "true"})
			f.network(podNetwork("dataplane", yes))
			f.pod("app", `[{"name":"dataplane","interfaceName":"net1"}]`, nil)
			f.client.PrependReactor("patch", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				p := action.(k8stesting.PatchAction)
				if p.GetPatchType() != types.MergePatchType || !strings.Contains(string(p.GetPatch()), `"resourceVersion"`) {
					t.Errorf("patch %s %s: want a merge patch conditional on the resourceVersion", p.GetPatchType(), p.GetPatch())
				}
				if conflict {
					return true, nil, apierrors.NewConflict(corev1.Resource("pods"), p.GetName(), errors.New("the object has been modified"))
				}
				return false, nil, nil
			})
			f.client.ClearActions()
			p := f.reconcilePod("app")
			wantLifted(t, p, pnv1.NodeLabel("dataplane"))
			var verbs []string
			for _, a := range f.client.Actions() {
				if a.GetResource().Resource == "pods" && a.GetVerb() != "list" {
					verbs = append(verbs, a.GetVerb())
				}
			}
			want := []string{"patch", "get"} // reconcilePod's get of the result
			if conflict {
				want = []string{"patch", "get", "update", "get"}
			}
			if !slices.Equal(verbs, want) {
				t.Errorf("requests %v, want %v", verbs, want)
			}
		})
	}
}

// The pod changes between the cache's copy, judged, and the write that
// lifts its gate (the API server refuses the patch at the copy's
// resourceVersion): the pod written is the one judged, as the API server
// has it. A network it lists now that does not pass keeps it gated; one
// that does is what its node affinity requires, not the copy's.
func TestGateJudgesThePodItWrites(t *testing.T) {
	for name, tc := range map[string]struct {
		now    string // the pod's annotation when the gate is lifted
		reason string // kept gated for; "" lifted
		want   []string
	}{
		"a network that does not exist": {now: `[{"name":"a"},{"name":"nope","interfaceName":"net2"}]`, reason: ReasonPodNetworkMissing,
			want: []string{"PodNetwork nope does not exist"}},
		"a network no node attaches":  {now: `[{"name":"nowhere"}]`, reason: ReasonNoNode, want: []string{pnv1.NodeLabel("nowhere")}},
		"another network that passes": {now: `[{"name":"b"}]`, want: []string{pnv1.NodeLabel("b")}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newGateFixture(t)
			f.node("node-a", map[string]string{pnv1.NodeLabel("a"): "true", pnv1.NodeLabel("b"): "true"})
			f.network(podNetwork("a", nil))
			f.network(podNetwork("b", nil))
			f.network(podNetwork("nowhere", nil))
			f.pod("app", `[{"name":"a"}]`, nil)
			list, err := f.client.CoreV1().Pods("ns1").List(f.ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f.pods = []*corev1.Pod{&list.Items[0]}
			// The patch at the cached copy's resourceVersion finds the pod
			// changed: the API server's conflict.
			patched := false
			f.client.PrependReactor("patch", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if patched {
					return false, nil, nil
				}
				patched = true
				p, err := f.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "ns1", "app")
				if err != nil {
					return true, nil, err
				}
				pod := p.(*corev1.Pod).DeepCopy()
				pod.Annotations[pnv1.AnnotationNetworks] = tc.now
				if err := f.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), pod, "ns1"); err != nil {
					return true, nil, err
				}
				return true, nil, apierrors.NewConflict(corev1.Resource("pods"), "app", errors.New("the object has been modified"))
			})
			f.reconcile(objectKey{pod: true, namespace: "ns1", name: "app"})
			p, err := f.client.CoreV1().Pods("ns1").Get(f.ctx, "app", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !patched {
				t.Fatal("no patch lifted the gate")
			}
			if tc.reason != "" {
				f.wantGated(p, tc.reason, tc.want...)
				return
			}
			wantLifted(t, p, tc.want...)
			for _, term := range p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
				for _, e := range term.MatchExpressions {
					if e.Key == pnv1.NodeLabel("a") {
						t.Errorf("the pod requires %s, the label of the network its cached copy listed", e.Key)
					}
				}
			}
		})
	}
}
