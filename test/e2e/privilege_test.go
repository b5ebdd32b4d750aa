//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fastpath-dra/fastpath/test/testbed"
)

// serviceAccount is the chart's service account of fastpathd.
const serviceAccount = testbed.ChartRelease

// TestLeastPrivilege: fastpathd's service account, as the chart installs
// it, may do exactly what the daemon does and nothing more; and a token of
// that account bound to another node is refused, with a message naming
// both nodes, when it writes this node's ResourceSlices or the status of a
// claim allocated here, while a token bound to this node may.
func TestLeastPrivilege(t *testing.T) {
	ctx := testContext(t)
	veth := cniSetup(t, ctx, 26189, []string{"--cni-devices", "1"}, 8)[0]

	t.Run("RBAC", func(t *testing.T) {
		type access struct{ verb, resource, subresource, name, namespace string }
		allowed := []access{
			{"list", "resourceslices", "", "", ""}, {"watch", "resourceslices", "", "", ""}, {"create", "resourceslices", "", "", ""},
			{"update", "resourceslices", "", "", ""}, {"delete", "resourceslices", "", "", ""},
			{"get", "resourceclaims", "", "", ""}, {"update", "resourceclaims", "status", "", ""},
			{"associated-node:update", "resourceclaims", "driver", driverName, ""}, {"associated-node:update", "resourceclaims", "driver", cniDriver, ""},
			{"get", "nodes", "", "", ""}, {"patch", "nodes", "status", "", ""}, {"get", "cniconfigs", "", "", ""},
			// ConfigMaps for approved configs' arguments: in the config
			// namespace only (no cni.configMapNamespaces).
			{"get", "configmaps", "", "", testbed.ChartNamespace},
			{"create", "events", "", "", ""}, {"patch", "events", "", "", ""},
			// The node's pods, to read their claims ahead (claimPrefetch,
			// on by default): RBAC cannot scope a list to a node, the
			// daemon's watch asks for its own node's only.
			{"list", "pods", "", "", ""}, {"watch", "pods", "", "", ""},
		}
		denied := []access{
			{"deletecollection", "resourceslices", "", "", ""}, {"patch", "resourceslices", "", "", ""},
			{"list", "resourceclaims", "", "", ""}, {"watch", "resourceclaims", "", "", ""}, {"update", "resourceclaims", "", "", ""},
			{"delete", "resourceclaims", "", "", ""}, {"patch", "resourceclaims", "status", "", ""},
			{"update", "resourceclaims", "binding", "", ""},
			{"arbitrary-node:update", "resourceclaims", "driver", driverName, ""},
			{"associated-node:update", "resourceclaims", "driver", "gpu.example.com", ""},
			{"list", "nodes", "", "", ""}, {"update", "nodes", "", "", ""}, {"update", "nodes", "status", "", ""}, {"list", "configmaps", "", "", ""},
			{"get", "configmaps", "", "", ""}, {"get", "configmaps", "", "", "kube-system"},
			{"list", "cniconfigs", "", "", ""}, {"update", "cniconfigs", "status", "", ""}, {"create", "cniconfigs", "", "", ""},
			{"get", "secrets", "", "", ""}, {"update", "pods", "", "", ""}, {"delete", "events", "", "", ""},
		}
		user := "system:serviceaccount:" + testbed.ChartNamespace + ":" + serviceAccount
		check := func(user string, a access, want bool) {
			group := "resource.k8s.io"
			switch a.resource {
			case "nodes", "configmaps", "secrets", "pods", "events":
				group = ""
			case "cniconfigs":
				group = "cni.networking.x-k8s.io"
			case "leases":
				group = "coordination.k8s.io"
			}
			ns := a.namespace
			if ns == "" {
				ns = "default"
			}
			if group == "cni.networking.x-k8s.io" {
				ns = "" // cluster-scoped
			}
			sar, err := bed.Client().AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
				User:   user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + testbed.ChartNamespace, "system:authenticated"},
				ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: a.verb, Group: group,
					Resource: a.resource, Subresource: a.subresource, Name: a.name},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed != want {
				t.Errorf("%s: %s %s/%s %s in %q: allowed = %v, want %v", user, a.verb, a.resource, a.subresource, a.name, ns, sar.Status.Allowed, want)
			}
		}
		for _, a := range allowed {
			check(user, a, true)
		}
		for _, a := range denied {
			check(user, a, false)
		}
		// fastpathd controller: CNIConfig objects and their status, its
		// Lease; nothing of claims, slices or ConfigMaps.
		controller := "system:serviceaccount:" + testbed.ChartNamespace + ":" + serviceAccount + "-controller"
		for _, a := range []access{{"get", "cniconfigs", "", "", ""}, {"list", "cniconfigs", "", "", ""}, {"watch", "cniconfigs", "", "", ""},
			{"update", "cniconfigs", "status", "", ""}, {"get", "leases", "", "", testbed.ChartNamespace},
			{"create", "leases", "", "", testbed.ChartNamespace}, {"update", "leases", "", "", testbed.ChartNamespace}} {
			check(controller, a, true)
		}
		for _, a := range []access{{"update", "cniconfigs", "", "", ""}, {"create", "cniconfigs", "", "", ""}, {"delete", "cniconfigs", "", "", ""},
			{"get", "configmaps", "", "", ""}, {"get", "resourceclaims", "", "", ""}, {"list", "resourceslices", "", "", ""},
			{"get", "leases", "", "", "kube-system"}, {"delete", "leases", "", "", testbed.ChartNamespace}} {
			check(controller, a, false)
		}
	})

	other, own := twoNodes(t, ctx)
	onOther, onOwn := nodeBoundClient(t, ctx, other), nodeBoundClient(t, ctx, own)

	slices, err := nodeSlices(ctx)
	if err != nil || len(slices) == 0 {
		t.Fatalf("no ResourceSlice of node %s (%v)", bed.NodeName(), err)
	}
	var slice resourceapi.ResourceSlice
	for _, s := range slices {
		slice = s
	}
	dryRun := []string{metav1.DryRunAll}
	t.Run("slices", func(t *testing.T) {
		changed := slice.DeepCopy()
		changed.Labels = map[string]string{"e2e": "changed"}
		fresh := slice.DeepCopy()
		fresh.ObjectMeta = metav1.ObjectMeta{Name: "e2e-" + slice.Name}
		slices := onOther.ResourceV1().ResourceSlices()
		for what, call := range map[string]func() error{
			"update": func() error { _, err := slices.Update(ctx, changed, metav1.UpdateOptions{DryRun: dryRun}); return err },
			"create": func() error { _, err := slices.Create(ctx, fresh, metav1.CreateOptions{DryRun: dryRun}); return err },
			"delete": func() error { return slices.Delete(ctx, slice.Name, metav1.DeleteOptions{DryRun: dryRun}) },
		} {
			wantRefused(t, what+" of this node's slice with another node's token", call(),
				"fastpathd of node "+other.Name+" may not write ResourceSlice", "of node "+bed.NodeName())
		}
		if _, err := onOwn.ResourceV1().ResourceSlices().Update(ctx, changed, metav1.UpdateOptions{DryRun: dryRun}); err != nil {
			t.Errorf("update of this node's slice with this node's token: %v", err)
		}
		elsewhere := fresh.DeepCopy()
		elsewhere.Spec.NodeName = new(other.Name)
		elsewhere.Spec.Pool.Name = other.Name
		_, err := onOwn.ResourceV1().ResourceSlices().Create(ctx, elsewhere, metav1.CreateOptions{DryRun: dryRun})
		wantRefused(t, "create of another node's slice with this node's token", err,
			"fastpathd of node "+bed.NodeName()+" may not write ResourceSlice", "of node "+other.Name)
	})

	t.Run("claim status", func(t *testing.T) {
		claim := netdevClaim("e2e-privilege", nil)
		claim.Spec.Devices.Requests[0].Exactly.Selectors = nil
		created, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
		})
		// Allocated on this node, as the scheduler would.
		created.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "nic", Driver: driverName, Pool: bed.NodeName(), Device: "netdev-" + veth.Name,
			}}},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{bed.NodeName()}}},
			}}},
		}
		allocated, err := bed.Client().ResourceV1().ResourceClaims("default").UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		allocated.Status.Devices = []resourceapi.AllocatedDeviceStatus{{
			Driver: driverName, Pool: bed.NodeName(), Device: "netdev-" + veth.Name,
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "NetworkInterfaceReady", LastTransitionTime: metav1.Now()}},
		}}
		_, err = onOther.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, allocated, metav1.UpdateOptions{DryRun: dryRun})
		wantRefused(t, "status of a claim allocated on this node with another node's token", err,
			`resource="resourceclaims/driver"`, "arbitrary-node:update")
		if _, err := onOwn.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, allocated, metav1.UpdateOptions{DryRun: dryRun}); err != nil {
			t.Errorf("status of a claim allocated on this node with this node's token: %v", err)
		}
	})
}

