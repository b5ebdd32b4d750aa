//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	ncv1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// TestNodeConfig: with nodeConfig on, a FastpathNodeConfig that selects
// the node by label changes what it publishes and its IP pool, without a
// Helm upgrade or a restart of the daemon, and says so in its status; a
// change of the pool reaches the next claim; a second object selecting
// the node too applies neither (both say so, naming the other) and the
// node keeps what it had, until one goes; with the objects gone, the
// chart's values again.
func TestNodeConfig(t *testing.T) {
	ctx := testContext(t)
	const port = 26283
	n := faultSetup(t, ctx, faultOptions{port: port, links: 2, up: true, before: func(d *daemon) {
		d.values["nodeConfig"] = map[string]any{"enabled": true, "installCRD": true}
	}})
	restarts := restartCount(n.d.pod)
	dyn, err := dynamic.NewForConfig(bed.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	configs := dyn.Resource(ncv1.GroupVersionResource)
	label := "e2e.fastpath.dev/pool"
	setNodeLabel(t, ctx, label, "a")

	second := fmt.Sprintf("netdev-%s%d1a", faultPrefix, port)
	filter := fmt.Sprintf(`device.attributes["fastpath.dev"].ifName == "%s%d1a"`, faultPrefix, port)
	spec := ncv1.FastpathNodeConfigSpec{NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{label: "a"}}, Filter: &filter,
		IPPools: []v1alpha1.IPPool{{Name: "e2e", Subnet: "10.84.0.0/24"}}}
	createNodeConfig(t, ctx, configs, "e2e-pool-a", spec)
	waitApplied(t, ctx, configs, "e2e-pool-a", 1, ncv1.ReasonApplied, "applied")
	waitPublished(t, ctx, second)

	// A claim of the pool gets an address of it.
	tmpl := claimTemplate(t, ctx, "e2e-pool-nic", "nic", "netdev.fastpath.dev", `device.attributes["fastpath.dev"].kind == "netdev"`,
		&v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "net1"}, IPAM: &v1alpha1.IPAMSpec{Pool: "e2e"}})
	runAndCheckAddress(t, ctx, templatePod("e2e-pool-1", "ifaces", tmpl), "10.84.0.")

	// The pool changes: the next claim gets an address of the new one.
	spec.IPPools[0].Subnet = "10.84.1.0/24"
	updateNodeConfig(t, ctx, configs, "e2e-pool-a", spec)
	waitApplied(t, ctx, configs, "e2e-pool-a", 2, ncv1.ReasonApplied, "applied")
	runAndCheckAddress(t, ctx, templatePod("e2e-pool-2", "ifaces", tmpl), "10.84.1.")

	// A second object selects the node: neither applies.
	all := "true"
	createNodeConfig(t, ctx, configs, "e2e-pool-b", ncv1.FastpathNodeConfigSpec{
		NodeSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: label, Operator: metav1.LabelSelectorOpExists}}}, Filter: &all})
	waitApplied(t, ctx, configs, "e2e-pool-a", 2, ncv1.ReasonConflict, "FastpathNodeConfig e2e-pool-b")
	waitApplied(t, ctx, configs, "e2e-pool-b", 1, ncv1.ReasonConflict, "FastpathNodeConfig e2e-pool-a")
	waitPublished(t, ctx, second)

	// The second goes: the first applies again. Then the first goes: the
	// chart's values again.
	if err := configs.Delete(ctx, "e2e-pool-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, ctx, configs, "e2e-pool-a", 2, ncv1.ReasonApplied, "applied")
	if err := configs.Delete(ctx, "e2e-pool-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ctx, fmt.Sprintf("netdev-%s%d0a", faultPrefix, port), second)
	if now := restartCount(n.d.pod); now != restarts {
		t.Errorf("the daemon restarted %d times", now-restarts)
	}
}

// setNodeLabel labels the bed's node, until the test ends.
func setNodeLabel(t *testing.T, ctx context.Context, key, value string) {
	t.Helper()
	patch := func(ctx context.Context, v any) error {
		data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: v}}})
		_, err := bed.Client().CoreV1().Nodes().Patch(ctx, bed.NodeName(), types.MergePatchType, data, metav1.PatchOptions{})
		return err
	}
	if err := patch(ctx, value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = patch(context.Background(), nil) })
}

