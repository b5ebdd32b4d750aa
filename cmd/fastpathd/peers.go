package main

import (
	"context"
	"strings"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// peers are the other fastpathd daemons that may read the node's state
// directory, which may be of the previous release: v0.1.0 reads checkpoint
// version 2 alone, refuses version 3 at its start, and while it runs reads
// the checkpoint again only when its file changed. The store asks present
// before each write (claims.Store.SetPeerCheck) and writes version 2 while
// one may be there.
//
// A daemon is there from the moment the runtime runs its pod's sandbox:
// another pod of this daemon's DaemonSet (of its namespace, named by its
// generateName) that the runtime runs, as it says at Synchronize and
// RunPodSandbox (nri.PodObserver), until its sandbox stops. Synchronize
// lists stopped sandboxes too (a pod being deleted, its daemon gone): a
// sandbox counts there while its process runs (the runtime gives its PID)
// or a container of it has not exited. At its
// RunPodSandbox the store is settled to version 2 (claims.Store.Settle)
// before the hook returns, so before the runtime starts the new daemon's
// container. A daemon that does not run in a pod the runtime tells of
// (started by hand) is there while it serves on a DRA plugin socket other
// than this daemon's.
type peers struct {
	store     *claims.Store
	logger    klog.Logger
	own       types.UID
	pluginDir string
	ownSocket string

	mu sync.Mutex
	// set: own's namespace and DaemonSet are known (ownNamespace,
	// ownSet), from the runtime's list of sandboxes.
	set                  bool
	ownNamespace, ownSet string
	// pods are the sandboxes of the other daemons' pods, by pod UID.
	pods map[types.UID]string
	// said and alone: what present said last, for its log lines.
	said, alone bool
	// alone, if set, is called, apart, each time present finds the
	// daemon alone after it was not (or at its first call): what a daemon
	// of the previous release left may then be cleared up, the store used.
	onAlone func()
}

func newPeers(ctx context.Context, store *claims.Store, own types.UID, pluginDir, ownSocket string) *peers {
	return &peers{store: store, logger: klog.FromContext(ctx), own: own, pluginDir: pluginDir, ownSocket: ownSocket,
		pods: map[types.UID]string{}}
}

// present says whether another daemon may read the state directory now.
// The store calls it under its file lock before each write.
func (p *peers) present() bool {
	p.mu.Lock()
	pod := ""
	for _, name := range p.pods {
		pod = name
		break
	}
	p.mu.Unlock()
	socket := ""
	if pod == "" {
		socket = liveSocket(p.pluginDir, p.ownSocket)
	}
	alone := pod == "" && socket == ""
	p.mu.Lock()
	changed := !p.said || alone != p.alone
	p.said, p.alone = true, alone
	onAlone := p.onAlone
	p.mu.Unlock()
	if changed {
		if alone {
			p.logger.Info("Alone on the node: checkpoint changes go to its journal (version 3)")
			if onAlone != nil {
				go onAlone() // the store's locks are held
			}
		} else {
			p.logger.Info("Another fastpathd may read the node's state: the checkpoint is written whole (version 2)", "pod", pod, "socket", socket)
		}
	}
	return !alone
}

// daemonSetOf is the name a DaemonSet's pod is made from: the pod's, less
// the suffix the API server adds to its generateName; "" for none.
func daemonSetOf(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return ""
	}
	return name[:i]
}

// other says whether the sandbox is another daemon's pod. The caller holds
// mu.
func (p *peers) other(pod *api.PodSandbox) bool {
	return p.set && types.UID(pod.GetUid()) != p.own && pod.GetNamespace() == p.ownNamespace &&
		daemonSetOf(pod.GetName()) == p.ownSet
}

// Synchronized takes the runtime's sandboxes and its containers that have
// not exited: this daemon's pod among them names its DaemonSet, the others
// of the DaemonSet that run are other daemons'. The store is settled, for
// those.
func (p *peers) Synchronized(ctx context.Context, pods []*api.PodSandbox, containers []*api.Container) {
	running := map[string]bool{}
	for _, c := range containers {
		running[c.GetPodSandboxId()] = true
	}
	p.mu.Lock()
	for _, pod := range pods {
		if types.UID(pod.GetUid()) == p.own && daemonSetOf(pod.GetName()) != "" {
			p.set, p.ownNamespace, p.ownSet = true, pod.GetNamespace(), daemonSetOf(pod.GetName())
		}
	}
	clear(p.pods)
	for _, pod := range pods {
		if p.other(pod) && (pod.GetPid() != 0 || running[pod.GetId()]) {
			p.pods[types.UID(pod.GetUid())] = pod.GetNamespace() + "/" + pod.GetName()
		}
	}
	p.mu.Unlock()
	p.settle(ctx)
}

// Started takes a new sandbox: another daemon's, the store is settled
// before the runtime starts its container.
func (p *peers) Started(ctx context.Context, pod *api.PodSandbox) {
	p.mu.Lock()
	other := p.other(pod)
	if other {
		p.pods[types.UID(pod.GetUid())] = pod.GetNamespace() + "/" + pod.GetName()
	}
	p.mu.Unlock()
	if other {
		p.settle(ctx)
	}
}

// Stopped forgets a sandbox that stopped.
func (p *peers) Stopped(_ context.Context, pod *api.PodSandbox) {
	p.mu.Lock()
	_, was := p.pods[types.UID(pod.GetUid())]
	delete(p.pods, types.UID(pod.GetUid()))
	p.mu.Unlock()
	if was {
		p.present() // says whether this daemon is alone now
	}
}

// settle folds the checkpoint's journal into it, for another daemon of the
// node about to read it (claims.Store.Settle).
func (p *peers) settle(ctx context.Context) {
	if err := p.store.Settle(); err != nil {
		klog.FromContext(ctx).Error(err, "The checkpoint could not be written in version 2 for another fastpathd of the node: one of the previous release refuses version 3 at its start")
	}
}

// setOnAlone sets what is called each time the daemon finds itself alone
// on the node (onAlone).
func (p *peers) setOnAlone(f func()) {
	p.mu.Lock()
	p.onAlone = f
	p.mu.Unlock()
}
