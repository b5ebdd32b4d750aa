package fulldisk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size bytes at dir, made if missing, until the
// test ends: a filesystem of its own to fill up. Root only.
func Tmpfs(t testing.TB, dir string, size int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount a tmpfs of %d bytes at %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// Free is the free space of the filesystem of dir, for unprivileged users.
func Free(t testing.TB, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// Fill writes a file in dir until its filesystem has at most leave bytes
// free (less by up to a block; 0: none, a write fails with ENOSPC), and
// returns what removes the file.
func Fill(t testing.TB, dir string, leave int64) (remove func()) {
	t.Helper()
	f, err := os.CreateTemp(dir, "fill-")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	remove = func() {
		if err := os.Remove(f.Name()); err != nil {
			t.Errorf("remove %s: %v", filepath.Base(f.Name()), err)
		}
	}
	block := make([]byte, 4096)
	for Free(t, dir) > leave {
		n := min(int64(len(block)), Free(t, dir)-leave)
		if _, err := f.Write(block[:n]); errors.Is(err, unix.ENOSPC) {
			break
		} else if err != nil {
			remove()
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil && !errors.Is(err, unix.ENOSPC) {
			remove()
			t.Fatal(err)
		}
	}
	return remove
}
