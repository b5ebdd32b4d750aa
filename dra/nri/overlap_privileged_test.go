//go:build privileged

package nri

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// gatedAttacher holds each Attach until its gate opens.
type gatedAttacher struct {
	Attacher
	gate chan struct{}
}

func (g gatedAttacher) Attach(ctx context.Context, netns string, nd dataplane.Netdev) (dataplane.Attached, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return dataplane.Attached{}, ctx.Err()
	}
	return g.Attacher.Attach(ctx, netns, nd)
}

// overlapBed is a test bed whose plugin attaches with Overlap, through a
// gate the test opens.
func overlapBed(t *testing.T, cls ...claims.Claim) (*testBed, context.Context, chan struct{}) {
	t.Helper()
	bed, ctx := newTestBed(t, cls...)
	gate := make(chan struct{})
	bed.plugin.opts.Overlap = true
	bed.plugin.opts.Attacher = gatedAttacher{Attacher: bed.plugin.opts.Attacher, gate: gate}
	t.Cleanup(bed.plugin.WaitReports)
	return bed, ctx, gate
}

func createContainer(ctx context.Context, b *testBed, sb *api.PodSandbox) error {
	_, _, err := b.hooks.CreateContainer(ctx, sb, &api.Container{Name: "app"})
	return err
}

// startContainer is the runtime's making and starting of a container of
// the pod: CreateContainer, then StartContainer.
func startContainer(ctx context.Context, b *testBed, sb *api.PodSandbox) error {
	if err := createContainer(ctx, b, sb); err != nil {
		return err
	}
	return b.hooks.StartContainer(ctx, sb, &api.Container{Name: "app"})
}

