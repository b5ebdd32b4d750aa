package main

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// hostState is what fastpathd keeps on the node between its runs: the
// claim store and its locks in the state directory, the CNI results cache
// there, the kubelet plugins' sockets, and other sockets it serves (the
// CRI Network API's). The networks set through the CRI Network API
// (netapi/ in the state directory) are the node's configuration, as a
// file in the CNI configuration directory is: they stay, and go with
// the last of them removed.
type hostState struct {
	stateDir   string
	pluginDirs []string
	sockets    []string
	// quiesce, when set, ends the NRI hooks for good (nri.Plugin.Quiesce)
	// and says whether those under way finished before ctx ended: it runs
	// before the state is removed, whose hooks' lock file a late hook
	// would make again.
	quiesce func(ctx context.Context) bool
}

// leaveNoTrace removes the daemon's host state as it stops, when nothing
// needs it: no claim is prepared and no other fastpathd of the node
// serves (a rolling update's new pod would, and shares the state). The
// chart's uninstall then leaves nothing on the node but the directories
// the kubelet made for the pod's hostPath volumes, empty. Whatever the
// daemon does not know as its own is left alone.
func leaveNoTrace(ctx context.Context, store *claims.Store, st hostState) {
	logger := klog.FromContext(ctx)
	if n := len(store.Claims()); n > 0 {
		logger.V(2).Info("Keeping the state directory: claims are prepared", "claims", n, "stateDir", st.stateDir)
		return
	}
	for _, dir := range st.pluginDirs {
		if other := liveSocket(dir, ""); other != "" {
			logger.V(2).Info("Keeping the state directory: another fastpathd of the node serves", "socket", other)
			return
		}
	}
	for _, socket := range st.sockets {
		if live(socket) {
			logger.V(2).Info("Keeping the state directory: another fastpathd of the node serves", "socket", socket)
			return
		}
	}
	// The store's files under its file lock, read again under it: a
	// daemon started meanwhile may have written a record.
	if removed, err := store.RemoveUnused(); err != nil {
		logger.Error(err, "Keeping the state directory: the claim store's files cannot be removed", "checkpoint", store.Path())
		return
	} else if !removed {
		logger.V(2).Info("Keeping the state directory: another fastpathd of the node wrote a claim", "checkpoint", store.Path())
		return
	}
	if st.quiesce != nil {
		qctx, cancel := context.WithTimeout(ctx, quiesceTimeout)
		done := st.quiesce(qctx)
		cancel()
		if !done {
			logger.Info("Keeping the rest of the state directory: a runtime hook is still running", "waited", quiesceTimeout, "stateDir", st.stateDir)
			return
		}
	}
	// A daemon killed holding a claim's lock left its file.
	errs := []error{claims.RemoveClaimLocks(store.Path())}
	for _, name := range []string{"checkpoint.json.lock", "nri.lock"} {
		errs = append(errs, removeIfThere(filepath.Join(st.stateDir, name)))
	}
	// With no claim, the CNI cache and the claims' directories hold
	// nothing that will be used again.
	for _, name := range []string{"cni", "claims"} {
		errs = append(errs, os.RemoveAll(filepath.Join(st.stateDir, name)))
	}
	for _, dir := range st.pluginDirs {
		errs = append(errs, removeDeadSockets(dir))
	}
	for _, socket := range st.sockets {
		errs = append(errs, removeIfThere(socket))
	}
	if err := errors.Join(errs...); err != nil {
		logger.Error(err, "Removing the daemon's state from the node")
		return
	}
	logger.Info("No claim is prepared: removed the daemon's state from the node", "stateDir", st.stateDir)
}

// quiesceTimeout bounds how long a stopping daemon waits for the runtime
// hooks under way before it removes its state.
const quiesceTimeout = 10 * time.Second

func removeIfThere(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// liveSocket is a socket in dir, other than except, that a process
// answers on, or "".
func liveSocket(dir, except string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSocket == 0 {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if path == except {
			continue
		}
		if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = conn.Close()
			return path
		}
	}
	return ""
}

// live: a process answers on the socket.
func live(socket string) bool {
	conn, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// removeDeadSockets removes the sockets in dir no process answers on: a
// daemon killed before it could remove its own.
func removeDeadSockets(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Type()&fs.ModeSocket == 0 || !strings.HasSuffix(e.Name(), ".sock") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			_ = conn.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			errs = append(errs, removeIfThere(path))
		}
	}
	return errors.Join(errs...)
}
