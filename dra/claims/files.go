package claims

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The store's files are opened without following a symbolic link at their
// own name (O_NOFOLLOW), and must be regular files of one name: a link or
// a hard link planted where the store reads or writes is refused, never
// written through, so that whoever may write in the state directory cannot
// make the daemon write to or read from another file of the node. Nor
// does an open of them wait for a FIFO's other end (O_NONBLOCK), or leak
// into a child process (O_CLOEXEC).
const safeFlags = unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC

// ErrNotRegular is the error of a store's file that is a symbolic link,
// a hard link (a second name of another file), or no file at all (a
// directory, a FIFO): something the store never writes.
var ErrNotRegular = errors.New("not a regular file of its own")

// openFile opens path with flags, and checks what it opened: a regular
// file, one name of it only. A symbolic link at path is ELOOP's error,
// wrapping ErrNotRegular.
func openFile(path string, flags int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flags, perm)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: %w", path, ErrNotRegular)
	}
	if err != nil {
		return nil, err
	}
	if err := checkRegular(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func checkRegular(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s (mode %s): %w", f.Name(), fi.Mode(), ErrNotRegular)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		return fmt.Errorf("%s has %d names (hard links): %w", f.Name(), st.Nlink, ErrNotRegular)
	}
	return nil
}

// readFile reads the store's file at path (openFile).
func readFile(path string) ([]byte, error) {
	f, err := openFile(path, os.O_RDONLY|safeFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// WriteFileAtomic writes data to path so that path holds either the old or
// the new content, whatever happens: a temporary file in the same
// directory, written and synced, renamed over path, and the directory
// synced.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := ReplaceFile(path, data, perm); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// ReplaceFile is WriteFileAtomic but for the directory's sync: path holds
// the old or the new content whatever happens, and the new one from the
// moment it returns unless the machine loses power before the directory
// is synced (SyncDir). Whatever path was (a symbolic link too) is
// replaced, never written through: the temporary file is new
// (O_EXCL, O_NOFOLLOW), and renamed over path. The temporary file is
// locked (flock) until it is renamed, so that a process removing the
// temporary files of killed writes (removeTemps) leaves a live one's.
func ReplaceFile(path string, data []byte, perm os.FileMode) error {
	return replaceFile(filepath.Dir(path), path, data, perm, true)
}

// ReplaceFileUnsynced is ReplaceFile without any sync, for a file that
// each boot writes again (a CDI spec: on most nodes its directory is a
// tmpfs, and fastpathd writes every prepared claim's again after a
// reboot): a reader never sees it partly written, and a power cut may
// leave the old content, the new, or an empty file. It costs no wait
// for the disk on a Prepare's path.
func ReplaceFileUnsynced(path string, data []byte, perm os.FileMode) error {
	return replaceFile(filepath.Dir(path), path, data, perm, false)
}

// ReplaceFileUnsyncedVia is ReplaceFileUnsynced with the temporary file
// made in stage, a directory of the same filesystem as path's (made if
// missing), rather than beside path: a watch of path's directory
// (inotify) sees a file moved in, never one written there or moved away.
// The temporary files of killed writes are stage's (RemoveTemps).
func ReplaceFileUnsyncedVia(stage, path string, data []byte, perm os.FileMode) error {
	return replaceFile(stage, path, data, perm, false)
}

func replaceFile(tmpDir, path string, data []byte, perm os.FileMode, sync bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if tmpDir != dir {
		if err := os.MkdirAll(tmpDir, 0o750); err != nil {
			return err
		}
	}
	tmp, err := createTemp(tmpDir, "."+filepath.Base(path)+".")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if err := markWritten(tmp.Name()); err != nil {
		return err
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", tmp.Name(), err)
		}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename to %s: %w", path, err)
	}
	return nil
}

// OverwriteFile writes data into the file at path in place, keeping its
// inode, so that a bind mount of the file (a container's, made before the
// write) shows the new content; a file that is not there is made
// (WriteFileAtomic), and one that already holds data is left alone. The
// new content goes first, written and synced, to a file beside path
// (nextOf), then into path, synced, and the file beside is removed: a kill
// or a power cut at any point leaves either path whole or the file beside
// it, which FinishOverwrite puts into path. A reader of path during the
// write may see it partly written.
func OverwriteFile(path string, data []byte, perm os.FileMode) error {
	old, err := readFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return WriteFileAtomic(path, data, perm)
	case err != nil:
		return err
	case bytes.Equal(old, data):
		return nil
	}
	if err := WriteFileAtomic(nextOf(path), data, perm); err != nil {
		return err
	}
	return overwrite(path, data)
}

