//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/test/testbed"
)

// requiredPlugins is the pod annotation with which the runtime's NRI
// default validator refuses to create a container while a plugin it names
// is not connected.
const requiredPlugins = "required-plugins.noderesource.dev"

// TestRequiredPlugins: a pod that requires fastpath's NRI plugin does not
// start while no fastpathd serves the node (its container is not created,
// the runtime naming the plugin), and starts once one does.
// TestRollingUpgrade's pods require it too: they start while either
// daemon serves. On a runtime whose NRI has no default validator (CRI-O
// 1.34, containerd before 2.2), see requiredPluginsUnenforced.
func TestRequiredPlugins(t *testing.T) {
	ctx := testContext(t)
	v, err := bed.Config().Versions()
	if err != nil {
		t.Fatal(err)
	}
	if bed.Config().Runtime == testbed.RuntimeCRIO || utilversion.MustParseSemantic(v.Containerd).LessThan(utilversion.MustParseSemantic("v2.2.0")) {
		requiredPluginsUnenforced(t, ctx)
		return
	}
	pod := testbed.WorkloadPod("default", "e2e-required", "sleep")
	pod.Annotations = map[string]string{requiredPlugins: `["fastpath"]`}
	createPod(t, ctx, pod)
	const refusal = `required plugin "fastpath" not present`
	var last string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Status.Phase == corev1.PodRunning {
			return false, fmt.Errorf("pod %s runs while no fastpathd serves the node", pod.Name)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				last = w.Reason + ": " + w.Message
				if strings.Contains(w.Message, refusal) {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s was never refused for want of fastpath (last: %s): %v", pod.Name, last, err)
	}
	t.Logf("without fastpathd: %s", last)

	// Publishing nothing: the pod needs the plugin, not a device.
	startDaemon(t, ctx, 26282, "--filter", `device.attributes["fastpath.dev"].ifName == "e2e-none"`)
	t.Cleanup(func() { deleteSlices(t) })
	start := time.Now()
	if _, err := bed.WaitPod(ctx, "default", pod.Name, 2*time.Minute, func(p *corev1.Pod) (bool, error) {
		return p.Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		t.Fatalf("pod %s did not start once fastpathd served: %v", pod.Name, err)
	}
	t.Logf("pod %s running %s after fastpathd served (the kubelet's backoff)", pod.Name, time.Since(start).Round(time.Second))
	// containerd 2.2's NRI has the validator: nothing the daemon uses is
	// off (from 1.36 the API server serves every DRA feature it uses).
	if strings.HasPrefix(v.Kubernetes, "v1.36") || strings.HasPrefix(v.Kubernetes, "v1.37") {
		waitFeaturesOff(t, ctx, corev1.ConditionFalse, "the cluster and the runtime serve every feature fastpath uses")
	}
}

// TestNRIOff: on a node whose runtime has NRI off, its socket is not
// there: fastpathd stays unready and its log says so, and what to turn on.
// (The bed's own kubelet root and NRI socket are not the defaults either:
// every test runs the chart with the paths of a non-default layout.)
func TestNRIOff(t *testing.T) {
	ctx := testContext(t)
	d := newDaemon(t, 26284, "--filter", `device.attributes["fastpath.dev"].ifName == "e2e-none"`)
	d.values["nriSocket"] = filepath.Join(t.TempDir(), "nri", "nri.sock")
	if err := d.install(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.stop(t) })
	t.Cleanup(func() { deleteSlices(t) })
	const want = "does not exist: NRI is off in the runtime"
	var logs string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := bed.DaemonPod(ctx)
		if err != nil || p == nil {
			return false, nil
		}
		d.pod = p
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return false, fmt.Errorf("fastpathd is Ready without the runtime's NRI socket")
			}
		}
		logs, _ = bed.PodLogs(ctx, p.Namespace, p.Name)
		return strings.Contains(logs, want), nil
	})
	if err != nil {
		t.Fatalf("fastpathd never said %q: %v; its log:\n%s", want, err, logs)
	}
	for line := range strings.Lines(logs) {
		if strings.Contains(line, want) {
			t.Logf("fastpathd: %s", strings.TrimSpace(line))
			break
		}
	}
}

// requiredPluginsUnenforced is TestRequiredPlugins on a runtime whose NRI
// has no default validator (CRI-O 1.34, containerd before 2.2;
// docs/install.md): a pod that requires fastpath and selects a network
// starts while no fastpathd serves the node, without the network; once
// fastpathd connects, it says in the node's condition that the runtime
// lacks the validator, and attaches the network to the running pod.
func requiredPluginsUnenforced(t *testing.T, ctx context.Context) {
	t.Helper()
	master := hostVethNamed(t, "fprq0a", "fprq0b")
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	// The daemon once, for the NetworkAttachmentDefinition CRD its chart
	// installs; then none serves the node.
	d := startDaemon(t, ctx, 26282, "--npwg", "--cni-bin-dir", bed.Config().CNIBinDir(), "--cni-plugins", "macvlan,static",
		"--filter", `device.attributes["fastpath.dev"].ifName == "e2e-none"`)
	t.Cleanup(func() { deleteSlices(t) })
	createServed(t, ctx, nads, fmt.Sprintf(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: net-rq
spec:
  config: '{"cniVersion": "1.0.0", "name": "net-rq", "plugins": [{"type": "macvlan", "master": %q, "mode": "bridge", "ipam": {"type": "static"}, "capabilities": {"ips": true}}]}'
`, master.Attrs().Name))
	d.stop(t)

	pod := testbed.WorkloadPod("default", "e2e-required", "sleep")
	pod.Annotations = map[string]string{requiredPlugins: `["fastpath"]`, nadv1.NetworkAttachmentAnnot: `[{"name": "net-rq", "ips": ["10.94.0.5/24"]}]`}
	createPod(t, ctx, pod)
	running, err := bed.WaitPod(ctx, "default", pod.Name, time.Minute, func(p *corev1.Pod) (bool, error) {
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod %s did not start without fastpathd on a runtime that does not enforce %s: %v", pod.Name, requiredPlugins, err)
	}
	uid := string(running.UID)
	if _, err := podInterface(uid, "net1"); err == nil {
		t.Fatalf("pod %s has net1 while no fastpathd serves the node", pod.Name)
	}
	t.Logf("pod %s runs without fastpathd and without net1: the runtime does not enforce %s", pod.Name, requiredPlugins)

	d.start(t, ctx)
	// fastpathd says what it found: the runtime lacks the validator.
	runtime := "containerd"
	if bed.Config().Runtime == testbed.RuntimeCRIO {
		runtime = "cri-o" // as CRI-O names itself
	}
	waitFeaturesOff(t, ctx, corev1.ConditionTrue, "required_plugins (runtime): the runtime "+runtime, "is older than NRI v0.10.0")
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := podInterface(uid, "net1")
		if err == nil && !slices.Contains(l.addrs, "10.94.0.5/24") {
			err = fmt.Errorf("net1 has %v", l.addrs)
		}
		last = err
		return err == nil, nil
	}); err != nil {
		t.Fatalf("fastpathd connected and pod %s never got net1 with 10.94.0.5/24: %v", pod.Name, last)
	}
	t.Logf("pod %s got net1 once fastpathd connected", pod.Name)
}
