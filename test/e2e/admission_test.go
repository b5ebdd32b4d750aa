//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// TestAdmissionPolicies: the chart's admission policies, on the bed's API
// server, keep fastpathd's service account, with a token bound to a node,
// to what that node's daemon writes:
//   - ResourceSlices of fastpath's drivers alone (fastpath.dev and, with the
//     CNI driver, cni.dra.networking.x-k8s.io): another driver's slice on
//     its node is neither created, updated nor deleted;
//   - the status of claims allocated on its node, never their allocation:
//     an unallocated claim is not allocated (on its node or another) and an
//     allocated one not deallocated. From 1.36 the API server itself asks
//     for resourceclaims/binding to write status.allocation; on 1.34 and
//     1.35 only the policy stands, so the test grants the service account
//     that permission to see the policy alone;
//   - a pod's network-status annotations, and nothing else: no finalizer,
//     owner reference, label, other annotation or spec change.
//
// What the daemon does write (its node's CNI slice, a Ready device status,
// a network-status annotation) is allowed. Writes are dry runs.
func TestAdmissionPolicies(t *testing.T) {
	ctx := testContext(t)
	startDaemon(t, ctx, 26202, "--cni", "--cni-plugin-dir", bed.PluginDir(cniDriver), "--cni-bin-dir", bed.Config().CNIBinDir(),
		"--cni-plugins", "macvlan", "--npwg")
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.driver=" + cniDriver})
	})
	other, own := twoNodes(t, ctx)
	onOther, onOwn := nodeBoundClient(t, ctx, other), nodeBoundClient(t, ctx, own)
	dryRun := []string{metav1.DryRunAll}

	t.Run("slices", func(t *testing.T) {
		admin := bed.Client().ResourceV1().ResourceSlices()
		foreign, err := admin.Create(ctx, testSlice("e2e-foreign-driver", "gpu.example.com", own.Name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), foreign.Name, metav1.DeleteOptions{}) })
		slices := onOwn.ResourceV1().ResourceSlices()
		const notOurs = "fastpathd may write only the ResourceSlices of its drivers (fastpath.dev, cni.dra.networking.x-k8s.io): "
		waitRefused(t, ctx, "create of another driver's slice on this node", func() error {
			_, err := slices.Create(ctx, testSlice("e2e-foreign-new", "gpu.example.com", own.Name), metav1.CreateOptions{DryRun: dryRun})
			return err
		}, notOurs+"ResourceSlice e2e-foreign-new is of driver gpu.example.com")
		changed := foreign.DeepCopy()
		changed.Labels = map[string]string{"e2e": "changed"}
		_, err = slices.Update(ctx, changed, metav1.UpdateOptions{DryRun: dryRun})
		wantRefused(t, "update of another driver's slice on this node", err, notOurs+"ResourceSlice e2e-foreign-driver is of driver gpu.example.com")
		err = slices.Delete(ctx, foreign.Name, metav1.DeleteOptions{DryRun: dryRun})
		wantRefused(t, "delete of another driver's slice on this node", err, notOurs+"ResourceSlice e2e-foreign-driver is of driver gpu.example.com")

		// Another node's slice moved to this node: refused (the API server
		// keeps nodeName immutable; the policy checks the old node too).
		elsewhere, err := admin.Create(ctx, testSlice("e2e-other-node", driverName, other.Name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), elsewhere.Name, metav1.DeleteOptions{}) })
		moved := elsewhere.DeepCopy()
		moved.Spec.NodeName = new(own.Name)
		_, err = slices.Update(ctx, moved, metav1.UpdateOptions{DryRun: dryRun})
		wantRefused(t, "moving another node's slice to this node", err)

		// This node's slice of the CNI driver, as the daemon writes it.
		list, err := admin.List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + cniDriver + ",spec.nodeName=" + own.Name})
		if err != nil || len(list.Items) == 0 {
			t.Fatalf("no ResourceSlice of %s on node %s (%v)", cniDriver, own.Name, err)
		}
		mine := list.Items[0].DeepCopy()
		mine.Labels = map[string]string{"e2e": "changed"}
		if _, err := slices.Update(ctx, mine, metav1.UpdateOptions{DryRun: dryRun}); err != nil {
			t.Errorf("update of this node's CNI slice with this node's token: %v", err)
		}
	})

	t.Run("node condition", func(t *testing.T) {
		// fastpathd's own write of the condition (the daemon above).
		waitFeaturesOff(t, ctx, corev1.ConditionFalse)
		patch := func(condition string) []byte {
			return fmt.Appendf(nil, `{"status":{"conditions":[{"type":%q,"status":"True","reason":"E2E","message":"e2e"}]}}`, condition)
		}
		nodes := onOwn.CoreV1().Nodes()
		if _, err := nodes.Patch(ctx, own.Name, types.StrategicMergePatchType, patch(string(status.FeaturesOffCondition)),
			metav1.PatchOptions{DryRun: dryRun}, "status"); err != nil {
			t.Errorf("this node's %s with its token: %v", status.FeaturesOffCondition, err)
		}
		_, err := nodes.Patch(ctx, own.Name, types.StrategicMergePatchType, patch("NetworkUnavailable"), metav1.PatchOptions{DryRun: dryRun}, "status")
		wantRefused(t, "another condition of this node", err, "fastpathd may change only the condition FastpathFeaturesOff of Node "+own.Name+"'s status")
		_, err = nodes.Patch(ctx, other.Name, types.StrategicMergePatchType, patch(string(status.FeaturesOffCondition)), metav1.PatchOptions{DryRun: dryRun}, "status")
		wantRefused(t, "another node's condition", err, "fastpathd of node "+own.Name+" may not write Node "+other.Name+"'s status")
	})

	t.Run("claim allocation", func(t *testing.T) {
		grantClaimBinding(t, ctx)
		claims := bed.Client().ResourceV1().ResourceClaims("default")
		claim := netdevClaim("e2e-admission", nil)
		claim.Spec.Devices.Requests[0].Exactly.Selectors = nil
		created, err := claims.Create(ctx, claim, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = claims.Delete(context.Background(), claim.Name, metav1.DeleteOptions{}) })
		allocated := func(c *resourceapi.ResourceClaim, node string) *resourceapi.ResourceClaim {
			c = c.DeepCopy()
			c.Status.Allocation = &resourceapi.AllocationResult{
				Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
					Request: "nic", Driver: driverName, Pool: node, Device: "netdev-e2e0",
				}}},
				NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
				}}},
			}
			return c
		}
		// The policy, not the API server, refuses: the admin may.
		if _, err := claims.UpdateStatus(ctx, allocated(created, own.Name), metav1.UpdateOptions{DryRun: dryRun}); err != nil {
			t.Fatalf("the admin allocating the claim: %v", err)
		}
		for _, c := range []struct {
			client kubernetes.Interface
			node   string
		}{{onOwn, own.Name}, {onOther, other.Name}} {
			// Polled: the grant reaches the API server's authorizer in a moment.
			waitRefused(t, ctx, "allocating an unallocated claim on node "+c.node+" with its token", func() error {
				_, err := c.client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, allocated(created, c.node), metav1.UpdateOptions{DryRun: dryRun})
				return err
			}, "fastpathd of node "+c.node+" may not write the status of ResourceClaim default/e2e-admission of no node (not allocated on one node)")
		}

		// Allocated on this node, as the scheduler would: the daemon
		// writes its device status, and does not deallocate it.
		onNode, err := claims.UpdateStatus(ctx, allocated(created, own.Name), metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		deallocated := onNode.DeepCopy()
		deallocated.Status.Allocation = nil
		_, err = onOwn.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, deallocated, metav1.UpdateOptions{DryRun: dryRun})
		wantRefused(t, "deallocating a claim of this node with its token", err,
			"fastpathd of node "+own.Name+" may not write the status of ResourceClaim default/e2e-admission of no node")
		ready := onNode.DeepCopy()
		ready.Status.Devices = []resourceapi.AllocatedDeviceStatus{{
			Driver: driverName, Pool: own.Name, Device: "netdev-e2e0",
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "NetworkInterfaceReady", LastTransitionTime: metav1.Now()}},
		}}
		if _, err := onOwn.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, ready, metav1.UpdateOptions{DryRun: dryRun}); err != nil {
			t.Errorf("the device status of a claim of this node with its token: %v", err)
		}
	})

	t.Run("pod metadata", func(t *testing.T) {
		pod := testbed.WorkloadPod("default", "e2e-admission", "sleep")
		pod.Spec.NodeName = own.Name
		if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bed.DeletePod(context.Background(), pod.Namespace, pod.Name) })
		patch := func(client kubernetes.Interface, doc string) error {
			_, err := client.CoreV1().Pods("default").Patch(ctx, pod.Name, types.MergePatchType, []byte(doc), metav1.PatchOptions{DryRun: dryRun})
			return err
		}
		status := fmt.Sprintf(`{"metadata": {"annotations": {%q: "[]"}}}`, nadv1.NetworkStatusAnnot)
		const onlyStatus = "fastpathd may change only the network-status annotations (k8s.v1.cni.cncf.io/network-status, network.fastpath.dev/network-status) of pod default/e2e-admission"
		waitRefused(t, ctx, "network-status of this node's pod with another node's token", func() error { return patch(onOther, status) },
			"fastpathd of node "+other.Name+" may not write pod default/e2e-admission of node "+own.Name)
		if err := patch(onOwn, status); err != nil {
			t.Errorf("network-status of this node's pod with its token: %v", err)
		}
		for what, doc := range map[string]string{
			"a finalizer":        `{"metadata": {"finalizers": ["e2e.fastpath.dev/held"]}}`,
			"an owner":           fmt.Sprintf(`{"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": %q, "uid": %q}]}}`, other.Name, other.UID),
			"a label":            `{"metadata": {"labels": {"e2e": "changed"}}}`,
			"another annotation": `{"metadata": {"annotations": {"e2e": "changed"}}}`,
			"the spec":           `{"spec": {"activeDeadlineSeconds": 5}}`,
		} {
			wantRefused(t, what+" of this node's pod with its token", patch(onOwn, doc), onlyStatus)
		}
		// The pod as it was: nothing above was written.
		if got, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		} else if len(got.Finalizers) > 0 || len(got.OwnerReferences) > 0 || got.Labels["e2e"] != "" || got.Annotations["e2e"] != "" {
			t.Errorf("the pod changed: %+v", got.ObjectMeta)
		}
	})
}

