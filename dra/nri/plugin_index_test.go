package nri

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

func TestValidIndex(t *testing.T) {
	for idx, want := range map[string]bool{"10": true, "00": true, "99": true, "": false, "1": false, "100": false, "1a": false, "-1": false, "１０": false} {
		if got := ValidIndex(idx); got != want {
			t.Errorf("ValidIndex(%q) = %v, want %v", idx, got, want)
		}
	}
}

// TestHookLockLostSparesOtherPods: a daemon whose hook lock cannot be
// taken (its state directory gone) fails the sandboxes of the pods it has
// devices for, and lets every other pod start: its own replacement among
// them.
func TestHookLockLostSparesOtherPods(t *testing.T) {
	store, err := claims.Open(filepath.Join(t.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	c := claims.Claim{Driver: claims.DriverFastpath, UID: "c1", Namespace: "default", Name: "web", Pod: claims.Pod{UID: "pod-a", Name: "web"},
		Devices: []claims.Device{{Request: "nic", Pool: "node-a", Device: "netdev-a", Kind: "netdev", Mode: "netdev"}}}
	if err := store.Admit(c); err != nil {
		t.Fatal(err)
	}
	p := New(Options{Store: store, HookLock: claims.FileLock(filepath.Join(t.TempDir(), "gone", "nri.lock"))})
	other := Pod{UID: "pod-b", Namespace: "fastpath-system", Name: "fastpath-x", SandboxID: "s-b", NetNS: "/run/netns/b"}
	if err := p.AttachPod(t.Context(), other); err != nil {
		t.Errorf("a pod without fastpath devices: %v, want it to start", err)
	}
	if err := p.DetachPod(t.Context(), other); err != nil {
		t.Errorf("its stop: %v", err)
	}
	mine := Pod{UID: "pod-a", Namespace: "default", Name: "web", SandboxID: "s-a", NetNS: "/run/netns/a"}
	if err := p.AttachPod(t.Context(), mine); err == nil || !strings.Contains(err.Error(), "nri.lock") {
		t.Errorf("a pod with a claim: %v, want the lock's error", err)
	}
}
