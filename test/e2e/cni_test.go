//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

const cniDriver = "cni.dra.networking.x-k8s.io"

// cniMaster is the host link the CNI devices name in their attribute
// "name": the macvlan master of the design's example.
const cniMaster = vethPrefix + "m0"

// cniClaimSpec is a claim spec with one CNI request per config.
func cniClaimSpec(configs map[string]v1alpha1.CNIConfig) resourceapi.ResourceClaimSpec {
	var spec resourceapi.ResourceClaimSpec
	for _, req := range slices.Sorted(maps.Keys(configs)) {
		spec.Devices.Requests = append(spec.Devices.Requests, resourceapi.DeviceRequest{
			Name: req, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "cni.networking.x-k8s.io"},
		})
		spec.Devices.Config = append(spec.Devices.Config, resourceapi.DeviceClaimConfiguration{
			Requests: []string{req},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: cniDriver, Parameters: opaque(configs[req]),
			}},
		})
	}
	return spec
}

// macvlanConfig is the design's example: macvlan in bridge mode on the
// device attribute "name", host-local IPAM in its default directory
// (ipamDir).
func macvlanConfig(ifName string, ipamRange map[string]any) v1alpha1.CNIConfig {
	return v1alpha1.CNIConfig{IfName: ifName, CNIVersion: "1.0.0", Plugins: []v1alpha1.CNIPlugin{{
		Type:      "macvlan",
		Config:    map[string]any{"mode": "bridge", "ipam": map[string]any{"type": "host-local", "ranges": [][]any{{ipamRange}}}},
		Arguments: []v1alpha1.CNIArgument{{FieldPath: "master", ValueFrom: &v1alpha1.CNIValueSource{AttributeRef: "name"}}},
	}}}
}

// subnet is a host-local range of a whole subnet.
func subnet(cidr string) map[string]any { return map[string]any{"subnet": cidr} }

// hostLocalDir is where host-local keeps its leases by default, on the
// node (the chart mounts cni.stateDirs, /var/lib/cni, into the daemon).
const hostLocalDir = "/var/lib/cni/networks"

// ipamDir is host-local's directory of the network of request of the pod's
// claim podClaim: fastpathd names networks <namespace>-<claim>-<request>.
// It is removed when the test ends.
func ipamDir(t *testing.T, ctx context.Context, pod, podClaim, request string) string {
	t.Helper()
	var claim string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Spec.ResourceClaims {
			if c.Name == podClaim && c.ResourceClaimName != nil {
				claim = *c.ResourceClaimName
				return true, nil
			}
		}
		for _, c := range p.Status.ResourceClaimStatuses {
			if c.Name == podClaim && c.ResourceClaimName != nil {
				claim = *c.ResourceClaimName
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s never had its claim %s", pod, podClaim)
	}
	dir := filepath.Join(hostLocalDir, cnipolicy.NetworkName("default", claim, request))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// ipamAllocations lists host-local's allocations below dir.
func ipamAllocations(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), "last_reserved_ip") && d.Name() != "lock" {
			out = append(out, strings.TrimPrefix(path, dir+"/"))
		}
		return nil
	})
	return out
}

// interfaceLine is the workload's "NAME MAC ADDRS" line for name.
// ifacesEnd is the last line of the workload's ifaces listing
// (test/images/workload): a log that has it has every interface.
const ifacesEnd = "-- end of interfaces"

