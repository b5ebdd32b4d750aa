package nri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
)

// connection is the plugin's state towards the runtime.
type connection struct {
	mu        sync.Mutex
	connected bool
	synced    chan struct{} // closed at the first Synchronize
	// failed is why the last attempt to connect failed, nil once one
	// succeeded.
	failed error
	// runtime is the runtime that connected last (Configure).
	runtime Runtime
}

// Run keeps the plugin connected to the runtime's NRI socket until ctx
// ends, reconnecting when the runtime restarts.
func (p *Plugin) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("nriSocket", p.opts.Socket)
	backoff := time.Second
	for ctx.Err() == nil {
		idx := p.opts.Index
		if idx == "" {
			idx = DefaultIndex
		}
		h := &hooks{p: p}
		s, err := stub.New(h, stub.WithPluginName(p.opts.Name), stub.WithPluginIdx(idx), stub.WithSocketPath(p.opts.Socket))
		if err == nil {
			h.stub = s
			err = s.Start(ctx)
		}
		p.setFailed(err)
		if err != nil {
			err = p.Connected()
			logger.Error(err, "NRI plugin not connected; retrying", "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		logger.Info("NRI plugin connected")
		// The connection ends when the runtime closes it, or when ctx
		// does.
		closed := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
				s.Stop()
			case <-closed:
			}
		}()
		s.Wait()
		close(closed)
		s.Stop()
		p.setConnected(false)
		if ctx.Err() == nil {
			logger.Info("NRI connection closed; reconnecting")
		}
	}
}

func (p *Plugin) setConnected(on bool) {
	p.conn.mu.Lock()
	defer p.conn.mu.Unlock()
	p.conn.connected = on
	if on {
		select {
		case <-p.conn.synced:
		default:
			close(p.conn.synced)
		}
	}
}

func (p *Plugin) setFailed(err error) {
	p.conn.mu.Lock()
	defer p.conn.mu.Unlock()
	p.conn.failed = err
}

// Connected says whether the runtime is connected and has synchronized
// with the plugin, or why not: a socket that is not there is NRI off in
// the runtime (or on at another path), one nobody listens on a runtime
// down.
func (p *Plugin) Connected() error {
	p.conn.mu.Lock()
	defer p.conn.mu.Unlock()
	switch {
	case p.conn.connected:
		return nil
	case errors.Is(p.conn.failed, fs.ErrNotExist):
		return fmt.Errorf("the runtime's NRI socket %s does not exist: NRI is off in the runtime (containerd 1.7: disable = false under [plugins.\"io.containerd.nri.v1.nri\"]; CRI-O before 1.30: enable_nri = true under [crio.nri]), or its socket is elsewhere (--nri-socket, chart value nriSocket)", p.opts.Socket)
	case errors.Is(p.conn.failed, syscall.ECONNREFUSED):
		return fmt.Errorf("nothing listens on the runtime's NRI socket %s: the runtime is down or restarting", p.opts.Socket)
	case p.conn.failed != nil:
		return fmt.Errorf("not connected to the runtime's NRI socket %s: %w", p.opts.Socket, p.conn.failed)
	}
	return fmt.Errorf("not connected to the runtime's NRI socket %s", p.opts.Socket)
}

// WaitConnected waits until the runtime has connected and synchronized
// with the plugin for the first time, or ctx ends.
func (p *Plugin) WaitConnected(ctx context.Context) error {
	select {
	case <-p.conn.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the runtime's NRI socket %s: %w", p.opts.Socket, ctx.Err())
	}
}

// hooks are the NRI events the plugin handles; stub is the connection
// they are called on (nil in tests that call them directly).
type hooks struct {
	p    *Plugin
	stub stub.Stub
}

