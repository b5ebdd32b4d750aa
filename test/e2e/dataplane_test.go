//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dataplane/nldump"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// vethPrefix starts the veths that stand in for VF netdevs here.
const vethPrefix = "fpv"

// hostVeth creates a veth pair whose "a" end stands in for a VF netdev.
func hostVeth(t *testing.T, n int) netlink.Link {
	t.Helper()
	return hostVethNamed(t, fmt.Sprintf("%s%da", vethPrefix, n), fmt.Sprintf("%s%db", vethPrefix, n))
}

// hostVethNamed creates the veth pair name/peer and returns name's end.
func hostVethNamed(t *testing.T, name, peer string) netlink.Link {
	t.Helper()
	return netnstest.Veth(t, name, peer)
}

// scrapeMetrics reads the daemon's /metrics (it is in the node's network
// namespace).
func scrapeMetrics(t *testing.T, ctx context.Context, port int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape the daemon's metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape the daemon's metrics: %s %v", resp.Status, err)
	}
	return string(body)
}

// dataplaneSetup publishes n veths (their "a" ends) through a fastpathd
// and the DeviceClasses of deploy/, and returns the veths as they were.
func dataplaneSetup(t *testing.T, ctx context.Context, first, port int, more ...int) []*netlink.LinkAttrs {
	t.Helper()
	return dataplaneSetupArgs(t, ctx, port, nil, append([]int{first}, more...)...)
}

// dataplaneSetupArgs is dataplaneSetup with more fastpathd arguments.
func dataplaneSetupArgs(t *testing.T, ctx context.Context, port int, args []string, vethNums ...int) []*netlink.LinkAttrs {
	t.Helper()
	return dataplaneSetupWith(t, ctx, port, args, nil, vethNums...)
}

// dataplaneSetupWith is dataplaneSetupArgs with before, if not nil, run
// on the daemon before it starts (its state directory made).
func dataplaneSetupWith(t *testing.T, ctx context.Context, port int, args []string, before func(*daemon), vethNums ...int) []*netlink.LinkAttrs {
	t.Helper()
	var out []*netlink.LinkAttrs
	for _, n := range vethNums {
		out = append(out, hostVeth(t, n).Attrs())
	}
	t.Cleanup(func() { deleteSlices(t) })
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	bpfDir := filepath.Join(t.TempDir(), "bpf")
	t.Cleanup(func() { _ = unix.Unmount(bpfDir, unix.MNT_DETACH) })
	d := newDaemon(t, port, append([]string{"--bpf-dir", bpfDir, "--filter",
		fmt.Sprintf(`device.attributes["fastpath.dev"].kind == "netdev" && device.attributes["fastpath.dev"].ifName.startsWith(%q) && device.attributes["fastpath.dev"].ifName.endsWith("a")`, vethPrefix)},
		args...)...)
	if before != nil {
		before(d)
	}
	d.start(t, ctx)
	t.Cleanup(func() { d.stop(t) })
	lastDaemon = d
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := nodeSlices(ctx)
		return err == nil && countDevices(s) == len(out), nil
	})
	if err != nil {
		t.Fatalf("the %d veths were never published", len(out))
	}
	return out
}

// lastDaemon is the daemon dataplaneSetup started.
var lastDaemon *daemon