// testSlice is a ResourceSlice of driver on node, with no device.
func testSlice(name, driver, node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
		Driver: driver, NodeName: new(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
	}}
}

// grantClaimBinding lets fastpathd's service account write claims'
// status.allocation (resourceclaims/binding) until the test ends: what
// the API server checks itself from 1.36, so that the admission policy
// alone decides, as on 1.34 and 1.35.
func grantClaimBinding(t *testing.T, ctx context.Context) {
	t.Helper()
	const name = "e2e-fastpathd-claim-binding"
	rbac := bed.Client().RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/binding"}, Verbs: []string{"update"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: testbed.ChartNamespace, Name: serviceAccount}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// waitRefused waits until call is refused by an admission policy (the API
// server has the policies a moment after the chart installs them), then
// checks the refusal as wantRefused does.
func waitRefused(t *testing.T, ctx context.Context, what string, call func() error, want ...string) {
	t.Helper()
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		err = call()
		var status apierrors.APIStatus
		return err != nil && errors.As(err, &status) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"), nil
	})
	wantRefused(t, what, err, want...)
}

// TestIPAMClaimNodePolicy: with npwg.ipamClaims, the chart's admission
// policy, on the bed's API server (the IPAMClaim CRD's schema), keeps a
// node's fastpathd to the IPAMClaims no other node holds. Each status a
// node's daemon writes names its node in the condition
// fastpath.dev/HeldOnNode; with a token bound to the bed's node, the
// daemon's service account may take an IPAMClaim no node holds or one
// another node let go, and let go of its own; it may not take one another
// node holds, name another node, nor touch another writer's condition.
// Writes are dry runs.
func TestIPAMClaimNodePolicy(t *testing.T) {
	ctx := testContext(t)
	// Without fastpathd controller, which would let go of the IPAMClaims
	// this test makes held by pods that do not exist.
	d := newDaemon(t, 26303, "--npwg", "--npwg-ipamclaims", "--cni-bin-dir", bed.Config().CNIBinDir(), "--cni-plugins", "macvlan,static")
	d.values["controller"] = map[string]any{"enabled": false}
	d.start(t, ctx)
	t.Cleanup(func() { d.stop(t) })
	other, own := twoNodes(t, ctx)
	onOwn, err := dynamic.NewForConfig(nodeBoundConfig(t, ctx, own))
	if err != nil {
		t.Fatal(err)
	}
	mine := onOwn.Resource(ipamClaimsGVR).Namespace("default")
	admin := dynamicClient(t).Resource(ipamClaimsGVR).Namespace("default")
	createServed(t, ctx, ipamClaimsGVR, `apiVersion: k8s.cni.cncf.io/v1alpha1
kind: IPAMClaim
metadata:
  name: e2e-ipc-node
spec:
  network: net-p
  interface: net1
`)
	t.Cleanup(func() { deleteIPAMClaim(t, "e2e-ipc-node") })
	dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	// held is the IPAMClaim as the API server has it, its status the one
	// of owner on node (status True or False; no condition for "").
	held := func(t *testing.T, owner, node string, status metav1.ConditionStatus) *unstructured.Unstructured {
		t.Helper()
		u, err := admin.Get(ctx, "e2e-ipc-node", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := &npwg.IPAMClaim{Status: npwg.IPAMClaimStatus{IPs: []string{"10.94.0.10/24"}}}
		if node != "" {
			c.Status, _ = npwg.WithOwner(c, owner, node, nil)
			if status == metav1.ConditionFalse {
				c.Status, _ = npwg.Released(c, node, npwg.ReasonReleased)
			}
		}
		st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c.Status)
		if err != nil {
			t.Fatal(err)
		}
		u.Object["status"] = st
		return u
	}
	// set makes the IPAMClaim's status, as another node's daemon or
	// fastpathd controller would.
	set := func(t *testing.T, owner, node string, status metav1.ConditionStatus) {
		t.Helper()
		if _, err := admin.UpdateStatus(ctx, held(t, owner, node, status), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	take := func(t *testing.T, owner, node string, status metav1.ConditionStatus) error {
		_, err := mine.UpdateStatus(ctx, held(t, owner, node, status), dryRun)
		return err
	}
	const (
		heldElsewhere = "may not write IPAMClaim default/e2e-ipc-node, which node fastpath-other-node holds (status condition fastpath.dev/HeldOnNode)"
		namesItsNode  = "may write the status of IPAMClaim default/e2e-ipc-node only naming its node in the condition fastpath.dev/HeldOnNode"
	)

	// Held by no node: this node's daemon takes it, naming itself, and
	// writes no other condition.
	waitRefused(t, ctx, "an IPAMClaim no node holds, taken naming another node", func() error {
		return take(t, "e2e-a", other.Name, metav1.ConditionTrue)
	}, namesItsNode)
	ready := held(t, "e2e-a", own.Name, metav1.ConditionTrue)
	if err := unstructured.SetNestedSlice(ready.Object, append(mustSlice(t, ready, "status", "conditions"),
		map[string]any{"type": "Ready", "status": "True", "reason": "Allocated", "message": "", "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}),
		"status", "conditions"); err != nil {
		t.Fatal(err)
	}
	_, err = mine.UpdateStatus(ctx, ready, dryRun)
	wantRefused(t, "an IPAMClaim no node holds, taken with another condition", err, "may not change the conditions of IPAMClaim default/e2e-ipc-node but fastpath.dev/HeldOnNode")
	if err := take(t, "e2e-a", own.Name, metav1.ConditionTrue); err != nil {
		t.Errorf("an IPAMClaim no node holds, taken by this node: %v", err)
	}

	// Held by the other node: not this node's to take, nor to let go.
	set(t, "e2e-b", other.Name, metav1.ConditionTrue)
	wantRefused(t, "an IPAMClaim another node holds, taken", take(t, "e2e-a", own.Name, metav1.ConditionTrue), heldElsewhere)
	wantRefused(t, "an IPAMClaim another node holds, let go", take(t, "e2e-b", other.Name, metav1.ConditionFalse), heldElsewhere)

	// Let go by the other node: this node's daemon takes it.
	set(t, "e2e-b", other.Name, metav1.ConditionFalse)
	if err := take(t, "e2e-a", own.Name, metav1.ConditionTrue); err != nil {
		t.Errorf("an IPAMClaim another node let go, taken by this node: %v", err)
	}

	// Held by this node: it lets it go.
	set(t, "e2e-a", own.Name, metav1.ConditionTrue)
	if err := take(t, "e2e-a", own.Name, metav1.ConditionFalse); err != nil {
		t.Errorf("an IPAMClaim this node holds, let go: %v", err)
	}
}

// TestIPAMClaimHolderGone: fastpathd controller (run by the chart with
// npwg.ipamClaims) lets go of an IPAMClaim held on a node whose holding
// pod is gone: the condition fastpath.dev/HeldOnNode turns False (reason
// HolderGone), still naming the node, and the bed's node's daemon may
// then take it.
func TestIPAMClaimHolderGone(t *testing.T) {
	ctx := testContext(t)
	startDaemon(t, ctx, 26304, "--npwg", "--npwg-ipamclaims", "--cni-bin-dir", bed.Config().CNIBinDir(), "--cni-plugins", "macvlan,static")
	other, own := twoNodes(t, ctx)
	admin := dynamicClient(t).Resource(ipamClaimsGVR).Namespace("default")
	createServed(t, ctx, ipamClaimsGVR, `apiVersion: k8s.cni.cncf.io/v1alpha1
kind: IPAMClaim
metadata:
  name: e2e-ipc-gone
spec:
  network: net-p
  interface: net1
`)
	t.Cleanup(func() { deleteIPAMClaim(t, "e2e-ipc-gone") })
	u, err := admin.Get(ctx, "e2e-ipc-gone", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := &npwg.IPAMClaim{Status: npwg.IPAMClaimStatus{IPs: []string{"10.94.0.10/24"}}}
	c.Status, _ = npwg.WithOwner(c, "e2e-ipc-no-such-pod", other.Name, nil)
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&c.Status)
	if err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = st
	if _, err := admin.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *npwg.IPAMClaim
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got = getIPAMClaim(t, ctx, "e2e-ipc-gone")
		return npwg.HeldOn(got) == "", nil
	}); err != nil {
		t.Fatalf("IPAMClaim e2e-ipc-gone, held on %s by a pod that does not exist, was not let go: %+v\n%s", other.Name, got.Status, controllerState(t))
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, npwg.IPAMClaimNodeCondition)
	if cond == nil || cond.Reason != npwg.ReasonHolderGone || cond.Message != other.Name {
		t.Errorf("condition %+v, want False %s naming %s", cond, npwg.ReasonHolderGone, other.Name)
	}
	// The bed's node may take it now.
	onOwn, err := dynamic.NewForConfig(nodeBoundConfig(t, ctx, own))
	if err != nil {
		t.Fatal(err)
	}
	u, err = admin.Get(ctx, "e2e-ipc-gone", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c = getIPAMClaim(t, ctx, "e2e-ipc-gone")
	c.Status, _ = npwg.WithOwner(c, "e2e-ipc-next", own.Name, nil)
	if st, err = runtime.DefaultUnstructuredConverter.ToUnstructured(&c.Status); err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = st
	if _, err := onOwn.Resource(ipamClaimsGVR).Namespace("default").UpdateStatus(ctx, u, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the IPAMClaim let go, taken by this node: %v", err)
	}
}

// mustSlice is the slice at fields of u.
func mustSlice(t *testing.T, u *unstructured.Unstructured, fields ...string) []any {
	t.Helper()
	s, _, err := unstructured.NestedSlice(u.Object, fields...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
