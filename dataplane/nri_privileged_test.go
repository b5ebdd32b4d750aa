//go:build privileged

package dataplane

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2/ktesting"
)

// fakeDevices is a checkpoint of prepared pods.
type fakeDevices map[string][]PodNetdev

func (f fakeDevices) PodNetdevs(uid string) []PodNetdev { return f[uid] }
func (f fakeDevices) PreparedPods() []string {
	var out []string
	for uid := range f {
		out = append(out, uid)
	}
	return out
}

// recordingReporter records what the plugin reports.
type recordingReporter struct {
	mu     sync.Mutex
	events []string
}

func (r *recordingReporter) Attached(_ context.Context, dev PodNetdev, _ string, res Attached) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "attached "+dev.Device+" as "+res.Name)
}

func (r *recordingReporter) Failed(_ context.Context, dev PodNetdev, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "failed "+dev.Device+": "+err.Error())
}

func sandbox(uid, netns string) *api.PodSandbox {
	return &api.PodSandbox{Uid: uid, Name: "pod-" + uid, Namespace: "default",
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: netns}}}}
}

func podDev(device string, nd Netdev) PodNetdev {
	return PodNetdev{ClaimNamespace: "default", ClaimName: "c-" + device, ClaimUID: "uid-" + device, Request: "nic", Pool: "node", Device: device, Netdev: nd}
}

func newTestPlugin(t *testing.T, devs fakeDevices, rep Reporter) *Plugin {
	t.Helper()
	p, err := NewPlugin(PluginOptions{Socket: t.TempDir() + "/nri.sock", Devices: devs, Reporter: rep, Attacher: newAttacher(t)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPluginRunStopSynchronize drives the hooks as the runtime would: two
// devices attach at RunPodSandbox and return at StopPodSandbox; a pod that
// is gone at Synchronize has its devices restored.
func TestPluginRunStopSynchronize(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	podNS := newNetNS(t)
	_, h1 := newVeth(t)
	_, h2 := newVeth(t)
	nd1, nd2 := testNetdev(h1), testNetdev(h2)
	nd2.Name, nd2.MAC, nd2.Addresses, nd2.Routes = "net2", "", []string{"10.66.2.2/24"}, nil
	rep := &recordingReporter{}
	p := newTestPlugin(t, fakeDevices{"pod-1": {podDev("dev-a", nd1), podDev("dev-b", nd2)}}, rep)

	if err := p.RunPodSandbox(ctx, sandbox("pod-1", podNS)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rep.events, "; "); got != "attached dev-a as net1; attached dev-b as net2" {
		t.Errorf("reports = %q", got)
	}
	for _, name := range []string{"net1", "net2"} {
		if l, _ := podLink(t, podNS, name); l == nil {
			t.Errorf("the pod has no %s", name)
		}
	}
	if err := p.StopPodSandbox(ctx, sandbox("pod-1", podNS)); err != nil {
		t.Fatal(err)
	}
	assertRestored(t, nd1, podNS)
	assertRestored(t, nd2, podNS)
	// RemovePodSandbox after a stop is harmless.
	if err := p.RemovePodSandbox(ctx, sandbox("pod-1", podNS)); err != nil {
		t.Fatal(err)
	}

	// Attached again; then the runtime reports running pods without it.
	if err := p.RunPodSandbox(ctx, sandbox("pod-1", podNS)); err != nil {
		t.Fatal(err)
	}
	// Play the kernel returning the devices when the namespace went: move
	// them back to the host under other names, keeping their aliases.
	for _, name := range []string{"net1", "net2"} {
		kernelReturns(t, p.opts.Attacher, podNS, name, nil)
	}
	if _, err := p.Synchronize(ctx, []*api.PodSandbox{sandbox("other-pod", "/nonexistent")}, nil); err != nil {
		t.Fatal(err)
	}
	assertRestored(t, nd1, "")
	assertRestored(t, nd2, "")
}

// TestPluginRollsBackThePod: the second device cannot attach, so the first
// returns to the host, both are reported failed with the error, and the
// sandbox fails naming claim and device.
func TestPluginRollsBackThePod(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	podNS := newNetNS(t)
	_, h1 := newVeth(t)
	_, h2 := newVeth(t)
	nd1, nd2 := testNetdev(h1), testNetdev(h2)
	nd2.Name, nd2.Routes = "net2", []Route{{Destination: "10.70.0.0/16", Gateway: "192.0.2.9"}}
	rep := &recordingReporter{}
	p := newTestPlugin(t, fakeDevices{"pod-2": {podDev("dev-a", nd1), podDev("dev-b", nd2)}}, rep)
	err := p.RunPodSandbox(ctx, sandbox("pod-2", podNS))
	if err == nil || !strings.Contains(err.Error(), "claim default/c-dev-b") || !strings.Contains(err.Error(), "device dev-b") {
		t.Fatalf("RunPodSandbox = %v, want an error naming claim and device", err)
	}
	assertRestored(t, nd1, podNS)
	assertRestored(t, nd2, podNS)
	var failed int
	for _, e := range rep.events {
		if strings.HasPrefix(e, "failed ") && strings.Contains(e, "10.70.0.0/16") {
			failed++
		}
	}
	if failed != 2 {
		t.Errorf("reports = %q, want both devices failed with the error", rep.events)
	}
}

// TestPluginNoNetNS: a hostNetwork pod cannot take a fastpath netdev.
func TestPluginNoNetNS(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	_, h1 := newVeth(t)
	p := newTestPlugin(t, fakeDevices{"pod-3": {podDev("dev-a", testNetdev(h1))}}, &recordingReporter{})
	err := p.RunPodSandbox(ctx, &api.PodSandbox{Uid: "pod-3", Name: "p", Namespace: "default"})
	if err == nil || !strings.Contains(err.Error(), "no network namespace") {
		t.Fatalf("RunPodSandbox = %v", err)
	}
	if _, err := netlink.LinkByName(h1.Attrs().Name); err != nil {
		t.Errorf("the device left the host: %v", err)
	}
}