// TestDataplaneNetdev: a pod with a netdev claim and a full config gets the
// device as net1, configured; the claim is Ready with networkData; deleting
// the pod returns the device to the host as it was.
func TestDataplaneNetdev(t *testing.T) {
	ctx := testContext(t)
	orig := dataplaneSetup(t, ctx, 1, 26181)[0]
	// Published: the veth, while it is on the host (moved into the pod, a
	// stand-in leaves the node's inventory; a VF would not).
	var m string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		m = scrapeMetrics(t, ctx, 26181)
		return strings.Contains(m, `fastpath_published_devices{kind="netdev"} 1`), nil
	}); err != nil {
		t.Errorf("the daemon's metrics lack fastpath_published_devices{kind=\"netdev\"} 1:\n%s", m)
	}

	claim := netdevClaim("e2e-net", &v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{
		Name: "net1", MTU: 9000, MAC: "02:00:00:fa:57:01", Addresses: []string{"10.77.1.2/24", "fd00:77::2/64"},
		Routes: []v1alpha1.Route{{Destination: "10.78.0.0/16", Gateway: "10.77.1.1"}},
	}})
	claim.Spec.Devices.Requests[0].Exactly.Selectors = nil
	if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
	})
	pod := claimPod("e2e-net", "ifaces", &corev1.PodResourceClaim{Name: "fast", ResourceClaimName: &claim.Name})
	if _, err := bed.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "net1 ", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var net1 string
	for line := range strings.Lines(logs) {
		if strings.HasPrefix(line, "net1 ") {
			net1 = strings.TrimSpace(line)
		}
	}
	for _, want := range []string{"02:00:00:fa:57:01", "10.77.1.2/24", "fd00:77::2/64"} {
		if !strings.Contains(net1, want) {
			t.Errorf("the pod's net1 %q lacks %s; it sees:\n%s", net1, want, logs)
		}
	}
	if _, err := netlink.LinkByName(orig.Name); err == nil {
		t.Errorf("%s is still in the host namespace while the pod runs", orig.Name)
	}
	// The daemon's metrics count the claim's Prepare, the hook and the
	// attach, and what is attached now.
	metrics := scrapeMetrics(t, ctx, 26181)
	for _, want := range []string{
		`fastpath_prepare_total{driver="fastpath.dev",result="success"} 1`,
		`fastpath_nri_hook_total{hook="run_pod_sandbox",result="success"}`,
		`fastpath_attach_total{result="success"} 1`,
		"fastpath_attach_duration_seconds_count 1",
		`fastpath_prepared_claims{driver="fastpath.dev"} 1`,
		"fastpath_attached_devices 1",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("the daemon's metrics lack %s", want)
		}
	}

	// The driver restarts while the pod runs; deleting the pod later still
	// returns the device.
	lastDaemon.restart(t, ctx)

	var status *resourceapi.AllocatedDeviceStatus
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil || len(c.Status.Devices) != 1 {
			return false, nil
		}
		status = &c.Status.Devices[0]
		return len(status.Conditions) > 0, nil
	})
	if err != nil {
		t.Fatal("the claim never got a device status")
	}
	if c := status.Conditions[0]; c.Type != "Ready" || c.Status != metav1.ConditionTrue || c.Reason != "NetworkInterfaceReady" {
		t.Errorf("condition = %+v", c)
	}
	nd := status.NetworkData
	if nd == nil || nd.InterfaceName != "net1" || nd.HardwareAddress != "02:00:00:fa:57:01" || strings.Join(nd.IPs, ",") != "10.77.1.2/24,fd00:77::2/64" {
		t.Errorf("networkData = %+v", nd)
	}
	if status.Data == nil || !strings.Contains(string(status.Data.Raw), `"interfaces"`) || !strings.Contains(string(status.Data.Raw), `"ips"`) {
		t.Errorf("data = %v", status.Data)
	}

	if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
		t.Fatal(err)
	}
	assertReturned(t, ctx, orig)

	// Idle again, the daemon collects garbage at its idle target: one
	// that allocated fast all the time would stay at Go's 100 %.
	var gogc float64
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		gogc = gaugeValue(scrapeMetrics(t, ctx, 26181), "go_gc_gogc_percent")
		return gogc == 25, nil
	}); err != nil {
		t.Errorf("the idle daemon's go_gc_gogc_percent is %v, want 25", gogc)
	}
}

// assertReturned waits for the veth to be back in the host as it was.
func assertReturned(t *testing.T, ctx context.Context, orig *netlink.LinkAttrs) {
	t.Helper()
	var back netlink.Link
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var err error
		back, err = netlink.LinkByName(orig.Name)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s never came back to the host", orig.Name)
	}
	if back.Attrs().MTU != orig.MTU || back.Attrs().HardwareAddr.String() != orig.HardwareAddr.String() || back.Attrs().Alias != "" {
		t.Errorf("returned %s: MTU %d MAC %s alias %q, want %d %s \"\"", orig.Name, back.Attrs().MTU, back.Attrs().HardwareAddr, back.Attrs().Alias, orig.MTU, orig.HardwareAddr)
	}
	addrs, err := nldump.Read(func() ([]netlink.Addr, error) { return netlink.AddrList(back, netlink.FAMILY_ALL) })
	if err != nil {
		t.Fatalf("addresses of the returned %s: %v", orig.Name, err)
	}
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			t.Errorf("returned %s still has %s", orig.Name, a.IPNet)
		}
	}
}