var (
	_ stub.SynchronizeInterface     = (*hooks)(nil)
	_ stub.RunPodInterface          = (*hooks)(nil)
	_ stub.StopPodInterface         = (*hooks)(nil)
	_ stub.RemovePodInterface       = (*hooks)(nil)
	_ stub.CreateContainerInterface = (*hooks)(nil)
)

func podOf(pod *api.PodSandbox) Pod {
	p := Pod{UID: types.UID(pod.GetUid()), Namespace: pod.GetNamespace(), Name: pod.GetName(), SandboxID: pod.GetId(),
		Networks: pod.GetAnnotations()[nadv1.NetworkAttachmentAnnot], IPs: pod.GetIps(), PodNetworks: pod.GetAnnotations()[pnv1.AnnotationNetworks]}
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			p.NetNS = ns.GetPath()
		}
	}
	return p
}

// Synchronize reconciles with the pods the runtime runs, at every
// connection (a restart of fastpathd or of the runtime): what fastpath did
// for pods that no longer run is undone, and pods that run get their
// devices now if they lack them (their RunPodSandbox was missed), and
// their claims' status said again.
func (h *hooks) Synchronize(ctx context.Context, pods []*api.PodSandbox, containers []*api.Container) ([]*api.ContainerUpdate, error) {
	defer h.observe("synchronize", time.Now(), nil)
	if o := h.p.opts.Pods; o != nil {
		o.Synchronized(ctx, pods, containers)
	}
	h.p.Synchronize(ctx, pods)
	h.p.CollectGarbage(ctx, pods)
	h.p.setConnected(true)
	return nil, nil
}

// observe records a hook's call.
func (h *hooks) observe(hook string, start time.Time, err error) {
	h.p.opts.Metrics.Hook(hook, err, time.Since(start))
}

// Synchronize reconciles the store with the sandboxes the runtime runs.
func (p *Plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox) {
	running := runningPods(pods)
	p.forgetAttachedGone(running)
	logger := klog.FromContext(ctx)
	// Pods on their own, a few at a time: the kernel serializes the
	// moves, the rest (records, lookups, CNI plugins) overlaps.
	var wg sync.WaitGroup
	sem := make(chan struct{}, syncParallel)
	uids := p.opts.Store.Pods()
	// A pod that selects networks and has none recorded is in no record:
	// its RunPodSandbox and its CreateContainer were both missed (no
	// fastpathd connected, as when one daemon of a rolling update is
	// killed before the other serves), and it runs without them.
	for uid, pod := range running {
		if !slices.Contains(uids, uid) && p.wantsNPWG(pod) {
			uids = append(uids, uid)
		}
	}
	for _, uid := range uids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			pod, ok := running[uid]
			if !ok {
				if err := p.DetachPod(ctx, Pod{UID: uid}); err != nil {
					logger.Error(bounds.Err(err), "Releasing the devices of a pod that is gone", "podUID", uid)
				}
				return
			}
			// Attached again, not only checked: an attach is repeatable,
			// completes what is missing and says the claims' status
			// again, which a process killed after attaching them may
			// never have written.
			if err := p.AttachPod(ctx, pod); err != nil {
				logger.Error(bounds.Err(err), "Attaching the devices of a running pod")
			}
		})
	}
	wg.Wait()
}

// runningPods maps each pod to its sandbox. The runtime lists a pod's
// stopped sandboxes too until the kubelet removes them, as after a
// RunPodSandbox that failed and was tried again: the pod's sandbox is then
// the one that runs, with a process, in a network namespace that is
// there, not whichever the runtime listed last.
func runningPods(pods []*api.PodSandbox) map[types.UID]Pod {
	running := map[types.UID]Pod{}
	liveness := map[types.UID]int{}
	for _, sb := range pods {
		uid, pod, live := types.UID(sb.GetUid()), podOf(sb), sandboxLiveness(sb)
		if have, ok := liveness[uid]; ok && have >= live {
			continue
		}
		running[uid], liveness[uid] = pod, live
	}
	return running
}

