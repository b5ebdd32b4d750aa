package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// Bed is a running test bed, started by this process or attached to.
type Bed struct {
	cfg    Config
	st     *state
	rest   *rest.Config
	client kubernetes.Interface
}

// hostPaths are created by the node's components wherever they are
// configured; the bed removes those that did not exist before it started.
var hostPaths = []string{"/var/log/containers", "/var/lib/cni", "/run/containerd", "/opt/containerd"}

// Start builds the images and starts a bed. It refuses to start while another
// bed runs in cfg.Dir. On failure it stops what it started and returns a
// *ComponentError naming the component and its log.
func Start(ctx context.Context, cfg Config) (_ *Bed, err error) {
	logger := klog.FromContext(ctx)
	if cfg, err = cfg.Defaults(); err != nil {
		return nil, err
	}
	vers, err := cfg.Versions()
	if err != nil {
		return nil, err
	}
	bins := binariesIn(cfg.CacheDir, vers)
	if err := checkBinaries(cfg, bins); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	unlock, err := lock(cfg)
	if err != nil {
		return nil, err
	}
	defer unlock()

	old, err := loadState(cfg)
	if err != nil {
		return nil, err
	}
	if old != nil {
		if p, ok := old.running(); ok {
			return nil, fmt.Errorf("a test bed is already running in %s (%s pid %d, started %s): use it with KUBECONFIG=%s, or stop it first with `make cluster-down`",
				cfg.Dir, p.Name, p.PID, old.Started.Format(time.RFC3339), cfg.Kubeconfig())
		}
	}
	if old != nil || len(Leftovers(cfg)) > 0 {
		logger.Info("Cleaning up what an earlier test bed left", "dir", cfg.Dir)
		if err := teardown(ctx, cfg, old); err != nil {
			return nil, fmt.Errorf("clean up the earlier test bed in %s: %w", cfg.Dir, err)
		}
	}
	if err := checkPorts(cfg); err != nil {
		return nil, err
	}
	if err := resetDir(cfg); err != nil {
		return nil, err
	}

	st := &state{Config: cfg, Started: time.Now()}
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			st.CreatedPaths = append(st.CreatedPaths, p)
		}
	}
	if err := st.save(); err != nil {
		return nil, err
	}
	if err := shareDir(cfg.Dir); err != nil {
		_ = teardown(context.WithoutCancel(ctx), cfg, st)
		return nil, &ComponentError{Component: "shared mount", Err: err}
	}
	defer func() {
		if err != nil {
			logger.Info("Start failed, stopping what was started", "err", err)
			if tdErr := teardown(context.WithoutCancel(ctx), cfg, st); tdErr != nil {
				err = fmt.Errorf("%w; cleanup also failed: %w", err, tdErr)
			}
		}
	}()
	b := &Bed{cfg: cfg, st: st}
	if err := b.start(ctx, bins); err != nil {
		return nil, err
	}
	return b, nil
}

// Attach returns the bed running in cfg.Dir, or an error if none runs.
func Attach(cfg Config) (*Bed, error) {
	cfg, err := cfg.Defaults()
	if err != nil {
		return nil, err
	}
	st, err := loadState(cfg)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, fmt.Errorf("no test bed in %s: start one with `make cluster-up`", cfg.Dir)
	}
	if _, ok := st.running(); !ok {
		return nil, fmt.Errorf("the test bed in %s is not running: start it with `make cluster-up`", cfg.Dir)
	}
	if st.Config.Runtime == "" {
		st.Config.Runtime = RuntimeContainerd
	}
	if want := os.Getenv("FASTPATH_RUNTIME"); want != "" && want != st.Config.Runtime {
		return nil, fmt.Errorf("the test bed in %s runs %s, not %s (FASTPATH_RUNTIME): stop it first with `make cluster-down`", cfg.Dir, st.Config.Runtime, want)
	}
	// The bed is the starter's; the chart and images are the caller's
	// source tree's: a test run attached to a bed another tree started
	// tests its own code.
	st.Config.RepoDir = cfg.RepoDir
	b := &Bed{cfg: st.Config, st: st}
	if err := b.connect(); err != nil {
		return nil, err
	}
	return b, nil
}

