package nri

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/attach"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// Attacher moves netdevs into pods and back (dataplane.Attacher).
type Attacher interface {
	HostUp(name string) (bool, error)
	InPod(netns string, nd dataplane.Netdev) (bool, error)
	Attach(ctx context.Context, netns string, nd dataplane.Netdev) (dataplane.Attached, error)
	Detach(ctx context.Context, netns string, nd dataplane.Netdev) error
	// Sub-interfaces of shared devices, made in the pod and deleted.
	AttachShared(ctx context.Context, netns string, s dataplane.SubInterface) (dataplane.Attached, error)
	DetachShared(ctx context.Context, netns string, s dataplane.SubInterface) error
	SharedInPod(netns string, s dataplane.SubInterface) (bool, error)
}

// CNI runs CNI plugin chains (dataplane.CNI).
type CNI interface {
	Add(ctx context.Context, n dataplane.CNINetwork) (dataplane.CNIResult, error)
	Added(ctx context.Context, n dataplane.CNINetwork) (dataplane.CNIResult, bool, error)
	Del(ctx context.Context, n dataplane.CNINetwork) error
	// STATUS, CHECK and GC (cni_verbs.go).
	Status(ctx context.Context, n dataplane.CNINetwork) error
	Check(ctx context.Context, n dataplane.CNINetwork) error
	Cached(ctx context.Context, n dataplane.CNINetwork) (dataplane.CNIResult, bool, error)
	Attachments() ([]dataplane.CNIAttachment, error)
	GC(ctx context.Context, conflist []byte, valid []dataplane.CNIAttachment) error
}

var (
	_ Attacher = (*dataplane.Attacher)(nil)
	_ CNI      = (*dataplane.CNI)(nil)
)

// Options configure the plugin.
type Options struct {
	// Socket is the runtime's NRI socket.
	Socket   string
	Store    *claims.Store
	Attacher Attacher
	// CNI runs the networks of CNI claims; nil when the CNI driver is off.
	CNI    CNI
	Status *status.Writer
	// DelAttempts is how often a CNI DEL is tried before it is left for
	// Unprepare (default 3), DelBackoff the first wait between tries.
	DelAttempts int
	DelBackoff  time.Duration
	// Metrics records the hooks, attaches and detaches; nil for none.
	Metrics *metrics.Metrics
	// Name is the plugin's name for the runtime; default PluginName.
	Name string
	// Index is the plugin's index among the runtime's NRI plugins, two
	// digits: plugins are called in index order. Empty: 10.
	Index string
	// NPWG, when set, attaches the networks pods select with the Network
	// Plumbing WG annotation; it needs CNI.
	NPWG *NPWGOptions
	// PodNetworks, when set, attaches the PodNetworks (KEP-3698) pods name;
	// it needs NPWG.
	PodNetworks *PodNetworkOptions
	// Metadata, when set, gets the network data of the devices put in
	// pods, for their claims' device metadata.
	Metadata *kubelet.Metadata
	// WriteCDI writes a claim's CDI spec again (dra.WriteCDISpec): the
	// character devices of a software RDMA device made again in the pod
	// have new numbers, and the runtime reads the spec when it creates
	// each container. Nil: not written.
	WriteCDI func(*claims.Claim) error
	// HookLock, when set, is held for the pod (FileLock.LockKey) across
	// each pod's hooks by every daemon of the node, so that two daemons (a
	// rolling update: the runtime calls both) never act on one pod at
	// once. Hooks of different pods do not wait for each other: the
	// runtime calls its NRI plugins one event at a time, so a hook that
	// waited for another pod's attach would hold up every pod of the node.
	HookLock claims.FileLock
	// Pods, when set, is told of the node's pod sandboxes as the runtime
	// runs them; nil: not told.
	Pods PodObserver
	// OnRuntime, when set, is told which runtime connected, at its first
	// connection and when another (an upgraded runtime) connects. It is
	// called in the runtime's Configure request: it must not block.
	OnRuntime func(context.Context, Runtime)
	// Overlap, when set, attaches the devices of a pod without CNI
	// networks (nor a software RDMA device: overlaps) while the runtime
	// goes on with the pod: RunPodSandbox takes the pod's hook lock,
	// starts the attach and returns, the pod's first CreateContainer lets
	// the container be made, and its StartContainer waits for the attach
	// (failing with its error, as the sandbox would have). The kubelet's
	// and the runtime's work between the sandbox and the container's
	// start (its spec, mounts and the runtime's create) runs beside the
	// kernel's namespace move. Unset, and for a pod with CNI networks:
	// the attach completes inside RunPodSandbox, which fails with its
	// error.
	Overlap bool
}