// TestDataplaneAttachFailure: a route the pod's interface cannot reach fails
// the attach: the sandbox fails with an error naming claim and device, the
// claim says NotReady with the error, and the device is back in the host.
func TestDataplaneAttachFailure(t *testing.T) {
	ctx := testContext(t)
	orig := dataplaneSetup(t, ctx, 2, 26182)[0]
	claim := netdevClaim("e2e-fail", &v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{
		Name: "net1", Addresses: []string{"10.79.1.2/24"}, Routes: []v1alpha1.Route{{Destination: "10.80.0.0/16", Gateway: "192.0.2.1"}},
	}})
	claim.Spec.Devices.Requests[0].Exactly.Selectors = nil
	if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
	})
	pod := claimPod("e2e-fail", "sleep", &corev1.PodResourceClaim{Name: "fast", ResourceClaimName: &claim.Name})
	if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	msg, err := waitEvent(ctx, pod.Name, "10.80.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"claim default/e2e-fail", "device netdev-" + orig.Name, "net1"} {
		if !strings.Contains(msg, want) {
			t.Errorf("event %q does not name %q", msg, want)
		}
	}
	var cond metav1.Condition
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil || len(c.Status.Devices) != 1 || len(c.Status.Devices[0].Conditions) != 1 {
			return false, nil
		}
		cond = c.Status.Devices[0].Conditions[0]
		return true, nil
	})
	if err != nil {
		t.Fatal("the claim never got a device condition")
	}
	if cond.Status != metav1.ConditionFalse || cond.Reason != "NetworkInterfaceNotReady" || !strings.Contains(cond.Message, "10.80.0.0/16") {
		t.Errorf("condition = %+v", cond)
	}
	if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
		t.Fatal(err)
	}
	assertReturned(t, ctx, orig)
}

// TestDataplaneTwoClaims: a pod with two claims gets both devices; a pod
// whose two claims ask for the same interface name fails with an event
// naming the field, and once it is deleted nothing of it is left.
func TestDataplaneTwoClaims(t *testing.T) {
	ctx := testContext(t)
	origs := dataplaneSetup(t, ctx, 4, 26183, 5)
	d := lastDaemon
	mkClaim := func(name, ifName string) *resourceapi.ResourceClaim {
		c := netdevClaim(name, &v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: ifName}})
		c.Spec.Devices.Requests[0].Exactly.Selectors = nil
		if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		return c
	}
	twoClaimPod := func(name string, a, b *resourceapi.ResourceClaim) *corev1.Pod {
		pod := claimPod(name, "ifaces", &corev1.PodResourceClaim{Name: "a", ResourceClaimName: &a.Name})
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "b", ResourceClaimName: &b.Name})
		pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: "b"})
		return pod
	}

	pod := twoClaimPod("e2e-two", mkClaim("e2e-two-a", "net1"), mkClaim("e2e-two-b", "net2"))
	if _, err := bed.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "net2 ", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, "net1 ") {
		t.Errorf("the pod sees net2 but not net1:\n%s", logs)
	}
	if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
		t.Fatal(err)
	}
	for _, o := range origs {
		assertReturned(t, ctx, o)
	}

	clash := twoClaimPod("e2e-clash", mkClaim("e2e-clash-a", "net1"), mkClaim("e2e-clash-b", "net1"))
	if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, clash, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", clash.Name) })
	msg, err := waitEvent(ctx, clash.Name, "interface name net1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "already given to the pod by claim default/e2e-clash-") {
		t.Errorf("event %q does not explain the name clash", msg)
	}
	if err := bed.DeletePod(ctx, "default", clash.Name); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		specs, _ := filepath.Glob(filepath.Join(bed.CDIDir(), "fastpath.dev-*"))
		return len(specs) == 0 && checkpointClaims(t, d) == 0, nil
	})
	if err != nil {
		t.Errorf("after the clashing pod went, CDI specs or checkpoint entries remain")
	}
	for _, o := range origs {
		assertReturned(t, ctx, o)
	}
}

// scrapeMetricsCtx is the daemon's /metrics, or "" when it does not
// answer.
func scrapeMetricsCtx(ctx context.Context, port int) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(body)
}

// gaugeValue is the value of a metric (name, with its labels if it has
// any, as the exposition writes them) in a Prometheus text
// exposition; 0 when it is not there.
func gaugeValue(text, name string) float64 {
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
