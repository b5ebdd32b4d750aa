package status

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestNodeCondition: the condition says the features each source turned
// off, or none; the kubelet's conditions are left alone; an unchanged
// condition is not written again, and its transition time is kept while
// its status is; it is written after the API server comes back.
func TestNodeCondition(t *testing.T) {
	const node = "node-a"
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{ready}}})
	ctx := t.Context()
	c := NewNodeCondition(client, node)
	c.Backoff, c.MaxBackoff = time.Millisecond, 10*time.Millisecond
	go c.Run(ctx)
	condition := func(what string, ok func(corev1.NodeCondition) bool) corev1.NodeCondition {
		t.Helper()
		var got corev1.NodeCondition
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			var others []corev1.NodeCondition
			for _, have := range n.Status.Conditions {
				if have.Type == FeaturesOffCondition {
					got = have
				} else {
					others = append(others, have)
				}
			}
			if len(others) != 1 || others[0] != ready {
				t.Fatalf("the node's other conditions changed: %+v", others)
			}
			return ok(got), nil
		})
		if err != nil {
			t.Fatalf("%s: condition %+v: %v", what, got, err)
		}
		return got
	}
	writes := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "patch" && a.GetSubresource() == "status" {
				n++
			}
		}
		return n
	}

	c.Set("cluster", nil)
	served := condition("nothing off", func(c corev1.NodeCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == ReasonAllServed
	})
	if served.LastTransitionTime.IsZero() {
		t.Error("no transition time")
	}
	c.Set("runtime", []FeatureOff{{Name: "required_plugins", Why: "cri-o 1.34.0 (NRI v0.9.1) has no default validator"}})
	c.Set("cluster", []FeatureOff{{Name: "taints", Why: "feature gate DRADeviceTaints off"}})
	off := condition("two off", func(c corev1.NodeCondition) bool {
		return c.Status == corev1.ConditionTrue && strings.Contains(c.Message, "taints (cluster): feature gate DRADeviceTaints off") &&
			strings.Contains(c.Message, "required_plugins (runtime): cri-o 1.34.0")
	})
	if off.Reason != ReasonFeaturesOff || strings.Index(off.Message, "taints") > strings.Index(off.Message, "required_plugins") {
		t.Errorf("condition %+v: want reason %s, the cluster's first", off, ReasonFeaturesOff)
	}
	// What was applied last is not written again.
	before := writes()
	key := string(off.Status) + "/" + off.Message
	if got, err := c.apply(ctx, key); err != nil || got != key || writes() != before {
		t.Errorf("apply of the condition applied: %q, %v, %d writes", got, err, writes()-before)
	}
	// A refused write is tried again; the transition time stays while
	// the status does.
	var refused atomic.Int32
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refused.Add(1) <= 2 {
			return true, nil, errors.New("the API server is down")
		}
		return false, nil, nil
	})
	c.Set("cluster", nil)
	again := condition("the runtime's only, after two refusals", func(c corev1.NodeCondition) bool {
		return c.Status == corev1.ConditionTrue && !strings.Contains(c.Message, "taints")
	})
	if refused.Load() < 3 {
		t.Errorf("%d writes tried, want the two refused and one more", refused.Load())
	}
	if !again.LastTransitionTime.Equal(&off.LastTransitionTime) {
		t.Errorf("transition time %v, want %v kept", again.LastTransitionTime, off.LastTransitionTime)
	}
}
