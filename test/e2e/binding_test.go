//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The binding conditions fastpathd publishes (dra.ConditionReadyToBind,
// dra.ConditionBindingFailed).
const (
	readyToBind   = "fastpath.dev/ReadyToBind"
	bindingFailed = "fastpath.dev/BindingFailed"
)

// TestBindingConditions: with --binding-conditions, the veths are published
// with fastpath's binding conditions, and the bed's scheduler
// (DRADeviceBindingConditions, on by default) waits for the node:
//   - a pod whose device's link is down stays Pending, its claim allocated
//     and the device's status saying what it waits for, until the link comes
//     up; then it is bound and runs with the device, whose status keeps
//     ReadyToBind beside Ready;
//   - a pod whose first device's link stays down past --binding-timeout has
//     that binding failed, the device tainted NoSchedule, and is allocated
//     again, the other device, on which it runs; the taint goes once the
//     link is up.
func TestBindingConditions(t *testing.T) {
	ctx := testContext(t)
	// fpv93a: link down until the test brings its peer up; fpv94a: down
	// for good; fpv95a: up.
	for n, up := range map[int]bool{93: false, 94: false, 95: true} {
		a := hostVeth(t, n)
		setLink(t, a.Attrs().Name, true)
		setLink(t, fmt.Sprintf("%s%db", vethPrefix, n), up)
	}
	t.Cleanup(func() { deleteSlices(t) })
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	bpfDir := filepath.Join(t.TempDir(), "bpf")
	t.Cleanup(func() { _ = unix.Unmount(bpfDir, unix.MNT_DETACH) })
	d := startDaemon(t, ctx, 26294, "--bpf-dir", bpfDir, "--filter",
		fmt.Sprintf(`device.attributes["fastpath.dev"].kind == "netdev" && device.attributes["fastpath.dev"].ifName.startsWith(%q) && device.attributes["fastpath.dev"].ifName.endsWith("a")`, vethPrefix),
		"--binding-conditions", `device.attributes["fastpath.dev"].kind == "netdev"`, "--binding-timeout", "8s")
	names := []string{"netdev-fpv93a", "netdev-fpv94a", "netdev-fpv95a"}
	waitDevices(t, ctx, "three veths with binding conditions", func(devs map[string]resourceapi.Device) bool {
		for _, n := range names {
			if dev, ok := devs[n]; !ok || len(dev.BindingConditions) != 1 || dev.BindingConditions[0] != readyToBind ||
				len(dev.BindingFailureConditions) != 1 || dev.BindingFailureConditions[0] != bindingFailed {
				return false
			}
		}
		return true
	})

	t.Run("pending until the link is up", func(t *testing.T) {
		claim, pod := bindingClaimPod(t, ctx, "e2e-bind-wait", `device.attributes["fastpath.dev"].ifName == "fpv93a"`)
		got := waitDeviceCondition(t, ctx, claim.Name, readyToBind, func(c *metav1.Condition) bool { return c != nil && c.Reason == "Waiting" })
		if !strings.Contains(got.Message, "the link of netdev-fpv93a (fpv93a) is") || got.Status != metav1.ConditionFalse {
			t.Errorf("while the link is down: %s %s %s: %s", readyToBind, got.Status, got.Reason, got.Message)
		}
		if _, err := waitEvent(ctx, pod.Name, "waiting for binding conditions for device on node "+bed.NodeName()); err != nil {
			t.Error(err)
		}
		if p, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Fatalf("pod %s bound to %q while its device's link is down (%v)", pod.Name, p.Spec.NodeName, err)
		}
		setLink(t, "fpv93b", true)
		waitRunningWith(t, ctx, pod, "nic")
		c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := deviceStatus(c, "netdev-fpv93a")
		if st == nil || !apimeta.IsStatusConditionTrue(st.Conditions, readyToBind) || !apimeta.IsStatusConditionTrue(st.Conditions, "Ready") {
			t.Errorf("the running pod's device status %+v, want %s and Ready both True", st, readyToBind)
		}
		deletePodAndClaim(t, ctx, pod, claim)
	})

	t.Run("failed, then allocated again", func(t *testing.T) {
		claim, pod := bindingClaimPod(t, ctx, "e2e-bind-fail", `device.attributes["fastpath.dev"].ifName in ["fpv94a", "fpv95a"]`)
		if first := resultOf(t, waitAllocated(t, ctx, claim.Name), "nic").Device; first != "netdev-fpv94a" {
			t.Fatalf("first allocated %s; the test needs the scheduler to take netdev-fpv94a, first in the slice, first", first)
		}
		failed := waitDeviceCondition(t, ctx, claim.Name, bindingFailed, func(c *metav1.Condition) bool { return c != nil && c.Status == metav1.ConditionTrue })
		if failed.Reason != "LinkDown" || !strings.Contains(failed.Message, "binding timeout 8s") {
			t.Errorf("%s %s: %s, want LinkDown past the binding timeout", bindingFailed, failed.Reason, failed.Message)
		}
		waitRunningWith(t, ctx, pod, "nic")
		if again := resultOf(t, waitAllocated(t, ctx, claim.Name), "nic").Device; again != "netdev-fpv95a" {
			t.Errorf("the pod runs with %s, want netdev-fpv95a", again)
		}
		if _, err := waitEvent(ctx, pod.Name, "device binding failed"); err != nil {
			t.Error(err)
		}
		taint := func(devs map[string]resourceapi.Device) string {
			for _, tt := range devs["netdev-fpv94a"].Taints {
				return fmt.Sprintf("%s=%s:%s", tt.Key, tt.Value, tt.Effect)
			}
			return ""
		}
		devs := waitDevices(t, ctx, "netdev-fpv94a", func(devs map[string]resourceapi.Device) bool { _, ok := devs["netdev-fpv94a"]; return ok })
		if got := taint(devs); got != "fastpath.dev/unhealthy=LinkDown:NoSchedule" {
			t.Errorf("netdev-fpv94a, whose binding failed, is tainted %q", got)
		}
		setLink(t, "fpv94b", true)
		waitDevices(t, ctx, "netdev-fpv94a untainted once its link is up", func(devs map[string]resourceapi.Device) bool {
			_, ok := devs["netdev-fpv94a"]
			return ok && taint(devs) == ""
		})
		deletePodAndClaim(t, ctx, pod, claim)
	})
	waitNoClaims(t, ctx, d)
}

