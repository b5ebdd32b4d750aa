//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fastpath-dra/fastpath/devices/memif"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// healthArgs make the daemon look often and report soon, so that the tests
// see a problem within a few seconds.
var healthArgs = []string{"--rediscover-interval", "250ms", "--health-interval", "250ms", "--health-grace", "500ms"}

// deviceTaint is the fastpath taint of a device in the node's slices, or
// nil: the device's value and whether it is published at all.
func deviceTaint(ctx context.Context, device string) (*resourceapi.DeviceTaint, bool, error) {
	slices, err := nodeSlices(ctx)
	if err != nil {
		return nil, false, err
	}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if d.Name != device {
				continue
			}
			for _, taint := range d.Taints {
				if taint.Key == dra.TaintKey {
					return &taint, true, nil
				}
			}
			return nil, true, nil
		}
	}
	return nil, false, nil
}

// waitTaint waits for each device to carry the fastpath taint with reason
// (or, with reason "", to be published without it).
func waitTaint(t *testing.T, ctx context.Context, reason string, devices ...string) {
	t.Helper()
	last := map[string]string{}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, dev := range devices {
			taint, published, err := deviceTaint(ctx, dev)
			switch {
			case err != nil:
				return false, nil
			case !published:
				last[dev] = "not published"
				return false, nil
			case taint == nil:
				last[dev] = "no taint"
				if reason != "" {
					return false, nil
				}
			default:
				last[dev] = fmt.Sprintf("%s=%s:%s", taint.Key, taint.Value, taint.Effect)
				if taint.Value != reason || taint.Effect != resourceapi.DeviceTaintEffectNoSchedule {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("want devices %v tainted %q; they are %v", devices, reason, last)
	}
}

// waitPodHealth waits for the pod's container to see its claimed device's
// health as want (Healthy or Unhealthy), as the kubelet writes it from the
// driver's health stream, and returns the device's resource ID and the
// message.
func waitPodHealth(t *testing.T, ctx context.Context, pod string, want corev1.ResourceHealthStatus) (string, string) {
	t.Helper()
	var seen []string
	var id, msg string
	_, err := bed.WaitPod(ctx, "default", pod, 60*time.Second, func(p *corev1.Pod) (bool, error) {
		seen = seen[:0]
		for _, cs := range p.Status.ContainerStatuses {
			for _, rs := range cs.AllocatedResourcesStatus {
				for _, r := range rs.Resources {
					seen = append(seen, fmt.Sprintf("%s %s %s %q", rs.Name, r.ResourceID, r.Health, ptr.Deref(r.Message, "")))
					if r.Health == want && strings.HasPrefix(string(r.ResourceID), driverName+"/") {
						id, msg = string(r.ResourceID), ptr.Deref(r.Message, "")
						return true, nil
					}
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s never saw its device %s; it sees %q", pod, want, seen)
	}
	return id, msg
}

// waitPodScheduleFailure waits for the scheduler to say it cannot place
// the pod, and returns what it said.
func waitPodScheduleFailure(t *testing.T, ctx context.Context, pod string) string {
	t.Helper()
	var msg string
	_, err := bed.WaitPod(ctx, "default", pod, 60*time.Second, func(p *corev1.Pod) (bool, error) {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				msg = c.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the scheduler never refused pod %s: %v", pod, err)
	}
	return msg
}

// TestHealthPFLinkDown: on a fixture E810 whose PF loses its link, every
// VF of the PF is tainted PFLinkDown in the slice within the grace period;
// the pod holding one sees it Unhealthy with an event saying why; a new
// pod wanting such a VF is not scheduled. The link comes back: the taints
// go, the first pod sees its device Healthy, and the waiting pod runs; the
// VFs stay tainted degraded, effect None. A DeviceTaintRule with NoExecute
// on the waiting pod's VF evicts it.
func TestHealthPFLinkDown(t *testing.T) {
	ctx := testContext(t)
	root, devRoot, _ := fixtureE810(t, ctx)
	startDaemon(t, ctx, 26230, append([]string{"--sysfs-root", root, "--dev-root", devRoot}, healthArgs...)...)
	vfs := []string{"pci-0000-3b-01-0", "pci-0000-3b-01-1", "pci-0000-3b-01-2", "pci-0000-3b-01-3"}
	waitTaint(t, ctx, "", vfs...)

	tmpl := claimTemplate(t, ctx, "e2e-health-vf", "dpdk", "vfio.fastpath.dev", `device.attributes["fastpath.dev"].driver == "iavf"`, nil)
	holder := claimPod("e2e-health-holder", "sleep", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &tmpl.Name})
	if _, err := bed.RunPod(ctx, holder); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", holder.Name) })
	held := podClaimStatus(t, ctx, holder).Device
	waitPodHealth(t, ctx, holder.Name, corev1.ResourceHealthStatusHealthy)

	operstate := filepath.Join(root, "sys", "class", "net", "ens1f0", "operstate")
	if err := os.WriteFile(operstate, []byte("down\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	waitTaint(t, ctx, "PFLinkDown", vfs...)
	// Discovery reads the fixture every 250 ms and the grace is 500 ms here;
	// on a live host a link event starts discovery at once.
	t.Logf("the PF's VFs were tainted %s after its link went down", time.Since(down).Round(10*time.Millisecond))
	if m := scrapeMetrics(t, ctx, 26230); !strings.Contains(m, `fastpath_unhealthy_devices{reason="PFLinkDown"} 4`) {
		t.Errorf("the metrics do not count the 4 VFs unhealthy:\n%s", grepLines(m, "fastpath_unhealthy_devices"))
	}
	// The kubelet names the device by its CDI name, <claim UID>-<request>.
	if id, msg := waitPodHealth(t, ctx, holder.Name, corev1.ResourceHealthStatusUnhealthy); !strings.HasSuffix(id, "-dpdk") || !strings.HasPrefix(msg, "PFLinkDown: ") {
		t.Errorf("pod %s sees %s unhealthy (%q)", holder.Name, id, msg)
	}
	if _, err := waitEvent(ctx, holder.Name, "device "+held+" is unhealthy (PFLinkDown): the link of PF ens1f0 (0000:3b:00.0) is down"); err != nil {
		t.Error(err)
	}

	// The other iavf VF is free, but tainted: the scheduler leaves the pod
	// that wants it pending.
	waiting := claimPod("e2e-health-waiting", "sleep", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &tmpl.Name})
	if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, waiting, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", waiting.Name) })
	if msg := waitPodScheduleFailure(t, ctx, waiting.Name); !strings.Contains(msg, "cannot allocate all claims") {
		t.Logf("the scheduler says: %s", msg)
	}
	if c := podClaim(t, ctx, waiting.Name); c != nil && c.Status.Allocation != nil {
		t.Errorf("claim %s of the waiting pod was allocated a tainted VF: %+v", c.Name, c.Status.Allocation.Devices.Results)
	}

	if err := os.WriteFile(operstate, []byte("up\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitTaint(t, ctx, "", vfs...)
	waitPodHealth(t, ctx, holder.Name, corev1.ResourceHealthStatusHealthy)
	if _, err := waitEvent(ctx, holder.Name, "device "+held+" is healthy again (it was PFLinkDown)"); err != nil {
		t.Error(err)
	}
	running := func(p *corev1.Pod) (bool, error) { return p.Status.Phase == corev1.PodRunning, nil }
	if _, err := bed.WaitPod(ctx, "default", waiting.Name, 60*time.Second, running); err != nil {
		t.Fatalf("the pod waiting for a VF did not run once the link was back: %v", err)
	}
	// The VFs are degraded, effect None, for --health-degraded-hold (5m):
	// allocated all the same (the waiting pod's VF is one of them).
	for _, vf := range vfs {
		if taint := degradedTaint(t, ctx, vf); taint == nil || taint.Value != "PFLinkDown" || taint.Effect != resourceapi.DeviceTaintEffectNone {
			t.Errorf("%s has degraded taint %+v once its PF's link came back, want %s=PFLinkDown:None", vf, taint, dra.DegradedTaintKey)
		}
	}
	if m := scrapeMetrics(t, ctx, 26230); !strings.Contains(m, `fastpath_degraded_devices{reason="PFLinkDown"} 4`) {
		t.Errorf("the metrics do not count the 4 VFs degraded:\n%s", grepLines(m, "fastpath_degraded_devices"))
	}
	if _, err := waitEvent(ctx, holder.Name, "device "+held+" was PFLinkDown for "); err != nil {
		t.Error(err)
	}

	// The operator drains the waiting pod's VF with a DeviceTaintRule
	// (install.md's example): NoExecute evicts the pod, and the VF is
	// released as for any pod that goes.
	drained := podClaimStatus(t, ctx, waiting).Device
	rule := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "e2e-drain"}, Spec: resourceapi.DeviceTaintRuleSpec{
		DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: new(driverName), Pool: new(bed.NodeName()), Device: new(drained)},
		Taint:          resourceapi.DeviceTaint{Key: "example.com/drain", Value: "replace-cable", Effect: resourceapi.DeviceTaintEffectNoExecute}}}
	if _, err := bed.Client().ResourceV1().DeviceTaintRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().DeviceTaintRules().Delete(context.Background(), rule.Name, metav1.DeleteOptions{})
	})
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := bed.Client().CoreV1().Pods("default").Get(ctx, waiting.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && (p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed)), nil
	})
	if err != nil {
		t.Fatalf("pod %s, holding %s, was not evicted by DeviceTaintRule %s", waiting.Name, drained, rule.Name)
	}
	t.Logf("DeviceTaintRule %s evicted pod %s from %s", rule.Name, waiting.Name, drained)
}

// degradedTaint is the degraded taint of a device in the node's slices, or
// nil.
func degradedTaint(t *testing.T, ctx context.Context, device string) *resourceapi.DeviceTaint {
	t.Helper()
	slices, err := nodeSlices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			for _, taint := range d.Taints {
				if d.Name == device && taint.Key == dra.DegradedTaintKey {
					return &taint
				}
			}
		}
	}
	return nil
}