// twoNodes are another node, only an object to bind a token to (nothing
// runs there; deleted when the test ends), and the bed's node.
func twoNodes(t *testing.T, ctx context.Context) (other, own *corev1.Node) {
	t.Helper()
	other, err := bed.Client().CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "fastpath-other-node"},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{
			{Key: "fastpath.dev/e2e", Value: "no-kubelet", Effect: corev1.TaintEffectNoExecute},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().CoreV1().Nodes().Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	})
	own, err = bed.Client().CoreV1().Nodes().Get(ctx, bed.NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return other, own
}

// nodeBoundClient is a client with a token of fastpathd's service account
// bound to node: the API server puts the node's name in the token, as it
// does for a pod's token.
func nodeBoundClient(t *testing.T, ctx context.Context, node *corev1.Node) kubernetes.Interface {
	t.Helper()
	client, err := kubernetes.NewForConfig(nodeBoundConfig(t, ctx, node))
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// nodeBoundConfig is the client configuration of nodeBoundClient, its
// token checked.
func nodeBoundConfig(t *testing.T, ctx context.Context, node *corev1.Node) *rest.Config {
	t.Helper()
	tok, err := bed.Client().CoreV1().ServiceAccounts(testbed.ChartNamespace).CreateToken(ctx, serviceAccount, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{
			ExpirationSeconds: new(int64(600)),
			BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token bound to node %s: %v", node.Name, err)
	}
	admin := bed.RESTConfig()
	rc := &rest.Config{Host: admin.Host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData, CAFile: admin.CAFile}}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	// The token authenticates as the service account, with the node.
	review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := review.Status.UserInfo; !strings.HasSuffix(u.Username, ":"+serviceAccount) || fmt.Sprint(u.Extra["authentication.kubernetes.io/node-name"]) != "["+node.Name+"]" {
		t.Fatalf("the token of node %s authenticates as %+v", node.Name, u)
	}
	return rc
}

// wantRefused checks that err is the API server's refusal and that its
// message contains every one of want.
func wantRefused(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed, want refused", what)
		return
	}
	t.Logf("%s: refused: %v", what, err)
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("%s: %v, want a refusal", what, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: the refusal %q does not say %q", what, err, w)
		}
	}
}

// TestChartRefusesBadValues: helm install with values that break the
// chart's schema fails before it changes anything, naming the field.
func TestChartRefusesBadValues(t *testing.T) {
	ctx := testContext(t)
	err := bed.InstallChart(ctx, map[string]any{"metrics": map[string]any{"port": "nine"}, "kubeletDir": "/var/lib/kubelet"})
	if err == nil {
		t.Cleanup(func() { _ = bed.UninstallChart(context.Background()) })
		t.Fatal("the chart installed with metrics.port: nine and kubeletDir")
	}
	for _, want := range []string{"/metrics/port", "got string, want integer", "'kubeletDir' not allowed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if out, err := bed.Helm(ctx, "status", testbed.ChartRelease, "--namespace", testbed.ChartNamespace); err == nil {
		t.Errorf("a release exists after the refused install:\n%s", out)
	}
}
