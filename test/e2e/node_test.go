//go:build e2e

package e2e

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/test/testbed"
)

func TestNodeReady(t *testing.T) {
	ctx := testContext(t)
	// The kubelet reports the runtime's version as "Unknown" until it
	// has asked a containerd that an earlier test restarted.
	var node *corev1.Node
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := bed.Client().CoreV1().Nodes().Get(ctx, bed.NodeName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = n
		return !strings.HasSuffix(n.Status.NodeInfo.ContainerRuntimeVersion, "://Unknown"), nil
	})
	if node == nil {
		t.Fatalf("get node: %v", err)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	if !ready {
		t.Errorf("node %s is not Ready: %+v", node.Name, node.Status.Conditions)
	}
	var internalIP string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internalIP = a.Address
		}
	}
	if want := bed.Config().NodeIP.String(); internalIP != want {
		t.Errorf("node InternalIP = %q, want %q", internalIP, want)
	}
	if v, want := node.Status.NodeInfo.KubeletVersion, bedVersions(t).Kubernetes; v != want {
		t.Errorf("kubelet version = %q, want %s", v, want)
	}
	if rt := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "containerd://2.") {
		t.Errorf("container runtime = %q, want containerd 2.x", rt)
	}
	// DRA needs resource.k8s.io/v1.
	if _, err := bed.Client().Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1"); err != nil {
		t.Errorf("resource.k8s.io/v1 not served: %v", err)
	}
}

func bedVersions(t *testing.T) testbed.Versions {
	t.Helper()
	v, err := bed.Config().Versions()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPodRunsAndIsDeleted(t *testing.T) {
	ctx := testContext(t)
	const ns, name = "default", "e2e-plain"
	pod, err := bed.RunPod(ctx, testbed.WorkloadPod(ns, name, "ifaces"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(ctx, ns, name) })
	if pod.Spec.NodeName != bed.NodeName() {
		t.Errorf("pod scheduled to %q, want %q", pod.Spec.NodeName, bed.NodeName())
	}
	podIP, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil || !bed.Config().PodCIDR.Contains(podIP) {
		t.Errorf("pod IP %q is not in the pod network %s", pod.Status.PodIP, bed.Config().PodCIDR)
	}
	logs, err := bed.WaitPodLog(ctx, ns, name, "eth0", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The workload prints "NAME MAC ADDRS": eth0 must carry the pod IP.
	var eth0 string
	for line := range strings.Lines(logs) {
		if strings.HasPrefix(line, "eth0 ") {
			eth0 = strings.TrimSpace(line)
		}
	}
	if !strings.Contains(eth0, pod.Status.PodIP+"/") {
		t.Errorf("pod log line for eth0 = %q, want it to carry the pod IP %s; whole log:\n%s", eth0, pod.Status.PodIP, logs)
	}
	if err := bed.DeletePod(ctx, ns, name); err != nil {
		t.Fatal(err)
	}
}

func TestSecondBedRefused(t *testing.T) {
	ctx := testContext(t)
	_, err := testbed.Start(ctx, bed.Config())
	if err == nil {
		t.Fatal("a second test bed started in the same directory; want it refused")
	}
	if !strings.Contains(err.Error(), "already running") {
		t.Errorf("error = %q, want it to say a bed is already running", err)
	}
	// The refusal must not have disturbed the running bed.
	if running, err := testbed.Running(bed.Config()); err != nil || !running {
		t.Errorf("after the refused start the bed runs = %v (err %v), want true", running, err)
	}
}
