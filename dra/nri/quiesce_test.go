package nri

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// TestQuiesce: once Quiesce is called no hook takes a pod's lock (the
// node's hook lock file is not made); Quiesce waits for a hook that holds
// one, gives up at its context's end while the hook runs, and says so; once
// the hook is done it succeeds.
func TestQuiesce(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "nri.lock")
	store, err := claims.Open(filepath.Join(t.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Socket: filepath.Join(t.TempDir(), "nri.sock"), Store: store, HookLock: claims.FileLock(lock)})
	unlock, err := p.lockPod(t.Context(), "pod-running")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if p.Quiesce(ctx) {
		t.Fatal("Quiesce says the hooks ended while one holds a pod's lock")
	}
	if _, err := p.lockPod(t.Context(), "pod-late"); !errors.Is(err, errQuiesced) {
		t.Errorf("a hook after Quiesce: %v, want %v", err, errQuiesced)
	}
	unlock()
	if !p.Quiesce(t.Context()) {
		t.Fatal("Quiesce failed with no hook running")
	}
	if _, err := p.lockPod(t.Context(), "pod-later"); !errors.Is(err, errQuiesced) {
		t.Errorf("a hook after Quiesce: %v, want %v", err, errQuiesced)
	}
}