// TestHealthMemifNotAnswering: a vswitch endpoint that accepts connections
// but never says HELLO is tainted MemifNotAnswering, and the pod holding it
// sees it Unhealthy with an event saying why; served again, it is neither.
func TestHealthMemifNotAnswering(t *testing.T) {
	ctx := testContext(t)
	root, memifDir := sysfsfixture.TempDir(t), sysfsfixture.TempDir(t)
	if err := sysfsfixture.Plain().Write(root); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(memifDir, "vswitch.sock")
	l, err := memif.ListenAndServe(socket, memif.Hello{Name: "vswitch"}, func(memif.Init) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	t.Cleanup(func() { deleteSlices(t) })
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	startDaemon(t, ctx, 26231, append([]string{"--sysfs-root", root, "--memif-dir", memifDir}, healthArgs...)...)
	dev := "memif-vswitch"
	waitTaint(t, ctx, "", dev)
	tmpl := claimTemplate(t, ctx, "e2e-health-memif", "vs", "memif.fastpath.dev", `device.attributes["fastpath.dev"].memifRole == "slave"`,
		&v1alpha1.InterfaceConfig{Memif: &v1alpha1.MemifSpec{UID: new(int64(0)), GID: new(int64(0))}})
	holder := claimPod("e2e-health-memif", "sleep", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &tmpl.Name})
	if _, err := bed.RunPod(ctx, holder); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", holder.Name) })
	waitPodHealth(t, ctx, holder.Name, corev1.ResourceHealthStatusHealthy)

	// The vswitch hangs: its socket takes connections and says nothing.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	mute, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: socket, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	waitTaint(t, ctx, "MemifNotAnswering", dev)
	if _, msg := waitPodHealth(t, ctx, holder.Name, corev1.ResourceHealthStatusUnhealthy); !strings.HasPrefix(msg, "MemifNotAnswering: ") {
		t.Errorf("pod %s sees its memif unhealthy with %q", holder.Name, msg)
	}
	if _, err := waitEvent(ctx, holder.Name, "device "+dev+" is unhealthy (MemifNotAnswering)"); err != nil {
		t.Error(err)
	}

	if err := mute.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = memif.ListenAndServe(socket, memif.Hello{Name: "vswitch"}, func(memif.Init) {}); err != nil {
		t.Fatal(err)
	}
	waitTaint(t, ctx, "", dev)
	waitPodHealth(t, ctx, holder.Name, corev1.ResourceHealthStatusHealthy)
}

