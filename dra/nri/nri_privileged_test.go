//go:build privileged

package nri

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

var seq atomic.Int32

func newNetNS(t *testing.T) string {
	t.Helper()
	return netnstest.New(t, fmt.Sprintf("%s-%d-%d", testPrefix, os.Getpid(), seq.Add(1)))
}

// newVeth creates a veth pair in the host namespace; the returned end
// stands in for a VF netdev.
func newVeth(t *testing.T) netlink.Link {
	t.Helper()
	n := seq.Add(1)
	// Unique on the machine: another run of these tests may be going on.
	id := fmt.Sprintf("%s%d-%d", testPrefix, os.Getpid()%100000, n)
	return netnstest.Veth(t, id+"a", id+"b")
}

// testBed is a plugin over a store, with a fake API server for the status.
type testBed struct {
	plugin *Plugin
	hooks  *hooks
	store  *claims.Store
	client *fake.Clientset
}

func newTestBed(t *testing.T, cls ...claims.Claim) (*testBed, context.Context) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	store, err := claims.Open(filepath.Join(t.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	for _, c := range cls {
		c.Prepared = true
		if err := store.Admit(c); err != nil {
			t.Fatal(err)
		}
		rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}}
		for _, d := range c.Devices {
			res := resourceapi.DeviceRequestAllocationResult{Request: d.Request, Driver: claims.DriverFastpath, Pool: d.Pool, Device: d.Device}
			if d.Shared != nil && d.Shared.ShareID != "" {
				res.ShareID = new(types.UID(d.Shared.ShareID))
			}
			rc.Status.Allocation.Devices.Results = append(rc.Status.Allocation.Devices.Results, res)
		}
		if _, err := client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	writer := status.NewWriter(client)
	writer.Start(ctx)
	a, err := dataplane.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	p := New(Options{Socket: filepath.Join(t.TempDir(), "nri.sock"), Store: store, Attacher: a, Status: writer})
	return &testBed{plugin: p, hooks: &hooks{p: p}, store: store, client: client}, ctx
}

// netdevClaim is a prepared claim of pod with one veth as its netdev.
func netdevClaim(name string, pod types.UID, host netlink.Link, ifName string, addresses ...string) claims.Claim {
	return claims.Claim{Driver: claims.DriverFastpath, UID: types.UID("uid-" + name), Namespace: "default", Name: name,
		Pod: claims.Pod{UID: pod, Name: "pod-" + string(pod)},
		Devices: []claims.Device{{Request: "nic", Pool: "node-a", Device: "netdev-" + host.Attrs().Name, Kind: "netdev", Mode: "netdev",
			Host: &claims.HostNetdev{Name: host.Attrs().Name, MTU: host.Attrs().MTU, MAC: host.Attrs().HardwareAddr.String()},
			Pod:  &claims.PodInterface{Name: ifName, MTU: 9000, MAC: "02:00:00:aa:bb:0" + ifName[len(ifName)-1:], Addresses: addresses}}}}
}

func sandbox(uid types.UID, netnsPath string) *api.PodSandbox {
	return &api.PodSandbox{Uid: string(uid), Id: "sandbox-" + string(uid), Name: "pod-" + string(uid), Namespace: "default",
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: netnsPath}}}}
}

// podHandle is a netlink handle in the pod's network namespace.
func podHandle(t *testing.T, netnsPath string) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromPath(netnsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func podLink(t *testing.T, netnsPath, name string) netlink.Link {
	t.Helper()
	l, err := podHandle(t, netnsPath).LinkByName(name)
	if err != nil {
		return nil
	}
	return l
}

// assertRestored checks the claim's netdev is back in the host as it was,
// without addresses, and its attachment forgotten.
func (b *testBed) assertRestored(t *testing.T, c claims.Claim) {
	t.Helper()
	h := c.Devices[0].Host
	l, err := netlink.LinkByName(h.Name)
	if err != nil {
		t.Fatalf("%s is not back in the host: %v", h.Name, err)
	}
	if l.Attrs().MTU != h.MTU || l.Attrs().HardwareAddr.String() != h.MAC || l.Attrs().Alias != h.Alias {
		t.Errorf("restored %s: MTU %d MAC %s alias %q, want %d %s %q", h.Name, l.Attrs().MTU, l.Attrs().HardwareAddr, l.Attrs().Alias, h.MTU, h.MAC, h.Alias)
	}
	addrs, _ := netlink.AddrList(l, netlink.FAMILY_ALL)
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			t.Errorf("restored %s still has address %s", h.Name, a.IPNet)
		}
	}
	if rec, _ := b.store.Get(c.Key()); rec.Devices[0].Attached != nil {
		t.Errorf("%s: the attachment is still recorded: %+v", c.Name, rec.Devices[0].Attached)
	}
}

