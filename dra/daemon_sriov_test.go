//go:build sriov

package dra_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/test/netnstest"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// sriovDaemon is one life of fastpathd on the VM's igb PF: the claim store
// of its state directory, the runtime hooks and the kubelet plugin, built
// and started in the order `fastpathd run` starts them, with a fake
// kubelet.
type sriovDaemon struct {
	ctx     context.Context
	store   *claims.Store
	plugin  *nri.Plugin
	kubelet *dra.FakeKubelet
	stop    func()
}

// startSRIOVDaemon starts a daemon on the state below dir; life numbers
// its sockets. The runtime, when the hooks connect, runs the sandboxes
// running, none by default.
func startSRIOVDaemon(t *testing.T, dir string, life int, client *fake.Clientset, inv devices.Inventory, running ...*api.PodSandbox) *sriovDaemon {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	store, err := claims.Open(filepath.Join(dir, "state", "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	writer := status.NewWriter(client)
	writer.Start(ctx)
	attacher, err := dataplane.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	plugin := nri.New(nri.Options{Store: store, Attacher: attacher, Status: writer, WriteCDI: dra.WriteCDISpec})
	plugin.Synchronize(ctx, running)
	run := filepath.Join(dir, fmt.Sprint(life))
	opts := dra.Options{NodeName: testNode, Client: client, PluginDir: filepath.Join(run, "plugins"), RegistryDir: filepath.Join(run, "registry"),
		StateDir: filepath.Join(dir, "state"), CDIDir: filepath.Join(dir, "cdi"), BPFDir: filepath.Join(dir, "bpf"), MemifDir: filepath.Join(dir, "memif"),
		Store: store, Status: writer, Runtime: plugin, PCI: dataplane.PCIBinder{SysfsRoot: "/", DevRoot: "/"}}
	if err := os.MkdirAll(opts.RegistryDir, 0o750); err != nil {
		t.Fatal(err)
	}
	d, err := dra.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	d.UseInventory(inv)
	if err := d.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			d.Stop()
			cancel()
			plugin.Close()
			_ = attacher.Close()
		})
	}
	t.Cleanup(stop)
	return &sriovDaemon{ctx: ctx, store: store, plugin: plugin, kubelet: dra.StartFakeKubelet(t, ctx, opts.RegistryDir), stop: stop}
}

// TestSRIOVDaemonDownPodGone is what veths cannot show, at the daemon's
// level: a pod holds a VF (netdev mode, with a name, MTU and MAC, and VF
// settings); fastpathd goes down, and the pod's network namespace goes
// while it is down, which gives the VF back to the host under its pod
// name. fastpathd started again on the same state finds it at
// Synchronize and gives it back its name and MTU, and Unprepare gives it
// its MAC and the VF settings as they were.
func TestSRIOVDaemonDownPodGone(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vf := pf.VFsReady(t, 4)[2]
	t.Cleanup(func() { pf.ResetVF(t, vf) })
	host, err := netlink.LinkByName(vf.Netdev)
	if err != nil {
		t.Fatal(err)
	}
	was := host.Attrs()
	wasVF := readVF(t, pf.Name, vf.ID)
	inv := discoverSRIOV(t)
	const mac = "02:fa:57:00:02:03"
	claim := testClaim("gone", []alloc{{Request: "nic", Device: devices.PCIDeviceName(vf.Address)}},
		fromClaim(config(`"interface": {"name": "net1", "mtu": 1400, "mac": "`+mac+`"}, "vf": {"vlan": 70, "trust": true}`)))
	client := fake.NewClientset(claim)
	dir, err := os.MkdirTemp("", "fp") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	d := startSRIOVDaemon(t, dir, 1, client, inv)
	if e := prepare(t, d.ctx, d.kubelet, claim); e != "" {
		t.Fatalf("prepare: %s", e)
	}
	podNS := netnstest.New(t, fmt.Sprintf("%s-%d-daemon", sriovtest.Prefix, os.Getpid()))
	pod := nri.Pod{UID: claim.Status.ReservedFor[0].UID, Namespace: claim.Namespace, Name: claim.Status.ReservedFor[0].Name,
		SandboxID: "sandbox-gone", NetNS: podNS}
	if err := d.plugin.AttachPod(d.ctx, pod); err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	netnstest.Do(t, podNS, func() {
		l, err := netlink.LinkByName("net1")
		if err != nil {
			t.Fatalf("no net1 in the pod: %v", err)
		}
		if l.Attrs().MTU != 1400 || l.Attrs().HardwareAddr.String() != mac || l.Attrs().ParentDev != vf.Address {
			t.Errorf("net1 in the pod: MTU %d, MAC %s, device %s; want 1400, %s, %s", l.Attrs().MTU, l.Attrs().HardwareAddr, l.Attrs().ParentDev, mac, vf.Address)
		}
	})

	// fastpathd goes down; then the pod's namespace.
	d.stop()
	if err := netns.DeleteNamed(filepath.Base(podNS)); err != nil {
		t.Fatal(err)
	}
	var back string
	sriovtest.WaitFor(t, 10*time.Second, "the VF back in the host", func() bool {
		back = sriovtest.Netdev(vf.Address)
		return back != ""
	})
	t.Logf("the kernel gave the VF back as %s", back)
	if back == was.Name {
		t.Errorf("the VF came back as %s, its host name: nothing left to restore", back)
	}

	d = startSRIOVDaemon(t, dir, 2, client, inv)
	l, err := netlink.LinkByName(was.Name)
	if err != nil {
		t.Fatalf("after Synchronize the VF is not %s again: %v (it is %q)", was.Name, err, sriovtest.Netdev(vf.Address))
	}
	if l.Attrs().MTU != was.MTU || l.Attrs().Alias != was.Alias || l.Attrs().ParentDev != vf.Address {
		t.Errorf("after Synchronize %s: MTU %d, alias %q, device %s; want MTU %d, alias %q, %s",
			was.Name, l.Attrs().MTU, l.Attrs().Alias, l.Attrs().ParentDev, was.MTU, was.Alias, vf.Address)
	}
	if c, ok := d.store.Get(claims.Key{Driver: claims.DriverFastpath, UID: claim.UID}); !ok || c.Devices[0].Attached != nil {
		t.Errorf("after Synchronize the store says %+v, want the claim prepared and its device detached", c)
	}

	unprepare(t, d.ctx, d.kubelet, claim)
	l, err = netlink.LinkByName(was.Name)
	if err != nil {
		t.Fatal(err)
	}
	if l.Attrs().MTU != was.MTU || l.Attrs().HardwareAddr.String() != was.HardwareAddr.String() || l.Attrs().Alias != was.Alias {
		t.Errorf("after Unprepare %s: MTU %d, MAC %s, alias %q; want MTU %d, MAC %s, alias %q as before",
			was.Name, l.Attrs().MTU, l.Attrs().HardwareAddr, l.Attrs().Alias, was.MTU, was.HardwareAddr, was.Alias)
	}
	if got := readVF(t, pf.Name, vf.ID); got != wasVF {
		t.Errorf("after Unprepare the kernel reports VF %d as %+v, want %+v as before", vf.ID, got, wasVF)
	}
	if n := len(d.store.Claims()); n != 0 {
		t.Errorf("the store still holds %d claims", n)
	}
	if specs, _ := os.ReadDir(filepath.Join(dir, "cdi")); len(specs) != 0 {
		t.Errorf("CDI specs left: %v", specs)
	}
}