// Running reports whether a bed runs in cfg.Dir.
func Running(cfg Config) (bool, error) {
	cfg, err := cfg.Defaults()
	if err != nil {
		return false, err
	}
	st, err := loadState(cfg)
	if err != nil || st == nil {
		return false, err
	}
	_, ok := st.running()
	return ok, nil
}

// Stop stops the bed in cfg.Dir, if any, and removes every process, mount,
// link, cgroup and host path it created. Stopping a stopped bed is harmless.
func Stop(ctx context.Context, cfg Config) error {
	cfg, err := cfg.Defaults()
	if err != nil {
		return err
	}
	if _, err := os.Stat(cfg.Dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	unlock, err := lock(cfg)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := loadState(cfg)
	if err != nil {
		return err
	}
	return teardown(ctx, cfg, st)
}

// Stop stops the bed; see the package-level Stop.
func (b *Bed) Stop(ctx context.Context) error { return Stop(ctx, b.cfg) }

// Config is the bed's configuration, with every default filled in.
func (b *Bed) Config() Config { return b.cfg }

// Client is an admin client of the bed's API server.
func (b *Bed) Client() kubernetes.Interface { return b.client }

// RESTConfig is the admin REST configuration of the bed's API server.
func (b *Bed) RESTConfig() *rest.Config { return rest.CopyConfig(b.rest) }

// Kubeconfig is the path of the admin kubeconfig.
func (b *Bed) Kubeconfig() string { return b.cfg.Kubeconfig() }

// NodeName is the name of the bed's node.
func (b *Bed) NodeName() string { return b.cfg.NodeName }

// NRISocket is where NRI plugins connect to the bed's containerd.
func (b *Bed) NRISocket() string { return b.cfg.NRISocket() }

// PluginDir is where the kubelet expects a DRA driver's sockets.
func (b *Bed) PluginDir(driver string) string { return b.cfg.PluginDir(driver) }

// RegistryDir is the kubelet's plugin registration directory.
func (b *Bed) RegistryDir() string { return b.cfg.RegistryDir() }

// CDIDir is where containerd reads CDI specs.
func (b *Bed) CDIDir() string { return b.cfg.CDIDir() }

// StartProcess starts an extra process beside the node (a driver under test,
// say), with its log in LogDir; the bed stops it first when it stops.
func (b *Bed) StartProcess(ctx context.Context, name string, argv ...string) error {
	unlock, err := lock(b.cfg)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := loadState(b.cfg)
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("the test bed in %s is not running", b.cfg.Dir)
	}
	for _, p := range st.Processes {
		if p.Name == name && p.alive() {
			return fmt.Errorf("%s already runs (pid %d)", name, p.PID)
		}
	}
	p, err := startProcess(name, b.cfg.LogFile(name), nil, argv...)
	if err != nil {
		return err
	}
	st.Processes = append(st.Processes, p)
	b.st = st
	klog.FromContext(ctx).Info("Started", "component", name, "pid", p.PID, "log", p.Log)
	return st.save()
}

// ProcessPID is the PID of a running process started with StartProcess,
// or 0.
func (b *Bed) ProcessPID(name string) int {
	st, err := loadState(b.cfg)
	if err != nil || st == nil {
		return 0
	}
	for _, p := range st.Processes {
		if p.Name == name && p.alive() {
			return p.PID
		}
	}
	return 0
}

// StopProcess stops an extra process started with StartProcess.
func (b *Bed) StopProcess(name string) error {
	unlock, err := lock(b.cfg)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := loadState(b.cfg)
	if err != nil || st == nil {
		return err
	}
	var errs []error
	kept := st.Processes[:0]
	for _, p := range st.Processes {
		if p.Name != name {
			kept = append(kept, p)
			continue
		}
		errs = append(errs, p.stop(10*time.Second))
	}
	st.Processes = kept
	b.st = st
	return errors.Join(append(errs, st.save())...)
}