// condition waits for the claim's device condition to be status.
func (b *testBed) condition(t *testing.T, ctx context.Context, c claims.Claim, want metav1.ConditionStatus) resourceapi.AllocatedDeviceStatus {
	t.Helper()
	var got resourceapi.AllocatedDeviceStatus
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		rc, err := b.client.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil || len(rc.Status.Devices) != 1 || len(rc.Status.Devices[0].Conditions) != 1 {
			return false, nil
		}
		got = rc.Status.Devices[0]
		return got.Conditions[0].Status == want, nil
	})
	if err != nil {
		t.Fatalf("claim %s: no device condition %s: %+v", c.Name, want, got)
	}
	return got
}

// TestRunStopSynchronize drives the hooks as the runtime would: two claims'
// devices attach at RunPodSandbox, with their status, and return at
// StopPodSandbox; for a pod that is gone at Synchronize, whose devices the
// kernel returned under other names, they are restored.
func TestRunStopSynchronize(t *testing.T) {
	podNS := newNetNS(t)
	a := netdevClaim("a", "pod-1", newVeth(t), "net1", "10.66.1.2/24", "fd00:66::2/64")
	a.Devices[0].Pod.Routes = []claims.Route{{Destination: "10.67.0.0/16", Gateway: "10.66.1.1"}}
	b := netdevClaim("b", "pod-1", newVeth(t), "net2", "10.66.2.2/24")
	bed, ctx := newTestBed(t, a, b)

	if err := bed.hooks.RunPodSandbox(ctx, sandbox("pod-1", podNS)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []claims.Claim{a, b} {
		want := c.Devices[0].Pod
		l := podLink(t, podNS, want.Name)
		if l == nil || l.Attrs().MTU != 9000 || l.Attrs().HardwareAddr.String() != want.MAC || l.Attrs().Alias != c.Devices[0].Host.Name {
			t.Errorf("the pod's %s = %+v", want.Name, l)
		}
		st := bed.condition(t, ctx, c, metav1.ConditionTrue)
		if st.NetworkData == nil || st.NetworkData.InterfaceName != want.Name || strings.Join(st.NetworkData.IPs, ",") != strings.Join(want.Addresses, ",") {
			t.Errorf("%s: networkData = %+v", c.Name, st.NetworkData)
		}
		if rec, _ := bed.store.Get(c.Key()); rec.Devices[0].Attached == nil || rec.Devices[0].Attached.NetNS != podNS {
			t.Errorf("%s: attachment recorded as %+v", c.Name, rec.Devices[0].Attached)
		}
	}
	// A retried hook finds the devices in place.
	if err := bed.hooks.RunPodSandbox(ctx, sandbox("pod-1", podNS)); err != nil {
		t.Fatalf("retried RunPodSandbox: %v", err)
	}
	if err := bed.hooks.StopPodSandbox(ctx, sandbox("pod-1", podNS)); err != nil {
		t.Fatal(err)
	}
	bed.assertRestored(t, a)
	bed.assertRestored(t, b)
	// RemovePodSandbox after a stop is harmless.
	if err := bed.hooks.RemovePodSandbox(ctx, sandbox("pod-1", podNS)); err != nil {
		t.Fatal(err)
	}

	// Attached again; then the runtime reports running pods without it.
	if err := bed.hooks.RunPodSandbox(ctx, sandbox("pod-1", podNS)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"net1", "net2"} {
		kernelReturns(t, podNS, name)
	}
	if _, err := bed.hooks.Synchronize(ctx, []*api.PodSandbox{sandbox("other-pod", "/nonexistent")}, nil); err != nil {
		t.Fatal(err)
	}
	bed.assertRestored(t, a)
	bed.assertRestored(t, b)
	if err := bed.plugin.Connected(); err != nil {
		t.Errorf("after Synchronize: %v", err)
	}
}

// kernelReturns plays the kernel giving a device back to the host when its
// namespace goes: the pod's interface moves to the host under another name,
// keeping its alias.
func kernelReturns(t *testing.T, podNS, name string) {
	t.Helper()
	h := podHandle(t, podNS)
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatalf("the pod has no %s: %v", name, err)
	}
	if err := h.LinkSetName(l, fmt.Sprintf("%sret%d", testPrefix, seq.Add(1))); err != nil {
		t.Fatal(err)
	}
	host, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if err := h.LinkSetNsFd(l, int(host)); err != nil {
		t.Fatal(err)
	}
}

