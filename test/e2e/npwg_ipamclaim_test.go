//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

var ipamClaimsGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1alpha1", Resource: "ipamclaims"}

// TestNPWGIPAMClaim: with --npwg-ipamclaims, fastpathd installed by the
// chart (with the IPAMClaim CRD, its RBAC and admission policy) gives an
// attachment whose element names an IPAMClaim an address of the node pool
// its NetworkAttachmentDefinition names, and writes it to the IPAMClaim
// with the owner pod. A second pod naming the IPAMClaim while the first
// runs does not start. The pod deleted and created again gets the same
// address. The pool's one address is not given to another IPAMClaim while
// the first exists, pods gone or not; once it is deleted, it is.
func TestNPWGIPAMClaim(t *testing.T) {
	// Longer than testContext's: the kubelet retries a refused sandbox
	// with a growing backoff.
	ctx, cancel := context.WithTimeout(klog.NewContext(t.Context(), klog.Background()), 8*time.Minute)
	t.Cleanup(cancel)
	master := hostVethNamed(t, "fpic0a", "fpic0b")
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	// One address: whoever holds it, no one else gets one.
	pools := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(pools, []byte(`apiVersion: fastpath.dev/v1alpha1
kind: IPPoolConfig
pools:
- name: tenant
  subnet: 10.94.0.0/24
  rangeStart: 10.94.0.10
  rangeEnd: 10.94.0.10
`), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, ctx, 26196, "--npwg", "--npwg-ipamclaims", "--npwg-ipamclaim-check-interval", "1s",
		"--cni-bin-dir", bed.Config().CNIBinDir(), "--cni-plugins", "macvlan,static,host-local", "--ip-pools", pools)

	nad := fmt.Sprintf(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: net-p
  annotations:
    %s: tenant
spec:
  config: '{"cniVersion": "1.0.0", "name": "net-p", "plugins": [{"type": "macvlan", "master": %q, "mode": "bridge", "ipam": {"type": "static"}, "capabilities": {"ips": true}}]}'
`, npwg.IPPoolAnnotation, master.Attrs().Name)
	createServed(t, ctx, nads, nad)
	t.Cleanup(func() {
		_ = dynamicClient(t).Resource(nads).Namespace("default").Delete(context.Background(), "net-p", metav1.DeleteOptions{})
	})
	for _, name := range []string{"vm-a", "vm-b"} {
		createServed(t, ctx, ipamClaimsGVR, fmt.Sprintf(`apiVersion: k8s.cni.cncf.io/v1alpha1
kind: IPAMClaim
metadata:
  name: %s
spec:
  network: net-p
  interface: net1
`, name))
		t.Cleanup(func() { deleteIPAMClaim(t, name) })
	}

	// The first pod: the pool's address, written to the IPAMClaim.
	runIPAMPod(t, ctx, "e2e-ipc", "vm-a", "10.94.0.10/24")
	claim := getIPAMClaim(t, ctx, "vm-a")
	if !slices.Equal(claim.Status.IPs, []string{"10.94.0.10/24"}) || claim.Status.OwnerPod == nil || claim.Status.OwnerPod.Name != "e2e-ipc" {
		t.Errorf("IPAMClaim vm-a status %+v, want ips [10.94.0.10/24] and owner e2e-ipc", claim.Status)
	}

	// A second pod naming it meanwhile does not start.
	twin := ipamPod("e2e-ipc-twin", "vm-a", "sleep")
	if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, twin, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", twin.Name) })
	if msg, err := waitEvent(ctx, twin.Name, "held by pod default/e2e-ipc"); err != nil {
		t.Errorf("no event of the second pod naming the IPAMClaim says it is held: %v", err)
	} else {
		t.Logf("event: %s", msg)
	}
	if err := bed.DeletePod(ctx, "default", twin.Name); err != nil {
		t.Fatal(err)
	}

	// Deleted and created again: the same address.
	if err := bed.DeletePod(ctx, "default", "e2e-ipc"); err != nil {
		t.Fatal(err)
	}
	lease := waitLease(t, ctx, d.stateDir, "vm-a", func(c *claims.Claim) bool { return !c.Prepared })
	if len(lease.Devices) != 1 || lease.Devices[0].IPAM == nil || lease.Devices[0].IPAM.Address != "10.94.0.10/24" {
		t.Errorf("record of IPAMClaim vm-a after its pod went: %+v, want it to keep 10.94.0.10/24", lease)
	}
	runIPAMPod(t, ctx, "e2e-ipc", "vm-a", "10.94.0.10/24")
	if err := bed.DeletePod(ctx, "default", "e2e-ipc"); err != nil {
		t.Fatal(err)
	}
	waitLease(t, ctx, d.stateDir, "vm-a", func(c *claims.Claim) bool { return !c.Prepared })

	// Another IPAMClaim: the pool's one address is vm-a's while it exists.
	other := ipamPod("e2e-ipc-b", "vm-b", "ifaces")
	if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", other.Name) })
	if msg, err := waitEvent(ctx, other.Name, "no free address"); err != nil {
		t.Errorf("no event of the pod of another IPAMClaim says the pool is full: %v", err)
	} else {
		t.Logf("event: %s", msg)
	}
	if lease := waitLease(t, ctx, d.stateDir, "vm-a", func(*claims.Claim) bool { return true }); len(lease.Devices) != 1 {
		t.Errorf("IPAMClaim vm-a lost its address while it exists: %+v", lease)
	}
	deleteIPAMClaim(t, "vm-a")
	if _, err := bed.WaitPod(ctx, "default", other.Name, 2*time.Minute, func(p *corev1.Pod) (bool, error) {
		return p.Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		t.Fatalf("the pod of IPAMClaim vm-b did not start once vm-a was deleted: %v", err)
	}
	waitIPAMLogs(t, ctx, other.Name, "10.94.0.10/24")
	if claim := getIPAMClaim(t, ctx, "vm-b"); !slices.Equal(claim.Status.IPs, []string{"10.94.0.10/24"}) {
		t.Errorf("IPAMClaim vm-b status %+v, want the address vm-a's deletion released", claim.Status)
	}

	// The last: nothing left once its pod and IPAMClaim are gone.
	if err := bed.DeletePod(ctx, "default", other.Name); err != nil {
		t.Fatal(err)
	}
	deleteIPAMClaim(t, "vm-b")

	// The network's own IPAM (host-local, no node pool): the address the
	// first pod got is written to the IPAMClaim, and asked for again when
	// the pod is deleted and created again (§8).
	createServed(t, ctx, nads, fmt.Sprintf(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: net-h
spec:
  config: '{"cniVersion": "1.0.0", "name": "net-h", "plugins": [{"type": "macvlan", "master": %q, "mode": "bridge", "capabilities": {"ips": true}, "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "10.95.1.0/24", "rangeStart": "10.95.1.20"}]]}}]}'
`, master.Attrs().Name, filepath.Join(t.TempDir(), "host-local")))
	t.Cleanup(func() {
		_ = dynamicClient(t).Resource(nads).Namespace("default").Delete(context.Background(), "net-h", metav1.DeleteOptions{})
	})
	createServed(t, ctx, ipamClaimsGVR, `apiVersion: k8s.cni.cncf.io/v1alpha1
kind: IPAMClaim
metadata:
  name: vm-h
spec:
  network: net-h
  interface: net1
`)
	t.Cleanup(func() { deleteIPAMClaim(t, "vm-h") })
	for round := range 2 {
		pod := testbed.WorkloadPod("default", "e2e-iph", "ifaces")
		pod.Annotations = map[string]string{nadv1.NetworkAttachmentAnnot: `[{"name": "net-h", "ipam-claim-reference": "vm-h"}]`}
		if _, err := bed.RunPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
		waitIPAMLogs(t, ctx, pod.Name, "10.95.1.20/24")
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			return slices.Equal(getIPAMClaim(t, ctx, "vm-h").Status.IPs, []string{"10.95.1.20/24"}), nil
		}); err != nil {
			t.Errorf("round %d: IPAMClaim vm-h status %+v, want the address host-local gave", round, getIPAMClaim(t, ctx, "vm-h").Status)
		}
		if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
			t.Fatal(err)
		}
	}
	deleteIPAMClaim(t, "vm-h")
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(leases(t, d.stateDir)) == 0, nil
	}); err != nil {
		t.Errorf("records of deleted IPAMClaims left: %+v", leases(t, d.stateDir))
	}
}

