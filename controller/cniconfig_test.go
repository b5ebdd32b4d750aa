package controller

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/watch"
)

func unstructuredCNIConfig(t *testing.T, o *v1alpha1.CNIConfigObject) *unstructured.Unstructured {
	t.Helper()
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	return u
}

// The controller writes each object's Accepted condition, and writes it
// again when the object changes.
func TestCNIConfigController(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	set := testApproved(t)
	good, bad := set["macvlan-host-local"], *set["storage-net"]
	bad.Spec.Plugins = append(bad.Spec.Plugins, v1alpha1.CNIPlugin{Type: "host-device"})
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{watch.CNIConfigResource: "CNIConfigList"},
		unstructuredCNIConfig(t, good), unstructuredCNIConfig(t, &bad))
	c := NewCNIConfigController(client, cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}, time.Hour)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	accepted := func(name string, want metav1.ConditionStatus, generation int64) metav1.Condition {
		t.Helper()
		var last *metav1.Condition
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			u, err := client.Resource(watch.CNIConfigResource).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			o, err := cnipolicy.FromUnstructured(u)
			if err != nil {
				return false, err
			}
			last = meta.FindStatusCondition(o.Status.Conditions, "Accepted")
			return last != nil && last.Status == want && last.ObservedGeneration == generation, nil
		})
		if err != nil {
			t.Fatalf("%s: condition %+v, want Accepted %s for generation %d", name, last, want, generation)
		}
		return *last
	}
	if cond := accepted("macvlan-host-local", metav1.ConditionTrue, 0); cond.Reason != "Accepted" {
		t.Errorf("the design's CNIConfig: %+v", cond)
	}
	if cond := accepted("storage-net", metav1.ConditionFalse, 0); cond.Reason != "PluginNotAllowed" {
		t.Errorf("a config running host-device: %+v", cond)
	}
	if c.Synced() != nil {
		t.Errorf("not synced after the first round: %v", c.Synced())
	}

	// A change is judged again.
	u, err := client.Resource(watch.CNIConfigResource).Get(ctx, "storage-net", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bad.Spec.Plugins = bad.Spec.Plugins[:1]
	bad.Generation = 2
	fixed := unstructuredCNIConfig(t, &bad)
	fixed.SetResourceVersion(u.GetResourceVersion())
	fixed.Object["status"] = u.Object["status"]
	if _, err := client.Resource(watch.CNIConfigResource).Update(ctx, fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if cond := accepted("storage-net", metav1.ConditionTrue, 2); cond.Reason != "Accepted" {
		t.Errorf("after the fix: %+v", cond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