// setLink sets the host link name up or down.
func setLink(t *testing.T, name string, up bool) {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err == nil {
		if up {
			err = netlink.LinkSetUp(l)
		} else {
			err = netlink.LinkSetDown(l)
		}
	}
	if err != nil {
		t.Fatalf("set %s up=%v: %v", name, up, err)
	}
}

// bindingClaimPod creates a claim of one netdev the selector admits, and a
// pod of it that lists its interfaces.
func bindingClaimPod(t *testing.T, ctx context.Context, name, selector string) (*resourceapi.ResourceClaim, *corev1.Pod) {
	t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "nic",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "netdev.fastpath.dev",
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}}}}}}}
	created, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create claim %s: %v", name, err)
	}
	t.Cleanup(func() { deleteClaim(t, name) })
	pod := claimPod(name, "ifaces", &corev1.PodResourceClaim{Name: "nic", ResourceClaimName: &created.Name})
	if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", name) })
	return created, pod
}

// waitDeviceCondition waits until a device of the claim has a condition
// of type cond that ok accepts, and returns it.
func waitDeviceCondition(t *testing.T, ctx context.Context, claim, cond string, ok func(*metav1.Condition) bool) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	var seen []resourceapi.AllocatedDeviceStatus
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		seen = c.Status.Devices
		for _, st := range c.Status.Devices {
			if found := apimeta.FindStatusCondition(st.Conditions, cond); ok(found) {
				got = *found
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("claim %s: no device's %s condition as awaited; its devices' status: %+v (pod: %s)", claim, cond, seen, podScheduled(ctx, claim))
	}
	return got
}

// deviceStatus is the claim's status entry of device, nil for none.
func deviceStatus(c *resourceapi.ResourceClaim, device string) *resourceapi.AllocatedDeviceStatus {
	for i := range c.Status.Devices {
		if c.Status.Devices[i].Device == device {
			return &c.Status.Devices[i]
		}
	}
	return nil
}