// TestOverlapAttach: with Overlap, RunPodSandbox returns while the device
// is still in the host, and so does the pod's first CreateContainer (the
// runtime makes the container meanwhile); a StartContainer that cannot
// wait for the attach fails saying so, one that can returns once the
// device is in the pod.
func TestOverlapAttach(t *testing.T) {
	podNS := newNetNS(t)
	a := netdevClaim("a", "pod-o1", newVeth(t), "net1", "10.66.11.2/24")
	bed, ctx, gate := overlapBed(t, a)
	sb := sandbox("pod-o1", podNS)

	if err := bed.hooks.RunPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if podLink(t, podNS, "net1") != nil {
		t.Fatal("the device is in the pod before its attach was let go")
	}
	soon, cancelSoon := context.WithTimeout(ctx, 2*time.Second)
	defer cancelSoon()
	if err := createContainer(soon, bed, sb); err != nil {
		t.Fatalf("CreateContainer while the attach is held = %v, want it let through", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := bed.hooks.StartContainer(short, sb, &api.Container{Name: "app"})
	cancel()
	if err == nil || !strings.Contains(err.Error(), "waiting for the attach") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("StartContainer while the attach is held = %v, want it to say it waited for the attach", err)
	}
	if podLink(t, podNS, "net1") != nil {
		t.Fatal("the device is in the pod before its attach was let go")
	}

	close(gate)
	if err := bed.hooks.StartContainer(ctx, sb, &api.Container{Name: "app"}); err != nil {
		t.Fatalf("StartContainer after the attach: %v", err)
	}
	startedThenStopped(t, ctx, bed, sb, podNS, a)
}

// startedThenStopped checks a pod whose first container started: its
// claim's net1 in the pod and Ready, no attach left pending; then its
// sandbox stops and the device is back in the host.
func startedThenStopped(t *testing.T, ctx context.Context, bed *testBed, sb *api.PodSandbox, podNS string, c claims.Claim) {
	t.Helper()
	if l := podLink(t, podNS, "net1"); l == nil || l.Attrs().MTU != 9000 {
		t.Fatalf("the pod's net1 = %+v once its first container started", l)
	}
	bed.condition(t, ctx, c, metav1.ConditionTrue)
	if n := bed.plugin.pendingAttaches(); n != 0 {
		t.Errorf("%d attaches still pending after a successful one was waited for", n)
	}
	if err := bed.hooks.StopPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	bed.assertRestored(t, c)
}

// TestOverlapAttachFails: an attach that fails after RunPodSandbox
// returned fails the pod's first container with its error, naming claim
// and device (its creation if the attach had ended by then, else its
// start, after one more try), and leaves nothing in the pod; the next
// container tries the attach again.
func TestOverlapAttachFails(t *testing.T) {
	podNS := newNetNS(t)
	a := netdevClaim("a", "pod-o2", newVeth(t), "net1", "10.66.12.2/24")
	b := netdevClaim("b", "pod-o2", newVeth(t), "net2", "10.66.13.2/24")
	b.Devices[0].Pod.Routes = []claims.Route{{Destination: "10.71.0.0/16", Gateway: "192.0.2.9"}}
	bed, ctx, gate := overlapBed(t, a, b)
	close(gate)
	sb := sandbox("pod-o2", podNS)

	if err := bed.hooks.RunPodSandbox(ctx, sb); err != nil {
		t.Fatalf("RunPodSandbox = %v, want the failure left for the container", err)
	}
	for try := range 2 {
		err := startContainer(ctx, bed, sb)
		if err == nil || !strings.Contains(err.Error(), "cannot start without its devices") ||
			!strings.Contains(err.Error(), "claim default/b") || !strings.Contains(err.Error(), "device "+b.Devices[0].Device) ||
			!strings.Contains(err.Error(), "10.71.0.0/16") {
			t.Fatalf("container %d: %v, want the attach's error naming claim, device and route", try+1, err)
		}
		bed.assertRestored(t, a)
		bed.assertRestored(t, b)
		if n := bed.plugin.pendingAttaches(); n != 0 {
			t.Errorf("container %d: %d attaches still pending", try+1, n)
		}
	}
	st := bed.condition(t, ctx, b, metav1.ConditionFalse)
	if !strings.Contains(st.Conditions[0].Message, "10.71.0.0/16") {
		t.Errorf("condition %+v, want the attach's error", st.Conditions[0])
	}
}

// TestOverlapStopWhileAttaching: a sandbox stopped while its attach runs
// is stopped after it: the device goes back to the host and its record
// says so, and a failed attach nobody waited for is forgotten.
func TestOverlapStopWhileAttaching(t *testing.T) {
	podNS := newNetNS(t)
	a := netdevClaim("a", "pod-o3", newVeth(t), "net1", "10.66.14.2/24")
	bed, ctx, gate := overlapBed(t, a)
	sb := sandbox("pod-o3", podNS)
	if err := bed.hooks.RunPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- bed.hooks.StopPodSandbox(ctx, sb) }()
	close(gate)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	bed.assertRestored(t, a)
	if n := bed.plugin.pendingAttaches(); n != 0 {
		t.Errorf("%d attaches still pending after the sandbox stopped", n)
	}
	// The pod's sandbox comes again and its container starts with it.
	if err := bed.hooks.RunPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := startContainer(ctx, bed, sb); err != nil {
		t.Fatal(err)
	}
	if podLink(t, podNS, "net1") == nil {
		t.Fatal("the pod has no net1 once its container was let through")
	}
	if err := bed.hooks.StopPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	bed.assertRestored(t, a)
}

