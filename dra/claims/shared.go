package claims

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Two daemons share a store while one replaces the other (a DaemonSet's
// rolling update: the kubelet may call either, and the runtime calls both).
// Then each change takes a lock on a file beside the checkpoint, reads the
// checkpoint and its journal again if the other daemon wrote them, and
// writes; each read reads them again if they changed. A daemon alone never
// reads its files after Open.

// stamps identifies a version of the checkpoint and its journal.
type stamps struct{ checkpoint, journal stamp }

// stamps are the files' as they are now.
func (s *Store) stamps() (stamps, error) {
	c, err := stampOf(s.path)
	if err != nil {
		return stamps{}, err
	}
	j, err := stampOf(JournalPath(s.path))
	return stamps{c, j}, err
}

// stamp identifies a version of a file.
type stamp struct {
	ino   uint64
	size  int64
	mtime time.Time
}

func stampOf(path string) (stamp, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return stamp{}, nil
	}
	if err != nil {
		return stamp{}, err
	}
	st := stamp{size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st, nil
}

// Share makes the store safe to share with another daemon of the node,
// and makes it write version 2 until SetJournal says otherwise: the other
// daemon may be of the previous release. It reads the files again, under
// the file lock: the other daemon may have written them since Open read
// them.
func (s *Store) Share() error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	unlock, err := s.lockFile().Lock(context.Background())
	if err != nil {
		return err
	}
	defer unlock()
	s.mu.Lock()
	s.shared, s.journal, s.allowJournal, s.seen = true, false, false, stamps{checkpoint: stamp{size: -1}} // no file's
	s.mu.Unlock()
	return s.refresh()
}

// A daemon of the previous release reads version 2 alone, and reads the
// checkpoint again only when its file changed. So that it never serves
// claims that are not current, a shared store asks, under the file lock
// and before each write, whether another daemon may read the files
// (SetPeerCheck): while one may, the write is of version 2, the whole
// checkpoint, and the first such write folds a journal into it. Settle
// does that at once, for a daemon about to start, which refuses version 3
// at its start.

// SetPeerCheck makes a shared store ask present, before each write and
// under the file lock, whether another daemon may read the files now:
// then it writes version 2, even with SetJournal on. present is called
// with the store's locks held: it must not use the store. Set it before
// the store is written.
func (s *Store) SetPeerCheck(present func() bool) {
	s.mu.Lock()
	s.peer = present
	s.mu.Unlock()
}

// checkPeer sets the version the next write writes: version 3 if
// SetJournal allows it and no other daemon may read the files. The caller
// holds fileMu and the file lock.
func (s *Store) checkPeer() {
	s.mu.RLock()
	present := s.peer
	s.mu.RUnlock()
	if present == nil {
		return
	}
	alone := !present()
	s.mu.Lock()
	s.journal = s.allowJournal && alone
	s.mu.Unlock()
}

// Settle writes the checkpoint whole in version 2, the journal folded
// into it, if it is of version 3 and another daemon may read it now
// (SetPeerCheck): a daemon of the previous release starting refuses
// version 3, and one running reads the checkpoint alone. A store of its
// own, or without a peer check, writes nothing.
func (s *Store) Settle() error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	s.mu.RLock()
	asks := s.shared && s.peer != nil && !s.removed
	s.mu.RUnlock()
	if !asks {
		return nil
	}
	unlock, err := s.lockShared()
	if err != nil {
		return err
	}
	defer unlock()
	s.mu.RLock()
	fold := !s.journal && s.format == Version
	s.mu.RUnlock()
	if !fold {
		return nil
	}
	return s.writeWhole(maps.Clone(s.claims))
}

// FileLock is an exclusive lock on a file, shared by the processes of a
// node. The zero path is no lock.
//
// It is two locks of the file, taken in one order: an open file
// description's fcntl lock (F_OFD_SETLK), the kind the kubelet plugin
// helper takes on its serialize.lock, and a flock, the kind the previous
// release took. Linux keeps the two kinds apart: a lock of one kind only
// would not exclude a holder of the other.
type FileLock string

