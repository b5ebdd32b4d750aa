package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// DriverName is the DRA driver name fastpath serves.
const DriverName = "fastpath.dev"

type runOptions struct {
	discoveryOptions
	nodeName    string
	kubeconfig  string
	pluginDir   string
	registryDir string
	nriSocket   string
	stateDir    string
	cdiDir      string
	devRoot     string
	bpfDir      string
	metricsAddr string
	profiling   bool
	resync      time.Duration
	cni         cniOptions
}

func (o *runOptions) addFlags(fs *flag.FlagSet) {
	o.discoveryOptions.addFlags(fs)
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server; empty means in-cluster")
	fs.StringVar(&o.pluginDir, "plugin-dir", "/var/lib/kubelet/plugins/"+DriverName, "directory for the DRA plugin's socket")
	fs.StringVar(&o.registryDir, "registry-dir", "/var/lib/kubelet/plugins_registry", "kubelet plugin registration directory")
	fs.StringVar(&o.nriSocket, "nri-socket", "/var/run/nri/nri.sock", "the container runtime's NRI socket")
	fs.StringVar(&o.stateDir, "state-dir", "/var/lib/fastpath", "directory for the checkpoint and per-claim state")
	fs.StringVar(&o.cdiDir, "cdi-dir", "/var/run/cdi", "directory for CDI specs")
	fs.StringVar(&o.bpfDir, "bpf-dir", "/sys/fs/bpf/fastpath", "directory on a bpffs for XDP programs and maps of afxdp claims (a bpffs is mounted there if it is not on one)")
	fs.StringVar(&o.devRoot, "dev-root", "/", "directory holding dev/, where VFIO device nodes appear; a stand-in in tests")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "127.0.0.1:9178", "address for /healthz and /readyz; empty disables")
	fs.BoolVar(&o.profiling, "profiling", false, "also serve Go's /debug/pprof/ handlers on --metrics-addr")
	o.cni.addFlags(fs)
	fs.DurationVar(&o.resync, "rediscover-interval", 5*time.Minute, "rediscover devices this often even without an event")
}

func (o *runOptions) validate() error {
	if o.nodeName == "" {
		return usagef("run: --node-name (or $NODE_NAME) is required")
	}
	for name, dir := range map[string]string{"--plugin-dir": o.pluginDir, "--registry-dir": o.registryDir,
		"--state-dir": o.stateDir, "--cdi-dir": o.cdiDir, "--nri-socket": o.nriSocket, "--dev-root": o.devRoot, "--bpf-dir": o.bpfDir} {
		if dir == "" {
			return usagef("run: %s must not be empty", name)
		}
	}
	if o.resync < 0 {
		return usagef("run: --rediscover-interval %s: must not be negative", o.resync)
	}
	if err := o.cni.validate(); err != nil {
		return err
	}
	if o.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
			return usagef("run: --metrics-addr %q: %v", o.metricsAddr, err)
		}
	}
	return nil
}

func newFlagSet(name string, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("fastpathd "+name, flag.ContinueOnError)
	fs.SetOutput(output)
	klog.InitFlags(fs)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}

