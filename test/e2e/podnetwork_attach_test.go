//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/netapi"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// TestPodNetworkAttach: with the CRI Network API, PodNetworks and the NPWG
// machinery on, a network set through the API's socket is listed with its
// status beside _fallback, the bed's own CNI configuration; the pod of the
// KEP's "Status" example (default, dataplane1 on net1, an attachment on
// net2) gets dataplane1 with the node's configuration of that name and the
// attachment's PodNetwork with its NetworkAttachmentDefinition, and its
// network.fastpath.dev/network-status says so; a pod naming a disabled
// PodNetwork does not start, and its event says why, until it is enabled
// again; the network removed through the API is no longer listed.
func TestPodNetworkAttach(t *testing.T) {
	ctx := testContext(t)
	dyn := dynamicClient(t)
	networks := dyn.Resource(pnv1.PodNetworkResource)
	attachments := dyn.Resource(pnv1.PodNetworkAttachmentResource).Namespace("default")
	t.Cleanup(func() { _ = networks.Delete(context.Background(), pnv1.DefaultPodNetworkName, metav1.DeleteOptions{}) })
	master := hostVethNamed(t, "fppna0a", "fppna0b")
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, ctx, 26243, "--npwg", "--podnetworks", "--network-api", "--cni-bin-dir", bed.Config().CNIBinDir(),
		"--cni-plugins", "macvlan,static")
	t.Cleanup(func() { controllerLogClean(t) })

	// The CRI Network API, through its socket.
	client, conn, err := netapi.Dial(filepath.Join(d.stateDir+".netapi", "network-api.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	conflist := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "dataplane1", "plugins": [{"type": "macvlan", "master": %q, "mode": "bridge",
		"ipam": {"type": "static", "addresses": [{"address": "10.96.1.5/24"}]}}]}`, master.Attrs().Name)
	cfg, err := netapi.FromConflist([]byte(conflist))
	if err != nil {
		t.Fatal(err)
	}
	// Before the daemon goes: the node's networks are the node's
	// configuration, and stay unless removed.
	t.Cleanup(func() {
		_, _ = client.RemovePodNetwork(context.Background(), &netapi.RemovePodNetworkRequest{Name: "dataplane1"})
	})
	var setErr error
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, setErr = client.SetPodNetwork(ctx, &netapi.SetPodNetworkRequest{Config: &netapi.NetworkConfig{
			Metadata: &netapi.NetworkMetadata{Name: "dataplane1"}, Cniv1Config: cfg}})
		return setErr == nil, nil
	}); err != nil {
		t.Fatalf("SetPodNetwork: %v", setErr)
	}
	list, err := client.ListPodNetwork(ctx, &netapi.ListPodNetworkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	statuses := map[string]*netapi.NetworkStatus{}
	for _, n := range list.GetNetworks() {
		statuses[n.GetConfig().GetMetadata().GetName()] = n.GetStatus()
	}
	t.Logf("networks: %v", statuses)
	for _, name := range []string{netapi.FallbackName, "dataplane1"} {
		if st := statuses[name]; st == nil || !st.GetSandboxManagement() {
			t.Errorf("network %s: status %v, want listed and ready for sandboxes", name, st)
		}
	}

	// The same through the CLI, on the socket.
	// The binary the image was built with, else built now.
	args := []string{"networks", "list", "--socket", filepath.Join(d.stateDir+".netapi", "network-api.sock")}
	cli := exec.Command(filepath.Join(bed.Config().RepoDir, "bin", "fastpathd"), args...)
	if _, err := os.Stat(cli.Path); err != nil {
		cli = exec.Command("go", append([]string{"run", "./cmd/fastpathd"}, args...)...)
	}
	cli.Dir = bed.Config().RepoDir
	out, err := cli.CombinedOutput()
	if err != nil {
		t.Errorf("fastpathd networks list: %v\n%s", err, out)
	}
	for _, want := range []string{netapi.FallbackName, "dataplane1"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("fastpathd networks list lacks %s:\n%s", want, out)
		}
	}
	t.Logf("fastpathd networks list:\n%s", out)

	// _fallback follows the bed's CNI configuration as it changes: a key
	// the plugins ignore is added to its first plugin, and taken out again.
	confs, err := filepath.Glob(filepath.Join(bed.Config().CNIConfDir(), "*.conflist"))
	if err != nil || len(confs) == 0 {
		t.Fatalf("the bed's CNI configuration: %v, %v", confs, err)
	}
	slices.Sort(confs)
	original, err := os.ReadFile(confs[0])
	if err != nil {
		t.Fatal(err)
	}
	var edited map[string]any
	if err := json.Unmarshal(original, &edited); err != nil {
		t.Fatal(err)
	}
	edited["plugins"].([]any)[0].(map[string]any)["fpnaMarker"] = "e2e"
	data, _ := json.Marshal(edited)
	restore := func() { _ = os.WriteFile(confs[0], original, 0o644) }
	t.Cleanup(restore)
	if err := os.WriteFile(confs[0], data, 0o644); err != nil {
		t.Fatal(err)
	}
	fallbackHas := func(marked bool) error {
		return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			list, err := client.ListPodNetwork(ctx, &netapi.ListPodNetworkRequest{})
			if err != nil {
				return false, nil
			}
			for _, n := range list.GetNetworks() {
				if n.GetConfig().GetMetadata().GetName() == netapi.FallbackName {
					// Caught halfway through the write, it may have none.
					plugins := n.GetConfig().GetCniv1Config().GetPlugins()
					if len(plugins) == 0 {
						return false, nil
					}
					_, has := plugins[0].GetParameters()["fpnaMarker"]
					return has == marked, nil
				}
			}
			return false, nil
		})
	}
	if err := fallbackHas(true); err != nil {
		t.Errorf("_fallback did not follow the change of %s: %v", confs[0], err)
	}
	restore()
	if err := fallbackHas(false); err != nil {
		t.Errorf("_fallback did not follow %s back: %v", confs[0], err)
	}

	// The KEP's objects: dataplane1 (the node has its configuration), and
	// an attachment of a PodNetwork whose parameters are a
	// NetworkAttachmentDefinition.
	nad := fmt.Sprintf(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: fast-net
spec:
  config: '{"cniVersion": "1.0.0", "name": "fast-net", "plugins": [{"type": "macvlan", "master": %q, "mode": "bridge", "ipam": {"type": "static", "addresses": [{"address": "10.96.2.5/24"}]}}]}'
`, master.Attrs().Name)
	createServed(t, ctx, nads, nad)
	for _, doc := range []string{`apiVersion: network.fastpath.dev/v1alpha1
kind: PodNetwork
metadata:
  name: dataplane1
spec:
  enabled: true
  provider: fastpath.dev/fastpathd
`, `apiVersion: network.fastpath.dev/v1alpha1
kind: PodNetwork
metadata:
  name: fast
spec:
  enabled: true
  parametersRefs:
  - {group: k8s.cni.cncf.io, kind: network-attachment-definitions, name: fast-net, namespace: default}
`} {
		if _, err := createYAML(t, ctx, pnv1.PodNetworkResource, false, doc); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, name := range []string{"dataplane1", "fast"} {
			_ = networks.Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	if _, err := createYAML(t, ctx, pnv1.PodNetworkAttachmentResource, true, `apiVersion: network.fastpath.dev/v1alpha1
kind: PodNetworkAttachment
metadata:
  name: my-interface-fast-net
spec:
  podNetworkName: fast
`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = attachments.Delete(context.Background(), "my-interface-fast-net", metav1.DeleteOptions{}) })
	waitCondition(t, ctx, networks, "dataplane1", metav1.ConditionTrue, pnv1.ReasonReady, "")
	waitCondition(t, ctx, networks, "fast", metav1.ConditionTrue, pnv1.ReasonReady, "")
	waitCondition(t, ctx, attachments, "my-interface-fast-net", metav1.ConditionTrue, pnv1.ReasonReady, "")

	pod := testbed.WorkloadPod("default", "e2e-podnetwork-attach", "ifaces")
	pod.Annotations = map[string]string{pnv1.AnnotationNetworks: `[{"podNetworkName": "default", "interfaceName": "eth0", "isDefaultGW": true},
		{"podNetworkName": "dataplane1", "interfaceName": "net1"}, {"podNetworkAttachmentName": "my-interface-fast-net", "interfaceName": "net2"}]`}
	runWithInterfaces(t, ctx, pod, "net2", "net1 ", "10.96.1.5/24", "net2 ", "10.96.2.5/24")
	var sts []pnv1.NetworkStatus
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		sts = nil
		return json.Unmarshal([]byte(p.Annotations[pnv1.AnnotationNetworkStatus]), &sts) == nil && len(sts) == 3, nil
	}); err != nil {
		t.Fatalf("the pod's %s: %+v, want default, dataplane1 and fast", pnv1.AnnotationNetworkStatus, sts)
	}
	t.Logf("network status: %+v", sts)
	if sts[0].Name != "default" || sts[0].InterfaceName != "eth0" || !sts[0].IsDefaultGW ||
		sts[1].Name != "dataplane1" || sts[1].InterfaceName != "net1" || sts[1].IP != "10.96.1.5" ||
		sts[2].Name != "fast" || sts[2].InterfaceName != "net2" || sts[2].IP != "10.96.2.5" {
		t.Errorf("network status %+v", sts)
	}

	// Disabled, a PodNetwork takes no new pod; enabled again, the
	// runtime's next try starts it.
	setEnabled(t, ctx, networks, "dataplane1", false)
	waitCondition(t, ctx, networks, "dataplane1", metav1.ConditionFalse, pnv1.ReasonAdministrativelyDisabled, "")
	late := testbed.WorkloadPod("default", "e2e-podnetwork-late", "ifaces")
	late.Annotations = map[string]string{pnv1.AnnotationNetworks: `[{"podNetworkName": "dataplane1", "interfaceName": "net1"}]`}
	createRefused(t, ctx, late, pnv1.ReasonAdministrativelyDisabled, "the pod naming a disabled PodNetwork says so")
	// The first pod holds 10.96.1.5 on the same master: the late one
	// needs its own address, so the node's network is set again.
	cfg2, err := netapi.FromConflist([]byte(strings.Replace(conflist, "10.96.1.5", "10.96.1.6", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.SetPodNetwork(ctx, &netapi.SetPodNetworkRequest{Config: &netapi.NetworkConfig{
		Metadata: &netapi.NetworkMetadata{Name: "dataplane1"}, Cniv1Config: cfg2}}); err != nil {
		t.Fatal(err)
	}
	setEnabled(t, ctx, networks, "dataplane1", true)
	if _, err := bed.WaitPodLog(ctx, "default", late.Name, "10.96.1.6/24", 90*time.Second); err != nil {
		t.Errorf("the pod did not start once its PodNetwork was enabled again: %v", err)
	}

	if _, err := client.RemovePodNetwork(ctx, &netapi.RemovePodNetworkRequest{Name: "dataplane1"}); err != nil {
		t.Fatal(err)
	}
	if list, err = client.ListPodNetwork(ctx, &netapi.ListPodNetworkRequest{}); err != nil {
		t.Fatal(err)
	}
	// What is left of dataplane1 is the PodNetwork object, listed from
	// the cluster, with no configuration on this node any more.
	for _, n := range list.GetNetworks() {
		if n.GetConfig().GetMetadata().GetName() != "dataplane1" {
			continue
		}
		if st := n.GetStatus(); !strings.HasPrefix(st.GetMessage(), "PodNetwork dataplane1: ") || st.GetSandboxManagement() {
			t.Errorf("after RemovePodNetwork, dataplane1 is listed as %v: want only the PodNetwork, without a configuration", st)
		}
	}

	// A pod that lists only the default PodNetwork gets its status; while
	// the default is disabled, a new pod that lists it is held.
	waitCondition(t, ctx, networks, pnv1.DefaultPodNetworkName, metav1.ConditionTrue, pnv1.ReasonReady, "")
	only := testbed.WorkloadPod("default", "e2e-podnetwork-default", "ifaces")
	only.Annotations = map[string]string{pnv1.AnnotationNetworks: `[{"name": "default"}]`}
	runWithInterfaces(t, ctx, only, "eth0")
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := bed.Client().CoreV1().Pods("default").Get(ctx, only.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		sts = nil
		return json.Unmarshal([]byte(p.Annotations[pnv1.AnnotationNetworkStatus]), &sts) == nil && len(sts) == 1, nil
	}); err != nil {
		t.Errorf("the pod listing only default: %s %+v, want the default's entry", pnv1.AnnotationNetworkStatus, sts)
	} else if sts[0].Name != "default" || sts[0].InterfaceName != "eth0" || !sts[0].IsDefaultGW || sts[0].IP == "" {
		t.Errorf("the default's entry %+v", sts[0])
	}
	setEnabled(t, ctx, networks, pnv1.DefaultPodNetworkName, false)
	// (The test's clean-up deletes the default PodNetwork: the
	// controller makes it again, enabled, for the next.)
	waitCondition(t, ctx, networks, pnv1.DefaultPodNetworkName, metav1.ConditionFalse, pnv1.ReasonAdministrativelyDisabled, "")
	held := testbed.WorkloadPod("default", "e2e-podnetwork-held", "ifaces")
	held.Annotations = map[string]string{pnv1.AnnotationNetworks: `[{"name": "default"}]`}
	createRefused(t, ctx, held, pnv1.ReasonAdministrativelyDisabled, "the pod listing the disabled default PodNetwork")
}