// TestOverlapNotWithNetworks: a pod with a CNI network (here a claim's,
// which this plugin cannot add: it runs no CNI) is attached inside
// RunPodSandbox even with Overlap, and its failure fails the sandbox, as a
// CNI plugin's does; the pod's device is back in the host.
func TestOverlapNotWithNetworks(t *testing.T) {
	podNS := newNetNS(t)
	a := netdevClaim("a", "pod-o4", newVeth(t), "net1", "10.66.15.2/24")
	n := claims.Claim{Driver: claims.DriverFastpath, UID: "uid-net", Namespace: "default", Name: "net",
		Pod:      claims.Pod{UID: "pod-o4", Name: "pod-pod-o4"},
		Networks: []claims.Network{{Request: "net", Pool: "node-a", Device: "cni-0", IfName: "net2", Conflist: []byte(`{}`)}}}
	bed, ctx, gate := overlapBed(t, a, n)
	close(gate)
	err := bed.hooks.RunPodSandbox(ctx, sandbox("pod-o4", podNS))
	if err == nil || !strings.Contains(err.Error(), "claim default/net has CNI networks") {
		t.Fatalf("RunPodSandbox = %v, want the network's failure", err)
	}
	bed.assertRestored(t, a)
	if n := bed.plugin.pendingAttaches(); n != 0 {
		t.Errorf("%d attaches pending for a pod attached in its hook", n)
	}
}

// TestOverlapPodsApart: with the node's hook lock (a daemon of a rolling
// update), a pod's RunPodSandbox and CreateContainer do not wait for
// another pod's attach. The runtime calls its NRI plugins one event at a
// time, so a hook that waited would hold up every pod of the node.
func TestOverlapPodsApart(t *testing.T) {
	ns1, ns2 := newNetNS(t), newNetNS(t)
	a := netdevClaim("a", "pod-o5", newVeth(t), "net1", "10.66.15.2/24")
	b := netdevClaim("b", "pod-o6", newVeth(t), "net1", "10.66.16.2/24")
	bed, ctx, gate := overlapBed(t, a, b)
	bed.plugin.opts.HookLock = claims.FileLock(filepath.Join(t.TempDir(), "nri.lock"))
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release) // before the bed's wait for the attaches
	sb1, sb2 := sandbox("pod-o5", ns1), sandbox("pod-o6", ns2)
	if err := bed.hooks.RunPodSandbox(ctx, sb1); err != nil {
		t.Fatal(err)
	}
	// pod-o5's attach holds its hook lock until the gate opens; a hook
	// that waited for it would end with the context's deadline.
	soon, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := bed.hooks.RunPodSandbox(soon, sb2); err != nil {
		t.Fatalf("another pod's RunPodSandbox while pod-o5's attach is held: %v", err)
	}
	plain := sandbox("pod-o7", newNetNS(t))
	if err := createContainer(soon, bed, plain); err != nil {
		t.Fatalf("a pod without devices: CreateContainer while pod-o5's attach is held: %v", err)
	}
	if err := bed.hooks.StopPodSandbox(soon, plain); err != nil {
		t.Fatal(err)
	}
	// One pod's hooks still wait for each other.
	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if err := bed.plugin.AttachPod(short, podOf(sb1)); err == nil {
		t.Fatal("a second attach of pod-o5 did not wait for the first")
	}
	release()
	for _, sb := range []*api.PodSandbox{sb1, sb2} {
		if err := startContainer(ctx, bed, sb); err != nil {
			t.Fatalf("a container of %s after the attaches: %v", sb.Uid, err)
		}
	}
	if podLink(t, ns1, "net1") == nil || podLink(t, ns2, "net1") == nil {
		t.Fatal("a pod's device is not in it after its first container")
	}
	for _, sb := range []*api.PodSandbox{sb1, sb2} {
		if err := bed.hooks.StopPodSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	bed.assertRestored(t, a)
	bed.assertRestored(t, b)
}

// failOnce fails its first Attach, once the gate opens.
type failOnce struct {
	gatedAttacher
	failed atomic.Bool
}

func (f *failOnce) Attach(ctx context.Context, netns string, nd dataplane.Netdev) (dataplane.Attached, error) {
	select {
	case <-f.gate:
	case <-ctx.Done():
		return dataplane.Attached{}, ctx.Err()
	}
	if !f.failed.Swap(true) {
		return dataplane.Attached{}, errors.New("the device went away for a moment")
	}
	return f.Attacher.Attach(ctx, netns, nd)
}