// Lock takes the lock, waiting for another process to release it until
// ctx ends, and returns its release.
func (l FileLock) Lock(ctx context.Context) (unlock func(), _ error) {
	if l == "" {
		return func() {}, nil
	}
	f, err := openLocked(ctx, string(l), false)
	if err != nil {
		return nil, err
	}
	return func() { _ = f.Close() }, nil // closing releases both
}

// RLock takes the lock shared: holders of RLock do not exclude each
// other, and exclude (and wait for) holders of Lock, the kubelet plugin
// helper's lock of an earlier release among them.
func (l FileLock) RLock(ctx context.Context) (unlock func(), _ error) {
	if l == "" {
		return func() {}, nil
	}
	f, err := openLocked(ctx, string(l), true)
	if err != nil {
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}

// LockKey takes the lock for key alone: holders of different keys do not
// wait for each other, holders of one key exclude each other, and each
// excludes a holder of Lock (this release's, or an earlier one's that
// took Lock for every key) and is excluded by it. The file's flock is
// held shared and an fcntl lock (F_OFD_SETLK) taken on the key's byte
// alone, which Lock's lock of the whole file covers. Two keys whose bytes
// collide only wait for each other.
func (l FileLock) LockKey(ctx context.Context, key string) (unlock func(), _ error) {
	if l == "" {
		return func() {}, nil
	}
	f, err := openFile(string(l), os.O_CREATE|os.O_RDWR|safeFlags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", l, err)
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	byteOf := int64(h.Sum64() % keyBytes)
	if err := lockBoth(ctx, f, unix.LOCK_SH, unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: byteOf, Len: 1}); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s for %s: %w", l, key, err)
	}
	return func() { _ = f.Close() }, nil
}

// keyBytes is how many bytes of a FileLock's file LockKey's keys map to.
const keyBytes = 1 << 40

// openLocked opens the file at path, made if missing, and takes both its
// locks (FileLock), shared or not, which closing it releases.
func openLocked(ctx context.Context, path string, shared bool) (*os.File, error) {
	f, err := openFile(path, os.O_CREATE|os.O_RDWR|safeFlags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	how, typ := unix.LOCK_EX, int16(unix.F_WRLCK)
	if shared {
		how, typ = unix.LOCK_SH, unix.F_RDLCK
	}
	if err := lockBoth(ctx, f, how, unix.Flock_t{Type: typ, Whence: io.SeekStart}); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// lockBoth takes f's flock (how: LOCK_SH or LOCK_EX), then its fcntl lock
// lk (F_OFD_SETLK), in that order, waiting for each until ctx ends.
func lockBoth(ctx context.Context, f *os.File, how int, lk unix.Flock_t) error {
	if err := waitFor(ctx, func() error { return unix.Flock(int(f.Fd()), how|unix.LOCK_NB) }); err != nil {
		return err
	}
	return waitFor(ctx, func() error { return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk) })
}

// waitFor tries to take a lock until it is taken, or ctx ends.
func waitFor(ctx context.Context, try func() error) error {
	for {
		err := try()
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("held by another process: %w", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// lockRemovable takes the FileLock at path, made if missing, and returns
// its release, which removes the file, and its directory once empty: a
// claim's lock file lives while it is held or waited for, and the
// directory while one is (an earlier release that does not know it, rolled
// back to, would leave it on the node forever). A holder that took the
// lock of a file removed meanwhile (its release ran between this one's
// open and lock) takes the new one's instead; one whose directory went
// between making it and opening the file makes it again.
func lockRemovable(ctx context.Context, path string) (unlock func(), _ error) {
	dir := filepath.Dir(path)
	for {
		// Beside the checkpoint, whose directory is there.
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		f, err := openLocked(ctx, path, false)
		if errors.Is(err, fs.ErrNotExist) && ctx.Err() == nil {
			continue // the directory went with another lock's release
		}
		if err != nil {
			return nil, err
		}
		held, err1 := f.Stat()
		now, err2 := os.Lstat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return func() {
				_ = os.Remove(path)
				_ = f.Close()
				_ = os.Remove(dir) // only if empty: fails while another lock lives
			}, nil
		}
		_ = f.Close()
		if err1 != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err1)
		}
	}
}

// RemoveClaimLocks removes the claim lock files of the checkpoint at path
// that no process holds, and their directory once empty: a daemon killed
// while it held a claim's lock left its file (a lock's release removes
// it). A lock held now is left, and the error names it.
func RemoveClaimLocks(path string) error {
	dir := ClaimLockDir(path)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		lock := filepath.Join(dir, e.Name())
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		f, err := openLocked(ctx, lock, false)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("claim lock %s: %w", lock, err))
			continue
		}
		// As a release does: the file, if it is still the one locked.
		held, err1 := f.Stat()
		now, err2 := os.Lstat(lock)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			_ = os.Remove(lock)
		}
		_ = f.Close()
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// lockFile is the lock of a shared store's changes.
func (s *Store) lockFile() FileLock { return FileLock(s.path + ".lock") }

