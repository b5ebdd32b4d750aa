package dataplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"k8s.io/klog/v2"
)

// PodNetdev is one prepared netdev of a pod, with what identifies it to
// people (claim, request, device) and to the status writer.
type PodNetdev struct {
	ClaimNamespace, ClaimName, ClaimUID string
	Request, Pool, Device               string
	Netdev                              Netdev
}

func (p PodNetdev) String() string {
	return fmt.Sprintf("claim %s/%s, request %q, device %s", p.ClaimNamespace, p.ClaimName, p.Request, p.Device)
}

// Devices tells the plugin what was prepared for which pod (package dra
// answers from its checkpoint).
type Devices interface {
	// PodNetdevs lists the netdevs prepared for the pod with this UID.
	PodNetdevs(podUID string) []PodNetdev
	// PreparedPods lists the UIDs of every pod with prepared netdevs.
	PreparedPods() []string
}

// PodRef names a pod sandbox.
type PodRef struct {
	UID, Namespace, Name string
	SandboxID            string
}

// PodNetworks are a pod's networks that are not netdevs fastpath moves:
// CNI configs of claims, run when the sandbox starts (package dra).
type PodNetworks interface {
	// AddPod sets up the pod's networks in its namespace (netns "" for a
	// pod without one, an error if it has networks); an error fails the
	// sandbox, with nothing of the pod's networks left behind.
	AddPod(ctx context.Context, pod PodRef, netns string) error
	// DelPod tears them down; what fails is retried later by the caller's
	// owner (Unprepare).
	DelPod(ctx context.Context, pod PodRef) error
	// PodsWithNetworks lists the UIDs of pods with networks set up.
	PodsWithNetworks() []string
}

// Reporter hears how each attach went (package dra writes the claim status).
type Reporter interface {
	Attached(ctx context.Context, dev PodNetdev, netns string, res Attached)
	Failed(ctx context.Context, dev PodNetdev, err error)
}

// PluginOptions configure the NRI plugin.
type PluginOptions struct {
	Socket   string // the runtime's NRI socket
	Devices  Devices
	Reporter Reporter
	Attacher *Attacher
	// Networks, when set, are set up after the netdevs are attached.
	Networks PodNetworks
}

// Plugin is fastpath's NRI plugin: it attaches prepared netdevs when a pod
// sandbox starts and returns them when it stops. The hooks do only what
// needs the pod's network namespace; everything slow happened in Prepare.
type Plugin struct {
	opts PluginOptions
	stub stub.Stub
	mu   sync.Mutex // one hook at a time: a device is attached to one pod
}

// NewPlugin makes the plugin; Start connects it to the runtime.
func NewPlugin(opts PluginOptions) (*Plugin, error) {
	p := &Plugin{opts: opts}
	s, err := stub.New(p, stub.WithPluginName("fastpath"), stub.WithPluginIdx("10"), stub.WithSocketPath(opts.Socket))
	if err != nil {
		return nil, fmt.Errorf("NRI plugin: %w", err)
	}
	p.stub = s
	return p, nil
}

// Start connects to the runtime and serves until ctx ends or the runtime
// closes the connection (the caller restarts it then).
func (p *Plugin) Start(ctx context.Context) error {
	if err := p.stub.Start(ctx); err != nil {
		return fmt.Errorf("connect to the runtime's NRI socket %s: %w", p.opts.Socket, err)
	}
	return nil
}

// Wait blocks until the connection to the runtime ends.
func (p *Plugin) Wait() { p.stub.Wait() }

// Stop disconnects from the runtime.
func (p *Plugin) Stop() { p.stub.Stop() }

// Synchronize reconciles with the running pods: the netdevs of prepared
// pods that no longer run are restored to the host.
func (p *Plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	logger := klog.FromContext(ctx)
	running := map[string]bool{}
	for _, pod := range pods {
		running[pod.GetUid()] = true
	}
	for _, uid := range p.opts.Devices.PreparedPods() {
		if running[uid] {
			continue
		}
		for _, dev := range p.opts.Devices.PodNetdevs(uid) {
			if err := p.opts.Attacher.Detach(ctx, "", dev.Netdev); err != nil {
				logger.Error(err, "Restoring a device of a pod that is gone", "device", dev.String())
			}
		}
	}
	if p.opts.Networks != nil {
		for _, uid := range p.opts.Networks.PodsWithNetworks() {
			if running[uid] {
				continue
			}
			if err := p.opts.Networks.DelPod(ctx, PodRef{UID: uid}); err != nil {
				logger.Error(err, "Tearing down the networks of a pod that is gone", "podUID", uid)
			}
		}
	}
	return nil, nil
}