// TestOverlapStartRetries: an attach that fails after the pod's first
// CreateContainer let the container be made is tried once more at its
// start, which goes on once that succeeds: the runtime makes a container
// that fails to start exited, and the kubelet makes it again only if the
// pod's restart policy says so.
func TestOverlapStartRetries(t *testing.T) {
	podNS := newNetNS(t)
	a := netdevClaim("a", "pod-o8", newVeth(t), "net1", "10.66.17.2/24")
	bed, ctx, gate := overlapBed(t, a)
	f := &failOnce{gatedAttacher: bed.plugin.opts.Attacher.(gatedAttacher)}
	bed.plugin.opts.Attacher = f
	sb := sandbox("pod-o8", podNS)
	if err := bed.hooks.RunPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := createContainer(ctx, bed, sb); err != nil {
		t.Fatalf("CreateContainer while the attach is held: %v", err)
	}
	close(gate)
	if err := bed.hooks.StartContainer(ctx, sb, &api.Container{Name: "app"}); err != nil {
		t.Fatalf("StartContainer after an attach that failed once: %v", err)
	}
	if !f.failed.Load() {
		t.Fatal("the first attach did not fail")
	}
	startedThenStopped(t, ctx, bed, sb, podNS, a)
}

// countingAttacher counts the looks in pods (InPod).
type countingAttacher struct {
	Attacher
	looks atomic.Int32
}

func (c *countingAttacher) InPod(netns string, nd dataplane.Netdev) (bool, error) {
	c.looks.Add(1)
	return c.Attacher.InPod(netns, nd)
}

// TestOverlapCreateAfterAttach: the pod's first CreateContainer after the
// attach RunPodSandbox began succeeded makes its container without looking
// in the pod again (the runtime holds every pod's hooks behind it); the
// next container's looks, and so does the first of a sandbox stopped and
// run again.
func TestOverlapCreateAfterAttach(t *testing.T) {
	podNS := newNetNS(t)
	a := netdevClaim("a", "pod-o9", newVeth(t), "net1", "10.66.18.2/24")
	bed, ctx, gate := overlapBed(t, a)
	close(gate)
	counting := &countingAttacher{Attacher: bed.plugin.opts.Attacher}
	bed.plugin.opts.Attacher = counting
	sb := sandbox("pod-o9", podNS)
	if err := bed.hooks.RunPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	// The attach ends beside the hook.
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return bed.plugin.pendingAttaches() == 0, nil
	}); err != nil {
		t.Fatalf("the attach RunPodSandbox began did not end: %v", err)
	}
	if err := startContainer(ctx, bed, sb); err != nil {
		t.Fatalf("the first container: %v", err)
	}
	if n := counting.looks.Load(); n != 0 {
		t.Errorf("the first container after a successful attach looked in the pod %d times, want 0", n)
	}
	if err := startContainer(ctx, bed, sb); err != nil {
		t.Fatalf("the second container: %v", err)
	}
	if n := counting.looks.Load(); n != 1 {
		t.Errorf("the second container looked in the pod %d times, want 1", n)
	}
	startedThenStopped(t, ctx, bed, sb, podNS, a)
	// Stopped before any container (the attach's note forgotten with the
	// sandbox), then run again with a new sandbox: its first container
	// comes after that attach and looks no more than the first did.
	sb2 := sandbox("pod-o9", podNS)
	sb2.Id += "-2"
	if err := bed.hooks.RunPodSandbox(ctx, sb2); err != nil {
		t.Fatal(err)
	}
	if err := bed.hooks.StopPodSandbox(ctx, sb2); err != nil {
		t.Fatal(err)
	}
	bed.plugin.pendingMu.Lock()
	left := len(bed.plugin.attached)
	bed.plugin.pendingMu.Unlock()
	if left != 0 {
		t.Errorf("%d attached sandboxes noted after the pod's sandboxes stopped", left)
	}
}
