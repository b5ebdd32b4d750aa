package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// The components a test may crash and start again: what a node's process
// supervisor restarts, and the API server, whose outage the node lives
// through. The containers (and containerd's shims) run on while they are
// down, as on a node; etcd keeps the cluster's objects while the API
// server is down.
const (
	Containerd = "containerd"
	Kubelet    = "kubelet"
	APIServer  = "kube-apiserver"
)

// restartable are the components KillComponent and StartComponent take.
var restartable = []string{Containerd, Kubelet, APIServer}

// KillComponent kills a component with SIGKILL, as a crash would, and
// waits until it is gone. StartComponent starts it again.
func (b *Bed) KillComponent(ctx context.Context, name string) error {
	unlock, err := lock(b.cfg)
	if err != nil {
		return err
	}
	defer unlock()
	p, _, err := b.component(name)
	if err != nil {
		return err
	}
	if !p.alive() {
		return fmt.Errorf("%s (pid %d) is not running", name, p.PID)
	}
	if err := p.kill(); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Killed", "component", name, "pid", p.PID)
	return nil
}

// StartComponent starts a component that KillComponent killed, with the
// arguments it had, and waits until it serves: containerd answers on its
// socket, the kubelet's healthz is ok, the API server's readyz is ok.
func (b *Bed) StartComponent(ctx context.Context, name string) error {
	unlock, err := lock(b.cfg)
	if err != nil {
		return err
	}
	defer unlock()
	old, st, err := b.component(name)
	if err != nil {
		return err
	}
	if old.alive() {
		return fmt.Errorf("%s already runs (pid %d)", name, old.PID)
	}
	if len(old.Argv) == 0 {
		return fmt.Errorf("the bed in %s does not record how it started %s: stop it and start it again", b.cfg.Dir, name)
	}
	p, err := startProcess(name, old.Log, old.Env, old.Argv...)
	if err != nil {
		return err
	}
	// In the same place, so the bed stops it in the same order.
	i := slices.IndexFunc(st.Processes, func(q process) bool { return q.Name == name })
	st.Processes[i] = p
	if err := st.save(); err != nil {
		return err
	}
	b.st = st
	klog.FromContext(ctx).Info("Started again", "component", name, "pid", p.PID)
	ready, err := b.readiness(name)
	if err != nil {
		return err
	}
	timeout := 60 * time.Second
	if name == APIServer {
		// As long as the bed gives it when it starts.
		timeout = 90 * time.Second
	}
	return b.waitReady(ctx, name, timeout, ready)
}

// RestartComponent kills a component and starts it again.
func (b *Bed) RestartComponent(ctx context.Context, name string) error {
	if err := b.KillComponent(ctx, name); err != nil {
		return err
	}
	return b.StartComponent(ctx, name)
}

// component is the record of a component, and the state it is in.
func (b *Bed) component(name string) (process, *state, error) {
	if !slices.Contains(restartable, name) {
		return process{}, nil, fmt.Errorf("component %q cannot be restarted: only %s can", name, strings.Join(restartable, ", "))
	}
	st, err := loadState(b.cfg)
	if err != nil {
		return process{}, nil, err
	}
	if st == nil {
		return process{}, nil, fmt.Errorf("the test bed in %s is not running", b.cfg.Dir)
	}
	p, ok := st.find(name)
	if !ok {
		return process{}, nil, errors.New("the test bed has no " + name)
	}
	return p, st, nil
}

// readiness is the check that a component serves.
func (b *Bed) readiness(name string) (func(context.Context) error, error) {
	switch name {
	case Containerd:
		vers, err := b.cfg.Versions()
		if err != nil {
			return nil, err
		}
		ctr := filepath.Join(binariesIn(b.cfg.CacheDir, vers).containerd, "ctr")
		return func(ctx context.Context) error {
			return exec.CommandContext(ctx, ctr, "--address", b.cfg.containerdSocket(), "version").Run()
		}, nil
	case Kubelet:
		return httpReady(fmt.Sprintf("http://127.0.0.1:%d/healthz", b.cfg.KubeletHealthzPort)), nil
	case APIServer:
		// Ready, not only serving: its post-start hooks (RBAC's roles
		// among them) are done, so that it answers as it did before.
		return b.apiReady, nil
	}
	return nil, fmt.Errorf("no readiness check for %s", name)
}

// RebootNode does to the node what a reboot does, and starts it again.
// The control plane (etcd, the API server, the scheduler and the
// controller manager: other machines on a real cluster) runs on. The
// kubelet and containerd are killed, and so is every container with its
// shim; what lives in memory is lost: containerd's and runc's state
// directories (tmpfs below /run on a node) with the pods' network
// namespaces, the mounts below the kubelet's directory, the CDI specs
// (/var/run/cdi) and every bpffs mounted below the bed's directory. Then
// during does what else the reboot takes or brings back (the test's
// devices), and containerd and the kubelet start again with what they keep
// on disk: the kubelet's root directory (the claims it prepared) and
// containerd's root (images, the records of sandboxes that no longer run).
func (b *Bed) RebootNode(ctx context.Context, during func() error) error {
	logger := klog.FromContext(ctx)
	for _, name := range []string{Kubelet, Containerd} {
		if err := b.KillComponent(ctx, name); err != nil {
			return err
		}
	}
	if err := removeCgroups(b.cfg.CgroupName); err != nil {
		return fmt.Errorf("stop the containers: %w", err)
	}
	var errs []error
	for _, p := range processesMatching(b.cfg.containerdSocket()) {
		errs = append(errs, p.kill())
	}
	for _, dir := range []string{b.cfg.path("containerd", "state"), b.cfg.KubeletDir()} {
		errs = append(errs, unmountUnder(dir))
	}
	for _, m := range mountsUnder(b.cfg.Dir, "bpf") {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	for _, dir := range []string{b.cfg.path("containerd", "state"), b.cfg.path("runc")} {
		errs = append(errs, os.RemoveAll(dir))
	}
	specs, _ := os.ReadDir(b.cfg.CDIDir())
	for _, s := range specs {
		errs = append(errs, os.RemoveAll(filepath.Join(b.cfg.CDIDir(), s.Name())))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("reboot the node: %w", err)
	}
	logger.Info("Node down: containers, tmpfs state, CDI specs and bpffs gone")
	var duringErr error
	if during != nil {
		// The node comes up again whatever during says.
		duringErr = during()
	}
	if err := createCgroups(b.cfg.CgroupName); err != nil {
		return errors.Join(duringErr, fmt.Errorf("node cgroups: %w", err))
	}
	for _, name := range []string{Containerd, Kubelet} {
		if err := b.StartComponent(ctx, name); err != nil {
			return errors.Join(duringErr, err)
		}
	}
	logger.Info("Node up again")
	return duringErr
}
