//go:build privileged

package dataplane

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/bpf"
)

// TestAttachXDP: an afxdp netdev gets its pinned program attached once it
// is in the pod (a retried attach keeps it), and detaching takes the
// program off before the netdev goes home.
func TestAttachXDP(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	if err := bpf.MountBPFFS(root); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	dir := filepath.Join(root, "claim-xsk")
	prog, err := bpf.Load(bpf.XSKRedirect)
	if err != nil {
		t.Fatal(err)
	}
	if err := prog.Pin(dir); err != nil {
		t.Fatal(err)
	}
	_ = prog.Close()

	pod := newNetNS(t)
	name, host := newVeth(t)
	nd := testNetdev(host)
	nd.XDP = &XDP{Dir: dir, Mode: bpf.Native}
	a := newAttacher(t)
	for range 2 { // the second time, as a retried hook
		res, err := a.Attach(ctx, pod, nd)
		if err != nil {
			t.Fatal(err)
		}
		if res.XDPMode != bpf.Native {
			t.Errorf("XDP mode = %q, want native", res.XDPMode)
		}
	}
	if id, err := bpf.Attached(pod, "net1"); err != nil || id == 0 {
		t.Fatalf("no XDP program on net1 in the pod (%v)", err)
	}
	if err := a.Detach(ctx, pod, nd); err != nil {
		t.Fatal(err)
	}
	if id, err := bpf.Attached("", name); err != nil || id != 0 {
		t.Errorf("XDP program %d still on %s after detach (%v)", id, name, err)
	}
	if _, err := os.Stat(filepath.Join(dir, bpf.PinLink)); !os.IsNotExist(err) {
		t.Errorf("the attachment is still pinned: %v", err)
	}
}

// TestAttachXDPFailureRollsBack: when the program cannot be attached (the
// pin directory is empty), the netdev goes back to the host.
func TestAttachXDPFailureRollsBack(t *testing.T) {
	requireRoot(t)
	_, ctx := ktesting.NewTestContext(t)
	pod := newNetNS(t)
	name, host := newVeth(t)
	nd := testNetdev(host)
	nd.XDP = &XDP{Dir: t.TempDir(), Mode: bpf.Native}
	a := newAttacher(t)
	if _, err := a.Attach(ctx, pod, nd); err == nil {
		t.Fatal("attach with nothing pinned: no error")
	}
	if l, _ := podLink(t, pod, "net1"); l != nil {
		t.Errorf("net1 stayed in the pod after the failed attach")
	}
	if _, err := netlink.LinkByName(name); err != nil {
		t.Errorf("%s is not back on the host: %v", name, err)
	}
}
