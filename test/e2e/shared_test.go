//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// sharedParentName is the veth standing in for the NIC the pods share.
const sharedParentName = "fpsh0a"

// TestSharedNIC: eight pods share one NIC through one device of capacity
// eight, each with a macvlan made in its namespace and its own address from
// the node's pool, one with a bandwidth share (its transmit rate limited);
// two of them talk through the parent (bridge mode); a
// ninth pod stays pending until one of the eight goes, then gets the
// address that one had; when all are gone, the parent is as it was and the
// pool is empty.
func TestSharedNIC(t *testing.T) {
	ctx := testContext(t)
	parent := hostVethNamed(t, sharedParentName, "fpsh0b")
	for _, n := range []string{"fpsh0b", sharedParentName} {
		if err := netlink.LinkSetUp(mustLink(t, n)); err != nil {
			t.Fatal(err)
		}
	}
	before := mustLink(t, sharedParentName).Attrs()
	pools := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(pools, []byte(`apiVersion: fastpath.dev/v1alpha1
kind: IPPoolConfig
pools:
- name: fast
  subnet: 10.96.7.0/24
  gateway: 10.96.7.1
  rangeStart: 10.96.7.10
  rangeEnd: 10.96.7.29
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteSlices(t) })
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	// The example is valid for the API server (a dry run).
	dryRunCreate(t, ctx, filepath.Join(bed.Config().RepoDir, "deploy", "examples", "shared.yaml"))
	d := startDaemon(t, ctx, 26300,
		"--filter", fmt.Sprintf(`device.attributes["fastpath.dev"].kind == "netdev" && device.attributes["fastpath.dev"].ifName == %q`, parent.Attrs().Name),
		"--share", fmt.Sprintf(`device.attributes["fastpath.dev"].ifName == %q`, parent.Attrs().Name),
		"--share-interfaces", "8", "--share-bandwidth-mbps", "1000", "--ip-pools", pools)
	device := "netdev-" + parent.Attrs().Name
	if gaugeValue(scrapeMetrics(t, ctx, 26300), `fastpath_cluster_feature{feature="multiple_allocations"}`) == 0 {
		sharedWithoutConsumableCapacity(t, ctx, device)
		return
	}
	waitDevices(t, ctx, device+" shared with 8 interfaces and 1 Gbit/s", func(devs map[string]resourceapi.Device) bool {
		dev, ok := devs[device]
		if !ok || dev.AllowMultipleAllocations == nil || !*dev.AllowMultipleAllocations {
			return false
		}
		c, bw := dev.Capacity["interfaces"], dev.Capacity["bandwidth"]
		return c.Value.Value() == 8 && bw.Value.Value() == 1_000_000_000
	})

	tmpl := claimTemplate(t, ctx, "e2e-shared", "fast", "shared.fastpath.dev", `device.attributes["fastpath.dev"].kind == "netdev"`,
		&v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "fast0"}, IPAM: &v1alpha1.IPAMSpec{Pool: "fast"}})
	// Pod 0 asks for 100 Mbit/s of the device's bandwidth too.
	bwSpec := tmpl.Spec.Spec.DeepCopy()
	bwSpec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{
		Requests: map[resourceapi.QualifiedName]resource.Quantity{"bandwidth": resource.MustParse("100M")}}
	bwTmpl := createTemplate(t, ctx, "e2e-shared-bw", *bwSpec)
	pod := func(i int) *corev1.Pod {
		name := tmpl.Name
		if i == 0 {
			name = bwTmpl.Name
		}
		return claimPod(fmt.Sprintf("e2e-shared-%d", i), "ifaces", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &name})
	}
	// The eight start together on the node. They are scheduled one after
	// another: the scheduler, allocating shares of one device to claims
	// at the same moment, may refuse the last share while the others'
	// allocations are in flight, and tries that pod again only on a later
	// change of claims or slices (none comes: the node's slices are not
	// written while their devices are in use) or after minutes.
	for i := range 8 {
		if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, pod(i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		name := pod(i).Name
		t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", name) })
		if _, err := bed.WaitPod(ctx, "default", name, 30*time.Second, func(p *corev1.Pod) (bool, error) { return p.Spec.NodeName != "", nil }); err != nil {
			t.Fatalf("%s was not scheduled: %v\n%s", name, err, podState(ctx, name))
		}
	}
	addrs := map[string]string{} // pod: its address
	seen := map[string]string{}  // address: pod
	for i := range 8 {
		name := pod(i).Name
		addr := sharedAddress(t, ctx, name)
		if other, dup := seen[addr]; dup {
			t.Errorf("%s and %s both got %s", other, name, addr)
		}
		a, err := netip.ParsePrefix(addr)
		if err != nil || a.Bits() != 24 || a.Addr().Compare(netip.MustParseAddr("10.96.7.10")) < 0 || a.Addr().Compare(netip.MustParseAddr("10.96.7.29")) > 0 {
			t.Errorf("%s got %s, not from the pool's range", name, addr)
		}
		seen[addr], addrs[name] = name, addr
	}

	// Two of them talk through the parent.
	st := podClaimStatus(t, ctx, mustPod(t, ctx, pod(0).Name))
	var data struct {
		Interfaces []struct{ Sandbox string } `json:"interfaces"`
		Share      map[string]any             `json:"share"`
	}
	if st.Data == nil || json.Unmarshal(st.Data.Raw, &data) != nil || len(data.Interfaces) != 1 || data.Interfaces[0].Sandbox == "" {
		t.Fatalf("%s: status data %v", pod(0).Name, st.Data)
	}
	if st.ShareID == nil || data.Share["parent"] != parent.Attrs().Name || data.Share["kind"] != "macvlan" || data.Share["ipamPool"] != "fast" ||
		data.Share["bandwidth"] != float64(100_000_000) {
		t.Errorf("%s: the status does not say which share it got: shareID %v, %v", pod(0).Name, st.ShareID, data.Share)
	}
	if rate := tbfRate(t, data.Interfaces[0].Sandbox, "fast0"); rate != 100_000_000/8 {
		t.Errorf("%s: fast0's transmit limit is %d bytes/s, want %d", pod(0).Name, rate, 100_000_000/8)
	}
	to, _, _ := strings.Cut(addrs[pod(1).Name], "/")
	if out, err := exec.CommandContext(ctx, "nsenter", "--net="+data.Interfaces[0].Sandbox, "ping", "-c", "3", "-W", "2", to).CombinedOutput(); err != nil {
		t.Errorf("%s cannot reach %s (%s) through the shared parent: %v\n%s", pod(0).Name, pod(1).Name, to, err, out)
	}

	// A ninth is beyond the capacity: it waits, unscheduled.
	ninth := pod(8)
	if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, ninth, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", ninth.Name) })
	var why string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := bed.Client().CoreV1().Pods("default").Get(ctx, ninth.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				why = c.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the ninth pod was not held back by the capacity")
	}
	if p := mustPod(t, ctx, ninth.Name); p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Fatalf("the ninth pod was placed: node %q, phase %s (%s)", p.Spec.NodeName, p.Status.Phase, why)
	}
	t.Logf("the ninth pod waits: %s", why)

	// One goes: the ninth runs, with the address that one freed.
	freed := addrs[pod(3).Name]
	if err := bed.DeletePod(ctx, "default", pod(3).Name); err != nil {
		t.Fatal(err)
	}
	if got := sharedAddress(t, ctx, ninth.Name); got != freed {
		t.Errorf("the ninth pod got %s, want the freed %s (the pool's lowest free address)", got, freed)
	}

	// All go: the parent is as it was, and no claim holds an address.
	for i := range 9 {
		if err := bed.DeletePod(ctx, "default", pod(i).Name); err != nil {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return checkpointClaims(t, d) == 0, nil
	})
	if err != nil {
		t.Fatalf("%d claims still prepared after every pod went", checkpointClaims(t, d))
	}
	after := mustLink(t, sharedParentName).Attrs()
	if after.Index != before.Index || after.MTU != before.MTU || after.HardwareAddr.String() != before.HardwareAddr.String() ||
		after.Alias != before.Alias || after.Flags&net.FlagUp != before.Flags&net.FlagUp {
		t.Errorf("the parent changed: %+v, was %+v", after, before)
	}
	if as, _ := netlink.AddrList(mustLink(t, sharedParentName), netlink.FAMILY_V4); len(as) != 0 {
		t.Errorf("the parent has addresses: %v", as)
	}
	var cls []resourceapi.ResourceClaim
	if l, err := bed.Client().ResourceV1().ResourceClaims("default").List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range l.Items {
			if strings.HasPrefix(c.Name, "e2e-shared-") {
				cls = append(cls, c)
			}
		}
	}
	if len(cls) != 0 {
		t.Errorf("%d claims of the pods are left", len(cls))
	}
}

// sharedAddress waits for the pod to run and print its fast0, and returns
// fast0's IPv4 address. The wait allows for a kubelet that prepares a new
// pod's claim only at its next resync, a minute later (see the README's
// test bed).
func sharedAddress(t *testing.T, ctx context.Context, pod string) string {
	t.Helper()
	logs, err := bed.WaitPodLog(ctx, "default", pod, "fast0 ", 150*time.Second)
	if err != nil {
		t.Fatalf("%s: %v\n%s", pod, err, podState(ctx, pod))
	}
	for line := range strings.Lines(logs) {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "fast0" {
			for _, a := range strings.Split(f[2], ",") {
				if strings.HasPrefix(a, "10.96.7.") {
					return a
				}
			}
		}
	}
	t.Fatalf("%s: fast0 has no address of the pool:\n%s", pod, logs)
	return ""
}

// tbfRate is the rate of the token bucket on the interface in the network
// namespace at netnsPath, in bytes per second; 0 for none.
func tbfRate(t *testing.T, netnsPath, name string) uint64 {
	t.Helper()
	h, l := linkInPod(t, netnsPath, name)
	qs, err := h.QdiscList(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if tbf, ok := q.(*netlink.Tbf); ok {
			return tbf.Rate
		}
	}
	return 0
}

func mustPod(t *testing.T, ctx context.Context, name string) *corev1.Pod {
	t.Helper()
	p, err := bed.Client().CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// podState says where a pod is: its node, phase and conditions, its
// claims' allocations, and its events.
func podState(ctx context.Context, name string) string {
	var b strings.Builder
	p, err := bed.Client().CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	fmt.Fprintf(&b, "pod %s: node %q, phase %s, gates %v\n", name, p.Spec.NodeName, p.Status.Phase, p.Spec.SchedulingGates)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "  %s %s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName == nil {
			fmt.Fprintf(&b, "  claim %s: not created\n", s.Name)
			continue
		}
		c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			fmt.Fprintf(&b, "  claim %s: %v\n", *s.ResourceClaimName, err)
			continue
		}
		fmt.Fprintf(&b, "  claim %s: allocation %+v, reserved for %+v\n", c.Name, c.Status.Allocation, c.Status.ReservedFor)
	}
	events, err := bed.Client().CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err == nil {
		for _, e := range events.Items {
			fmt.Fprintf(&b, "  event %s %s: %s\n", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}

// sharedWithoutConsumableCapacity is TestSharedNIC on a cluster whose API
// server does not serve DRAConsumableCapacity (Kubernetes 1.34's
// default): fastpathd says so at start, in an event on the node, and
// publishes the shared device for one claim at a time; a pod's claim gets
// it, with its macvlan and an address from the pool, and a second pod
// waits until the first goes.
func sharedWithoutConsumableCapacity(t *testing.T, ctx context.Context, device string) {
	t.Helper()
	var said string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := bed.Client().CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,reason=DRAFeatureOff"})
		if err != nil {
			return false, nil
		}
		for _, e := range events.Items {
			if strings.Contains(e.Message, "DRAConsumableCapacity") {
				said = e.Message
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal("no DRAFeatureOff event on the node names DRAConsumableCapacity")
	}
	t.Logf("the node's event: %s", said)
	waitFeaturesOff(t, ctx, corev1.ConditionTrue, "multiple_allocations (cluster): feature gate DRAConsumableCapacity off")
	waitDevices(t, ctx, device+" for one claim at a time", func(devs map[string]resourceapi.Device) bool {
		dev, ok := devs[device]
		return ok && dev.AllowMultipleAllocations == nil
	})
	tmpl := claimTemplate(t, ctx, "e2e-shared", "fast", "shared.fastpath.dev", `device.attributes["fastpath.dev"].kind == "netdev"`,
		&v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "fast0"}, IPAM: &v1alpha1.IPAMSpec{Pool: "fast"}})
	pod := func(i int) *corev1.Pod {
		return claimPod(fmt.Sprintf("e2e-shared-%d", i), "ifaces", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &tmpl.Name})
	}
	first, second := pod(0), pod(1)
	createPod(t, ctx, first)
	addr := sharedAddress(t, ctx, first.Name)
	t.Logf("%s runs with fast0 %s", first.Name, addr)
	createPod(t, ctx, second)
	if _, err := bed.WaitPod(ctx, "default", second.Name, 10*time.Second, func(p *corev1.Pod) (bool, error) { return p.Spec.NodeName != "", nil }); err == nil {
		t.Fatalf("%s was scheduled while %s holds the device", second.Name, first.Name)
	}
	if err := bed.DeletePod(ctx, "default", first.Name); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s runs with fast0 %s once %s is gone", second.Name, sharedAddress(t, ctx, second.Name), first.Name)
}
