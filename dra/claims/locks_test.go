package claims

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// TestLockContext: a lock held is waited for until the context ends, and
// then nothing is held; released, the lock is taken and dropped after.
func TestLockContext(t *testing.T) {
	var l Locks[string]
	unlock := l.Lock("a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if u, err := l.LockContext(ctx, "a"); !errors.Is(err, context.Canceled) || u != nil {
		t.Fatalf("a held lock, the context ended: %v", err)
	}
	other, err := l.LockContext(ctx, "b")
	if err != nil {
		t.Fatalf("a free lock, the context ended: %v", err)
	}
	other()
	unlock()
	again, err := l.LockContext(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	again()
	if n := l.held(); n != 0 {
		t.Errorf("%d locks left", n)
	}
}

// TestStoreLockContext: a claim's lock held, LockContext returns when its
// context ends, with the context's error.
func TestStoreLockContext(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "checkpoint.json"))
	k := Key{Driver: DriverFastpath, UID: "uid-a"}
	unlock := s.Lock(k)
	defer unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if u, err := s.LockContext(ctx, k); !errors.Is(err, context.Canceled) || u != nil {
		t.Errorf("LockContext: %v", err)
	}
}
