package claims

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"golang.org/x/sys/unix"
)

// Two daemons sharing a store (a rolling update) see each other's changes,
// and the store refuses conflicts across them: both writing version 2,
// both writing the journal, and one of each (a daemon that has not yet
// seen the other go).
func TestSharedStores(t *testing.T) {
	for _, tc := range []struct {
		name     string
		journals [2]bool
	}{{"whole", [2]bool{}}, {"journal", [2]bool{true, true}}, {"mixed", [2]bool{true, false}}} {
		t.Run(tc.name, func(t *testing.T) { testSharedStores(t, tc.journals) })
	}
}

func testSharedStores(t *testing.T, journals [2]bool) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	a, b := open(t, path), open(t, path)
	for i, s := range []*Store{a, b} {
		if err := s.Share(); err != nil {
			t.Fatal(err)
		}
		s.SetJournal(journals[i])
	}
	x := netdevClaim("x", "pod1", "dev-x", "net1")
	if err := a.Admit(x); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Get(x.Key()); !ok {
		t.Fatal("the other daemon does not see a new claim")
	}
	var conflict *ConflictError
	if err := b.Admit(netdevClaim("y", "pod2", "dev-x", "net1")); !errors.As(err, &conflict) {
		t.Errorf("Admit of a device the other daemon holds = %v, want a conflict", err)
	}
	if err := b.Admit(netdevClaim("z", "pod3", "dev-z", "net1")); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(x.Key()); err != nil {
		t.Fatal(err)
	}
	if got := b.Claims(); len(got) != 1 || got[0].Name != "c-z" {
		t.Errorf("the other daemon sees %+v, want only z", got)
	}
	if got := a.Claims(); len(got) != 1 || got[0].Name != "c-z" {
		t.Errorf("the first daemon sees %+v, want only z", got)
	}
	// Both daemons see the other's pending write while it is committed,
	// and the surviving one that of a daemon killed before it was: the
	// pending file of a store abandoned mid-write (its process gone, so its
	// file lock too) is adopted at the next read.
	n := cniClaim("n", "pod4", "cni-0", "net1")
	wait, err := a.AdmitPending(n)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Get(n.Key()); !ok {
		t.Error("the other daemon does not see a pending write")
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	killed := open(t, path)
	k := cniClaim("k", "pod5", "cni-1", "net1")
	if err := writePending(killed, k); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Get(k.Key()); !ok {
		t.Error("the surviving daemon does not find a killed daemon's pending write")
	}
	if got := a.Claims(); len(got) != 3 {
		t.Errorf("the first daemon sees %+v, want z, n and k", got)
	}
}

func TestFileLock(t *testing.T) {
	l := FileLock(filepath.Join(t.TempDir(), "lock"))
	unlock, err := l.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Another process's lock: flock locks are per open file.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(ctx); err == nil {
		t.Fatal("the lock was taken twice")
	}
	unlock()
	again, err := l.Lock(t.Context())
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	again()
	if unlock, err := FileLock("").Lock(t.Context()); err != nil {
		t.Fatal(err)
	} else {
		unlock()
	}
}

// A daemon that starts while the other writes (a pod's claim released
// between the new daemon's Open and its Share) does not keep the claims
// it read before: Share reads the checkpoint again.
func TestShareAfterOtherWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	old := open(t, path)
	if err := old.Share(); err != nil {
		t.Fatal(err)
	}
	x := netdevClaim("x", "pod1", "dev-x", "net1")
	if err := old.Admit(x); err != nil {
		t.Fatal(err)
	}
	next := open(t, path)
	if err := old.Delete(x.Key()); err != nil {
		t.Fatal(err)
	}
	if err := next.Share(); err != nil {
		t.Fatal(err)
	}
	if _, ok := next.Get(x.Key()); ok {
		t.Error("the new daemon still holds a claim the old one released before it shared the store")
	}
	if err := next.Admit(netdevClaim("y", "pod2", "dev-x", "net1")); err != nil {
		t.Errorf("the released device cannot be prepared for another claim: %v", err)
	}
}

