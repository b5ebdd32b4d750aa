//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// TestPodNetworkNodeLabels: fastpathd with --podnetworks labels its node
// with the PodNetworks it can attach: one whose NetworkAttachmentDefinition's
// macvlan master is a link of the node gets its label, one whose master
// the node has not does not; deleting the PodNetwork removes its label;
// no other label of the node changes. The chart's admission policy keeps
// fastpathd's service account, with a token bound to a node, to those
// labels of its own node: another node's, another label and a taint are
// refused (dry runs).
func TestPodNetworkNodeLabels(t *testing.T) {
	ctx := testContext(t)
	networks := dynamicClient(t).Resource(pnv1.PodNetworkResource)
	nodes := bed.Client().CoreV1().Nodes()
	// After the daemon is gone: the labels a failed run left (the next
	// daemon with --podnetworks would remove them at start).
	t.Cleanup(func() { removePodNetworkLabels(t) })
	t.Cleanup(func() { _ = networks.Delete(context.Background(), pnv1.DefaultPodNetworkName, metav1.DeleteOptions{}) })
	master := hostVethNamed(t, vethPrefix+"nl0", vethPrefix+"nl1")
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	absentMaster := vethPrefix + "nl9"
	if _, err := netlink.LinkByName(absentMaster); err == nil {
		t.Fatalf("link %s exists: this test needs a name no link has", absentMaster)
	}
	own, err := nodes.Get(ctx, bed.NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	othersBefore := otherLabels(own.Labels)
	startDaemon(t, ctx, 26244, "--npwg", "--podnetworks", "--cni-bin-dir", bed.Config().CNIBinDir(), "--cni-plugins", "macvlan")

	// The PodNetwork whose master is missing first: the judgement that
	// labels the other has seen it.
	for _, n := range []struct{ name, master string }{{"e2e-nl-absent", absentMaster}, {"e2e-nl-present", master.Attrs().Name}} {
		createServed(t, ctx, nads, fmt.Sprintf(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: %s
spec:
  config: '{"cniVersion": "1.0.0", "name": %q, "plugins": [{"type": "macvlan", "master": %q, "mode": "bridge"}]}'
`, n.name, n.name, n.master))
		if _, err := createYAML(t, ctx, pnv1.PodNetworkResource, false, fmt.Sprintf(`apiVersion: network.fastpath.dev/v1alpha1
kind: PodNetwork
metadata:
  name: %s
spec:
  enabled: true
  provider: fastpath.dev/fastpathd
  parametersRefs:
  - {group: k8s.cni.cncf.io, kind: NetworkAttachmentDefinition, name: %s, namespace: default}
`, n.name, n.name)); err != nil {
			t.Fatal(err)
		}
	}
	present, absent := pnv1.NodeLabel("e2e-nl-present"), pnv1.NodeLabel("e2e-nl-absent")
	labelsAre := func(what string, ok func(map[string]string) bool) map[string]string {
		t.Helper()
		var labels map[string]string
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := nodes.Get(ctx, own.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			labels = n.Labels
			return ok(labels), nil
		}); err != nil {
			t.Fatalf("%s: node %s has labels %v", what, own.Name, labels)
		}
		return labels
	}
	labels := labelsAre("the label of the PodNetwork whose master is on the node", func(l map[string]string) bool { return l[present] == "true" })
	if _, ok := labels[absent]; ok {
		t.Errorf("node %s has the label %s of a PodNetwork whose master %s it has not", own.Name, absent, absentMaster)
	}
	if others := otherLabels(labels); !maps.Equal(others, othersBefore) {
		t.Errorf("the node's other labels changed: %v, were %v", others, othersBefore)
	}
	n, err := nodes.Get(ctx, own.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(n.ManagedFields, func(f metav1.ManagedFieldsEntry) bool {
		return f.Manager == status.NodeLabelsFieldManager && f.Operation == metav1.ManagedFieldsOperationApply
	}) {
		t.Errorf("no fields of node %s applied by %s: %+v", own.Name, status.NodeLabelsFieldManager, n.ManagedFields)
	}

	if err := networks.Delete(ctx, "e2e-nl-present", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	labels = labelsAre("the label of the deleted PodNetwork removed", func(l map[string]string) bool { _, ok := l[present]; return !ok })
	if others := otherLabels(labels); !maps.Equal(others, othersBefore) {
		t.Errorf("the node's other labels changed: %v, were %v", others, othersBefore)
	}

	t.Run("admission policy", func(t *testing.T) {
		other, own := twoNodes(t, ctx)
		onOther, onOwn := nodeBoundClient(t, ctx, other), nodeBoundClient(t, ctx, own)
		dryRun := []string{metav1.DryRunAll}
		patch := func(client kubernetes.Interface, node, doc string) error {
			_, err := client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(doc), metav1.PatchOptions{DryRun: dryRun})
			return err
		}
		label := fmt.Sprintf(`{"metadata": {"labels": {%q: "true"}}}`, pnv1.NodeLabel("e2e-nl-policy"))
		waitRefused(t, ctx, "a PodNetwork label of another node", func() error { return patch(onOwn, other.Name, label) },
			"fastpathd of node "+own.Name+" may not write Node "+other.Name+": only its own Node's labels")
		wantRefused(t, "a PodNetwork label of this node with another node's token", patch(onOther, own.Name, label),
			"fastpathd of node "+other.Name+" may not write Node "+own.Name)
		onlyLabels := "fastpathd may change only the labels " + pnv1.NodeLabelPrefix + "* of Node " + own.Name + ": not its spec (taints included)"
		for what, doc := range map[string]string{
			"another label": `{"metadata": {"labels": {"e2e.fastpath.dev/role": "net"}}}`,
			"a taint":       `{"spec": {"taints": [{"key": "e2e.fastpath.dev/evict", "effect": "NoExecute"}]}}`,
			"an annotation": `{"metadata": {"annotations": {"e2e.fastpath.dev/note": "x"}}}`,
		} {
			wantRefused(t, what+" of this node with its token", patch(onOwn, own.Name, doc), onlyLabels)
		}
		wantRefused(t, "a PodNetwork label not true", patch(onOwn, own.Name, fmt.Sprintf(`{"metadata": {"labels": {%q: "false"}}}`, pnv1.NodeLabel("e2e-nl-policy"))),
			"only to \"true\"")
		// What the daemon does: a label of its own node, applied.
		if _, err := onOwn.CoreV1().Nodes().Apply(ctx, corev1ac.Node(own.Name).WithLabels(map[string]string{pnv1.NodeLabel("e2e-nl-policy"): "true"}),
			metav1.ApplyOptions{FieldManager: "e2e-nl-policy", DryRun: dryRun}); err != nil {
			t.Errorf("a PodNetwork label of this node with its token: %v", err)
		}
		if got, err := bed.Client().CoreV1().Nodes().Get(ctx, own.Name, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		} else if got.Labels["e2e.fastpath.dev/role"] != "" || got.Annotations["e2e.fastpath.dev/note"] != "" ||
			slices.ContainsFunc(got.Spec.Taints, func(tt corev1.Taint) bool { return strings.HasPrefix(tt.Key, "e2e.fastpath.dev/") }) {
			t.Errorf("the node changed: %+v %+v", got.ObjectMeta, got.Spec)
		}
	})
}

// otherLabels are the labels that are not of PodNetworks.
func otherLabels(labels map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if !pnv1.IsNodeLabel(k) {
			out[k] = v
		}
	}
	return out
}

// removePodNetworkLabels removes the e2e PodNetworks' labels from the
// bed's node.
func removePodNetworkLabels(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := bed.Client().CoreV1().Nodes().Get(ctx, bed.NodeName(), metav1.GetOptions{})
	if err != nil {
		t.Logf("node %s: %v", bed.NodeName(), err)
		return
	}
	labels := map[string]any{}
	for k := range n.Labels {
		if pnv1.IsNodeLabel(k) && strings.HasPrefix(strings.TrimPrefix(k, pnv1.NodeLabelPrefix), "e2e-nl-") {
			labels[k] = nil
		}
	}
	if len(labels) == 0 {
		return
	}
	doc, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bed.Client().CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, doc, metav1.PatchOptions{}); err != nil {
		t.Errorf("remove the labels %v of node %s: %v", slices.Collect(maps.Keys(labels)), n.Name, err)
	}
}