// sandboxLiveness ranks a sandbox: 2 when its process runs, plus 1 when
// its network namespace is there.
func sandboxLiveness(sb *api.PodSandbox) int {
	live := 0
	if sb.GetPid() != 0 {
		live += 2
	}
	if netns := podOf(sb).NetNS; netns != "" {
		if _, err := os.Stat(netns); err == nil {
			live++
		}
	}
	return live
}

// syncParallel is how many pods Synchronize reconciles at once.
const syncParallel = 8

// CreateContainer lets a container be made only when its pod's devices
// are in place, or while the attach RunPodSandbox began still runs: the
// container's start waits for that (StartContainer), and meanwhile the
// runtime makes the container (its spec, its mounts, the runtime's create,
// tens of milliseconds). An attach that has already failed fails the
// container's creation, which the kubelet retries whatever the pod's
// restart policy.
func (h *hooks) CreateContainer(ctx context.Context, pod *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	start := time.Now()
	var err error
	if p := podOf(pod); !h.p.attachRunning(p) {
		err = bounds.Err(h.p.EnsurePod(ctx, p))
	}
	h.observe("create_container", start, err)
	return nil, nil, err
}

// StartContainer lets a container start only once the attach its
// CreateContainer let run has ended, and with the devices in place.
func (h *hooks) StartContainer(ctx context.Context, pod *api.PodSandbox, _ *api.Container) error {
	start := time.Now()
	err := bounds.Err(h.p.StartPod(ctx, podOf(pod)))
	h.observe("start_container", start, err)
	return err
}

// RunPodSandbox attaches the pod's devices and networks; with Overlap it
// starts the attach and the pod's first StartContainer waits for it.
func (h *hooks) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	start := time.Now()
	if o := h.p.opts.Pods; o != nil {
		o.Started(ctx, pod)
	}
	attach := h.p.AttachPod
	if h.p.opts.Overlap {
		attach = h.p.StartAttachPod
	}
	err := bounds.Err(attach(ctx, podOf(pod)))
	h.observe("run_pod_sandbox", start, err)
	return err
}

// StopPodSandbox returns the pod's devices. Errors are logged, not
// returned: failing here would not bring a device back and would leave the
// pod stuck; Unprepare finishes what failed.
func (h *hooks) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	start := time.Now()
	h.observe("stop_pod_sandbox", start, h.stop(ctx, pod))
	return nil
}

// RemovePodSandbox does what StopPodSandbox does, for a sandbox whose stop
// fastpath missed; it is harmless after a stop.
func (h *hooks) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	start := time.Now()
	h.observe("remove_pod_sandbox", start, h.stop(ctx, pod))
	return nil
}

func (h *hooks) stop(ctx context.Context, pod *api.PodSandbox) error {
	if o := h.p.opts.Pods; o != nil {
		o.Stopped(ctx, pod)
	}
	p := podOf(pod)
	err := bounds.Err(h.p.DetachPod(ctx, p))
	// A failed attach nobody waited for (no container was created) is
	// forgotten with its sandbox; DetachPod waited for it to end.
	h.p.forgetAttach(p)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Returning devices to the host", "pod", p.String())
	}
	return err
}

// PluginName is the plugin's name for the runtime, the one a pod's
// required-plugins.noderesource.dev annotation names. Both daemons of a
// node during a rolling update have it: the runtime calls both (the hook
// lock keeps them from acting on one pod at once), and a pod that requires
// fastpath starts while either serves.
const PluginName = "fastpath"

// DefaultIndex is the plugin's index among the runtime's NRI plugins when
// the operator gives none.
const DefaultIndex = "10"

// ValidIndex says whether idx is an NRI plugin index: two digits, as the
// runtime orders plugins by it.
func ValidIndex(idx string) bool {
	return len(idx) == 2 && idx[0] >= '0' && idx[0] <= '9' && idx[1] >= '0' && idx[1] <= '9'
}