// TestRollsBackThePod: the second device cannot attach (its route's gateway
// is unreachable), so the first returns to the host, both claims say why,
// and the sandbox fails naming claim and device.
func TestRollsBackThePod(t *testing.T) {
	podNS := newNetNS(t)
	a := netdevClaim("a", "pod-2", newVeth(t), "net1", "10.66.1.2/24")
	b := netdevClaim("b", "pod-2", newVeth(t), "net2", "10.66.2.2/24")
	b.Devices[0].Pod.Routes = []claims.Route{{Destination: "10.70.0.0/16", Gateway: "192.0.2.9"}}
	bed, ctx := newTestBed(t, a, b)
	err := bed.hooks.RunPodSandbox(ctx, sandbox("pod-2", podNS))
	if err == nil || !strings.Contains(err.Error(), "claim default/b") || !strings.Contains(err.Error(), "device "+b.Devices[0].Device) {
		t.Fatalf("RunPodSandbox = %v, want an error naming claim and device", err)
	}
	bed.assertRestored(t, a)
	bed.assertRestored(t, b)
	for _, c := range []claims.Claim{a, b} {
		st := bed.condition(t, ctx, c, metav1.ConditionFalse)
		if st.Conditions[0].Reason != status.ReasonNotReady || !strings.Contains(st.Conditions[0].Message, "10.70.0.0/16") {
			t.Errorf("%s: condition %+v, want NotReady with the error", c.Name, st.Conditions[0])
		}
	}
}

// TestNoNetNS: a hostNetwork pod cannot take a fastpath netdev.
func TestNoNetNS(t *testing.T) {
	host := newVeth(t)
	bed, ctx := newTestBed(t, netdevClaim("a", "pod-3", host, "net1"))
	err := bed.hooks.RunPodSandbox(ctx, &api.PodSandbox{Uid: "pod-3", Name: "p", Namespace: "default"})
	if err == nil || !strings.Contains(err.Error(), "no network namespace") {
		t.Fatalf("RunPodSandbox = %v", err)
	}
	if _, err := netlink.LinkByName(host.Attrs().Name); err != nil {
		t.Errorf("the device left the host: %v", err)
	}
}

// TestHooksDoNotReadTheCheckpoint: the hooks work from the store in memory:
// with the checkpoint file turned to garbage and its directory made
// unreadable after the start, a pod's device attaches and returns.
func TestHooksDoNotReadTheCheckpoint(t *testing.T) {
	podNS := newNetNS(t)
	a := netdevClaim("a", "pod-4", newVeth(t), "net1", "10.66.4.2/24")
	bed, ctx := newTestBed(t, a)
	path := bed.store.Path()
	if err := os.WriteFile(path, []byte("\x00 not a checkpoint"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(path)
	if err := os.Chmod(dir, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o750) })
	if err := bed.hooks.RunPodSandbox(ctx, sandbox("pod-4", podNS)); err != nil {
		t.Fatal(err)
	}
	if podLink(t, podNS, "net1") == nil {
		t.Fatal("the pod has no net1")
	}
	if err := bed.hooks.StopPodSandbox(ctx, sandbox("pod-4", podNS)); err != nil {
		t.Fatal(err)
	}
	bed.assertRestored(t, a)
}

// A runtime that removes the sandbox's network namespace before its
// StopPodSandbox reaches the plugin (CRI-O unmounts it first) still gets
// the devices back: fastpath held the namespace open since the attach,
// so the veth standing in for a VF is not destroyed with it, and the
// namespace is let go once the devices are out.
func TestStopAfterNamespaceRemoved(t *testing.T) {
	podNS := newNetNS(t)
	a := netdevClaim("a", "pod-1", newVeth(t), "net1", "10.66.1.2/24")
	bed, ctx := newTestBed(t, a)
	if err := bed.hooks.RunPodSandbox(ctx, sandbox("pod-1", podNS)); err != nil {
		t.Fatal(err)
	}
	if n := bed.plugin.netns.held(); n != 1 {
		t.Fatalf("%d network namespaces held after the attach, want the pod's", n)
	}
	// As CRI-O's StopPodSandbox does before it calls the plugins: the
	// namespace's mount and file go.
	if err := netns.DeleteNamed(filepath.Base(podNS)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(podNS); !os.IsNotExist(err) {
		t.Fatalf("%s is still there: %v", podNS, err)
	}
	if err := bed.hooks.StopPodSandbox(ctx, sandbox("pod-1", podNS)); err != nil {
		t.Fatal(err)
	}
	bed.assertRestored(t, a)
	if n := bed.plugin.netns.held(); n != 0 {
		t.Errorf("%d network namespaces held after the stop, want none", n)
	}
}
