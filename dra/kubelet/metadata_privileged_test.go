//go:build privileged

package kubelet

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMetadataWriteSeenThroughBindMount: the CDI spec mounts a metadata
// file itself into the containers, and the runtime may make a container's
// mounts before the attach writes the device's network data into the file
// (the container's start waits for the attach, not its creation): a write
// after the mount is seen through it. A real bind mount, in a mount
// namespace of the test's own.
func TestMetadataWriteSeenThroughBindMount(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The thread stays in its mount namespace and ends with the
		// goroutine (no UnlockOSThread).
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			t.Errorf("unshare the mount namespace: %v", err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			t.Errorf("make the mounts private: %v", err)
			return
		}
		m := &Metadata{CDIDir: t.TempDir()}
		file := filepath.Join(t.TempDir(), "default_a", "nic", "metadata.json")
		if err := os.MkdirAll(filepath.Dir(file), 0o750); err != nil {
			t.Error(err)
			return
		}
		if err := m.writeFile(file, []byte(`{"generation":1}`), 0o644); err != nil {
			t.Error(err)
			return
		}
		inContainer := filepath.Join(t.TempDir(), "fastpath.dev-metadata.json")
		if err := os.WriteFile(inContainer, nil, 0o644); err != nil {
			t.Error(err)
			return
		}
		if err := unix.Mount(file, inContainer, "", unix.MS_BIND, ""); err != nil {
			t.Errorf("bind mount %s: %v", file, err)
			return
		}
		defer func() { _ = unix.Unmount(inContainer, unix.MNT_DETACH) }()
		want := `{"generation":2,"networkData":{"interfaceName":"net1"}}`
		if err := m.writeFile(file, []byte(want), 0o644); err != nil {
			t.Error(err)
			return
		}
		if got, err := os.ReadFile(inContainer); err != nil || string(got) != want {
			t.Errorf("through the bind mount made before the write: %q, %v; want %q", got, err, want)
		}
	}()
	<-done
}
