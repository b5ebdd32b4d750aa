//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// numaPeerDriver is the second driver of TestNUMAMatchAttribute: the test
// publishes its slice; no kubelet plugin serves it.
const numaPeerDriver = "numa-peer.e2e.fastpath.dev"

// TestNUMAMatchAttribute: fastpathd publishes a fixture X710, whose
// functions sit on NUMA node 1, with the standard
// resource.kubernetes.io/numaNode beside the deprecated
// fastpath.dev/numaNode. A second driver offers a device on NUMA node 0,
// listed first, and one on node 1. One claim asks for a netdev of fastpath
// and a device of the second driver with a matchAttribute constraint on
// resource.kubernetes.io/numaNode: the scheduler allocates the second
// driver's device on the fastpath device's node. With the second driver's
// devices all on node 0, the same claim is not allocated and its pod is
// unschedulable. The pods never start (nothing prepares the second
// driver's device): the allocation is what is asserted.
func TestNUMAMatchAttribute(t *testing.T) {
	ctx := testContext(t)
	root := sysfsfixture.TempDir(t)
	if err := sysfsfixture.X710().Write(root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteSlices(t) })
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	d := startDaemon(t, ctx, 26260, "--sysfs-root", root)

	// The X710's two VFs, the devices netdev.fastpath.dev selects, carry
	// NUMA node 1 under both names.
	vfs := []string{"pci-0000-5e-01-0", "pci-0000-5e-01-1"}
	var published map[string]resourceapi.ResourceSlice
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := nodeSlices(ctx)
		published = s
		return err == nil && sliceWith(s, vfs[0]) != "" && sliceWith(s, vfs[1]) != "", nil
	})
	if err != nil {
		t.Fatalf("the X710's VFs %v were never published: slices %v", vfs, published)
	}
	for _, vf := range vfs {
		s := published[sliceWith(published, vf)]
		for _, name := range []string{string(deviceattribute.StandardDeviceAttributeNUMANode), "numaNode"} {
			if got := intAttr(s, vf, name); got != 1 {
				t.Errorf("%s publishes %s = %d, want 1 (the fixture's numa_node)", vf, name, got)
			}
		}
	}

	peerClass(t, ctx)
	peer := peerSlice(t, ctx, map[string]int64{"numa0": 0, "numa1": 1})

	t.Run("aligned", func(t *testing.T) {
		claim := numaClaim(t, ctx, "e2e-numa-aligned")
		pod := numaPod(t, ctx, claim)
		alloc := waitAllocated(t, ctx, claim.Name)
		nic, other := resultOf(t, alloc, "nic"), resultOf(t, alloc, "peer")
		if nic.Driver != driverName || !slices.Contains(vfs, nic.Device) {
			t.Errorf("request nic got %s/%s, want a VF of the X710 %v", nic.Driver, nic.Device, vfs)
		}
		if other.Driver != numaPeerDriver || other.Device != "numa1" {
			t.Errorf("request peer got %s/%s, want %s/numa1, on NUMA node 1 as the fastpath device", other.Driver, other.Device, numaPeerDriver)
		}
		now, err := nodeSlices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fast := intAttr(now[sliceWith(now, nic.Device)], nic.Device, string(deviceattribute.StandardDeviceAttributeNUMANode))
		if want := intAttr(*peer, other.Device, string(deviceattribute.StandardDeviceAttributeNUMANode)); fast != want {
			t.Errorf("allocated %s on NUMA node %d and %s on node %d", nic.Device, fast, other.Device, want)
		}
		t.Logf("allocated %s (NUMA node %d) with %s/%s", nic.Device, fast, other.Driver, other.Device)
		deletePodAndClaim(t, ctx, pod, claim)
	})

	// The second driver's devices all on node 0: the constraint cannot be
	// met, whatever fastpath device is taken.
	peer.Spec.Pool.Generation++
	peer.Spec.Devices = peerDevices(map[string]int64{"numa0": 0, "numa0b": 0})
	for i := range peer.Spec.Devices {
		// What only the update has, for the scheduler to show it saw it.
		peer.Spec.Devices[i].Attributes[numaPeerDriver+"/updated"] = resourceapi.DeviceAttribute{BoolValue: new(true)}
	}
	peer, err = bed.Client().ResourceV1().ResourceSlices().Update(ctx, peer, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("move the second driver's devices to NUMA node 0: %v", err)
	}

	t.Run("apart", func(t *testing.T) {
		// First the scheduler shows it has the update: a claim of a device
		// only the updated slice has is allocated. Without this, the claim
		// below could go unallocated for want of the update, not for the
		// constraint.
		seen := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "e2e-numa-seen"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "peer", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "e2e-numa-peer",
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
						Expression: fmt.Sprintf(`"updated" in device.attributes[%q]`, numaPeerDriver)}}}},
			}}}}}
		if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, seen, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteClaim(t, seen.Name) })
		seenPod := numaPod(t, ctx, seen)
		waitAllocated(t, ctx, seen.Name)
		deletePodAndClaim(t, ctx, seenPod, seen)

		claim := numaClaim(t, ctx, "e2e-numa-apart")
		waitUnallocated(t, ctx, numaPod(t, ctx, claim), claim, "no device of "+numaPeerDriver+" shares a NUMA node with fastpath's")
	})

	// Nothing fastpath prepared for the pods outlives them.
	waitNoClaims(t, ctx, d)
}

// waitNoClaims waits for the daemon's checkpoint to hold no claim, once
// a test's pods and claims went.
func waitNoClaims(t *testing.T, ctx context.Context, d *daemon) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return checkpointClaims(t, d) == 0, nil
	})
	if err != nil {
		t.Errorf("the checkpoint holds %d claims after the pods and claims went", checkpointClaims(t, d))
	}
}

