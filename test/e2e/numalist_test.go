//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	devs := waitDevices(t, ctx, vf, func(devs map[string]resourceapi.Device) bool { _, ok := devs[vf]; return ok })
	got := devs[vf].Attributes[deviceattribute.StandardDeviceAttributeNUMANode]
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
				deletePodAndClaim(t, ctx, pod, claim)
			} else {
				waitUnallocated(t, ctx, pod, claim, "no VF's list shares a node with [2 3]")
			}
		})
	}
	waitNoClaims(t, ctx, d)
}
