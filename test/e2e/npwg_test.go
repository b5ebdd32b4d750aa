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
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

var nads = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// TestNPWG: with --npwg, fastpathd installed by the chart (with the
// NetworkAttachmentDefinition CRD) attaches the networks a pod selects with
// the k8s.v1.cni.cncf.io/networks annotation: the same network twice, one
// with a generated interface name and one named, each with the address the
// element asks for through the static IPAM's ips capability; the pod's
// network-status lists both. A pod selecting a network that does not exist
// does not start, and the event names it.
func TestNPWG(t *testing.T) {
	ctx := testContext(t)
	master := hostVethNamed(t, "fpnpw0a", "fpnpw0b")
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, ctx, 26195, "--npwg", "--cni-bin-dir", bed.Config().CNIBinDir(), "--cni-plugins", "macvlan,static")

	doc := fmt.Sprintf(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: net-a
spec:
  config: '{"cniVersion": "1.0.0", "name": "net-a", "plugins": [{"type": "macvlan", "master": %q, "mode": "bridge", "ipam": {"type": "static"}, "capabilities": {"ips": true}}]}'
`, master.Attrs().Name)
	createServed(t, ctx, nads, doc)

	pod := testbed.WorkloadPod("default", "e2e-npwg", "ifaces")
	pod.Annotations = map[string]string{nadv1.NetworkAttachmentAnnot: `[{"name": "net-a", "ips": ["10.93.0.5/24"]}, {"name": "net-a", "interface": "data1", "ips": ["10.93.0.6/24"]}]`}
	runWithInterfaces(t, ctx, pod, "data1", "net1 ", "10.93.0.5/24", "data1 ", "10.93.0.6/24")

	var entries []nadv1.NetworkStatus
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		entries, err = npwg.DecodeNetworkStatus(p.Annotations[nadv1.NetworkStatusAnnot])
		return err == nil && len(entries) >= 2, nil
	}); err != nil {
		t.Fatalf("the pod's network-status has %d entries, want the two networks'", len(entries))
	}
	t.Logf("network-status: %+v", entries)
	for _, want := range []struct{ iface, ip string }{{"net1", "10.93.0.5"}, {"data1", "10.93.0.6"}} {
		found := false
		for _, e := range entries {
			if e.Name == "default/net-a" && e.Interface == want.iface && len(e.IPs) == 1 && e.IPs[0] == want.ip && e.Mac != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("network-status lacks default/net-a on %s with %s: %+v", want.iface, want.ip, entries)
		}
	}

	missing := testbed.WorkloadPod("default", "e2e-npwg-missing", "sleep")
	missing.Annotations = map[string]string{nadv1.NetworkAttachmentAnnot: "net-a,nowhere"}
	createRefused(t, ctx, missing, "nowhere", "the pod selecting a missing network names it")
}

// TestNPWGDelegated: a NetworkAttachmentDefinition whose annotation
// k8s.v1.cni.cncf.io/resourceName names a resource takes the device of that
// resource the pod claimed in mode delegate: host-device moves it into the
// pod under the element's interface name with the element's address; the
// pod's network-status lists it; deleting the pod gives the device back to
// the host. A pod selecting such a network without a claim of the resource
// does not start, and its event says so.
func TestNPWGDelegated(t *testing.T) {
	ctx := testContext(t)
	const resource = "example.com/fast_nic"
	veth := dataplaneSetupArgs(t, ctx, 26196, []string{"--npwg", "--cni-bin-dir", bed.Config().CNIBinDir(), "--cni-plugins", "host-device,static",
		"--resource-name", resource + "=true"}, 47)[0]

	doc := fmt.Sprintf(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: fast-nic
  annotations:
    k8s.v1.cni.cncf.io/resourceName: %s
spec:
  config: '{"cniVersion": "1.0.0", "name": "fast-nic", "plugins": [{"type": "host-device", "ipam": {"type": "static"}, "capabilities": {"ips": true}}]}'
`, resource)
	createServed(t, ctx, nads, doc)

	// The shipped example of the mode, now that the CRD is served.
	dryRunCreate(t, ctx, filepath.Join(bed.Config().RepoDir, "deploy", "examples", "delegate.yaml"))

	claim := netdevClaim("e2e-delegated", &v1alpha1.InterfaceConfig{Mode: v1alpha1.ModeDelegate})
	claim.Spec.Devices.Requests[0].Exactly.DeviceClassName = "delegate.fastpath.dev"
	claim.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf(`device.attributes["k8s.cni.cncf.io"].resourceName == %q`, resource)}}}
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
	})
	pod := claimPod("e2e-npwg-delegated", "ifaces", &corev1.PodResourceClaim{Name: "fast", ResourceClaimName: &claim.Name})
	pod.Annotations = map[string]string{nadv1.NetworkAttachmentAnnot: `[{"name": "fast-nic", "interface": "fast0", "ips": ["10.95.0.7/24"]}]`}
	if _, err := bed.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "fast0 ", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var fast0 string
	for line := range strings.Lines(logs) {
		if strings.HasPrefix(line, "fast0 ") {
			fast0 = strings.TrimSpace(line)
		}
	}
	if !strings.Contains(fast0, "10.95.0.7/24") || !strings.Contains(fast0, veth.HardwareAddr.String()) {
		t.Errorf("the pod's fast0 %q: want the claimed device (MAC %s) with 10.95.0.7/24; the pod sees:\n%s", fast0, veth.HardwareAddr, logs)
	}
	if _, err := netlink.LinkByName(veth.Name); err == nil {
		t.Errorf("%s is still in the host: host-device did not take the claimed device", veth.Name)
	}
	var entries []nadv1.NetworkStatus
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		entries, err = npwg.DecodeNetworkStatus(p.Annotations[nadv1.NetworkStatusAnnot])
		return err == nil && slices.ContainsFunc(entries, func(e nadv1.NetworkStatus) bool { return e.Name == "default/fast-nic" }), nil
	}); err != nil {
		t.Errorf("the pod's network-status lacks default/fast-nic: %+v", entries)
	}
	for _, e := range entries {
		if e.Name == "default/fast-nic" && (e.Interface != "fast0" || !slices.Equal(e.IPs, []string{"10.95.0.7"})) {
			t.Errorf("network-status entry %+v: want fast0 with 10.95.0.7", e)
		}
	}

	if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := netlink.LinkByName(veth.Name)
		return err == nil && l.Attrs().HardwareAddr.String() == veth.HardwareAddr.String(), nil
	}); err != nil {
		t.Errorf("%s did not come back to the host after the pod went", veth.Name)
	}

	lonely := testbed.WorkloadPod("default", "e2e-npwg-no-device", "sleep")
	lonely.Annotations = map[string]string{nadv1.NetworkAttachmentAnnot: "fast-nic"}
	createRefused(t, ctx, lonely, "none of the pod's claims holds one in mode delegate", "the pod without a claim of the resource says so")
}

// createRefused creates pod, deleted when the test ends, whose sandbox is
// to fail, and waits for the event that says want (what says it).
func createRefused(t *testing.T, ctx context.Context, pod *corev1.Pod, want, what string) {
	t.Helper()
	if _, err := bed.Client().CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), pod.Namespace, pod.Name) })
	if msg, err := waitEvent(ctx, pod.Name, want); err != nil {
		t.Errorf("no event of %s: %v", what, err)
	} else {
		t.Logf("event: %s", msg)
	}
}

// runWithInterfaces runs pod (the workload's ifaces command), deleted when
// the test ends, until it prints the interface last, and checks its output
// has each of wants; it returns the output.
func runWithInterfaces(t *testing.T, ctx context.Context, pod *corev1.Pod, last string, wants ...string) string {
	t.Helper()
	if _, err := bed.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), pod.Namespace, pod.Name) })
	logs, err := bed.WaitPodLog(ctx, pod.Namespace, pod.Name, last+" ", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range wants {
		if !strings.Contains(logs, want) {
			t.Errorf("the pod's interfaces lack %q:\n%s", want, logs)
		}
	}
	return logs
}
