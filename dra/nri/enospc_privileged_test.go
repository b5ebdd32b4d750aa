//go:build privileged

package nri

import (
	"fmt"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/test/fulldisk"
)

// diskPlugin is the NRI plugin of a daemon started on the checkpoint at
// path, on a disk that fills up.
type diskPlugin struct {
	path string
	fulldisk.Disk
}

func (n *diskPlugin) start(t *testing.T) *hooks {
	t.Helper()
	store, err := claims.Open(n.path, claims.Legacy{})
	if err != nil {
		t.Fatalf("the daemon does not start on what a full disk left: %v", err)
	}
	n.Wrap(store)
	a, err := dataplane.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	client := fake.NewClientset()
	writer := status.NewWriter(client)
	_, ctx := ktesting.NewTestContext(t)
	writer.Start(ctx)
	return &hooks{p: New(Options{Socket: filepath.Join(t.TempDir(), "nri.sock"), Store: store, Attacher: a, Status: writer})}
}

// TestFullDiskHooks fails each checkpoint write of the runtime's hooks in
// turn (RunPodSandbox records the attachment, StopPodSandbox its return)
// with ENOSPC, starts the daemon again on what was left, and lets the
// runtime retry RunPodSandbox, or the kubelet unprepare the claim after a
// Stop that could not record its work: the pod gets its device configured,
// and in the end the device is back in the host as it was and nothing is
// recorded.
func TestFullDiskHooks(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	host := newVeth(t)
	c := netdevClaim("disk", "pod-9", host, "net1", "10.66.9.2/24")
	c.Prepared = true
	newNode := func(t *testing.T) *diskPlugin {
		n := &diskPlugin{path: filepath.Join(t.TempDir(), "checkpoint.json")}
		store, err := claims.Open(n.path, claims.Legacy{})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Admit(c); err != nil {
			t.Fatal(err)
		}
		return n
	}
	attached := func(t *testing.T, podNS string) {
		t.Helper()
		l := podLink(t, podNS, "net1")
		if l == nil {
			t.Fatal("the pod has no net1")
		}
		addrs, err := podHandle(t, podNS).AddrList(l, 0)
		if err != nil || len(addrs) == 0 || addrs[0].IPNet.String() != "10.66.9.2/24" {
			t.Errorf("net1 in the pod has addresses %v (%v)", addrs, err)
		}
	}
	restored := func(t *testing.T, n *diskPlugin) {
		t.Helper()
		store, err := claims.Open(n.path, claims.Legacy{})
		if err != nil {
			t.Fatal(err)
		}
		(&testBed{store: store}).assertRestored(t, c)
	}

	// Uninterrupted: how many writes each hook makes.
	ref := newNode(t)
	h := ref.start(t)
	podNS := newNetNS(t)
	if err := h.RunPodSandbox(ctx, sandbox("pod-9", podNS)); err != nil {
		t.Fatal(err)
	}
	attached(t, podNS)
	runWrites := ref.Writes
	if err := h.StopPodSandbox(ctx, sandbox("pod-9", podNS)); err != nil {
		t.Fatal(err)
	}
	restored(t, ref)
	total := ref.Writes
	t.Logf("RunPodSandbox writes the checkpoint %d times, StopPodSandbox %d", runWrites, total-runWrites)
	if runWrites == 0 || total == runWrites {
		t.Fatalf("the hooks wrote %d and %d times: nothing to fail", runWrites, total-runWrites)
	}

	for fail := 1; fail <= total; fail++ {
		t.Run(fmt.Sprintf("write %d", fail), func(t *testing.T) {
			n := newNode(t)
			h := n.start(t)
			podNS := newNetNS(t)
			n.FailFrom = fail
			runErr := h.RunPodSandbox(ctx, sandbox("pod-9", podNS))
			if fail <= runWrites {
				if runErr == nil {
					t.Fatalf("RunPodSandbox succeeded with write %d failing", fail)
				}
				// The daemon starts again; the runtime tries the sandbox again.
				n.FailFrom = 0
				h = n.start(t)
				if err := h.RunPodSandbox(ctx, sandbox("pod-9", podNS)); err != nil {
					t.Fatalf("RunPodSandbox after a restart: %v", err)
				}
				attached(t, podNS)
			} else {
				if runErr != nil {
					t.Fatal(runErr)
				}
				attached(t, podNS)
				// Stop goes on past a failure (the runtime does not retry
				// it): what it could not record is left for the next hook
				// or Unprepare.
				if err := h.StopPodSandbox(ctx, sandbox("pod-9", podNS)); err != nil {
					t.Logf("StopPodSandbox with write %d failing: %v", fail, err)
				}
				if n.Writes < fail {
					t.Fatalf("StopPodSandbox made %d writes, the failing one was %d", n.Writes, fail)
				}
				n.FailFrom = 0
				h = n.start(t)
				// The kubelet's Unprepare finishes it.
				if err := h.p.ReleaseClaim(ctx, c.Key()); err != nil {
					t.Fatalf("release at Unprepare: %v", err)
				}
				restored(t, n)
				return
			}
			if err := h.StopPodSandbox(ctx, sandbox("pod-9", podNS)); err != nil {
				t.Fatalf("StopPodSandbox: %v", err)
			}
			restored(t, n)
		})
	}
}