func (b *Bed) start(ctx context.Context, bins binaries) error {
	logger := klog.FromContext(ctx)
	cfg := b.cfg
	for _, d := range []string{cfg.LogDir(), cfg.path("etcd"), cfg.path("cni", "net.d"), cfg.path("nri", "plugins"),
		cfg.path("nri", "conf.d"), cfg.path("containerd"), cfg.RegistryDir(), cfg.path("kubelet", "plugins"), cfg.CDIDir(),
		cfg.SharedDir()} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	archives, err := buildImages(ctx, cfg, cfg.path("images"))
	if err != nil {
		return &ComponentError{Component: "images", Err: err}
	}
	p, err := newPKI(cfg.path("pki"), cfg)
	if err != nil {
		return &ComponentError{Component: "pki", Err: err}
	}
	if err := os.WriteFile(cfg.Kubeconfig(), []byte(p.kubeconfig(cfg, "admin", p.adminToken)), 0o600); err != nil {
		return err
	}
	nodeKubeconfig := cfg.path("node.kubeconfig")
	if err := os.WriteFile(nodeKubeconfig, []byte(p.kubeconfig(cfg, "node", p.nodeToken)), 0o600); err != nil {
		return err
	}
	if err := b.connect(); err != nil {
		return err
	}
	if err := setupNodeLink(cfg); err != nil {
		return &ComponentError{Component: "node network", Err: err}
	}
	if err := createCgroups(cfg.CgroupName); err != nil {
		return &ComponentError{Component: "node cgroups", Err: err}
	}

	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", cfg.EtcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", cfg.EtcdPort+1)
	if err := b.run(ctx, "etcd", 30*time.Second, httpReady(etcdURL+"/health"),
		filepath.Join(bins.etcd, "etcd"), "--name", "fastpath-testbed", "--data-dir", cfg.path("etcd"),
		"--log-level", "warn", "--unsafe-no-fsync",
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "fastpath-testbed="+peerURL, "--listen-metrics-urls", ""); err != nil {
		return err
	}
	gates := featureGatesFlag(cfg.FeatureGates)
	if err := b.run(ctx, "kube-apiserver", 90*time.Second, b.apiReady,
		filepath.Join(bins.kubernetes, "kube-apiserver"), "--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(cfg.APIServerPort),
		"--endpoint-reconciler-type", "none",
		"--tls-cert-file", p.file("apiserver.crt"), "--tls-private-key-file", p.file("apiserver.key"),
		"--client-ca-file", p.file("ca.crt"), "--token-auth-file", p.file("tokens.csv"),
		"--authorization-mode", "Node,RBAC",
		"--kubelet-client-certificate", p.file("kubelet-client.crt"), "--kubelet-client-key", p.file("kubelet-client.key"),
		"--kubelet-preferred-address-types", "InternalIP",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", p.file("sa.pub"), "--service-account-signing-key-file", p.file("sa.key"),
		// Profiling lets the scale simulation collect the API server's
		// garbage (/debug/pprof/heap?gc=1) before reading its live heap;
		// only the admin may read it.
		"--service-cluster-ip-range", cfg.ServiceCIDR.String(), "--allow-privileged=true", "--profiling=true",
		// The CNI DRA driver design's examples are resource.k8s.io/v1beta1,
		// off by default since 1.35: the e2e tests apply them as they are.
		"--runtime-config", "resource.k8s.io/v1beta1=true",
		"--feature-gates", gates); err != nil {
		return err
	}
	if err := b.grantNodeReads(ctx); err != nil {
		return &ComponentError{Component: "kube-apiserver", Log: cfg.LogFile("kube-apiserver"), Err: err}
	}
	common := []string{"--kubeconfig", cfg.Kubeconfig(), "--authentication-kubeconfig", cfg.Kubeconfig(),
		"--authorization-kubeconfig", cfg.Kubeconfig(), "--bind-address", "127.0.0.1", "--leader-elect=false",
		"--profiling=false", "--feature-gates", gates}
	if cfg.APIQPS > 0 {
		common = append(common, "--kube-api-qps", strconv.Itoa(cfg.APIQPS), "--kube-api-burst", strconv.Itoa(2*cfg.APIQPS))
	}
	if err := b.run(ctx, "kube-scheduler", 60*time.Second, httpReady(fmt.Sprintf("https://127.0.0.1:%d/healthz", cfg.SchedulerPort)),
		append([]string{filepath.Join(bins.kubernetes, "kube-scheduler"), "--secure-port", strconv.Itoa(cfg.SchedulerPort)}, common...)...); err != nil {
		return err
	}
	if err := b.run(ctx, "kube-controller-manager", 60*time.Second, httpReady(fmt.Sprintf("https://127.0.0.1:%d/healthz", cfg.ControllerManagerPort)),
		append([]string{filepath.Join(bins.kubernetes, "kube-controller-manager"), "--secure-port", strconv.Itoa(cfg.ControllerManagerPort),
			"--service-account-private-key-file", p.file("sa.key"), "--root-ca-file", p.file("ca.crt"),
			"--use-service-account-credentials=false"}, common...)...); err != nil {
		return err
	}

	if err := os.WriteFile(cfg.path("cni", "net.d", "10-fastpath-testbed.conflist"), []byte(cniConfig(cfg)), 0o644); err != nil {
		return err
	}
	if cfg.Runtime == RuntimeCRIO {
		if err := b.startCRIO(ctx, bins, archives); err != nil {
			return err
		}
	} else if err := b.startContainerd(ctx, bins, archives); err != nil {
		return err
	}

	kubeletConf := cfg.path("kubelet.yaml")
	if err := os.WriteFile(kubeletConf, []byte(kubeletConfig(cfg, p)), 0o644); err != nil {
		return err
	}
	if err := b.run(ctx, "kubelet", 120*time.Second, b.nodeReady,
		filepath.Join(bins.kubernetes, "kubelet"), "--config", kubeletConf, "--kubeconfig", nodeKubeconfig,
		"--root-dir", cfg.KubeletDir(), "--cert-dir", cfg.path("kubelet", "pki"),
		"--hostname-override", cfg.NodeName, "--node-ip", cfg.NodeIP.String()); err != nil {
		return err
	}
	// Pods cannot be created before the default service account exists.
	if err := b.waitReady(ctx, "kube-controller-manager", 60*time.Second, func(ctx context.Context) error {
		_, err := b.client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	logger.Info("Test bed ready", "node", cfg.NodeName, "kubeconfig", cfg.Kubeconfig(), "logs", cfg.LogDir())
	return nil
}

func (b *Bed) startContainerd(ctx context.Context, bins binaries, archives []string) error {
	cfg := b.cfg
	ctrdConfig := cfg.path("containerd", "config.toml")
	if err := os.WriteFile(ctrdConfig, []byte(containerdConfig(cfg, bins)), 0o644); err != nil {
		return err
	}
	ctr := filepath.Join(bins.containerd, "ctr")
	ctrReady := func(ctx context.Context) error {
		return exec.CommandContext(ctx, ctr, "--address", cfg.containerdSocket(), "version").Run()
	}
	if err := b.run(ctx, "containerd", 30*time.Second, ctrReady,
		filepath.Join(bins.containerd, "containerd"), "--config", ctrdConfig); err != nil {
		return err
	}
	for _, a := range archives {
		if err := b.ImportImage(ctx, a); err != nil {
			return &ComponentError{Component: "containerd", Log: cfg.LogFile("containerd"), Err: err}
		}
	}
	return nil
}

// grantNodeReads lets the kubelet get pods and ResourceClaims through RBAC
// too. A 1.37 kubelet may ask for a new pod's claim before the API
// server's node authorizer has linked the pod to it, and after the refusal
// it prepares the claim only at its next resync, a minute later: on this
// fast single node that happened to about one pod in 25, and stalled the
// test that made it.
func (b *Bed) grantNodeReads(ctx context.Context) error {
	const name = "fastpath-testbed:node-reads"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:node:" + b.cfg.NodeName}},
	}
	if _, err := b.client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("grant the node reads: %w", err)
	}
	if _, err := b.client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("grant the node reads: %w", err)
	}
	return nil
}

