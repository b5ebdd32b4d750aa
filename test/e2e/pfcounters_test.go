//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// TestPFCounters: fastpathd on a sysfs fixture of a PF with 4 VFs, with
// the chart's pfCounters (on for this Kubernetes), publishes the PF and its
// VFs as partitionable devices. The real scheduler allocates a claim of a
// VF; a pod whose claim asks for the PF then stays Pending, the scheduler
// saying it cannot allocate the claim, until the VF's pod is gone; then the
// PF is allocated. A class of the test's own selects the PF, which the
// chart's classes leave out.
func TestPFCounters(t *testing.T) {
	ctx := testContext(t)
	root, devRoot, _ := fixtureTree(t, sysfsfixture.Generated(4))
	startDaemon(t, ctx, 26291, "--sysfs-root", root, "--dev-root", devRoot)
	const pfName = "pci-0000-3b-00-0"
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := nodeSlices(ctx)
		if err != nil {
			return false, nil
		}
		for _, sl := range s {
			for _, cs := range sl.Spec.SharedCounters {
				if q := cs.Counters[dra.CounterVFs].Value; cs.Name == dra.PFCounterSet(pfName) && q.Value() == 4 {
					return countDevices(s) == 5, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the PF's counter set of 4 vfs and its 5 devices were never published")
	}

	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-counters.fastpath.dev"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "fastpath.dev"`}}}}}
	if _, err := bed.Client().ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	claimOf := func(name, pci string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "nic",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name, Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf(`device.attributes["fastpath.dev"].pciAddress == %q`, pci)}}}}}}}}}
		if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		return c
	}
	podOf := func(c *resourceapi.ResourceClaim) *corev1.Pod {
		// Its device is the fixture's: Prepare fails on the node, and the
		// claim stays allocated while the pod is there.
		p := claimPod(c.Name, "sleep", &corev1.PodResourceClaim{Name: "fast", ResourceClaimName: &c.Name})
		if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", p.Name) })
		return p
	}
	allocated := func(name string) (string, bool) {
		c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) == 0 {
			return "", false
		}
		return c.Status.Allocation.Devices.Results[0].Device, true
	}
	waitAllocated := func(name, want string) {
		t.Helper()
		var got string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			var ok bool
			got, ok = allocated(name)
			return ok, nil
		})
		if err != nil || got != want {
			t.Fatalf("claim %s: allocated %q, want %s", name, got, want)
		}
	}

	vfPod := podOf(claimOf("e2e-counters-vf", "0000:3b:01.0"))
	waitAllocated("e2e-counters-vf", "pci-0000-3b-01-0")
	pfPod := podOf(claimOf("e2e-counters-pf", "0000:3b:00.0"))
	var why string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := bed.Client().CoreV1().Pods("default").Get(ctx, pfPod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				why = c.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s, whose claim asks for the PF of an allocated VF, was never said unschedulable", pfPod.Name)
	}
	if !strings.Contains(why, "cannot allocate all claims") {
		t.Errorf("the scheduler says %q, want that it cannot allocate the claims", why)
	}
	if dev, ok := allocated("e2e-counters-pf"); ok {
		t.Fatalf("the PF's claim was allocated %s while its VF is", dev)
	}
	t.Logf("while the VF is allocated, the scheduler says of the PF's pod: %s", why)

	// The VF's pod goes, its claim is deallocated, and the PF's pod is
	// scheduled with the PF.
	if err := bed.DeletePod(ctx, "default", vfPod.Name); err != nil {
		t.Fatal(err)
	}
	waitAllocated("e2e-counters-pf", pfName)
}