func runCommand(args []string, stderr io.Writer) error {
	var o runOptions
	fs := newFlagSet("run", stderr)
	o.addFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	discoverer, err := o.discoverer("run")
	if err != nil {
		return err
	}
	restConfig, err := loadRESTConfig(o.kubeconfig)
	if err != nil {
		return usagef("run: %v", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	logger := klog.Background().WithValues("node", o.nodeName)
	ctx = klog.NewContext(ctx, logger)
	return run(ctx, o, restConfig, discoverer)
}

func loadRESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// defaultGCPercent is the daemon's GC target unless $GOGC says otherwise.
// fastpathd idles between claims and discoveries, and its live heap is
// small (about 14 MiB with 1024 devices published): collecting at a quarter
// again the live heap instead of twice it keeps its resident memory 5-7 MiB
// smaller, for a few more collections per discovery.
const defaultGCPercent = 25

// run is the daemon: it checks that it can do its job on this node, then
// serves until the context ends.
func run(ctx context.Context, o runOptions, restConfig *rest.Config, discoverer *devices.Discoverer) error {
	logger := klog.FromContext(ctx)
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	if err := checkCluster(ctx, client, o.nodeName); err != nil {
		return err
	}
	store, err := claims.Open(filepath.Join(o.stateDir, "checkpoint.json"), claims.Legacy{CNI: filepath.Join(o.stateDir, "cni", "cni-checkpoint.json")})
	if err != nil {
		return err
	}
	writer := status.NewWriter(client)
	writer.Start(ctx)
	attacher, err := dataplane.NewAttacher()
	if err != nil {
		return err
	}
	defer func() { _ = attacher.Close() }()
	nriOpts := nri.Options{Socket: o.nriSocket, Store: store, Attacher: attacher, Status: writer}
	if o.cni.enabled {
		nriOpts.CNI = dataplane.NewCNI(splitList(o.cni.binDirs), filepath.Join(o.stateDir, "cni", "cache"))
	}
	plugin := nri.New(nriOpts)
	go plugin.Run(ctx)
	var ready readiness
	ready.add(plugin.Connected)
	srv, serveErr, err := serveHealth(ctx, o.metricsAddr, o.profiling, ready.check)
	if err != nil {
		return err
	}
	// The runtime first: the kubelet may prepare claims as soon as the
	// plugin registers, and a pod whose sandbox starts before fastpath
	// hears of it would run without its devices.
	if err := waitForRuntime(ctx, plugin, o.nriSocket); err != nil {
		return err
	}
	driver, err := dra.New(dra.Options{
		NodeName: o.nodeName, Client: client, PluginDir: o.pluginDir, RegistryDir: o.registryDir,
		StateDir: o.stateDir, CDIDir: o.cdiDir, MemifDir: o.MemifDir, BPFDir: o.bpfDir,
		Store: store, Status: writer, Runtime: plugin,
		PCI: dataplane.PCIBinder{SysfsRoot: o.SysfsRoot, DevRoot: o.devRoot},
	})
	if err != nil {
		return err
	}
	// Claims interrupted mid-Prepare are undone, and claims prepared in an
	// earlier boot done again, before the kubelet may call.
	if err := driver.Reconcile(ctx); err != nil {
		logger.Error(err, "Some claims could not be reconciled; their devices may not be as their claims say")
	}
	if err := driver.Start(ctx); err != nil {
		return err
	}
	defer driver.Stop()
	ready.add(driver.RegistrationStatus)
	if o.cni.enabled {
		cniDriver, err := o.cni.start(ctx, restConfig, client, o.nodeName, o.registryDir, store, writer, plugin)
		if err != nil {
			return err
		}
		defer cniDriver.Stop()
		ready.add(cniDriver.RegistrationStatus)
	}
	watchErr := make(chan error, 1)
	go func() {
		watchErr <- discoverer.Watch(ctx, devices.WatchOptions{Resync: o.resync}, func(inv devices.Inventory) {
			logger.Info("Publishing devices", "devices", len(inv.Devices), "warnings", len(inv.Warnings))
			if err := driver.Publish(ctx, inv); err != nil {
				logger.Error(err, "Publishing devices")
			}
		})
	}()
	logger.Info("fastpathd running", "version", version, "stateDir", o.stateDir)
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("health server on %s: %w", o.metricsAddr, err)
	case err := <-watchErr:
		if err != nil {
			return fmt.Errorf("device discovery: %w", err)
		}
	}
	logger.Info("Shutting down")
	if srv != nil {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdownCtx)
	}
	return nil
}

// readiness is what /readyz checks: the parts that are started.
type readiness struct {
	mu     sync.Mutex
	checks []func() error
}

func (r *readiness) add(check func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks = append(r.checks, check)
}

func (r *readiness) check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, c := range r.checks {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// waitForRuntime waits until the runtime connected the NRI plugin and
// synchronized with it, saying every while what it waits for.
func waitForRuntime(ctx context.Context, plugin *nri.Plugin, socket string) error {
	logger := klog.FromContext(ctx)
	for {
		waitCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := plugin.WaitConnected(waitCtx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		}
		logger.Info("Waiting for the container runtime to connect the NRI plugin before registering with the kubelet; is NRI enabled in the runtime?", "nriSocket", socket)
	}
}

// checkCluster fails unless the API server serves resource.k8s.io/v1
// (Kubernetes 1.34 or newer) and knows this node.
func checkCluster(ctx context.Context, client kubernetes.Interface, node string) error {
	if _, err := client.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1"); err != nil {
		return fmt.Errorf("the API server does not serve resource.k8s.io/v1 (fastpath needs Kubernetes 1.34 or newer): %w", err)
	}
	if _, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("node %q: %w (is --node-name right?)", node, err)
	}
	return nil
}

// serveHealth serves /healthz (alive) and /readyz (connected to the
// runtime and registered with the kubelet) on addr until ctx ends. Listening happens here, so a taken port is
// an error at start; a later failure arrives on the channel. With profiling,
// Go's pprof handlers are served under /debug/pprof/ as well.
func serveHealth(ctx context.Context, addr string, profiling bool, ready func() error) (*http.Server, <-chan error, error) {
	if addr == "" {
		return nil, nil, nil
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errs := make(chan error, 1)
	go func() {
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			errs <- err
		}
	}()
	return srv, errs, nil
}