// waitUnallocated waits for the scheduler to refuse the pod of claim,
// which no node can satisfy (why: what the test made impossible), checks
// that the claim was not allocated, and deletes both; it returns what the
// scheduler said.
func waitUnallocated(t *testing.T, ctx context.Context, pod *corev1.Pod, claim *resourceapi.ResourceClaim, why string) string {
	t.Helper()
	said := waitPodScheduleFailure(t, ctx, pod.Name)
	c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Allocation != nil {
		t.Errorf("claim %s allocated %+v, though %s", claim.Name, c.Status.Allocation.Devices.Results, why)
	}
	t.Logf("pod %s unschedulable: %s", pod.Name, said)
	deletePodAndClaim(t, ctx, pod, claim)
	return said
}

// waitDevices polls the node's slices until ok says their devices, by
// name, are as the test wants, and returns them; what says what was
// awaited, for the failure.
func waitDevices(t *testing.T, ctx context.Context, what string, ok func(map[string]resourceapi.Device) bool) map[string]resourceapi.Device {
	t.Helper()
	devs := map[string]resourceapi.Device{}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := nodeSlices(ctx)
		if err != nil {
			return false, nil
		}
		devs = map[string]resourceapi.Device{}
		for _, sl := range s {
			for _, dev := range sl.Spec.Devices {
				devs[dev.Name] = dev
			}
		}
		return ok(devs), nil
	})
	if err != nil {
		t.Fatalf("%s was never published (%d devices are)", what, len(devs))
	}
	return devs
}

// peerClass creates the DeviceClass of the second driver's devices.
func peerClass(t *testing.T, ctx context.Context) {
	t.Helper()
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-numa-peer"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", numaPeerDriver),
		}}}},
	}
	if _, err := bed.Client().ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create DeviceClass %s: %v", class.Name, err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
}

// peerSlice publishes the second driver's devices on the bed's node, each
// on its NUMA node, in name order.
func peerSlice(t *testing.T, ctx context.Context, numa map[string]int64) *resourceapi.ResourceSlice {
	t.Helper()
	s := testSlice("e2e-numa-peer", numaPeerDriver, bed.NodeName())
	s.Spec.Pool.Name = "e2e-numa-peer"
	s.Spec.Devices = peerDevices(numa)
	created, err := bed.Client().ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("publish the slice of %s: %v", numaPeerDriver, err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceSlices().Delete(context.Background(), s.Name, metav1.DeleteOptions{})
	})
	return created
}

// peerDevices are devices of the second driver, in name order, each with
// the standard NUMA attribute.
func peerDevices(numa map[string]int64) []resourceapi.Device {
	var out []resourceapi.Device
	for _, name := range slices.Sorted(maps.Keys(numa)) {
		out = append(out, resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			deviceattribute.StandardDeviceAttributeNUMANode: {IntValue: new(numa[name])},
		}})
	}
	return out
}

// numaClaim creates a claim for a netdev of fastpath and a device of the
// second driver on the same NUMA node.
func numaClaim(t *testing.T, ctx context.Context, name string) *resourceapi.ResourceClaim {
	t.Helper()
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{
				{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "netdev.fastpath.dev"}},
				{Name: "peer", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "e2e-numa-peer"}},
			},
			Constraints: []resourceapi.DeviceConstraint{{
				Requests:       []string{"nic", "peer"},
				MatchAttribute: new(resourceapi.FullyQualifiedName(deviceattribute.StandardDeviceAttributeNUMANode)),
			}},
		}},
	}
	created, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create claim %s: %v", name, err)
	}
	t.Cleanup(func() { deleteClaim(t, name) })
	return created
}

// numaPod creates a pod of the claim, deleted when the test ends; it is
// not waited for: it cannot start.
func numaPod(t *testing.T, ctx context.Context, claim *resourceapi.ResourceClaim) *corev1.Pod {
	t.Helper()
	pod := claimPod(claim.Name, "sleep", &corev1.PodResourceClaim{Name: "devs", ResourceClaimName: &claim.Name})
	if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	return pod
}

// waitAllocated waits for the claim's allocation and returns it.
func waitAllocated(t *testing.T, ctx context.Context, name string) *resourceapi.AllocationResult {
	t.Helper()
	var alloc *resourceapi.AllocationResult
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		alloc = c.Status.Allocation
		return alloc != nil, nil
	})
	if err != nil {
		t.Fatalf("claim %s was never allocated: %v (pod %s: %s)", name, err, name, podScheduled(ctx, name))
	}
	return alloc
}

// podScheduled is the pod's PodScheduled condition, for a failure's
// message.
func podScheduled(ctx context.Context, name string) string {
	p, err := bed.Client().CoreV1().Pods("default").Get(context.WithoutCancel(ctx), name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return fmt.Sprintf("PodScheduled %s %s: %s", c.Status, c.Reason, c.Message)
		}
	}
	return "no PodScheduled condition"
}

// resultOf is the allocation's result for request.
func resultOf(t *testing.T, alloc *resourceapi.AllocationResult, request string) resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	for _, r := range alloc.Devices.Results {
		if r.Request == request {
			return r
		}
	}
	t.Fatalf("the allocation has no result for request %s: %+v", request, alloc.Devices.Results)
	return resourceapi.DeviceRequestAllocationResult{}
}

// deletePodAndClaim deletes the pod, then the claim, and waits until the
// claim is gone (deallocated once no pod holds it).
func deletePodAndClaim(t *testing.T, ctx context.Context, pod *corev1.Pod, claim *resourceapi.ResourceClaim) {
	t.Helper()
	if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
		t.Fatal(err)
	}
	deleteClaim(t, claim.Name)
}