// TestHealthNetdevGone: the netdev a pod holds vanishes from the node (its
// veth peer is deleted on the host, and the pair goes); the pod sees the
// device Unhealthy with the reason, the device leaves the slice, and
// deleting the pod still releases the claim.
func TestHealthNetdevGone(t *testing.T) {
	ctx := testContext(t)
	dataplaneSetupArgs(t, ctx, 26232, healthArgs, 30)

	claim := netdevClaim("e2e-health-net", &v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "net1"}})
	claim.Spec.Devices.Requests[0].Exactly.Selectors = nil
	if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
	})
	pod := claimPod("e2e-health-net", "sleep", &corev1.PodResourceClaim{Name: "fast", ResourceClaimName: &claim.Name})
	if _, err := bed.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	waitPodHealth(t, ctx, pod.Name, corev1.ResourceHealthStatusHealthy)

	peer, err := netlink.LinkByName(fmt.Sprintf("%s%db", vethPrefix, 30))
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkDel(peer); err != nil {
		t.Fatal(err)
	}
	waitPodHealth(t, ctx, pod.Name, corev1.ResourceHealthStatusUnhealthy)
	if _, err := waitEvent(ctx, pod.Name, "(NetdevMissing): interface net1"); err != nil {
		t.Error(err)
	}
	// Gone from the node: no longer published, a taint with it.
	dev := fmt.Sprintf("netdev-%s%da", vethPrefix, 30)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, published, err := deviceTaint(ctx, dev)
		return err == nil && !published, nil
	})
	if err != nil {
		t.Errorf("%s is still published after it vanished", dev)
	}

	if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return checkpointClaims(t, lastDaemon) == 0, nil
	})
	if err != nil {
		t.Errorf("the claim of a pod whose device vanished was never released: the checkpoint holds %d claims", checkpointClaims(t, lastDaemon))
	}
}

// podClaim is the ResourceClaim made for the pod's claim from its
// template, or nil before the controller made it.
func podClaim(t *testing.T, ctx context.Context, pod string) *resourceapi.ResourceClaim {
	t.Helper()
	p, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, *st.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return nil
}

// grepLines are the lines of text that hold what.
func grepLines(text, what string) string {
	var out []string
	for l := range strings.Lines(text) {
		if strings.Contains(l, what) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