func interfaceLine(logs, name string) string {
	for line := range strings.Lines(logs) {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestCNI runs fastpathd with the CNI DRA driver on the real node, the
// reference plugins in the bed's CNI bin dir, and a veth as the host link
// the devices name.
func TestCNI(t *testing.T) {
	ctx := testContext(t)
	master := hostVethNamed(t, cniMaster, vethPrefix+"m1")
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	orig := cniSetup(t, ctx, 26187, []string{"--cni-plugins", "macvlan,host-local,static,tuning",
		"--cni-interface", cniMaster, "--cni-devices", "8"}, 7)[0]
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := bed.Client().ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + cniDriver})
		return err == nil && len(list.Items) == 1 && len(list.Items[0].Spec.Devices) == 8, nil
	})
	if err != nil {
		t.Fatal("the CNI driver's 8 devices were never published")
	}

	t.Run("an address released is given again", func(t *testing.T) {
		one := map[string]any{"subnet": "10.10.2.0/24", "rangeStart": "10.10.2.5", "rangeEnd": "10.10.2.5"}
		tmpl := createTemplate(t, ctx, "e2e-cni-one", cniClaimSpec(map[string]v1alpha1.CNIConfig{"macvlan0": macvlanConfig("net1", one)}))
		for i := range 2 {
			pod := claimPod(fmt.Sprintf("e2e-cni-one-%d", i), "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimTemplateName: &tmpl.Name})
			running, err := bed.RunPod(ctx, pod)
			if err != nil {
				t.Fatal(err)
			}
			ipam := ipamDir(t, ctx, pod.Name, "cni", "macvlan0")
			if got := ipamAllocations(t, ipam); len(got) != 1 {
				t.Errorf("pod %d: host-local allocations %v in %s", i, got, ipam)
			}
			logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "net1 ", 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if line := interfaceLine(logs, "net1"); !strings.HasSuffix(line, " 10.10.2.5/24") {
				t.Errorf("pod %d: net1 %q, want the range's one address", i, line)
			}
			if err := bed.DeletePod(ctx, "default", running.Name); err != nil {
				t.Fatal(err)
			}
			waitReleased(t, ctx, ipam)
		}
	})

	t.Run("a plugin failure", func(t *testing.T) {
		bad := macvlanConfig("net1", subnet("10.10.5.0/24"))
		// A mode macvlan does not know: Prepare cannot tell, ADD fails.
		bad.Plugins[0].Config["mode"] = vethPrefix + "-no-such-mode"
		tmpl := createTemplate(t, ctx, "e2e-cni-fail", cniClaimSpec(map[string]v1alpha1.CNIConfig{"macvlan0": bad}))
		pod := claimPod("e2e-cni-fail", "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimTemplateName: &tmpl.Name})
		msg := createPodWaitEvent(t, ctx, pod, "CNI ADD")
		for _, want := range []string{`request "macvlan0"`, "device cni-", `plugin type="macvlan" failed (add)`} {
			if !strings.Contains(msg, want) {
				t.Errorf("sandbox event %q does not name %q", msg, want)
			}
		}
		st := podClaimStatusOf(t, ctx, pod, cniDriver)
		if len(st.Conditions) != 1 || st.Conditions[0].Status != metav1.ConditionFalse || st.Conditions[0].Reason != "NetworkInterfaceNotReady" ||
			!strings.Contains(st.Conditions[0].Message, `plugin type="macvlan" failed (add)`) {
			t.Errorf("conditions = %+v, want not ready with the CNI error", st.Conditions)
		}
		if got := ipamAllocations(t, ipamDir(t, ctx, pod.Name, "cni", "macvlan0")); len(got) != 0 {
			t.Errorf("host-local allocations after the failed ADD: %v", got)
		}
	})

	t.Run("a ConfigMap's value in a plugin's error", func(t *testing.T) {
		// The operator lets claims of namespace default read its
		// ConfigMaps; a value read is never shown.
		cni := lastDaemon.values["cni"].(map[string]any)
		cni["configMapNamespaces"] = []string{"default"}
		t.Cleanup(func() { delete(cni, "configMapNamespaces") })
		if err := bed.InstallChart(ctx, lastDaemon.values); err != nil {
			t.Fatal(err)
		}
		const secret = vethPrefix + "-s3cret-mode"
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "e2e-cni-secret"}, Data: map[string]string{"mode": secret}}
		if _, err := bed.Client().CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = bed.Client().CoreV1().ConfigMaps("default").Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
		})
		cfg := macvlanConfig("net1", subnet("10.10.8.0/24"))
		cfg.Plugins[0].Arguments = append(cfg.Plugins[0].Arguments, v1alpha1.CNIArgument{FieldPath: "mode",
			ValueFrom: &v1alpha1.CNIValueSource{ConfigMapKeyRef: &v1alpha1.CNIConfigMapKeyRef{Name: cm.Name, Key: "mode"}}})
		tmpl := createTemplate(t, ctx, "e2e-cni-secret", cniClaimSpec(map[string]v1alpha1.CNIConfig{"macvlan0": cfg}))
		pod := claimPod("e2e-cni-secret", "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimTemplateName: &tmpl.Name})
		msg := createPodWaitEvent(t, ctx, pod, "CNI ADD")
		if strings.Contains(msg, secret) || !strings.Contains(msg, `unknown macvlan mode: <redacted>`) {
			t.Errorf("sandbox event %q: want the ConfigMap's value redacted", msg)
		}
		st := podClaimStatusOf(t, ctx, pod, cniDriver)
		if len(st.Conditions) != 1 || st.Conditions[0].Status != metav1.ConditionFalse || strings.Contains(st.Conditions[0].Message, secret) ||
			!strings.Contains(st.Conditions[0].Message, "<redacted>") {
			t.Errorf("conditions = %+v, want not ready without the ConfigMap's value", st.Conditions)
		}
	})

	t.Run("two CNI requests and a fastpath claim in one pod", func(t *testing.T) {
		// Claims, not templates: the pod names them in its spec, so the
		// kubelet may read them as soon as the pod is bound to the node.
		cniClaim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "e2e-cni-two"},
			Spec: cniClaimSpec(map[string]v1alpha1.CNIConfig{
				"a": macvlanConfig("net1", subnet("10.10.3.0/24")),
				"b": macvlanConfig("net2", subnet("10.10.4.0/24")),
			})}
		fast := netdevClaim("e2e-cni-fast", &v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "net3", Addresses: []string{"10.10.6.2/24"}}})
		fast.Spec.Devices.Requests[0].Exactly.Selectors = nil
		for _, c := range []*resourceapi.ResourceClaim{cniClaim, fast} {
			if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, c, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), c.Name, metav1.DeleteOptions{})
			})
		}
		pod := claimPod("e2e-cni-two", "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimName: &cniClaim.Name})
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "fast", ResourceClaimName: &fast.Name})
		pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: "fast"})
		running, err := bed.RunPod(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "net3 ", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for name, prefix := range map[string]string{"net1": "10.10.3.", "net2": "10.10.4.", "net3": "10.10.6.2/24"} {
			if f := strings.Fields(interfaceLine(logs, name)); len(f) < 3 || !strings.HasPrefix(f[2], prefix) {
				t.Errorf("%s in the pod: %q, want %s...; the pod sees:\n%s", name, f, prefix, logs)
			}
		}
		dirs := []string{ipamDir(t, ctx, pod.Name, "cni", "a"), ipamDir(t, ctx, pod.Name, "cni", "b")}
		if err := bed.DeletePod(ctx, "default", running.Name); err != nil {
			t.Fatal(err)
		}
		for _, dir := range dirs {
			waitReleased(t, ctx, dir)
		}
		assertReturned(t, ctx, orig)
	})
}