// PodObserver learns of the node's pods from the runtime's events.
type PodObserver interface {
	// Synchronized gets every sandbox the runtime has, stopped ones
	// among them, and every container that has not exited, at each
	// Synchronize, before the plugin acts on any.
	Synchronized(ctx context.Context, pods []*api.PodSandbox, containers []*api.Container)
	// Started gets a sandbox at its RunPodSandbox, before the plugin acts
	// on it: the runtime starts none of its containers before the hook
	// returns.
	Started(ctx context.Context, pod *api.PodSandbox)
	// Stopped gets a sandbox at its StopPodSandbox and RemovePodSandbox.
	Stopped(ctx context.Context, pod *api.PodSandbox)
}

// Pod names a pod sandbox.
type Pod struct {
	UID             types.UID
	Namespace, Name string
	SandboxID       string
	// NetNS is the sandbox's network namespace, "" for none
	// (hostNetwork).
	NetNS string
	// Networks is the pod's k8s.v1.cni.cncf.io/networks annotation; IPs
	// the sandbox's addresses, as the runtime says them.
	Networks string
	IPs      []string
	// PodNetworks is the pod's network.fastpath.dev/networks annotation.
	PodNetworks string
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// Plugin attaches and detaches pods' devices. Hooks of one pod run one at
// a time; hooks of different pods, and Prepare of other claims, do not
// wait for each other.
type Plugin struct {
	opts Options

	pods claims.Locks[types.UID]

	// reports are the network-status writes under way; attaching the
	// attaches StartAttachPod left running.
	reports   sync.WaitGroup
	attaching sync.WaitGroup

	// nadConfigs are the NetworkAttachmentDefinitions' configurations
	// read, by UID and resourceVersion (nadConfig).
	nadConfigsMu sync.Mutex
	nadConfigs   map[string]*npwg.Config

	conn connection

	// life is held shared by each pod's hook lock (lockPod) while it is
	// held; Quiesce takes it to end them for good. Once quiescing is set,
	// no hook takes a pod's lock.
	life      sync.RWMutex
	quiescing atomic.Bool

	// netns holds the namespaces of the pods with fastpath's devices or
	// networks in them.
	netns netnsHolds

	// pending are the attaches under way or failed that RunPodSandbox
	// started with Overlap, by pod; an attach that succeeds leaves, for
	// attached.
	pendingMu sync.Mutex
	pending   map[types.UID]*pendingAttach
	// attached are the sandboxes, by pod, whose attach begun by
	// RunPodSandbox succeeded and that no CreateContainer has checked
	// since: the pod's first container is made without looking at the
	// devices again (the runtime calls its plugins one at a time, and a
	// look in the pod's namespace is slow on a busy node: 26-33 ms a pod
	// in a burst of 64). Under pendingMu.
	attached map[types.UID]string
}

// pendingAttach is one attach RunPodSandbox left running.
type pendingAttach struct {
	sandbox string
	done    chan struct{}
	err     error // set before done closes
}

// New returns a plugin; Run connects it to the runtime.
func New(opts Options) *Plugin {
	if opts.DelAttempts == 0 {
		opts.DelAttempts = 3
	}
	if opts.DelBackoff == 0 {
		opts.DelBackoff = 100 * time.Millisecond
	}
	if opts.Name == "" {
		opts.Name = PluginName
	}
	if opts.NPWG != nil && (opts.NPWG.SetDefaultRoute == nil || opts.NPWG.InspectLink == nil || opts.NPWG.HostAddresses == nil) {
		npwg := *opts.NPWG
		if npwg.SetDefaultRoute == nil {
			npwg.SetDefaultRoute = dataplane.SetDefaultRoute
		}
		if npwg.InspectLink == nil {
			npwg.InspectLink = dataplane.InspectPodLink
		}
		if npwg.HostAddresses == nil {
			npwg.HostAddresses = dataplane.LinkAddresses
		}
		opts.NPWG = &npwg
	}
	return &Plugin{opts: opts, conn: connection{synced: make(chan struct{})}, pending: map[types.UID]*pendingAttach{}, attached: map[types.UID]string{}}
}

// WaitReports waits for the attaches RunPodSandbox left running, then for
// the writes of pods' network-status and of IPAMClaims' status under way,
// which the hooks leave to the background.
func (p *Plugin) WaitReports() {
	p.attaching.Wait()
	p.reports.Wait()
}

// lockPod serializes the hooks of one pod, in this daemon and with any
// other of the node.
func (p *Plugin) lockPod(ctx context.Context, uid types.UID) (unlock func(), _ error) {
	if p.quiescing.Load() {
		return nil, errQuiesced
	}
	p.life.RLock()
	if p.quiescing.Load() {
		p.life.RUnlock()
		return nil, errQuiesced
	}
	unlockPod, err := p.pods.LockContext(ctx, uid)
	if err != nil {
		p.life.RUnlock()
		return nil, fmt.Errorf("waiting for the pod's hook lock: %w", err)
	}
	unlockNode, err := p.opts.HookLock.LockKey(ctx, string(uid))
	if err != nil {
		unlockPod()
		p.life.RUnlock()
		return nil, err
	}
	return func() { unlockNode(); unlockPod(); p.life.RUnlock() }, nil
}

// errQuiesced is the error of a hook after Quiesce.
var errQuiesced = errors.New("fastpathd is stopping and has removed its state from the node")

// Quiesce makes every later hook and check fail without taking a pod's
// lock (a pod with nothing of fastpath's starts and stops as ever), and
// waits until ctx ends for those that hold one to finish; it says whether
// they did. A daemon that stops with nothing prepared calls it before it
// removes its state from the node, which a late hook (the runtime
// removing a sandbox after its pod went) would otherwise make again (the
// node's hook lock file); if a hook is still running at ctx's end, it
// leaves the state.
func (p *Plugin) Quiesce(ctx context.Context) bool {
	p.quiescing.Store(true)
	for !p.life.TryLock() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	p.life.Unlock()
	return true
}

// nothingFor says that fastpath has nothing recorded for the pod and the
// pod selects no network: its hooks have nothing to do.
func (p *Plugin) nothingFor(pod Pod) bool {
	return len(p.opts.Store.PodClaims(pod.UID)) == 0 && !p.wantsNPWG(pod)
}

// podNetdev is one netdev prepared for a pod, or one sub-interface of a
// shared device (sub set).
type podNetdev struct {
	claim claims.Claim
	index int // in claim.Devices
	nd    dataplane.Netdev
	sub   *dataplane.SubInterface
}

// podDevice is the claim's device i as the hooks handle it, false for
// devices without a kernel interface in the pod.
func podDevice(c claims.Claim, i int) (podNetdev, bool) {
	if nd, ok := attach.Netdev(c.Devices[i]); ok {
		return podNetdev{claim: c, index: i, nd: nd}, true
	}
	if s, ok := attach.SubInterface(c, c.Devices[i]); ok {
		return podNetdev{claim: c, index: i, sub: &s}, true
	}
	return podNetdev{}, false
}

func (n podNetdev) device() claims.Device { return n.claim.Devices[n.index] }

func (n podNetdev) String() string {
	d := n.device()
	return fmt.Sprintf("claim %s, request %q, device %s", n.claim.String(), d.Request, d.Device)
}

func ref(c claims.Claim) status.ClaimRef {
	return status.ClaimRef{Namespace: c.Namespace, Name: c.Name, UID: c.UID}
}

// AttachPod puts the pod's prepared devices into its network namespace,
// then runs its CNI networks, in claim and request order, then (with
// NPWG) the networks its annotation selects, in the annotation's order.
// If one fails, what was done for the pod is undone, the claims say why,
// and the error (naming claim, request and device, or the annotation's
// element) fails the sandbox. A retried call completes what an earlier
// one left.
func (p *Plugin) AttachPod(ctx context.Context, pod Pod) error {
	unlock, err := p.lockPod(ctx, pod.UID)
	if err != nil {
		if p.nothingFor(pod) {
			// A pod fastpath has nothing to do for starts whatever
			// is wrong with fastpath (its own replacement among them).
			klog.FromContext(ctx).Error(err, "No hook lock; the pod has no fastpath devices or networks, so it starts", "pod", pod.String())
			return nil
		}
		return fmt.Errorf("pod %s: %w", pod, err)
	}
	defer unlock()
	return p.attachLocked(ctx, pod)
}

// StartAttachPod does what AttachPod does, in the background: it returns
// once it holds the pod's hook lock (so that a stop of the sandbox comes
// after the attach), and WaitAttach waits for the attach and says how it
// ended. A pod fastpath has nothing to do for is done at once, and so is
// one with CNI networks (overlaps).
func (p *Plugin) StartAttachPod(ctx context.Context, pod Pod) error {
	if p.nothingFor(pod) || !p.overlaps(pod) {
		return p.AttachPod(ctx, pod)
	}
	unlock, err := p.lockPod(ctx, pod.UID)
	if err != nil {
		return fmt.Errorf("pod %s: %w", pod, err)
	}
	pa := &pendingAttach{sandbox: pod.SandboxID, done: make(chan struct{})}
	p.pendingMu.Lock()
	p.pending[pod.UID] = pa
	p.pendingMu.Unlock()
	// The hook's context ends when the hook returns; the attach keeps
	// its values and its deadline (the runtime's timeout for the hook).
	actx := context.WithoutCancel(ctx)
	cancel := context.CancelFunc(func() {})
	if deadline, ok := ctx.Deadline(); ok {
		actx, cancel = context.WithDeadline(actx, deadline)
	}
	p.attaching.Add(1)
	go func() {
		defer p.attaching.Done()
		defer cancel()
		err := func() error {
			defer unlock()
			return p.attachLocked(actx, pod)
		}()
		pa.err = err
		if err == nil {
			p.attachedOK(pod.UID, pa)
		}
		close(pa.done)
	}()
	return nil
}

// overlaps says whether the pod's attach may run beside the runtime: its
// fastpath work is devices only. A CNI network (a claim's, or one the pod
// selects) is added inside RunPodSandbox, whose failure fails the sandbox
// as a CNI plugin's does: what the users of Multus look for
// (FailedCreatePodSandBox), and what the NPWG specification's callers
// expect of an attach. So is a software RDMA device: it is made again in
// the pod with a verbs device of its own, which the attach writes into the
// claim's CDI spec, and the runtime reads the CDI specs for a container
// before it calls CreateContainer.
func (p *Plugin) overlaps(pod Pod) bool {
	if p.wantsNPWG(pod) {
		return false
	}
	for _, c := range p.opts.Store.PodClaims(pod.UID) {
		if len(c.Networks) > 0 {
			return false
		}
		for _, d := range c.Devices {
			if d.RDMA != nil && d.RDMA.Link != "" {
				return false
			}
		}
	}
	return true
}

// pendingOf is the attach StartAttachPod began for the pod's sandbox and
// nobody has waited for, nil for none.
func (p *Plugin) pendingOf(pod Pod) *pendingAttach {
	p.pendingMu.Lock()
	defer p.pendingMu.Unlock()
	if pa := p.pending[pod.UID]; pa != nil && pa.sandbox == pod.SandboxID {
		return pa
	}
	return nil
}

// attachRunning says whether an attach StartAttachPod began for the pod's
// sandbox has not ended yet.
func (p *Plugin) attachRunning(pod Pod) bool {
	pa := p.pendingOf(pod)
	if pa == nil {
		return false
	}
	select {
	case <-pa.done:
		return false
	default:
		return true
	}
}

// WaitAttach waits for the attach StartAttachPod began for the pod's
// sandbox, until ctx ends, and returns its error once: a failed attach is
// forgotten when said (the next check attaches again).
func (p *Plugin) WaitAttach(ctx context.Context, pod Pod) error {
	pa := p.pendingOf(pod)
	if pa == nil {
		return nil
	}
	select {
	case <-pa.done:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the attach RunPodSandbox began: %w", context.Cause(ctx))
	}
	p.dropPending(pod.UID, pa)
	return pa.err
}

// attachedOK forgets the pod's pending attach if it is pa, which
// succeeded, and notes its sandbox attached for the pod's first
// CreateContainer (takeAttached). A sandbox stopped meanwhile
// (forgetAttach) is not noted.
func (p *Plugin) attachedOK(uid types.UID, pa *pendingAttach) {
	p.pendingMu.Lock()
	if p.pending[uid] == pa {
		delete(p.pending, uid)
		p.attached[uid] = pa.sandbox
	}
	p.pendingMu.Unlock()
}

// takeAttached says whether the pod's sandbox was attached by the attach
// RunPodSandbox began, and no CreateContainer has checked it since; it
// forgets it, so that the next container's CreateContainer checks.
func (p *Plugin) takeAttached(pod Pod) bool {
	p.pendingMu.Lock()
	defer p.pendingMu.Unlock()
	if sb, ok := p.attached[pod.UID]; ok && sb == pod.SandboxID {
		delete(p.attached, pod.UID)
		return true
	}
	return false
}

// forgetAttachedGone forgets the attached sandboxes that no longer run
// (their stop missed, no fastpathd connected).
func (p *Plugin) forgetAttachedGone(running map[types.UID]Pod) {
	p.pendingMu.Lock()
	defer p.pendingMu.Unlock()
	for uid, sb := range p.attached {
		if pod, ok := running[uid]; !ok || pod.SandboxID != sb {
			delete(p.attached, uid)
		}
	}
}

// dropPending forgets the pod's pending attach if it is pa.
func (p *Plugin) dropPending(uid types.UID, pa *pendingAttach) {
	p.pendingMu.Lock()
	if p.pending[uid] == pa {
		delete(p.pending, uid)
	}
	p.pendingMu.Unlock()
}

// attachLocked is AttachPod with the pod's hook lock held.
func (p *Plugin) attachLocked(ctx context.Context, pod Pod) (err error) {
	fresh, durable, err := p.admitNPWG(ctx, pod)
	if err != nil {
		err = bounds.Err(err)
		klog.FromContext(ctx).Error(err, "Selected networks")
		return err
	}
	if durable != nil {
		// The record's write completes while the networks are added.
		defer func() {
			if err := durable(); err != nil {
				klog.FromContext(ctx).Error(err, "Syncing the record of the pod's networks: a power loss may forget them (CNI GC finds what they leave)", "pod", pod.String())
			}
		}()
	}
	defer func() {
		if err != nil {
			p.dropNPWG(pod.UID)
			p.netns.drop([]string{pod.NetNS}, p.netnsInUse)
			return
		}
		p.reportNPWG(ctx, pod)
		p.reportPodNetworks(ctx, pod)
		p.reportIPAMClaims(ctx, pod)
	}()
	all := p.opts.Store.PodClaims(pod.UID)
	networkOrder(all)
	if len(all) == 0 {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("pod", pod.String())
	var netdevs []podNetdev
	var networks []claims.Claim
	for _, c := range all {
		if !c.Prepared {
			return fmt.Errorf("pod %s: claim %s is not prepared", pod, c.String())
		}
		for i := range c.Devices {
			if n, ok := podDevice(c, i); ok {
				netdevs = append(netdevs, n)
			}
		}
		if len(c.Networks) > 0 {
			networks = append(networks, c)
		}
	}
	if pod.NetNS == "" && (len(netdevs) > 0 || len(networks) > 0) {
		return fmt.Errorf("pod %s has no network namespace: its fastpath devices and CNI networks need one (not hostNetwork)", pod)
	}
	if len(netdevs) > 0 || len(networks) > 0 {
		if err := p.netns.hold(pod.NetNS); err != nil {
			// The attach says what is wrong with the namespace.
			logger.V(2).Info("Not holding the pod's network namespace", "err", err)
		}
	}
	start := time.Now()
	if err := p.attachNetdevs(ctx, pod, netdevs); err != nil {
		err = bounds.Err(err)
		logger.Error(err, "Attach failed")
		return err
	}
	if len(netdevs) > 0 {
		logger.Info("Attached devices", "devices", len(netdevs), "duration", time.Since(start))
	}
	if err := p.addNetworks(ctx, pod, networks, fresh); err != nil {
		// The netdevs go back too: the sandbox fails.
		var errs []error
		for i := len(netdevs) - 1; i >= 0; i-- {
			if dErr := p.detach(ctx, netdevs[i], pod.NetNS); dErr != nil {
				errs = append(errs, fmt.Errorf("undoing %s: %w", netdevs[i], dErr))
			}
			p.opts.Status.Set(ctx, ref(netdevs[i].claim), status.OfShare(netdevs[i].device(), status.NotReady(claims.DriverFastpath, netdevs[i].device().Pool, netdevs[i].device().Device,
				status.ReasonNotReady, fmt.Sprintf("undone: %v", err))))
		}
		err = bounds.Err(errors.Join(append([]error{err}, errs...)...))
		logger.Error(err, "CNI ADD failed")
		return err
	}
	if err := p.defaultRouteNPWG(ctx, pod); err != nil {
		// As a failed ADD: the sandbox fails and nothing of it stays.
		cls := p.opts.Store.PodClaims(pod.UID)
		slices.SortStableFunc(cls, func(a, b claims.Claim) int {
			return boolCmp(b.Driver == claims.DriverNPWG, a.Driver == claims.DriverNPWG)
		})
		if rErr := p.release(ctx, cls, pod.SandboxID); rErr != nil {
			err = fmt.Errorf("%w; undoing the pod's networks and devices: %w", err, rErr)
		}
		err = bounds.Err(err)
		logger.Error(err, "Default route failed")
		return err
	}
	return nil
}

// attachNetdevs records where the netdevs go, with their admin state in
// the host, then moves each; on failure those moved go back.
func (p *Plugin) attachNetdevs(ctx context.Context, pod Pod, netdevs []podNetdev) error {
	for i := range netdevs {
		n := &netdevs[i]
		at := n.device().Attached
		if at != nil && (at.SandboxID != pod.SandboxID || at.NetNS != pod.NetNS) {
			// Recorded in an earlier sandbox of the pod that the runtime
			// replaced without stopping it (killed while making it, its
			// namespace left behind): the device (or sub-interface) may
			// still be there.
			klog.FromContext(ctx).Info("Taking a device back from the pod's earlier sandbox", "device", n.String(), "sandbox", at.SandboxID, "netns", at.NetNS)
			if err := p.detach(ctx, *n, at.NetNS); err != nil {
				return fmt.Errorf("%s: taking it back from the pod's earlier sandbox %s: %w", n, at.SandboxID, err)
			}
			n.claim.Devices[n.index].Attached = nil
			at = nil
		}
		if at == nil {
			up := false
			if n.sub == nil {
				var err error
				if up, err = p.opts.Attacher.HostUp(n.nd.HostName); err != nil {
					return fmt.Errorf("%s: %w", n, err)
				}
			}
			at = &claims.Attachment{SandboxID: pod.SandboxID, NetNS: pod.NetNS, HostUp: up}
			if err := p.record(ctx, *n, at); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		}
		n.claim.Devices[n.index].Attached = at
		n.nd.HostUp = at.HostUp
	}
	if len(netdevs) > 0 {
		fault.Point("attach.recorded")
	}
	for i, n := range netdevs {
		start := time.Now()
		var res dataplane.Attached
		var err error
		if n.sub != nil {
			res, err = p.opts.Attacher.AttachShared(ctx, pod.NetNS, *n.sub)
		} else {
			res, err = p.opts.Attacher.Attach(ctx, pod.NetNS, n.nd)
			if err == nil && len(res.RDMAFiles) > 0 {
				err = p.recordRDMAFiles(ctx, n, res.RDMAFiles)
			}
		}
		p.opts.Metrics.Attach(err, time.Since(start))
		if err != nil {
			err = fmt.Errorf("%s: %w", n, err)
			for j := i; j >= 0; j-- {
				if dErr := p.detach(ctx, netdevs[j], pod.NetNS); dErr != nil {
					err = fmt.Errorf("%w; undoing %s also failed: %w", err, netdevs[j], dErr)
				}
			}
			for _, m := range netdevs {
				p.opts.Status.Set(ctx, ref(m.claim), status.OfShare(m.device(), status.NotReady(claims.DriverFastpath, m.device().Pool, m.device().Device, status.ReasonNotReady, err.Error())))
			}
			return err
		}
		st := status.NetdevReady(n.device(), status.Interface{
			Name: res.Name, MAC: res.MAC, MTU: res.MTU, Addresses: res.Addresses, Sandbox: pod.NetNS, XDPMode: string(res.XDPMode)})
		p.opts.Status.Set(ctx, ref(n.claim), st)
		p.writeMetadata(ctx, n.claim, n.device().Request, st)
	}
	return nil
}

// recordRDMAFiles records the character devices of a netdev's RDMA device
// as they are in the pod, and writes its claim's CDI spec with them, when
// they changed.
func (p *Plugin) recordRDMAFiles(ctx context.Context, n podNetdev, files []dataplane.CharDevice) error {
	unlock, err := p.opts.Store.LockContext(ctx, n.claim.Key())
	if err != nil {
		return err
	}
	defer unlock()
	c, ok := p.opts.Store.Get(n.claim.Key())
	if !ok {
		return fmt.Errorf("claim %s is no longer prepared", n.claim.String())
	}
	r := c.Devices[n.index].RDMA
	if r == nil {
		return nil
	}
	nodes := attach.DeviceNodes(files)
	if slices.Equal(nodes, r.DeviceNodes) {
		return nil
	}
	r.DeviceNodes = nodes
	if err := p.opts.Store.Put(c); err != nil {
		return fmt.Errorf("record the character devices of RDMA device %s: %w", r.Device, err)
	}
	n.claim.Devices[n.index].RDMA = r
	if p.opts.WriteCDI == nil {
		return nil
	}
	if err := p.opts.WriteCDI(&c); err != nil {
		return fmt.Errorf("the character devices of RDMA device %s in the CDI spec: %w", r.Device, err)
	}
	return nil
}

// record sets (nil: clears) the attachment of a netdev in its claim.
func (p *Plugin) record(ctx context.Context, n podNetdev, at *claims.Attachment) error {
	unlock, err := p.opts.Store.LockContext(ctx, n.claim.Key())
	if err != nil {
		return err
	}
	defer unlock()
	c, ok := p.opts.Store.Get(n.claim.Key())
	if !ok {
		return fmt.Errorf("claim %s is no longer prepared", n.claim.String())
	}
	d := &c.Devices[n.index]
	if (d.Attached == nil && at == nil) || (d.Attached != nil && at != nil && *d.Attached == *at) {
		return nil
	}
	d.Attached = at
	if at == nil {
		return p.opts.Store.Put(c)
	}
	// Where a device goes is recorded before it moves, for a restart
	// after a kill to find; a power loss takes the move back with the
	// pod's namespace, so the record's sync runs beside the move.
	wait, err := p.opts.Store.PutPending(c)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	go func() {
		if err := wait(); err != nil {
			logger.Error(err, "Syncing the record of an attach (a power loss would forget it, and the namespace with the device)", "device", n.String())
		}
	}()
	return nil
}

// detach returns a netdev from the pod's network namespace netns (or, if
// it is gone, from wherever the kernel put it) to the host, and drops its
// attachment.
func (p *Plugin) detach(ctx context.Context, n podNetdev, netns string) error {
	start := time.Now()
	var err error
	if n.sub != nil {
		err = p.opts.Attacher.DetachShared(ctx, p.netns.path(netns), *n.sub)
	} else {
		err = p.opts.Attacher.Detach(ctx, p.netns.path(netns), n.nd)
	}
	p.opts.Metrics.Detach(err, time.Since(start))
	if errors.Is(err, dataplane.ErrDeviceGone) {
		klog.FromContext(ctx).Info("Not returning a device that is gone", "device", n.String(), "reason", err.Error())
		d := n.device()
		p.opts.Status.Set(ctx, ref(n.claim), status.NotReady(claims.DriverFastpath, d.Pool, d.Device, status.ReasonDeviceGone,
			fmt.Sprintf("device %s is gone from the node: %v", d.Device, err)))
		err = nil
	}
	if err != nil {
		return err
	}
	fault.Point("detach.returned")
	// The device is back: its record must say so, whether the caller
	// still waits or not.
	return p.record(context.WithoutCancel(ctx), n, nil)
}

// inPlace says whether everything of the pod's claims is in its sandbox,
// as recorded and as the kernel and libcni's cache show it: a hook killed
// after its record and before its work left a record only.
func (p *Plugin) inPlace(ctx context.Context, pod Pod, cls []claims.Claim) bool {
	for _, c := range cls {
		for i, d := range c.Devices {
			n, ok := podDevice(c, i)
			if !ok {
				continue
			}
			if d.Attached == nil || d.Attached.SandboxID != pod.SandboxID {
				return false
			}
			var in bool
			var err error
			if n.sub != nil {
				in, err = p.opts.Attacher.SharedInPod(pod.NetNS, *n.sub)
			} else {
				in, err = p.opts.Attacher.InPod(pod.NetNS, n.nd)
			}
			if err != nil || !in {
				return false
			}
		}
		for _, n := range c.Networks {
			if !n.Added || n.SandboxID != pod.SandboxID || p.opts.CNI == nil {
				return false
			}
			if _, ok, err := p.opts.CNI.Added(ctx, runtimeConf(c, n)); err != nil || !ok {
				return false
			}
		}
	}
	return true
}

// StartPod waits, before a container of the pod starts, for the attach
// RunPodSandbox began and CreateContainer let run; an attach that failed
// is tried once more, and if that fails too the container does not start,
// with the error. A pod without such an attach has nothing to wait for:
// its CreateContainer checked it (EnsurePod).
func (p *Plugin) StartPod(ctx context.Context, pod Pod) error {
	if p.pendingOf(pod) == nil {
		return nil
	}
	err := p.WaitAttach(ctx, pod)
	if err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Error(err, "The attach begun at RunPodSandbox failed: attaching again before the container starts", "pod", pod.String())
		err = p.AttachPod(ctx, pod)
	}
	if err != nil {
		return fmt.Errorf("pod %s cannot start without its devices: %w", pod, err)
	}
	return nil
}

// EnsurePod makes sure the pod's devices and networks are in its sandbox
// before a container of it starts: a pod whose RunPodSandbox fastpath
// missed (it was down, restarting, or slower than the runtime's timeout)
// gets them now, and if that fails the container does not start.
func (p *Plugin) EnsurePod(ctx context.Context, pod Pod) error {
	// An attach RunPodSandbox left running completes first; if it
	// failed, its error is the container's.
	if err := p.WaitAttach(ctx, pod); err != nil {
		return fmt.Errorf("pod %s cannot start without its devices: %w", pod, err)
	}
	// That attach, which succeeded, has just put them in place.
	if p.takeAttached(pod) {
		return nil
	}
	// Selected networks not yet recorded need an attach; else what is
	// recorded is checked.
	_, recorded := p.opts.Store.Get(npwgKey(pod.UID))
	if !p.wantsNPWG(pod) || recorded {
		if cls := p.opts.Store.PodClaims(pod.UID); len(cls) == 0 || p.inPlace(ctx, pod, cls) {
			return nil
		}
	}
	klog.FromContext(ctx).Info("The pod's devices are not in place: attaching them now", "pod", pod.String())
	if err := p.AttachPod(ctx, pod); err != nil {
		return fmt.Errorf("pod %s cannot start without its devices: %w", pod, err)
	}
	return nil
}

// DetachPod returns the pod's netdevs to the host and runs DEL for its CNI
// networks. It goes on past failures; what failed stays recorded, for
// Unprepare to finish.
func (p *Plugin) DetachPod(ctx context.Context, pod Pod) error {
	unlock, err := p.lockPod(ctx, pod.UID)
	if err != nil {
		if p.nothingFor(pod) {
			return nil
		}
		return fmt.Errorf("pod %s: %w", pod, err)
	}
	defer unlock()
	cls := p.opts.Store.PodClaims(pod.UID)
	// The selected networks first: they were added last.
	slices.SortStableFunc(cls, func(a, b claims.Claim) int {
		return boolCmp(b.Driver == claims.DriverNPWG, a.Driver == claims.DriverNPWG)
	})
	return p.release(ctx, cls, pod.SandboxID)
}

// ReleaseClaim does for one claim what DetachPod does for a pod: Unprepare
// calls it, for a pod whose sandbox stopped without fastpath (or whose
// teardown failed).
func (p *Plugin) ReleaseClaim(ctx context.Context, key claims.Key) error {
	c, ok := p.opts.Store.Get(key)
	if !ok {
		return nil
	}
	unlock, err := p.lockPod(ctx, c.Pod.UID)
	if err != nil {
		return fmt.Errorf("claim %s: %w", c.String(), err)
	}
	defer unlock()
	if c, ok = p.opts.Store.Get(key); !ok {
		return nil
	}
	return p.release(ctx, []claims.Claim{c}, "")
}

// release takes the claims' devices back and deletes their networks.
// With a sandbox, only what is recorded in that sandbox: the runtime
// stopping or removing an earlier sandbox of the pod (one whose teardown
// fastpath missed, removed by the kubelet's garbage collection later) must
// not take anything from the sandbox the pod runs in now.
func (p *Plugin) release(ctx context.Context, cls []claims.Claim, sandbox string) error {
	var errs []error
	var namespaces []string
	defer func() { p.netns.drop(namespaces, p.netnsInUse) }()
	for _, c := range cls {
		for _, d := range c.Devices {
			if d.Attached != nil {
				namespaces = append(namespaces, d.Attached.NetNS)
			}
		}
		for _, n := range c.Networks {
			if n.Added {
				namespaces = append(namespaces, n.NetNS)
			}
		}
		for i := len(c.Devices) - 1; i >= 0; i-- {
			n, ok := podDevice(c, i)
			at := c.Devices[i].Attached
			if !ok || at == nil {
				continue
			}
			if otherSandbox(at.SandboxID, sandbox) {
				klog.FromContext(ctx).V(2).Info("Leaving a device in the pod's other sandbox", "device", n.String(), "sandbox", at.SandboxID, "stopping", sandbox)
				continue
			}
			if err := p.detach(ctx, n, at.NetNS); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n, err))
			}
		}
		if len(c.Networks) > 0 {
			errs = append(errs, p.delNetworks(ctx, c.Key(), sandbox))
		}
		if c.Driver == claims.DriverNPWG {
			// No Unprepare drops it: gone once its networks are.
			p.dropNPWG(c.Pod.UID)
		}
		if c.Driver == claims.DriverIPAMClaim {
			errs = append(errs, p.letGoIPAMClaim(ctx, c.Key(), c.Pod.UID))
		}
	}
	return errors.Join(errs...)
}