// refresh reads the checkpoint and its journal again if another daemon
// wrote them since this store last read or wrote them. The caller holds
// fileMu.
func (s *Store) refresh() error {
	// A daemon killed in a pending write (AdmitPending) left it.
	if err := adoptPendingLocked(s.path); err != nil {
		return err
	}
	st, err := s.stamps()
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", s.path, err)
	}
	s.mu.RLock()
	same := st == s.seen
	s.mu.RUnlock()
	if same {
		return nil
	}
	// The daemon this one replaces may be of the previous release, or of
	// an earlier build, which compacted without the file lock.
	files, err := readStable(s.path)
	if err != nil {
		if _, newer := errors.AsType[*NewerError](err); newer {
			return err
		}
		return fmt.Errorf("written by another daemon: %w", err)
	}
	s.mu.Lock()
	s.setClaims(files.claims) // nil: no file, nothing prepared
	s.seen, s.extra = st, files.extra
	s.format, s.gen, s.size, s.tail, s.corrupt = files.version, files.gen, files.size, files.tail, files.corrupt
	s.mu.Unlock()
	return nil
}

// current brings a shared store up to date before a read.
func (s *Store) current() {
	s.mu.RLock()
	shared := s.shared && !s.removed
	s.mu.RUnlock()
	if !shared {
		return
	}
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if s.gone() { // RemoveUnused ran while this one waited for fileMu
		return
	}
	unlock, err := s.lockFile().Lock(context.Background())
	if err != nil {
		return // the claims this store has are the best it can tell
	}
	defer unlock()
	_ = s.refresh()
}

// RemoveUnused removes the store's files (the checkpoint, its journal, its
// pending write and the temporary files of killed writes), for a daemon
// that stops with nothing prepared, and says whether it did: only under
// the file lock, and only when the files, read again under it, hold no
// claim (nor a record held aside) and this store holds none. A daemon that started meanwhile (a
// rolling update's new pod, whose runtime hooks may write before it
// serves) and wrote a record keeps them. The files are left as they are
// when they cannot be read.
func (s *Store) RemoveUnused() (bool, error) {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	unlock, err := s.lockFile().Lock(context.Background())
	if err != nil {
		return false, err
	}
	defer unlock()
	if err := adoptPendingLocked(s.path); err != nil {
		return false, err
	}
	files, err := readStable(s.path)
	if err != nil {
		return false, err
	}
	s.mu.RLock()
	mine := len(s.claims) + len(s.corrupt)
	s.mu.RUnlock()
	if len(files.claims) > 0 || len(files.corrupt) > 0 || mine > 0 {
		return false, nil
	}
	var errs []error
	for _, f := range []string{s.path, JournalPath(s.path), PendingPath(s.path)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := removeTempsLocked(s.path); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		// No claims: the journal's lines yet to be synced are all gone
		// with it.
		s.wholeWritten(0)
		s.mu.Lock()
		s.removed = true
		if s.restTimer != nil {
			s.restTimer.Stop()
		}
		s.mu.Unlock()
	}
	return len(errs) == 0, errors.Join(errs...)
}