// Every write of the store's files gets its own modification time, to the
// nanosecond, even two writes of one size within one clock tick of the
// kernel: a daemon sharing the store tells them apart (stampOf).
func TestWritesStampedApart(t *testing.T) {
	dir := t.TempDir()
	for name, write := range map[string]func(string, []byte) error{
		"atomic":   func(p string, d []byte) error { return WriteFileAtomic(p, d, 0o600) },
		"unsynced": func(p string, d []byte) error { return WriteFileUnsynced(p, d, 0o600) },
	} {
		path := filepath.Join(dir, name)
		var stamps []stamp
		for i := range 20 {
			if err := write(path, []byte{'a' + byte(i%2)}); err != nil {
				t.Fatal(err)
			}
			st, err := stampOf(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range stamps {
				if o.mtime.Equal(st.mtime) {
					t.Fatalf("%s: write %d has the modification time of an earlier one (%s)", name, i, st.mtime)
				}
			}
			stamps = append(stamps, st)
		}
	}
}

// A daemon of the previous release, beside this one in a rolling update,
// writes its version-1 checkpoint: the shared store reads it migrated, and
// neither empties itself nor writes the other's claims away.
func TestSharedStoreReadsPreviousRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	if err := s.Share(); err != nil {
		t.Fatal(err)
	}
	copyFile(t, "testdata/v1/checkpoint.json", path)
	if n := len(s.Claims()); n != 4 {
		t.Fatalf("the store reads %d claims of the previous release's checkpoint, want its 4", n)
	}
	if err := s.Admit(netdevClaim("new", "pod9", "dev-new", "net1")); err != nil {
		t.Fatal(err)
	}
	again, err := Open(path, Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(again.Claims()); n != 5 {
		t.Errorf("after a write the checkpoint holds %d claims, want the previous release's 4 and the new one", n)
	}
}

// The temporary files of writes killed before their rename are removed
// when the store opens; other files of the directory are left.
func TestOpenRemovesKilledWrites(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.json")
	stale := filepath.Join(dir, ".checkpoint.json.k1llled")
	other := filepath.Join(dir, ".other.json.1")
	for _, f := range []string{stale, other} {
		if err := os.WriteFile(f, []byte(`{"version": 2, "cl`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	open(t, path)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary file of a killed write is still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file that is not the store's went: %v", err)
	}
}

// The lock excludes the kubelet plugin helper's lock of the same file (an
// open file description's fcntl lock, which a flock alone does not see).
func TestFileLockExcludesHelper(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serialize.lock")
	held, err := fileutil.LockFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if unlock, err := FileLock(path).Lock(ctx); err == nil {
		unlock()
		t.Fatal("the lock was taken while the helper holds the file")
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	unlock, err := FileLock(path).Lock(t.Context())
	if err != nil {
		t.Fatalf("after the helper's release: %v", err)
	}
	// And the helper waits for it in turn.
	if _, err := fileutil.TryLockFile(path, os.O_RDWR, 0o600); err == nil {
		t.Error("the helper took the file while the lock is held")
	}
	unlock()
}

// RLock's holders share the file: two at once, while Lock waits for both,
// and the kubelet plugin helper's lock (an earlier release's Prepare)
// waits for them and they for it.
func TestFileRLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serialize.lock")
	l := FileLock(path)
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	r1, err := l.RLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.RLock(short())
	if err != nil {
		t.Fatalf("a second shared holder waited: %v", err)
	}
	if unlock, err := l.Lock(short()); err == nil {
		unlock()
		t.Fatal("Lock was taken while shared holders hold the file")
	}
	if _, err := fileutil.TryLockFile(path, os.O_RDWR, 0o600); err == nil {
		t.Fatal("the helper took the file while shared holders hold it")
	}
	r1()
	if unlock, err := l.Lock(short()); err == nil {
		unlock()
		t.Fatal("Lock was taken while one shared holder is left")
	}
	r2()
	w, err := l.Lock(t.Context())
	if err != nil {
		t.Fatalf("Lock after the shared holders left: %v", err)
	}
	if unlock, err := l.RLock(short()); err == nil {
		unlock()
		t.Fatal("RLock was taken while Lock is held")
	}
	w()
	held, err := fileutil.LockFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if unlock, err := l.RLock(short()); err == nil {
		unlock()
		t.Fatal("RLock was taken while the helper holds the file")
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if unlock, err := FileLock("").RLock(t.Context()); err != nil {
		t.Fatal(err)
	} else {
		unlock()
	}
}

// A claim's lock is the node's when the store is shared: while one daemon
// holds it, the other's waits, so that a change that reads a record,
// works and writes it back (an attachment recorded by a hook) is never
// crossed by the other daemon's (an Unprepare's deletion), which it would
// undo. Its file goes with its release.
func TestClaimLockNodeWide(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	a, b := open(t, path), open(t, path)
	for _, s := range []*Store{a, b} {
		if err := s.Share(); err != nil {
			t.Fatal(err)
		}
	}
	c := netdevClaim("x", "pod1", "dev-x", "net1")
	if err := a.Put(c); err != nil {
		t.Fatal(err)
	}
	unlockA := a.Lock(c.Key())
	held, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if unlock, err := b.lockKey(held, c.Key()); err == nil {
		unlock()
		t.Fatal("the other daemon took the claim's lock while it was held")
	} else {
		unlock()
	}
	y := netdevClaim("y", "pod2", "dev-y", "net1")
	unlockY, err := b.lockKey(held, y.Key())
	if err != nil {
		t.Errorf("another claim's lock: %v", err)
	}
	unlockY()
	deleted := make(chan error, 1)
	go func() {
		unlock := b.Lock(c.Key())
		err := b.Delete(c.Key())
		unlock() // before the send: the test then looks for its file
		deleted <- err
	}()
	rec, _ := a.Get(c.Key())
	rec.Pod.Name = "attached"
	if err := a.Put(rec); err != nil {
		t.Fatal(err)
	}
	unlockA()
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Get(c.Key()); ok {
		t.Error("the deleted record came back")
	}
	if entries, _ := os.ReadDir(ClaimLockDir(path)); len(entries) != 0 {
		t.Errorf("lock files left after their release: %v", entries)
	}
	if _, err := os.Stat(ClaimLockDir(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the claim locks' directory outlives them (%v): v0.1.0, rolled back to, would leave it on the node", err)
	}
}

// Claim locks taken and released by two daemons at once, each release
// removing the directory once empty: none fails, for want of the
// directory another's release removed, and none is left.
func TestClaimLocksDirectoryRace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	a, b := open(t, path), open(t, path)
	for _, s := range []*Store{a, b} {
		if err := s.Share(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i, s := range []*Store{a, b, a, b} {
		wg.Go(func() {
			c := netdevClaim(fmt.Sprintf("c%d", i), "pod", "dev", "net1")
			k := c.Key()
			for range 300 {
				unlock, err := s.lockKey(t.Context(), k)
				if err != nil {
					t.Error(err)
					return
				}
				unlock()
			}
		})
	}
	wg.Wait()
	if _, err := os.Stat(ClaimLockDir(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the claim locks' directory is left (%v)", err)
	}
}

// A stopping daemon's RemoveUnused leaves no file of the store behind,
// even when a reader looks at the shared store afterwards (the daemon's
// health monitor, a metrics scrape): reads no longer take the file lock,
// which would make its file again.
func TestRemoveUnusedLeavesNoLock(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.json")
	s := open(t, path)
	if err := s.Share(); err != nil {
		t.Fatal(err)
	}
	x := netdevClaim("x", "pod1", "dev-x", "net1")
	if err := s.Admit(x); err != nil {
		t.Fatal(err)
	}
	if removed, err := s.RemoveUnused(); err != nil || removed {
		t.Fatalf("RemoveUnused with a claim = %v, %v; want the files kept", removed, err)
	}
	if err := s.Delete(x.Key()); err != nil {
		t.Fatal(err)
	}
	if removed, err := s.RemoveUnused(); err != nil || !removed {
		t.Fatalf("RemoveUnused with no claim = %v, %v; want the files removed", removed, err)
	}
	if err := os.Remove(path + ".lock"); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Claims()) + len(s.View()); n != 0 {
		t.Errorf("%d claims read after the files went", n)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("files left after RemoveUnused and a read: %v", names)
	}
}

// After RemoveUnused, what a stopping daemon's other parts may still call
// (the fold as it returns, the store watch's rewrite, the peers' settle,
// the metadata sweep's Hold) makes no file again; Hold refuses, so that
// the sweep does not act on claims another daemon may have written since.
// A claim's change is kept: it writes the files again.
func TestRemoveUnusedThenEveryPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.json")
	s := open(t, path)
	if err := s.Share(); err != nil {
		t.Fatal(err)
	}
	s.SetPeerCheck(func() bool { return true })
	if removed, err := s.RemoveUnused(); err != nil || !removed {
		t.Fatalf("RemoveUnused = %v, %v", removed, err)
	}
	if err := os.Remove(path + ".lock"); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Fold":    s.Fold,
		"Rewrite": s.Rewrite,
		"Settle":  s.Settle,
		"Hold": func() error {
			err := s.Hold(func([]*Claim, []*CorruptError) error {
				t.Error("Hold ran its function on a store whose files were removed")
				return nil
			})
			if !errors.Is(err, ErrRemoved) {
				t.Errorf("Hold = %v, want ErrRemoved", err)
			}
			return nil
		},
	} {
		if err := call(); err != nil {
			t.Errorf("%s after RemoveUnused: %v", name, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Fatalf("%s after RemoveUnused made %v", name, names)
		}
	}
	x := netdevClaim("x", "pod1", "dev-x", "net1")
	if err := s.Admit(x); err != nil {
		t.Fatal(err)
	}
	if n, _, err := Verify(path); err != nil || n != 1 {
		t.Fatalf("a claim admitted after RemoveUnused: the files hold %d (%v), want it kept", n, err)
	}
	if removed, err := s.RemoveUnused(); err != nil || removed {
		t.Errorf("RemoveUnused with that claim = %v, %v; want the files kept", removed, err)
	}
}

// TestRemoveUnusedStopsRest: a store of its own, at rest after its last
// change in version 3, whose files RemoveUnused removed before the rest
// came (a daemon stopping right after its last Unprepare), writes nothing
// when the rest comes: no checkpoint, no lock file.
func TestRemoveUnusedStopsRest(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.json")
	s := open(t, path)
	s.SetRest(time.Hour) // armed by the change, fired by hand below
	x := netdevClaim("x", "pod1", "dev-x", "net1")
	if err := s.Admit(x); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(x.Key()); err != nil {
		t.Fatal(err)
	}
	if removed, err := s.RemoveUnused(); err != nil || !removed {
		t.Fatalf("RemoveUnused = %v, %v", removed, err)
	}
	if err := os.Remove(path + ".lock"); err != nil {
		t.Fatal(err)
	}
	s.settleRest()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the rest after RemoveUnused left %v", names)
	}
}

// LockKey excludes holders of its key and of Lock, not of other keys:
// two pods' hooks do not wait for each other, one pod's do, and a daemon
// of an earlier release (Lock for every pod) waits for them all.
func TestFileLockKey(t *testing.T) {
	l := FileLock(filepath.Join(t.TempDir(), "nri.lock"))
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	a, err := l.LockKey(t.Context(), "pod-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.LockKey(short(), "pod-b")
	if err != nil {
		t.Fatalf("another key waited: %v", err)
	}
	if unlock, err := l.LockKey(short(), "pod-a"); err == nil {
		unlock()
		t.Fatal("a key's lock was taken twice")
	} else if !strings.Contains(err.Error(), "pod-a") {
		t.Errorf("the error does not name the key: %v", err)
	}
	if unlock, err := l.Lock(short()); err == nil {
		unlock()
		t.Fatal("Lock was taken while keys are held")
	}
	a()
	if unlock, err := l.LockKey(short(), "pod-a"); err != nil {
		t.Fatalf("the key after its release: %v", err)
	} else {
		unlock()
	}
	b()
	w, err := l.Lock(t.Context())
	if err != nil {
		t.Fatalf("Lock after the keys' release: %v", err)
	}
	if unlock, err := l.LockKey(short(), "pod-c"); err == nil {
		unlock()
		t.Fatal("a key was taken while Lock is held")
	}
	w()
	// An earlier release's lock: a flock of the whole file alone.
	f, err := os.OpenFile(string(l), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if unlock, err := l.LockKey(short(), "pod-a"); err == nil {
		unlock()
		t.Fatal("a key was taken while a flock of the file is held")
	}
	_ = f.Close()
	if unlock, err := FileLock("").LockKey(t.Context(), "pod-a"); err != nil {
		t.Fatal(err)
	} else {
		unlock()
	}
}