func podRef(pod *api.PodSandbox) PodRef {
	return PodRef{UID: pod.GetUid(), Namespace: pod.GetNamespace(), Name: pod.GetName(), SandboxID: pod.GetId()}
}

// RunPodSandbox attaches the pod's netdevs. If one fails, those attached
// before it are returned to the host and the sandbox fails with an error
// naming claim and device.
func (p *Plugin) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) (err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	devs := p.opts.Devices.PodNetdevs(pod.GetUid())
	if len(devs) == 0 && p.opts.Networks == nil {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues("pod", pod.GetNamespace()+"/"+pod.GetName())
	start := time.Now()
	netns := podNetNS(pod)
	if netns == "" {
		if len(devs) > 0 {
			return fmt.Errorf("pod %s/%s has no network namespace: fastpath devices need one (not hostNetwork)", pod.GetNamespace(), pod.GetName())
		}
		return p.addNetworks(ctx, pod, "", nil)
	}
	var done []PodNetdev
	for _, dev := range devs {
		res, err := p.opts.Attacher.Attach(ctx, netns, dev.Netdev)
		if err != nil {
			err = fmt.Errorf("%s: %w", dev, err)
			for i := len(done) - 1; i >= 0; i-- {
				if dErr := p.opts.Attacher.Detach(ctx, netns, done[i].Netdev); dErr != nil {
					err = fmt.Errorf("%w; undoing %s also failed: %w", err, done[i], dErr)
				}
			}
			for _, d := range devs {
				p.opts.Reporter.Failed(ctx, d, err)
			}
			logger.Error(err, "Attach failed")
			return err
		}
		done = append(done, dev)
		p.opts.Reporter.Attached(ctx, dev, netns, res)
	}
	if len(done) > 0 {
		logger.Info("Attached devices", "devices", len(done), "duration", time.Since(start))
	}
	return p.addNetworks(ctx, pod, netns, done)
}

// addNetworks sets up the pod's other networks; if that fails, the netdevs
// attached for the pod go back to the host.
func (p *Plugin) addNetworks(ctx context.Context, pod *api.PodSandbox, netns string, attached []PodNetdev) error {
	if p.opts.Networks == nil {
		return nil
	}
	err := p.opts.Networks.AddPod(ctx, podRef(pod), netns)
	if err == nil {
		return nil
	}
	for i := len(attached) - 1; i >= 0; i-- {
		if dErr := p.opts.Attacher.Detach(ctx, netns, attached[i].Netdev); dErr != nil {
			err = fmt.Errorf("%w; undoing %s also failed: %w", err, attached[i], dErr)
		}
		p.opts.Reporter.Failed(ctx, attached[i], fmt.Errorf("undone: %w", err))
	}
	return err
}

// StopPodSandbox returns the pod's netdevs to the host. Errors are logged,
// not returned: failing here would not bring a device back and would leave
// the pod stuck.
func (p *Plugin) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	p.detachAll(ctx, pod)
	return nil
}

// RemovePodSandbox does what StopPodSandbox does, for a sandbox whose stop
// fastpath missed; it is harmless after a stop.
func (p *Plugin) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	p.detachAll(ctx, pod)
	return nil
}

func (p *Plugin) detachAll(ctx context.Context, pod *api.PodSandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	logger := klog.FromContext(ctx).WithValues("pod", pod.GetNamespace()+"/"+pod.GetName())
	netns := podNetNS(pod)
	var errs []error
	for _, dev := range p.opts.Devices.PodNetdevs(pod.GetUid()) {
		if err := p.opts.Attacher.Detach(ctx, netns, dev.Netdev); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dev, err))
		}
	}
	if p.opts.Networks != nil {
		if err := p.opts.Networks.DelPod(ctx, podRef(pod)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		logger.Error(err, "Returning devices to the host")
	}
}

func podNetNS(pod *api.PodSandbox) string {
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			return ns.GetPath()
		}
	}
	return ""
}
