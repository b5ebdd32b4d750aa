package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/watch"
)

// The controller lets go of an IPAMClaim for the node that holds it once
// the node, or the pod holding it, is gone (or the pod finished, or is of
// another node): a pod of another node may then take it. An IPAMClaim
// whose holder runs on its node is not touched, nor one no node holds.
func TestIPAMClaimControllerLetsGo(t *testing.T) {
	pod := func(name, node string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: phase}}
	}
	kube := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
		pod("runs", "node-a", corev1.PodRunning), pod("elsewhere", "node-b", corev1.PodRunning), pod("done", "node-a", corev1.PodSucceeded))
	for name, tc := range map[string]struct {
		owner, node string
		want        string // the condition's reason after; "" unchanged
	}{
		"the node is gone":           {owner: "runs", node: "node-gone", want: npwg.ReasonHolderGone},
		"the pod is gone":            {owner: "gone", node: "node-a", want: npwg.ReasonHolderGone},
		"the pod is of another node": {owner: "elsewhere", node: "node-a", want: npwg.ReasonHolderGone},
		"the pod has finished":       {owner: "done", node: "node-a", want: npwg.ReasonHolderGone},
		"the pod runs on its node":   {owner: "runs", node: "node-a"},
		"held by no node":            {owner: "gone"},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			claim := &npwg.IPAMClaim{TypeMeta: metav1.TypeMeta{APIVersion: npwg.IPAMClaimGroupVersion, Kind: npwg.IPAMClaimKind},
				ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "vm-a", ResourceVersion: "3"},
				Spec:       npwg.IPAMClaimSpec{Network: "tenant/net", Interface: "net1"},
				Status: npwg.IPAMClaimStatus{IPs: []string{"10.0.0.5/24"}, OwnerPod: &npwg.OwnerPod{Name: tc.owner},
					Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Allocated", LastTransitionTime: metav1.Now()}}}}
			if tc.node != "" {
				claim.Status, _ = npwg.WithOwner(claim, tc.owner, tc.node, nil)
			}
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(claim)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: obj}
			client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{watch.IPAMClaimResource: "IPAMClaimList"}, u.DeepCopy())
			c := NewIPAMClaimController(client, kube, 0)
			if err := c.reconcile(ctx, u); err != nil {
				t.Fatal(err)
			}
			got, err := client.Resource(watch.IPAMClaimResource).Namespace("tenant").Get(context.Background(), "vm-a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var after npwg.IPAMClaim
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &after); err != nil {
				t.Fatal(err)
			}
			cond := meta.FindStatusCondition(after.Status.Conditions, npwg.IPAMClaimNodeCondition)
			switch {
			case tc.want == "" && tc.node != "" && npwg.HeldOn(&after) != tc.node:
				t.Errorf("status %+v, want it held on %s still", after.Status, tc.node)
			case tc.want == "" && tc.node == "" && cond != nil:
				t.Errorf("status %+v, want no node named", after.Status)
			case tc.want != "" && (npwg.HeldOn(&after) != "" || cond == nil || cond.Reason != tc.want || cond.Message != tc.node):
				t.Errorf("status %+v, want %s let go (%s)", after.Status, tc.node, tc.want)
			}
			if tc.want != "" && (len(after.Status.Conditions) != 2 || after.Status.Conditions[0].Type != "Ready" || after.Status.OwnerPod.Name != tc.owner ||
				len(after.Status.IPs) != 1) {
				t.Errorf("status %+v, want the rest kept", after.Status)
			}
		})
	}
}