// TestCNIAllowlist: a config whose plugin type is not on the node's
// allowlist is refused at Prepare with an error naming it.
func TestCNIAllowlist(t *testing.T) {
	ctx := testContext(t)
	cniSetup(t, ctx, 26188, []string{"--cni-plugins", "macvlan,host-local", "--cni-devices", "2"})
	bridge := v1alpha1.CNIConfig{IfName: "net1", Plugins: []v1alpha1.CNIPlugin{{Type: "bridge", Config: map[string]any{
		"bridge": vethPrefix + "br0", "ipam": map[string]any{"type": "static", "addresses": []any{map[string]any{"address": "10.10.7.2/24"}}}}}}}
	tmpl := createTemplate(t, ctx, "e2e-cni-deny", cniClaimSpec(map[string]v1alpha1.CNIConfig{"br": bridge}))
	pod := claimPod("e2e-cni-deny", "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimTemplateName: &tmpl.Name})
	msg := createPodWaitEvent(t, ctx, pod, "allowlist")
	for _, want := range []string{`request "br"`, `"bridge"`, `"static"`, "--cni-plugins"} {
		if !strings.Contains(msg, want) {
			t.Errorf("event %q does not name %q", msg, want)
		}
	}
	if _, err := netlink.LinkByName(vethPrefix + "br0"); err == nil {
		t.Errorf("the refused config's bridge exists")
	}
}

// cniSetup runs fastpathd with the CNI driver (the bed's reference plugins)
// and args, publishing veths vethNums, and creates the CNI DeviceClass.
func cniSetup(t *testing.T, ctx context.Context, port int, args []string, vethNums ...int) []*netlink.LinkAttrs {
	t.Helper()
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.driver=" + cniDriver})
	})
	veths := dataplaneSetupArgs(t, ctx, port, append([]string{"--cni", "--cni-plugin-dir", bed.PluginDir(cniDriver),
		"--cni-bin-dir", bed.Config().CNIBinDir()}, args...), vethNums...)
	applyDeviceClasses(t, ctx, "cni-deviceclass.yaml")
	return veths
}

// createPodWaitEvent creates the pod (deleted when the test ends) and
// waits for an event on it whose message contains want.
func createPodWaitEvent(t *testing.T, ctx context.Context, pod *corev1.Pod, want string) string {
	t.Helper()
	if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	msg, err := waitEvent(ctx, pod.Name, want)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// waitReleased waits for host-local to hold no allocation in dir.
func waitReleased(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		return len(ipamAllocations(t, dir)) == 0, nil
	})
	if err != nil {
		t.Errorf("host-local still holds %v after the pod went", ipamAllocations(t, dir))
	}
}