// run starts a component, records it, and waits until ready returns nil.
func (b *Bed) run(ctx context.Context, name string, timeout time.Duration, ready func(context.Context) error, argv ...string) error {
	return b.runWith(ctx, name, timeout, ready, []string{"PATH=" + filepath.Dir(argv[0]) + ":" + os.Getenv("PATH")}, argv...)
}

// runWith is run with env added to the component's environment.
func (b *Bed) runWith(ctx context.Context, name string, timeout time.Duration, ready func(context.Context) error, env []string, argv ...string) error {
	p, err := startProcess(name, b.cfg.LogFile(name), env, argv...)
	if err != nil {
		return err
	}
	b.st.Processes = append(b.st.Processes, p)
	if err := b.st.save(); err != nil {
		return err
	}
	klog.FromContext(ctx).V(1).Info("Started", "component", name, "pid", p.PID)
	return b.waitReady(ctx, name, timeout, ready)
}

// waitReady polls ready until it succeeds, the component exits, or timeout.
func (b *Bed) waitReady(ctx context.Context, name string, timeout time.Duration, ready func(context.Context) error) error {
	var proc *process
	for i := range b.st.Processes {
		if b.st.Processes[i].Name == name {
			proc = &b.st.Processes[i]
		}
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if proc != nil && !proc.alive() {
			return false, errors.New("exited")
		}
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		last = ready(attempt)
		return last == nil, nil
	})
	if err == nil {
		return nil
	}
	if last != nil && err.Error() != "exited" {
		err = fmt.Errorf("not ready after %s: %w", timeout, last)
	}
	return &ComponentError{Component: name, Log: b.cfg.LogFile(name), Err: err}
}