// createServed creates an object of a CRD the chart installed, which may
// take a moment to be served.
func createServed(t *testing.T, ctx context.Context, gvr schema.GroupVersionResource, doc string) {
	t.Helper()
	var err error
	if pollErr := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err = createYAML(t, ctx, gvr, true, doc)
		return err == nil, nil
	}); pollErr != nil {
		t.Fatalf("create %s: %v", gvr.Resource, err)
	}
}

func deleteIPAMClaim(t *testing.T, name string) {
	t.Helper()
	_ = dynamicClient(t).Resource(ipamClaimsGVR).Namespace("default").Delete(context.Background(), name, metav1.DeleteOptions{})
}

func getIPAMClaim(t *testing.T, ctx context.Context, name string) *npwg.IPAMClaim {
	t.Helper()
	u, err := dynamicClient(t).Resource(ipamClaimsGVR).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var c npwg.IPAMClaim
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// ipamPod is a pod attaching net-p with the addresses of the IPAMClaim.
func ipamPod(name, claim string, args ...string) *corev1.Pod {
	pod := testbed.WorkloadPod("default", name, args...)
	pod.Annotations = map[string]string{nadv1.NetworkAttachmentAnnot: fmt.Sprintf(`[{"name": "net-p", "ipam-claim-reference": %q}]`, claim)}
	return pod
}

// runIPAMPod runs a pod of the IPAMClaim and checks its net1's address.
func runIPAMPod(t *testing.T, ctx context.Context, name, claim, want string) {
	t.Helper()
	if _, err := bed.RunPod(ctx, ipamPod(name, claim, "ifaces")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", name) })
	waitIPAMLogs(t, ctx, name, want)
}

func waitIPAMLogs(t *testing.T, ctx context.Context, pod, want string) {
	t.Helper()
	logs, err := bed.WaitPodLog(ctx, "default", pod, "net1 ", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, want) {
		t.Errorf("pod %s's interfaces lack %s:\n%s", pod, want, logs)
	}
}

// leases are the IPAMClaim records of the daemon's checkpoint, by name.
func leases(t *testing.T, stateDir string) map[string]*claims.Claim {
	t.Helper()
	out := map[string]*claims.Claim{}
	cls, _, err := claims.Read(filepath.Join(stateDir, "checkpoint.json"))
	if err != nil {
		return out
	}
	for _, c := range cls {
		if c.Driver == claims.DriverIPAMClaim {
			out[c.Name] = c
		}
	}
	return out
}

// waitLease waits for the record of the IPAMClaim to be as ok says.
func waitLease(t *testing.T, ctx context.Context, stateDir, name string, ok func(*claims.Claim) bool) *claims.Claim {
	t.Helper()
	var c *claims.Claim
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c = leases(t, stateDir)[name]
		return c != nil && ok(c), nil
	}); err != nil {
		t.Fatalf("record of IPAMClaim %s: %+v", name, c)
	}
	return c
}