// netnsInUse says whether a record has a device or a network in the
// network namespace at path.
func (p *Plugin) netnsInUse(path string) bool {
	for _, c := range p.opts.Store.View() {
		for _, d := range c.Devices {
			if d.Attached != nil && d.Attached.NetNS == path {
				return true
			}
		}
		for _, n := range c.Networks {
			if n.Added && n.NetNS == path {
				return true
			}
		}
	}
	return false
}

// otherSandbox says whether something recorded in sandbox recorded is not
// the stopping sandbox's: a stop of the whole pod (stopping "") and a
// record without a sandbox (of an older fastpathd) take everything.
func otherSandbox(recorded, stopping string) bool {
	return stopping != "" && recorded != "" && recorded != stopping
}

// forgetAttach drops what StartAttachPod left for the pod's sandbox.
func (p *Plugin) forgetAttach(pod Pod) {
	p.pendingMu.Lock()
	if pa := p.pending[pod.UID]; pa != nil && pa.sandbox == pod.SandboxID {
		delete(p.pending, pod.UID)
	}
	if p.attached[pod.UID] == pod.SandboxID {
		delete(p.attached, pod.UID)
	}
	p.pendingMu.Unlock()
}

// pendingAttaches is how many attaches StartAttachPod left that nobody
// has waited for.
func (p *Plugin) pendingAttaches() int {
	p.pendingMu.Lock()
	defer p.pendingMu.Unlock()
	return len(p.pending)
}
