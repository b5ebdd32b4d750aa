//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// TestNUMANodeList: on a machine of two sockets split in two NUMA nodes
// each, fastpathd with --numa-node-list publishes the fixture X710's VFs,
// on node 1, with resource.kubernetes.io/numaNode [1, 0] (the bed's API
// server and scheduler have DRAListTypeAttributes). A claim of a VF and of
// a second driver's device on node 0 alone ([0]) with matchAttribute on it
// is allocated: the lists share node 0, where the scalar 1 would not. With
// the second driver's device on nodes 2 and 3, of the other socket, it is
// not.
func TestNUMANodeList(t *testing.T) {
	ctx := testContext(t)
	tree := sysfsfixture.X710()
	tree.NUMA = sysfsfixture.SubNUMA()
	root := sysfsfixture.TempDir(t)
	if err := tree.Write(root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteSlices(t) })
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	d := startDaemon(t, ctx, 26293, "--sysfs-root", root, "--numa-node-list")

	vf := "pci-0000-5e-01-0"
	var got resourceapi.DeviceAttribute
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := nodeSlices(ctx)
		if err != nil {
			return false, nil
		}
		for _, sl := range s {
			for _, dev := range sl.Spec.Devices {
				if dev.Name == vf {
					got = dev.Attributes[deviceattribute.StandardDeviceAttributeNUMANode]
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s was never published", vf)
	}
	if !slices.Equal(got.IntValues, []int64{1, 0}) || got.IntValue != nil {
		t.Fatalf("%s publishes numaNode %+v, want the list [1 0]", vf, got)
	}

	peerClass(t, ctx)
	peer := testSlice("e2e-numa-peer", numaPeerDriver, bed.NodeName())
	peer.Spec.Pool.Name = "e2e-numa-peer"
	peer.Spec.Devices = []resourceapi.Device{{Name: "near", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		deviceattribute.StandardDeviceAttributeNUMANode: {IntValues: []int64{0}},
		numaPeerDriver + "/socket":                      {IntValue: new(int64(0))},
	}}, {Name: "far", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		deviceattribute.StandardDeviceAttributeNUMANode: {IntValues: []int64{2, 3}},
		numaPeerDriver + "/socket":                      {IntValue: new(int64(1))},
	}}}
	if _, err := bed.Client().ResourceV1().ResourceSlices().Create(ctx, peer, metav1.CreateOptions{}); err != nil {
		t.Fatalf("publish the slice of %s: %v", numaPeerDriver, err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceSlices().Delete(context.Background(), peer.Name, metav1.DeleteOptions{})
	})

	for _, tc := range []struct {
		name      string
		socket    int64
		allocated bool
	}{{"near", 0, true}, {"far", 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			// A VF, and the second driver's device of the case's socket,
			// on one NUMA node by their lists.
			name := "e2e-numa-list-" + tc.name
			claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
				Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
					Requests: []resourceapi.DeviceRequest{
						{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "netdev.fastpath.dev"}},
						{Name: "peer", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "e2e-numa-peer",
							Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
								Expression: fmt.Sprintf(`device.attributes[%q].socket == %d`, numaPeerDriver, tc.socket)}}}}},
					},
					Constraints: []resourceapi.DeviceConstraint{{Requests: []string{"nic", "peer"},
						MatchAttribute: new(resourceapi.FullyQualifiedName(deviceattribute.StandardDeviceAttributeNUMANode))}},
				}}}
			if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create claim %s: %v", name, err)
			}
			t.Cleanup(func() { deleteClaim(t, name) })
			pod := numaPod(t, ctx, claim)
			if tc.allocated {
				alloc := waitAllocated(t, ctx, claim.Name)
				if nic, other := resultOf(t, alloc, "nic"), resultOf(t, alloc, "peer"); nic.Device != vf && nic.Device != "pci-0000-5e-01-1" || other.Device != "near" {
					t.Errorf("allocated %s and %s, want an X710 VF and the device near it", nic.Device, other.Device)
				}
			} else {
				why := waitPodScheduleFailure(t, ctx, pod.Name)
				if c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, claim.Name, metav1.GetOptions{}); err != nil || c.Status.Allocation != nil {
					t.Errorf("claim %s allocated (%v), though no VF's list shares a node with [2 3]", claim.Name, err)
				}
				t.Logf("pod %s unschedulable: %s", pod.Name, why)
			}
			deletePodAndClaim(t, ctx, pod, claim)
		})
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return checkpointClaims(t, d) == 0, nil
	})
	if err != nil {
		t.Errorf("the checkpoint holds %d claims after the pods and claims went", checkpointClaims(t, d))
	}
}