// FinishOverwrite completes the OverwriteFile of path a kill or a power
// cut interrupted, if one did, and says whether.
func FinishOverwrite(path string) (bool, error) {
	data, err := readFile(nextOf(path))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, overwrite(path, data)
}

// nextOf is where OverwriteFile keeps the new content of path until it is
// in path.
func nextOf(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".next")
}

// overwrite puts data into path in place, syncs it, and removes the copy
// beside it. A path gone (its directory removed with the claim) has
// nothing to complete.
func overwrite(path string, data []byte) error {
	f, err := openFile(path, os.O_WRONLY|safeFlags, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		err = writeInPlace(f, data)
		f.Close()
		if err != nil {
			return err
		}
	}
	if err := os.Remove(nextOf(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// writeInPlace makes f's content data, and syncs it.
func writeInPlace(f *os.File, data []byte) error {
	if _, err := f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if err := f.Truncate(int64(len(data))); err != nil {
		return fmt.Errorf("truncate %s: %w", f.Name(), err)
	}
	if err := markWritten(f.Name()); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", f.Name(), err)
	}
	return nil
}

// createTemp creates a new file in dir named prefix and a random number,
// mode 0600, as os.CreateTemp does, with the store's flags: never through
// a link planted at its name. The file is returned locked (flock), and
// still of its name: one removed between its creation and its lock (by
// removeTemps) is made again.
func createTemp(dir, prefix string) (*os.File, error) {
	for range 100 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64(), 36))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|safeFlags, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", name, err)
		}
		held, err1 := f.Stat()
		now, err2 := os.Lstat(name)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			return f, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("create a temporary file in %s: every name tried exists", dir)
}

// removeIfUnlocked removes the temporary file at path (ReplaceFile's)
// unless a live write holds its lock, and says whether it did.
func removeIfUnlocked(path string) (bool, error) {
	f, err := openFile(path, os.O_RDONLY|safeFlags, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// WriteFileUnsynced writes data to path, replacing what it held, without
// syncing it: a killed process's write is kept (by the kernel), a power
// loss may leave the file empty or cut. A symbolic link, a hard link, or
// anything but a regular file at path is refused (ErrNotRegular), and
// left as it was.
func WriteFileUnsynced(path string, data []byte, perm os.FileMode) error {
	f, err := openFile(path, os.O_WRONLY|os.O_CREATE|safeFlags, perm)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return fmt.Errorf("truncate %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := markWritten(path); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// markWritten sets the modification time of the file just written at
// path (never through a link) to the clock's time, to the nanosecond. The
// kernel's own is of its clock tick: two writes within one tick, the
// second reusing the inode the first freed, would look alike to a daemon
// sharing the store (stampOf).
func markWritten(path string) error {
	now := unix.NsecToTimespec(time.Now().UnixNano())
	omit := unix.Timespec{Nsec: unix.UTIME_OMIT}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{omit, now}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set the modification time of %s: %w", path, err)
	}
	return nil
}

// SyncDir syncs a directory: the renames in it outlive a power loss.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// RemoveTemps removes the temporary files that writes of files named
// prefix and more in dir (ReplaceFile, WriteFileAtomic) killed before
// their rename left, and leaves those of live writes, which hold their
// file's lock: for a directory of files written atomically beside the
// store (the CDI specs), whose temporary files the runtime ignores but
// nothing else would remove.
func RemoveTemps(dir, prefix string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		i := strings.LastIndexByte(name, '.')
		if !e.Type().IsRegular() || !strings.HasPrefix(name, "."+prefix) || i <= len(prefix) || !isBase36(name[i+1:]) {
			continue
		}
		if _, err := removeIfUnlocked(filepath.Join(dir, name)); err != nil {
			errs = append(errs, fmt.Errorf("remove %s, left by a write that was killed: %w", filepath.Join(dir, name), err))
		}
	}
	return errors.Join(errs...)
}

// isBase36 reports whether s is a random number as createTemp writes it.
func isBase36(s string) bool {
	if s == "" || len(s) > 13 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}
