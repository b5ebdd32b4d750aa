package claims

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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

// A claim's lock file a killed daemon left is removed, with its directory;
// one held now is left, and named.
func TestRemoveClaimLocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	if err := RemoveClaimLocks(path); err != nil {
		t.Fatalf("no lock directory: %v", err)
	}
	held := claimLockPath(path, Key{Driver: DriverFastpath, UID: "held"})
	unlock, err := lockRemovable(t.Context(), held)
	if err != nil {
		t.Fatal(err)
	}
	stale := claimLockPath(path, Key{Driver: DriverFastpath, UID: "killed"})
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err = RemoveClaimLocks(path)
	if err == nil || !strings.Contains(err.Error(), held) {
		t.Errorf("with a lock held: %v, want an error naming %s", err, held)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the stale lock is there: %v", err)
	}
	if _, err := os.Lstat(held); err != nil {
		t.Errorf("the held lock was removed: %v", err)
	}
	unlock() // the directory goes with the last lock's release
	if err := os.MkdirAll(ClaimLockDir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveClaimLocks(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(ClaimLockDir(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the lock directory is there: %v", err)
	}
}
