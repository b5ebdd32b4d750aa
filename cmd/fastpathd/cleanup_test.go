package main

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/nri"
)

// node is a daemon's host state after a run: a store (with claims or
// not), its locks, a CNI cache, a claim directory, a file of someone
// else's, and a plugin directory.
func node(t *testing.T, prepared bool) (*claims.Store, hostState) {
	t.Helper()
	st := hostState{stateDir: t.TempDir(), pluginDirs: []string{t.TempDir()}}
	store, err := claims.Open(filepath.Join(st.stateDir, "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(claims.Claim{Driver: "fastpath.dev", UID: "uid-1", Namespace: "ns", Name: "c", Pod: claims.Pod{UID: "pod-1"}}); err != nil {
		t.Fatal(err)
	}
	if !prepared {
		if err := store.Delete(claims.Key{Driver: "fastpath.dev", UID: "uid-1"}); err != nil {
			t.Fatal(err)
		}
	}
	// checkpoint.json.locks/…: the lock file of a claim, left by a daemon
	// killed while it held it.
	for _, f := range []string{"nri.lock", "checkpoint.json.lock", "checkpoint.json.locks/0123456789abcdef01234567.lock", "cni/cache/results/net1", "claims/uid-1/device-info.json", "operator-notes.txt"} {
		path := filepath.Join(st.stateDir, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return store, st
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != dir {
			rel, _ := filepath.Rel(dir, path)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// socket leaves a unix socket at path: served while the test runs if
// live, else closed without being removed (a daemon killed).
func socket(t *testing.T, path string, live bool) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if live {
		t.Cleanup(func() { _ = l.Close() })
		return
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
}

func TestLeaveNoTrace(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))

	t.Run("no claim", func(t *testing.T) {
		store, st := node(t, false)
		socket(t, filepath.Join(st.pluginDirs[0], "dra-killed.sock"), false)
		// A checkpoint write killed before its rename.
		if err := os.WriteFile(filepath.Join(st.stateDir, ".checkpoint.json.k1lled"), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		leaveNoTrace(ctx, store, st)
		if got := listDir(t, st.stateDir); !slices.Equal(got, []string{"operator-notes.txt"}) {
			t.Errorf("state directory after: %v, want only the file fastpathd does not know", got)
		}
		if got := listDir(t, st.pluginDirs[0]); len(got) != 0 {
			t.Errorf("plugin directory after: %v, want empty (a socket nobody answers on removed)", got)
		}
	})
	t.Run("claims prepared", func(t *testing.T) {
		store, st := node(t, true)
		before := listDir(t, st.stateDir)
		leaveNoTrace(ctx, store, st)
		if got := listDir(t, st.stateDir); !slices.Equal(got, before) {
			t.Errorf("state directory after: %v, want it as it was: %v", got, before)
		}
	})
	t.Run("another daemon serves", func(t *testing.T) {
		store, st := node(t, false)
		socket(t, filepath.Join(st.pluginDirs[0], "dra-other.sock"), true)
		before := listDir(t, st.stateDir)
		leaveNoTrace(ctx, store, st)
		if got := listDir(t, st.stateDir); !slices.Equal(got, before) {
			t.Errorf("state directory after: %v, want it as it was: %v", got, before)
		}
		if _, err := os.Stat(filepath.Join(st.pluginDirs[0], "dra-other.sock")); errors.Is(err, fs.ErrNotExist) {
			t.Error("the other daemon's socket was removed")
		}
	})
	t.Run("the CRI Network API socket", func(t *testing.T) {
		store, st := node(t, false)
		dir := t.TempDir()
		st.sockets = []string{filepath.Join(dir, "network-api.sock")}
		socket(t, st.sockets[0], false)
		leaveNoTrace(ctx, store, st)
		if got := listDir(t, dir); len(got) != 0 {
			t.Errorf("socket directory after: %v, want the dead socket removed", got)
		}
		store, st = node(t, false)
		st.sockets = []string{filepath.Join(t.TempDir(), "network-api.sock")}
		socket(t, st.sockets[0], true)
		before := listDir(t, st.stateDir)
		leaveNoTrace(ctx, store, st)
		if got := listDir(t, st.stateDir); !slices.Equal(got, before) {
			t.Errorf("state directory with another daemon's CRI Network API live: %v, want it as it was: %v", got, before)
		}
	})
}

// A daemon that started beside the stopping one, and recorded a claim
// before it serves (its runtime hooks write first), keeps the store: the
// stopping daemon reads the files again under their lock before it
// removes them, and removes nothing while another process holds the lock.
func TestLeaveNoTraceKeepsAnotherDaemonsStore(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	store, st := node(t, false)
	path := filepath.Join(st.stateDir, "checkpoint.json")
	other, err := claims.Open(path, claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Share(); err != nil {
		t.Fatal(err)
	}
	c := claims.Claim{Driver: "k8s.cni.cncf.io", UID: "pod-2", Namespace: "ns", Name: "p2", Pod: claims.Pod{UID: "pod-2"},
		Networks: []claims.Network{{Request: "net1", Pool: "cluster", Device: "net1", IfName: "net1", Conflist: []byte(`{}`)}}}
	if err := other.Put(c); err != nil {
		t.Fatal(err)
	}
	leaveNoTrace(ctx, store, st)
	if got, _, err := claims.Read(path); err != nil || len(got) != 1 {
		t.Fatalf("the other daemon's store after the clean-up: %d claims, %v; want its claim", len(got), err)
	}

	// Held by another process: the clean-up waits for it.
	store, st = node(t, false)
	path = filepath.Join(st.stateDir, "checkpoint.json")
	unlock, err := claims.FileLock(path + ".lock").Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		leaveNoTrace(ctx, store, st)
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("the clean-up did not wait for the store's file lock")
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the checkpoint, removed while another process held its lock: %v", err)
	}
	unlock()
	<-done
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the checkpoint after the lock's release: %v, want it removed", err)
	}
}

// The fold begun as the daemon is told to stop is over before the daemon
// returns (and leaveNoTrace runs): the last fold waits for it.
func TestFoldOnStopWaits(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var calls atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{})
	last := foldOnStop(ctx, func() {
		if calls.Add(1) == 1 {
			close(started)
			<-release
		}
	})
	cancel()
	<-started
	returned := make(chan struct{})
	go func() {
		last()
		close(returned)
	}()
	select {
	case <-returned:
		t.Fatal("the last fold returned while the one begun at the stop still runs")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-returned
	if n := calls.Load(); n != 2 {
		t.Errorf("fold called %d times, want 2 (at the stop, and last)", n)
	}

	// Not told to stop: the last fold alone.
	calls.Store(0)
	foldOnStop(t.Context(), func() { calls.Add(1) })()
	if n := calls.Load(); n != 1 {
		t.Errorf("without a stop, fold called %d times, want 1", n)
	}
}

// TestLeaveNoTraceLateHook: a runtime hook that comes after the daemon
// removed its state (the kubelet removing a sandbox of a pod long gone)
// makes nothing again: the hooks are ended before the node's hook lock
// file is removed, and a later one fails without taking it (a pod with
// nothing of fastpath's is let go as ever).
func TestLeaveNoTraceLateHook(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	store, st := node(t, false)
	plugin := nri.New(nri.Options{Socket: filepath.Join(t.TempDir(), "nri.sock"), Store: store,
		HookLock: claims.FileLock(filepath.Join(st.stateDir, "nri.lock"))})
	st.quiesce = plugin.Quiesce
	leaveNoTrace(ctx, store, st)
	if err := plugin.DetachPod(ctx, nri.Pod{UID: "pod-gone", Namespace: "ns", Name: "gone", SandboxID: "sandbox-gone"}); err != nil {
		t.Errorf("a late StopPodSandbox of a pod with nothing of fastpath's: %v", err)
	}
	if got := listDir(t, st.stateDir); !slices.Equal(got, []string{"operator-notes.txt"}) {
		t.Errorf("state directory after a late hook: %v, want only the file fastpathd does not know", got)
	}
}

// TestLeaveNoTraceHookStillRunning: a runtime hook still running when the
// wait for the hooks ends keeps the state directory's locks and caches
// (the hook may need them); only the claim store's files are gone.
func TestLeaveNoTraceHookStillRunning(t *testing.T) {
	ctx := klog.NewContext(t.Context(), ktesting.NewLogger(t, ktesting.NewConfig()))
	store, st := node(t, false)
	st.quiesce = func(context.Context) bool { return false }
	leaveNoTrace(ctx, store, st)
	got := listDir(t, st.stateDir)
	for _, want := range []string{"nri.lock", "cni", "claims", "operator-notes.txt"} {
		if !slices.Contains(got, want) {
			t.Errorf("state directory after: %v, want %s kept", got, want)
		}
	}
}