func (b *Bed) connect() error {
	rc, err := clientcmd.BuildConfigFromFlags("", b.cfg.Kubeconfig())
	if err != nil {
		return fmt.Errorf("load %s: %w", b.cfg.Kubeconfig(), err)
	}
	rc.QPS, rc.Burst = 50, 100
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	b.rest, b.client = rc, client
	return nil
}

func (b *Bed) apiReady(ctx context.Context) error {
	_, err := b.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err
}

func (b *Bed) nodeReady(ctx context.Context) error {
	node, err := b.client.CoreV1().Nodes().Get(ctx, b.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s not ready: %s", b.cfg.NodeName, c.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", b.cfg.NodeName)
}

// teardown stops everything st records and everything found below cfg.Dir,
// in an order that lets each component clean up after its children.
func teardown(ctx context.Context, cfg Config, st *state) error {
	logger := klog.FromContext(ctx)
	var errs []error
	if st != nil {
		if api, ok := st.find("kube-apiserver"); ok && api.alive() {
			if err := deletePods(ctx, cfg); err != nil {
				logger.Info("Could not delete pods through the API; killing them", "err", err)
			}
		}
		for i := len(st.Processes) - 1; i >= 0; i-- {
			if err := st.Processes[i].stop(15 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Container processes, then the shims of this bed's containerd and
	// the conmons of its CRI-O.
	errs = append(errs, removeCgroups(cfg.CgroupName))
	for _, p := range append(processesMatching(cfg.containerdSocket()), processesMatching(cfg.path("crio", "exits"))...) {
		errs = append(errs, p.stop(5*time.Second))
	}
	errs = append(errs, unmountUnder(cfg.Dir))
	errs = append(errs, unshareDir(cfg.Dir))
	errs = append(errs, removeLinks(cfg))
	if st != nil {
		for _, p := range st.CreatedPaths {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := os.Remove(cfg.stateFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (st *state) find(name string) (process, bool) {
	for _, p := range st.Processes {
		if p.Name == name {
			return p, true
		}
	}
	return process{}, false
}

// deletePods deletes every pod and waits for the kubelet to stop them, so
// containerd tears down their sandboxes and networks itself.
func deletePods(ctx context.Context, cfg Config) error {
	b := &Bed{cfg: cfg}
	if err := b.connect(); err != nil {
		return err
	}
	// The workloads' pods first, while the DaemonSets' (fastpathd) run to
	// release their claims; then the DaemonSets, whose controller would
	// otherwise make their pods again, and what is left.
	ownedByDaemonSet := func(p corev1.Pod) bool {
		return slices.ContainsFunc(p.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "DaemonSet" })
	}
	if err := b.deletePodsWhere(ctx, func(p corev1.Pod) bool { return !ownedByDaemonSet(p) }); err != nil {
		return err
	}
	sets, err := b.client.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, ds := range sets.Items {
		if err := b.client.AppsV1().DaemonSets(ds.Namespace).Delete(ctx, ds.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return b.deletePodsWhere(ctx, func(corev1.Pod) bool { return true })
}

// deletePodsWhere deletes the pods of every namespace that match, and
// waits until none is left.
func (b *Bed) deletePodsWhere(ctx context.Context, match func(corev1.Pod) bool) error {
	pods, err := b.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, pod := range pods.Items {
		if !match(pod) {
			continue
		}
		err := b.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(1))})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := b.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		return err == nil && !slices.ContainsFunc(pods.Items, match), nil
	})
}

func checkBinaries(cfg Config, bins binaries) error {
	need := []string{
		filepath.Join(bins.kubernetes, "kube-apiserver"), filepath.Join(bins.kubernetes, "kubelet"),
		filepath.Join(bins.etcd, "etcd"), filepath.Join(bins.containerd, "containerd"),
		filepath.Join(bins.runc, "runc"), filepath.Join(bins.cni, "bridge"), filepath.Join(bins.helm, "helm"),
	}
	if cfg.Runtime == RuntimeCRIO {
		need = append(need, filepath.Join(bins.crio, "crio"), filepath.Join(bins.crio, "pinns"), crioConmon)
	}
	for _, f := range need {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s is not built: run `make deps` (test/deps.sh testbed) first: %w", filepath.Base(f), err)
		}
	}
	return nil
}

func checkPorts(cfg Config) error {
	for name, port := range map[string]int{"kube-apiserver": cfg.APIServerPort, "etcd": cfg.EtcdPort,
		"etcd peer": cfg.EtcdPort + 1, "kube-scheduler": cfg.SchedulerPort,
		"kube-controller-manager": cfg.ControllerManagerPort, "kubelet healthz": cfg.KubeletHealthzPort} {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return fmt.Errorf("port %d for %s is in use by another process: %w", port, name, err)
		}
		l.Close()
	}
	return nil
}

// resetDir empties Dir but for its lock, so no state of an earlier bed leaks in.
func resetDir(cfg Config) error {
	entries, err := os.ReadDir(cfg.Dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == filepath.Base(cfg.lockFile()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(cfg.Dir, e.Name())); err != nil {
			return fmt.Errorf("clear %s: %w", cfg.Dir, err)
		}
	}
	return nil
}

// lock takes an exclusive lock on cfg.Dir, so two commands never start or
// stop the same bed at once.
func lock(cfg Config) (func(), error) {
	f, err := os.OpenFile(cfg.lockFile(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another command is starting or stopping the test bed in %s; wait for it to finish", cfg.Dir)
		}
		return nil, err
	}
	return func() { f.Close() }, nil
}