func nodeConfigObject(name string, spec ncv1.FastpathNodeConfigSpec) (*unstructured.Unstructured, error) {
	o, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ncv1.FastpathNodeConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: ncv1.Group + "/" + ncv1.Version, Kind: ncv1.Kind}, ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: o}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u, nil
}

// createNodeConfig creates a FastpathNodeConfig, deleted when the test
// ends; the CRD may be a moment from established.
func createNodeConfig(t *testing.T, ctx context.Context, configs dynamic.NamespaceableResourceInterface, name string, spec ncv1.FastpathNodeConfigSpec) {
	t.Helper()
	u, err := nodeConfigObject(name, spec)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = configs.Create(ctx, u, metav1.CreateOptions{})
		return last == nil, nil
	}); err != nil {
		t.Fatalf("create FastpathNodeConfig %s: %v", name, last)
	}
	t.Cleanup(func() { _ = configs.Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func updateNodeConfig(t *testing.T, ctx context.Context, configs dynamic.NamespaceableResourceInterface, name string, spec ncv1.FastpathNodeConfigSpec) {
	t.Helper()
	cur, err := configs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u, err := nodeConfigObject(name, spec)
	if err != nil {
		t.Fatal(err)
	}
	u.SetResourceVersion(cur.GetResourceVersion())
	if _, err := configs.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitApplied waits until the node's entry in the object's status is of
// generation and its condition Applied has reason and a message with msg.
func waitApplied(t *testing.T, ctx context.Context, configs dynamic.NamespaceableResourceInterface, name string, generation int64, reason, msg string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := configs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		var cfg ncv1.FastpathNodeConfig
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cfg); err != nil {
			return false, err
		}
		for _, st := range cfg.Status.Nodes {
			if st.Name != bed.NodeName() {
				continue
			}
			for _, c := range st.Conditions {
				if c.Type == ncv1.ConditionApplied {
					last = fmt.Sprintf("generation %d: %s: %s", st.ObservedGeneration, c.Reason, c.Message)
					return st.ObservedGeneration == generation && c.Reason == reason && strings.Contains(c.Message, msg), nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("FastpathNodeConfig %s: the node's status never said generation %d: %s (%s); last: %s", name, generation, reason, msg, last)
	}
	t.Logf("FastpathNodeConfig %s: %s", name, last)
}

// waitPublished waits until the node publishes exactly the devices named.
func waitPublished(t *testing.T, ctx context.Context, names ...string) {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := nodeSlices(ctx)
		if err != nil {
			return false, nil
		}
		got = nil
		for _, slice := range s {
			for _, d := range slice.Spec.Devices {
				got = append(got, d.Name)
			}
		}
		if len(got) != len(names) {
			return false, nil
		}
		for _, n := range names {
			if sliceWith(s, n) == "" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the node publishes %v, want %v", got, names)
	}
}

// runAndCheckAddress runs pod and checks that its net1 has an address
// starting with prefix; the pod is deleted after, its device back.
func runAndCheckAddress(t *testing.T, ctx context.Context, pod *corev1.Pod, prefix string) {
	t.Helper()
	if _, err := bed.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "net1 ", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if line := interfaceLine(logs, "net1"); !strings.Contains(line, " "+prefix) {
		t.Errorf("pod %s: net1 is %q, want an address of %s*", pod.Name, line, prefix)
	} else {
		t.Logf("pod %s: %s", pod.Name, line)
	}
	if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
		t.Fatal(err)
	}
	if err := podGone(ctx, pod, time.Minute); err != nil {
		t.Fatal(err)
	}
}
