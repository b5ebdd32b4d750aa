package nri

import (
	"fmt"
	"os"
	"sync"
)

// netnsHolds keeps open the network namespace of each pod fastpath put a
// device or a network in, from the attach until nothing of fastpath's is
// recorded in it any more. A runtime may remove a sandbox's namespace
// before its StopPodSandbox reaches NRI plugins (CRI-O does: it unmounts
// the namespace, then calls the plugins), and a namespace no process
// holds is destroyed with what is in it: a veth with it, a VF's netdev
// back in the host under the pod's name for it, a CNI plugin's DEL without
// the interface it deletes. Held, the namespace lives until the detach
// has taken everything out. A fastpathd that restarts holds again the
// namespaces of the pods that run (Synchronize attaches them again).
type netnsHolds struct {
	mu    sync.Mutex
	files map[string]*os.File // by the namespace's path
}

// hold opens the namespace at path, once.
func (h *netnsHolds) hold(path string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.files[path]; ok {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("hold network namespace %s: %w", path, err)
	}
	if h.files == nil {
		h.files = map[string]*os.File{}
	}
	h.files[path] = f
	return nil
}

// path is where the namespace that was at path can be entered: its held
// descriptor, which outlives the path's mount; path itself if not held.
// The descriptor is named by this process's ID, not /proc/self: a CNI
// plugin this process runs enters it too.
func (h *netnsHolds) path(path string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f, ok := h.files[path]; ok {
		return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
	}
	return path
}

// drop closes the namespaces of paths inUse does not say are used.
func (h *netnsHolds) drop(paths []string, inUse func(string) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range paths {
		if f, ok := h.files[p]; ok && !inUse(p) {
			_ = f.Close()
			delete(h.files, p)
		}
	}
}

// held is how many namespaces are held.
func (h *netnsHolds) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.files)
}

// closeAll closes every namespace held.
func (h *netnsHolds) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for p, f := range h.files {
		_ = f.Close()
		delete(h.files, p)
	}
}

// Close lets go of the network namespaces the plugin holds, as the
// daemon's process ending does: a namespace no pod holds any more is then
// destroyed, and the kernel gives a VF's netdev in it back to the host
// (where the next daemon's Synchronize finds it).
func (p *Plugin) Close() { p.netns.closeAll() }
