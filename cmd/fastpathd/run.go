package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/devices/filter"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/attach"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/cnidriver"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/sharedl2"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/dra/storewatch"
)

// DriverName is the DRA driver name fastpath serves.
const DriverName = "fastpath.dev"

type runOptions struct {
	discoveryOptions
	nodeName     string
	api          apiOptions
	pluginDir    string
	registryDir  string
	nriSocket    string
	nriIndex     string
	stateDir     string
	cdiDir       string
	devRoot      string
	bpfDir       string
	metricsAddr  string
	profiling    bool
	podUID       string
	healthSocket string
	health       dra.HealthOptions
	resync       time.Duration
	cni          cniOptions
	npwg         npwgOptions
	networkAPI   networkAPIOptions
	nodeConfig   nodeConfigOptions
	ipPoolsFile  string
	ipPools      dra.IPPools
	// gateways are those of the node's IP pools, as ipPools or the node's
	// FastpathNodeConfig set them, for the CNI driver and the networks
	// pods select.
	gateways *poolGateways
	// allowPFWithVFs lets claims take PFs that have VFs whole.
	allowPFWithVFs bool
	// pfCounters publishes PFs with VFs and their VFs as partitionable
	// devices.
	pfCounters bool
	// numaNodeList publishes resource.kubernetes.io/numaNode as a list.
	numaNodeList bool
	// binding is the CEL expression choosing the devices published with
	// binding conditions; bindingTimeout how long one may take to be
	// ready.
	binding         string
	bindingTimeout  time.Duration
	bindingSelector devices.Selector
	// interfaceSysctls are the interface sysctls claims may set beyond
	// the default ones.
	interfaceSysctls stringList
	// deviceMetadata writes the device metadata of prepared claims.
	deviceMetadata bool
	// claimPrefetch reads the claims of the node's pods ahead of the
	// kubelet's Prepare (kubelet.Prefetch).
	claimPrefetch bool
	// attachOverlap attaches a pod's devices while the runtime creates
	// its first container (nri.Options.Overlap).
	attachOverlap bool
	// journal lets the store write checkpoint version 3 (claims.SetJournal);
	// checkpointRest is the quiet time after which it writes version 2
	// (claims.SetRest).
	journal        bool
	checkpointRest time.Duration
}

func (o *runOptions) addFlags(fs *flag.FlagSet) {
	o.discoveryOptions.addFlags(fs)
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	o.api.addFlags(fs)
	fs.StringVar(&o.pluginDir, "plugin-dir", "/var/lib/kubelet/plugins/"+DriverName, "directory for the DRA plugin's socket")
	fs.StringVar(&o.registryDir, "registry-dir", "/var/lib/kubelet/plugins_registry", "kubelet plugin registration directory")
	fs.StringVar(&o.nriSocket, "nri-socket", "/var/run/nri/nri.sock", "the container runtime's NRI socket")
	fs.StringVar(&o.nriIndex, "nri-plugin-index", nri.DefaultIndex, "the daemon's index among the runtime's NRI plugins, two digits: the runtime calls plugins in index order, so another plugin that must see the pod's devices (or set up before them) takes a higher (lower) one")
	fs.StringVar(&o.stateDir, "state-dir", "/var/lib/fastpath", "directory for the checkpoint and per-claim state")
	fs.StringVar(&o.cdiDir, "cdi-dir", "/var/run/cdi", "directory for CDI specs")
	fs.StringVar(&o.bpfDir, "bpf-dir", "/sys/fs/bpf/fastpath", "directory on a bpffs for XDP programs and maps of afxdp claims (a bpffs is mounted there if it is not on one)")
	fs.StringVar(&o.devRoot, "dev-root", "/", "directory holding dev/, where VFIO device nodes appear; a stand-in in tests")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "127.0.0.1:9178", "address for /healthz, /readyz and /metrics; empty disables")
	fs.BoolVar(&o.profiling, "profiling", false, "also serve Go's /debug/pprof/ handlers on --metrics-addr")
	fs.StringVar(&o.healthSocket, "health-socket", "", "unix socket also serving /healthz and /readyz, for fastpathd probe: this daemon's own answer while another shares --metrics-addr (a rolling update); empty disables")
	fs.StringVar(&o.podUID, "pod-uid", os.Getenv("POD_UID"), "UID of the daemon's pod (default $POD_UID): with it, a newer daemon of the node replaces this one without a gap (rolling update)")
	o.cni.addFlags(fs)
	o.npwg.addFlags(fs)
	o.networkAPI.addFlags(fs)
	o.nodeConfig.addFlags(fs)
	fs.DurationVar(&o.checkpointRest, "checkpoint-rest", time.Second, "once this long has passed without a change of the node's claims, rewrite the checkpoint whole in version 2 (which the previous release reads), the journal folded into it; the next change writes version 3 again. 0: keep version 3 until the daemon stops")
	fs.BoolVar(&o.journal, "checkpoint-journal", true, "record a change of the node's claims as an entry of a journal beside the checkpoint (checkpoint version 3), whatever their number; false: rewrite the whole checkpoint at every change (version 2, which the previous release reads). Version 2 is written anyway while another fastpathd's pod runs or its DRA socket answers on the node (a rollback needs no change of this flag)")
	fs.BoolVar(&o.attachOverlap, "attach-overlap", true, "attach the devices of a pod without CNI networks while the kubelet and the runtime go on with the pod: RunPodSandbox starts the attach and returns, the pod's first container is made meanwhile, and its start waits for the attach (a failed attach is tried once more, then fails the container's start, or its creation if it had failed by then). A pod with a software RDMA device is attached inside RunPodSandbox. false, and for a pod with CNI networks (a CNI claim, NPWG networks): the attach completes inside RunPodSandbox, which fails with its error, and NRI plugins of a higher --nri-plugin-index see the devices at their RunPodSandbox")
	fs.BoolVar(&o.deviceMetadata, "device-metadata", true, "write each prepared claim's device metadata (KEP-5304: the devices' attributes and, once in the pod, their network data) and mount it into the pod's containers at /var/run/kubernetes.io/dra-device-attributes/, through a CDI spec in --cdi-dir")
	fs.BoolVar(&o.claimPrefetch, "claim-prefetch", true, "watch the node's pods (a field selector: this node's only; RBAC: list and watch pods) and read each pending pod's ResourceClaims as soon as it is bound here, beside the kubelet's own work before it calls Prepare, so that the kubelet plugin's read of the claim at Prepare is answered without a request: one round trip to the API server fewer on each claimed pod's start. A claim is kept only if a device of its allocation is fastpath's, and given once; false: the plugin reads each claim at Prepare")
	fs.BoolVar(&o.allowPFWithVFs, "allow-pf-with-vfs", false, "let claims take a PF that has SR-IOV VFs whole (modes netdev, afxdp, delegate): its pod can then set every VF's MAC, VLAN and trust; off, Prepare refuses them (mode vfio always)")
	fs.BoolVar(&o.numaNodeList, "numa-node-list", false, "publish resource.kubernetes.io/numaNode as a list (DRAListTypeAttributes, alpha in Kubernetes 1.37: the API server and the scheduler need the feature gate): a device's NUMA node first, then the nodes of its socket at the nearest distance, so that a matchAttribute with a device on any of them is met; off: the scalar every cluster accepts")
	fs.BoolVar(&o.pfCounters, "pf-counters", false, "publish each PF that has SR-IOV VFs with a counter set of its VFs (DRAPartitionableDevices, Kubernetes 1.36 and later): the PF consumes all of them and each VF one, so that the scheduler never gives a PF and one of its VFs at once (with --allow-pf-with-vfs); off: a cluster without the feature gate")
	fs.StringVar(&o.binding, "binding-conditions", "", `CEL expression, as --filter, choosing the devices published with binding conditions (DRADeviceBindingConditions, beta in Kubernetes 1.36): once one is allocated, the scheduler binds its pod only when this daemon reports it ready (on the node, healthy, its link up; bindable to vfio-pci for a claim in mode vfio), and allocates again elsewhere when it reports the binding failed (the device then tainted NoSchedule until it is ready); the daemon then lists and watches ResourceClaims. Empty: none, e.g. device.attributes["fastpath.dev"].kind == "sriov-vf"`)
	fs.DurationVar(&o.bindingTimeout, "binding-timeout", time.Minute, "how long an allocated device with binding conditions may take to become ready (its link to come up) before this daemon reports its binding failed; under the scheduler's own binding timeout (10m by default)")
	fs.Var(&o.interfaceSysctls, "interface-sysctls", "comma-separated interface sysctls claims may set (interface.sysctls) beyond the default ones (docs/reference.md), each ipv4.<name> or ipv6.<name> below net.ipv4.conf.<interface> or net.ipv6.conf.<interface>, e.g. ipv4.route_localnet,ipv6.mtu")
	fs.StringVar(&o.ipPoolsFile, "ip-pools", "", "file of the node's IP pools (kind IPPoolConfig), from which claims with ipam get addresses; empty: none")
	fs.DurationVar(&o.resync, "rediscover-interval", 5*time.Minute, "rediscover devices this often even without an event")
	fs.DurationVar(&o.health.Grace, "health-grace", time.Second, "how long a device must be unhealthy before it is tainted and reported (a shorter link flap only leaves it degraded: --health-degraded-hold)")
	fs.DurationVar(&o.health.Interval, "health-interval", time.Second, "how often prepared devices are checked in their pods")
	fs.DurationVar(&o.health.DegradedHold, "health-degraded-hold", 5*time.Minute, "how long a device whose problem ended (a link flap, however short) stays tainted fastpath.dev/degraded with effect None: usable, marked; 0 never taints so")
	fs.BoolVar(&o.health.Evict, "health-evict", false, "taint unhealthy devices NoExecute too: pods holding one are evicted unless they tolerate it")
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
	if !nri.ValidIndex(o.nriIndex) {
		return usagef("run: --nri-plugin-index %q: must be two digits, 00 to 99", o.nriIndex)
	}
	if o.resync < 0 {
		return usagef("run: --rediscover-interval %s: must not be negative", o.resync)
	}
	if o.checkpointRest < 0 {
		return usagef("run: --checkpoint-rest %s: must not be negative (0: version 3 until the daemon stops)", o.checkpointRest)
	}
	if err := o.cni.validate(); err != nil {
		return err
	}
	if err := o.npwg.validate(&o.cni); err != nil {
		return err
	}
	if err := o.networkAPI.validate(); err != nil {
		return err
	}
	if o.resync < 0 || o.health.Grace < 0 || o.health.Interval < 0 || o.health.DegradedHold < 0 {
		return usagef("run: --rediscover-interval, --health-grace, --health-interval and --health-degraded-hold must not be negative")
	}
	if o.bindingTimeout <= 0 {
		return usagef("run: --binding-timeout %s: must be positive", o.bindingTimeout)
	}
	var sysctls stringList
	for _, v := range o.interfaceSysctls {
		for k := range strings.SplitSeq(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				sysctls = append(sysctls, k)
			}
		}
	}
	o.interfaceSysctls = sysctls
	for _, k := range o.interfaceSysctls {
		if err := v1alpha1.ValidSysctlName(k); err != nil {
			return usagef("run: --interface-sysctls %q: %v", k, err)
		}
	}
	if o.binding != "" {
		sel, err := filter.Compile(o.binding)
		if err != nil {
			return usagef("run: --binding-conditions: %v", err)
		}
		o.bindingSelector = sel
	}
	if o.health.DegradedHold == 0 {
		o.health.DegradedHold = -1 // never: the driver's zero is its default
	}
	if o.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
			return usagef("run: --metrics-addr %q: %v", o.metricsAddr, err)
		}
	}
	if o.ipPoolsFile != "" {
		pools, err := loadIPPools(o.ipPoolsFile)
		if err != nil {
			return usagef("run: --ip-pools: %v", err)
		}
		o.ipPools = pools
	}
	return nil
}

// poolGateways are the gateways of the node's IP pools, which no static
// address of a network may be; set again when the pools change.
type poolGateways struct {
	mu  sync.Mutex
	gws sharedl2.Gateways
}

func (g *poolGateways) set(pools dra.IPPools) {
	gws := sharedl2.GatewaysOf(pools)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gws = gws
}

func (g *poolGateways) get() sharedl2.Gateways {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gws
}

// loadIPPools reads, defaults and validates a file of IP pools.
func loadIPPools(path string) (dra.IPPools, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, errs := v1alpha1.DecodeIPPoolConfig(data, field.NewPath(path))
	if len(errs) == 0 {
		errs = cfg.Validate(field.NewPath(path))
	}
	if len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return dra.NewIPPools(cfg), nil
}

// newFlagSet is a command's flag set with klog's flags.
func newFlagSet(name string, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("fastpathd "+name, flag.ContinueOnError)
	fs.SetOutput(output)
	klog.InitFlags(fs)
	return fs
}

// newRunFlagSet is the daemon's flag set, with the logging flags of
// Kubernetes components (--logging-format text|json, -v, --vmodule, ...)
// into logging.
func newRunFlagSet(output io.Writer, logging *logsapi.LoggingConfiguration) *flag.FlagSet {
	fs := flag.NewFlagSet("fastpathd run", flag.ContinueOnError)
	fs.SetOutput(output)
	logsapi.AddGoFlags(logging, fs)
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
	logging := logsapi.NewLoggingConfiguration()
	fs := newRunFlagSet(stderr, logging)
	o.addFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	if errs := logsapi.Validate(logging, nil, nil); len(errs) > 0 {
		return usagef("run: logging flags: %v", errs.ToAggregate())
	}
	discoverer, err := o.discoverer("run")
	if err != nil {
		return err
	}
	restConfig, err := o.api.restConfig()
	if err != nil {
		return usagef("run: %v", err)
	}
	if err := logsapi.ValidateAndApply(logging, nil); err != nil {
		return usagef("run: logging flags: %v", err)
	}
	defer logs.FlushLogs()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	logger := klog.Background().WithValues("node", o.nodeName)
	ctx = klog.NewContext(ctx, logger)
	return run(ctx, o, restConfig, discoverer)
}

// apiOptions are the flags of the daemon's API server client.
type apiOptions struct {
	kubeconfig string
	qps        float64
	burst      int
}

func (o *apiOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server; empty means in-cluster")
	fs.Float64Var(&o.qps, "kube-api-qps", 50, "requests per second the daemon sends the API server at most, beyond --kube-api-burst (the kubelet's default)")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "requests the daemon may send the API server at once before --kube-api-qps applies")
}

// restConfig is the API server's client configuration: --kubeconfig's, or
// in-cluster, with the flags' rate limit.
func (o *apiOptions) restConfig() (*rest.Config, error) {
	if o.qps <= 0 || o.burst < 1 {
		return nil, fmt.Errorf("--kube-api-qps %v and --kube-api-burst %d: both must be positive", o.qps, o.burst)
	}
	var cfg *rest.Config
	var err error
	if o.kubeconfig == "" {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
	} else if cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig); err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	// Built-in kinds travel as protobuf, as the kubelet's and the
	// controller manager's do: the API server decodes and encodes a node's
	// ResourceSlices several times faster than as JSON, and keeps one
	// encoding of each for the watchers rather than two. The dynamic
	// clients of custom resources speak JSON whatever this says.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg, nil
}

// podNetworkGetter is what the driver reads the PodNetworks claims name
// with: the NRI plugin's, nil when --podnetworks is off.
func podNetworkGetter(o *nri.PodNetworkOptions) attach.PodNetworkGetter {
	if o == nil {
		return nil
	}
	return o.Objects
}

// run is the daemon: it checks that it can do its job on this node, then
// serves until the context ends.
func run(ctx context.Context, o runOptions, restConfig *rest.Config, discoverer *devices.Discoverer) error {
	logger := klog.FromContext(ctx)
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(idleGCPercent)
		go paceGC(ctx)
	}
	// Every client counts its requests (fastpath_api_requests_total), and
	// all of them share one budget of requests, the status writer's last.
	m := metrics.New()
	restConfig = m.CountAPIRequests(restConfig)
	// A config without a rate (not the flags') has client-go's.
	if restConfig.QPS <= 0 || restConfig.Burst < 1 {
		restConfig = rest.CopyConfig(restConfig)
		restConfig.QPS, restConfig.Burst = rest.DefaultQPS, rest.DefaultBurst
	}
	limiter, err := status.NewRateLimiter(restConfig.QPS, restConfig.Burst)
	if err != nil {
		return err
	}
	restConfig.RateLimiter = limiter.Ahead()
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	statusClient, err := kubernetes.NewForConfig(limiter.Paced(restConfig))
	if err != nil {
		return err
	}
	logger.Info("Starting fastpathd", "version", version)
	// The node's part first: the runtime's hooks of the claims prepared
	// before a restart are served while the API server cannot be reached
	// (a restart during an outage), from the store and the node.
	store, err := claims.Open(filepath.Join(o.stateDir, "checkpoint.json"), checkpointLegacy(o.stateDir))
	if err != nil {
		return err
	}
	store.Logger = logger
	for _, e := range store.Corrupt() {
		logger.Error(e, "Holding a claim's corrupt record aside", "claim", e.Claim, "file", e.File, "line", e.Line)
	}
	// Last, once the kubelet plugins have stopped.
	st := hostState{stateDir: o.stateDir, pluginDirs: []string{o.pluginDir}}
	if o.networkAPI.socket != "" {
		st.sockets = append(st.sockets, o.networkAPI.socket)
	}
	if o.cni.enabled {
		st.pluginDirs = append(st.pluginDirs, o.cni.pluginDir)
	}
	// st's quiesce is set once the NRI plugin is made.
	defer func() { leaveNoTrace(context.WithoutCancel(ctx), store, st) }()
	// Stopping, the daemon leaves version 2, which a daemon of the previous
	// release started next (a rollback) reads: as soon as it is told to
	// stop, before the rest of its shutdown (a SIGKILL at the end of the
	// grace period finds it done), and as it returns.
	fold := func() {
		store.SetRest(0)
		if err := store.Fold(); err != nil {
			logger.Error(err, "The checkpoint's journal could not be folded into it: a fastpathd of the previous release will refuse it until `fastpathd checkpoint migrate --to 2`")
		}
	}
	defer foldOnStop(ctx, fold)()
	var hookLock claims.FileLock
	var others *peers
	if o.podUID != "" {
		// A rolling update: another daemon may share this node's state,
		// and read version 2 alone.
		if err := store.Share(); err != nil {
			return err
		}
		hookLock = claims.FileLock(filepath.Join(o.stateDir, "nri.lock"))
		own := filepath.Join(o.pluginDir, kubelet.PluginSocket(o.pluginDir, types.UID(o.podUID)))
		others = newPeers(ctx, store, types.UID(o.podUID), o.pluginDir, own)
		store.SetPeerCheck(others.present)
	}
	store.SetJournal(o.journal)
	store.SetRest(o.checkpointRest)
	writer := status.NewWriter(statusClient)
	writer.Metrics, writer.Limiter = m, limiter
	writer.Start(ctx)
	registerGauges(m, store, writer)
	// Whether the store can be written (a full disk): said on the Node,
	// in the metrics and by /readyz; new claims are refused while it
	// cannot be.
	events := eventRecorder(ctx, client, o.nodeName)
	storeWatch := storewatch.New(storewatch.Options{Store: store, NodeName: o.nodeName, Events: events, Metrics: m})
	go storeWatch.Run(ctx)
	// Every CNI plugin the daemon runs, for whichever network, takes a
	// slot of one bound.
	cniLimit := dataplane.NewCNILimit(o.cni.maxPlugins)
	registerCNIGauges(m, cniLimit)
	attacher, err := dataplane.NewAttacher()
	if err != nil {
		return err
	}
	defer func() { _ = attacher.Close() }()
	var meta *kubelet.Metadata
	if o.deviceMetadata {
		meta = &kubelet.Metadata{CDIDir: o.cdiDir}
	}
	var prefetch *kubelet.Prefetch
	if o.claimPrefetch && client != nil {
		prefetch = kubelet.NewPrefetch(client, o.nodeName, []string{devices.DriverName, cnidriver.DriverName}, m.ClaimPrefetch)
		go prefetch.Run(ctx)
	}
	nriOpts := nri.Options{Socket: o.nriSocket, Index: o.nriIndex, Store: store, Attacher: attacher, Status: writer, Metrics: m, Name: nri.PluginName, HookLock: hookLock,
		Metadata: meta, WriteCDI: dra.WriteCDISpec, Overlap: o.attachOverlap}
	if others != nil {
		nriOpts.Pods = others
	}
	if o.cni.enabled || o.npwg.enabled {
		nriOpts.CNI = dataplane.NewCNI(splitList(o.cni.binDirs), filepath.Join(o.stateDir, "cni", "cache"), cniLimit)
	}
	if err := o.npwg.watch(ctx, restConfig); err != nil {
		return err
	}
	o.gateways = &poolGateways{}
	o.gateways.set(o.ipPools)
	nriOpts.NPWG = o.npwg.options(client, o.nodeName, &o.cni, o.ipPools)
	if nriOpts.NPWG != nil {
		nriOpts.NPWG.PoolGateways = o.gateways.get
	}
	api, err := o.networkAPI.start(ctx, o.stateDir, splitList(o.cni.binDirs), cniLimit, o.npwg.networkSources(splitList(o.cni.plugins))...)
	if err != nil {
		return err
	}
	defer api.stop()
	nriOpts.PodNetworks = o.npwg.podNetworkOptions(client, api.configs())
	nodeLabels, err := o.npwg.nodeLabels(client, o.nodeName, api.configs(), splitList(o.cni.binDirs), splitList(o.cni.plugins))
	if err != nil {
		return err
	}
	// What the cluster or the runtime lacks that fastpath would use, on
	// the Node (status.FeaturesOffCondition).
	condition := status.NewNodeCondition(client, o.nodeName)
	go condition.Run(ctx)
	nriOpts.OnRuntime = runtimeFeatures(o.nodeName, events, condition, m)
	plugin := nri.New(nriOpts)
	defer plugin.Close()
	st.quiesce = plugin.Quiesce
	go plugin.Run(ctx)
	go plugin.RunIPAMClaims(ctx)
	var ready readiness
	// Not ready until the cluster is reached and the drivers registered: a
	// rolling update stops the daemon this one replaces once it is ready.
	var reached atomic.Bool
	ready.add(func() error {
		if !reached.Load() {
			return errors.New("waiting for the API server")
		}
		return nil
	})
	ready.add(plugin.Connected)
	ready.add(storeWatch.Err)
	srv, err := serveHealth(ctx, o.metricsAddr, o.healthSocket, o.profiling, ready.check, m.Handler())
	if err != nil {
		return err
	}

	granular, err := waitForCluster(ctx, client, o.nodeName, time.Second)
	if err != nil {
		return err
	}
	drivers := []string{devices.DriverName}
	if o.cni.enabled {
		drivers = append(drivers, cnidriver.DriverName)
	}
	cniNamespace := ""
	if o.cni.enabled {
		cniNamespace = o.cni.configNamespace
	}
	ps := permissions(drivers, cniNamespace, granular)
	if o.npwg.enabled {
		ps = append(ps, npwgPermissions...)
	}
	if o.npwg.ipamClaims {
		ps = append(ps, ipamClaimPermissions...)
	}
	if o.npwg.podNetworks {
		ps = append(ps, podNetworkPermissions...)
	}
	if o.nodeConfig.enabled {
		ps = append(ps, nodeConfigPermissions...)
	}
	if o.binding != "" {
		ps = append(ps, bindingPermissions...)
	}
	if err := awaitPermissions(ctx, client, ps, 30*time.Second, 2*time.Second); err != nil {
		return err
	}
	reached.Store(true)
	if nodeLabels != nil {
		go nodeLabels.Run(ctx)
	}
	// The runtime first: the kubelet may prepare claims as soon as the
	// plugin registers, and a pod whose sandbox starts before fastpath
	// hears of it would run without its devices.
	if err := waitForRuntime(ctx, plugin, o.nriSocket); err != nil {
		return err
	}
	features, pfCounters, binding := clusterFeatures(ctx, client, o, events, condition, m)
	var numaLists map[int64][]int64
	if o.numaNodeList && features.ListAttributes {
		if numaLists, err = devices.NUMANodeLists(o.SysfsRoot); err != nil {
			return err
		}
		if len(numaLists) == 0 {
			logger.Info("--numa-node-list: the node reports no NUMA node; its devices publish no numaNode")
		}
	}
	driver, err := dra.New(dra.Options{
		NodeName: o.nodeName, Client: client, PluginDir: o.pluginDir, RegistryDir: o.registryDir,
		StateDir: o.stateDir, CDIDir: o.cdiDir, MemifDir: o.MemifDir, BPFDir: o.bpfDir,
		Store: store, Status: writer, Runtime: plugin, Metrics: m, PodUID: types.UID(o.podUID),
		Health: o.health, HealthChecks: dra.LiveChecks{Attacher: attacher}, Events: events,
		PCI: dataplane.PCIBinder{SysfsRoot: o.SysfsRoot, DevRoot: o.devRoot}, IPPools: o.ipPools, AllowPFWithVFs: o.allowPFWithVFs, PFCounters: pfCounters,
		NUMANodeLists: numaLists, Binding: binding, InterfaceSysctls: o.interfaceSysctls,
		DeviceInfoDir: o.npwg.driverDeviceInfoDir(),
		PodNetworks:   podNetworkGetter(nriOpts.PodNetworks),
		Metadata:      meta,
		Prefetch:      prefetch,
		StoreFault:    storeWatch.Err,
		SliceFeatures: &features,
	})
	if err != nil {
		return err
	}
	// Claims interrupted mid-Prepare are undone, and claims prepared in an
	// earlier boot done again, before the kubelet may call.
	if err := driver.Reconcile(ctx); err != nil {
		logger.Error(err, "Some claims could not be reconciled; their devices may not be as their claims say")
	}
	// The device metadata of claims unprepared by a daemon that knows
	// nothing of it (the previous release, during a rollback) is removed
	// before the kubelet may call, and again each time the daemon finds
	// itself alone on the node (that daemon gone).
	metadataDirs := map[string]string{devices.DriverName: o.pluginDir, cnidriver.DriverName: o.cni.pluginDir}
	sweepMetadata := func() {
		if removed, err := kubelet.SweepMetadata(store, o.cdiDir, metadataDirs); errors.Is(err, claims.ErrRemoved) {
			return // the daemon stops with nothing prepared, its state gone
		} else if err != nil {
			logger.Error(err, "Some device metadata of claims no longer prepared could not be removed")
		} else if len(removed) > 0 {
			logger.Info("Removed the device metadata of claims no longer prepared", "files", removed)
		}
	}
	sweepMetadata()
	if others != nil {
		others.setOnAlone(sweepMetadata)
	}
	// The CDI specs of the prepared claims' device metadata, which a
	// reboot took with the CDI directory's tmpfs, are back before the
	// kubelet creates the pods' containers again.
	if o.deviceMetadata {
		restored, err := kubelet.RestoreMetadataSpecs(store, o.cdiDir, metadataDirs)
		if err != nil {
			logger.Error(err, "Some prepared claims' device metadata has no CDI spec: their pods' containers cannot be created again")
		}
		if len(restored) > 0 {
			logger.Info("Wrote again the CDI specs of prepared claims' device metadata", "specs", restored)
		}
	}
	if err := driver.Start(ctx); err != nil {
		return err
	}
	defer driver.Stop()
	ready.add(driver.RegistrationStatus)
	if o.cni.enabled {
		cniDriver, err := o.cni.start(ctx, restConfig, client, o.nodeName, o.registryDir, store, storeWatch.Err, writer, plugin, m, types.UID(o.podUID), meta, prefetch, o.gateways.get)
		if err != nil {
			return err
		}
		defer cniDriver.Stop()
		ready.add(cniDriver.RegistrationStatus)
	}
	if o.nodeConfig.enabled {
		var ipamClaims *nri.IPAMClaimOptions
		if nriOpts.NPWG != nil {
			ipamClaims = nriOpts.NPWG.IPAMClaims
		}
		if err := o.startNodeConfig(ctx, restConfig, client, discoverer, driver, store, ipamClaims); err != nil {
			return err
		}
	}
	watchErr := make(chan error, 1)
	go func() {
		watchErr <- discoverer.Watch(ctx, devices.WatchOptions{Resync: o.resync}, func(inv devices.Inventory) {
			logger.Info("Publishing devices", "devices", len(inv.Devices), "warnings", len(inv.Warnings))
			driver.Publish(ctx, inv)
		})
	}()
	logger.Info("fastpathd running", "version", version, "stateDir", o.stateDir)
	select {
	case <-ctx.Done():
	case err := <-srv.errs:
		return fmt.Errorf("health and metrics server: %w", err)
	case err := <-watchErr:
		if err != nil {
			return fmt.Errorf("device discovery: %w", err)
		}
	case err := <-api.Err():
		return err
	}
	logger.Info("Shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return srv.shutdown(shutdownCtx)
}

// clusterFeatures probes which DRA features of a ResourceSlice the API
// server keeps, and turns off, with one log line each, an event on the
// node, fastpath_cluster_feature at 0 and the node's condition
// (status.FeaturesOffCondition), what this node would publish
// and the cluster cannot serve: shared counters (--pf-counters: the
// DeviceClasses' CEL guard still keeps a PF with VFs from tenants),
// binding conditions (--binding-conditions), a device shared by several
// claims (shared mode: each such device is given to one claim at a time)
// and device taints (an unhealthy device is left out of the slices).
func clusterFeatures(ctx context.Context, client kubernetes.Interface, o runOptions, events record.EventRecorder, condition *status.NodeCondition, m *metrics.Metrics) (kubelet.SliceFeatures, bool, dra.BindingOptions) {
	logger := klog.FromContext(ctx)
	binding := dra.BindingOptions{Timeout: o.bindingTimeout, Selector: o.bindingSelector}
	f, err := kubelet.ProbeSliceFeatures(ctx, client, devices.DriverName, o.nodeName)
	if err != nil {
		logger.Error(err, "Could not tell which DRA features the API server serves: publishing as if all")
	}
	// needed: the daemon would use it (the node's condition lists only
	// those).
	type feature struct {
		name, gate, consequence string
		on, needed              bool
	}
	all := []feature{
		{"taints", "DRADeviceTaints", "an unhealthy device is left out of the ResourceSlices rather than tainted", f.Taints, true},
		{"counters", "DRAPartitionableDevices", "--pf-counters is turned off: the DeviceClasses' CEL guard keeps a PF with VFs from tenants", f.Counters, o.pfCounters},
		{"multiple_allocations", "DRAConsumableCapacity", "a shared-mode device is given to one claim at a time", f.MultipleAllocations, true},
		{"binding_conditions", "DRADeviceBindingConditions", "--binding-conditions is turned off: devices are published without binding conditions", f.BindingConditions, o.bindingSelector != nil},
		{"list_attributes", "DRAListTypeAttributes", "--numa-node-list is turned off: resource.kubernetes.io/numaNode is published as a number", f.ListAttributes, o.numaNodeList},
	}
	if !o.pfCounters {
		all[1].consequence = "nothing needs it (--pf-counters is not set): the DeviceClasses' CEL guard keeps a PF with VFs from tenants"
	}
	if o.bindingSelector == nil {
		all[3].consequence = "nothing needs it (--binding-conditions is not set)"
	}
	if !o.numaNodeList {
		all[4].consequence = "nothing needs it (--numa-node-list is not set)"
	}
	on := map[string]float64{}
	var off []status.FeatureOff
	for _, x := range all {
		on[x.name] = 0
		if x.on {
			on[x.name] = 1
			continue
		}
		msg := fmt.Sprintf("The API server does not serve this DRA feature (feature gate %s off): %s", x.gate, x.consequence)
		logger.Info(msg, "feature", x.name)
		events.Event(nodeRef(o.nodeName), corev1.EventTypeWarning, "DRAFeatureOff", msg)
		if x.needed {
			off = append(off, status.FeatureOff{Name: x.name, Why: fmt.Sprintf("feature gate %s off: %s", x.gate, x.consequence)})
		}
	}
	condition.Set("cluster", off)
	m.GaugeByLabel("cluster_feature", "The DRA features of a ResourceSlice the API server serves (1) or not (0), as found at start; what needs one it lacks is off.", "feature",
		func() map[string]float64 { return on })
	pfCounters := o.pfCounters && f.Counters
	if !f.BindingConditions {
		binding.Selector = nil
	}
	return f, pfCounters, binding
}

// runtimeFeatures is told which runtime connected (nri.Options.OnRuntime):
// what fastpath would use that its NRI lacks (nri.RuntimeFeatures) is said
// once in the log, in a RuntimeFeatureOff event on the node, in
// fastpath_runtime_feature{feature} at 0 and in the node's condition.
func runtimeFeatures(node string, events record.EventRecorder, condition *status.NodeCondition, m *metrics.Metrics) func(context.Context, nri.Runtime) {
	var mu sync.Mutex
	on := map[string]float64{}
	m.GaugeByLabel("runtime_feature", "The NRI features fastpath uses that the node's runtime has (1) or lacks (0), as it said when it connected; "+
		"a feature is absent until the runtime connects, and 1 when its NRI version is unknown.", "feature",
		func() map[string]float64 {
			mu.Lock()
			defer mu.Unlock()
			return maps.Clone(on)
		})
	return func(ctx context.Context, r nri.Runtime) {
		logger := klog.FromContext(ctx)
		var off []status.FeatureOff
		now := map[string]float64{}
		for _, f := range nri.RuntimeFeatures {
			has, known := r.Has(f)
			now[f.Name] = 1
			if !known {
				logger.Info("The runtime's NRI version is unknown: assuming it has this feature", "feature", f.Name, "runtime", r.String(), "since", "NRI "+f.Since)
			}
			if has {
				continue
			}
			now[f.Name] = 0
			why := fmt.Sprintf("the runtime %s is older than NRI %s: %s", r, f.Since, f.Without)
			logger.Info("The runtime lacks an NRI feature: "+why, "feature", f.Name)
			events.Event(nodeRef(node), corev1.EventTypeWarning, "RuntimeFeatureOff", why)
			off = append(off, status.FeatureOff{Name: f.Name, Why: why})
		}
		mu.Lock()
		on = now
		mu.Unlock()
		condition.Set("runtime", off)
	}
}

// nodeRef is the node's, for its events.
func nodeRef(node string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}
}

// eventRecorder records events (device health on the node and on pods)
// through the API server.
func eventRecorder(ctx context.Context, client kubernetes.Interface, node string) record.EventRecorder {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "fastpathd", Host: node})
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
		why := "is NRI enabled in the runtime?"
		if err := plugin.Connected(); err != nil {
			why = err.Error()
		}
		logger.Info("Waiting for the container runtime to connect the NRI plugin before registering with the kubelet", "nriSocket", socket, "reason", why)
	}
}

// waitForCluster checks the cluster (checkCluster) until the API server
// answers: while it cannot be reached, or answers that it cannot serve now
// (a restart, an overloaded or starting control plane), the daemon waits,
// saying why, with backoff from first up to 30s, rather than exit and
// crash-loop. An answer that no wait changes (resource.k8s.io/v1 not
// served, the node unknown, no permission) is the error.
func waitForCluster(ctx context.Context, client kubernetes.Interface, node string, first time.Duration) (bool, error) {
	logger := klog.FromContext(ctx)
	backoff := first
	for {
		granular, err := checkCluster(ctx, client, node)
		if err == nil || !transient(err) {
			return granular, err
		}
		logger.Info("Waiting for the API server", "err", err.Error(), "retryIn", backoff)
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("%w (waiting for the API server: %w)", err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// transient says whether an API error may go away by itself: not an
// answer that the resource or object does not exist, or that the daemon
// may not have it.
func transient(err error) bool {
	var p permanentError
	return !errors.As(err, &p) && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) && !apierrors.IsUnauthorized(err) &&
		!apierrors.IsBadRequest(err) && !apierrors.IsInvalid(err)
}

// permanentError is an answer of the cluster that no wait changes.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// checkCluster fails unless the API server serves resource.k8s.io/v1
// (Kubernetes 1.34 or newer) and knows this node. It says whether the API
// server authorizes claim status writes per driver and node
// (resourceclaims/driver, Kubernetes 1.36 and newer).
func checkCluster(ctx context.Context, client kubernetes.Interface, node string) (granularStatus bool, _ error) {
	switch _, err := client.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1"); {
	case apierrors.IsNotFound(err):
		return false, fmt.Errorf("the API server does not serve resource.k8s.io/v1 (fastpath needs Kubernetes 1.34 or newer): %w", err)
	case err != nil:
		return false, fmt.Errorf("the API server: %w", err)
	}
	if _, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		return false, fmt.Errorf("node %q: %w (is --node-name right?)", node, err)
	}
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		return false, fmt.Errorf("the API server's version: %w", err)
	}
	sv, err := utilversion.ParseGeneric(v.GitVersion)
	if err != nil {
		return false, permanentError{fmt.Errorf("the API server's version %q: %w", v.GitVersion, err)}
	}
	return sv.AtLeast(utilversion.MajorMinor(1, 36)), nil
}

// registerCNIGauges adds the metrics of the bound of CNI plugins.
func registerCNIGauges(m *metrics.Metrics, cniLimit *dataplane.CNILimit) {
	m.Gauge("cni_plugins_running", "CNI plugin processes running now.", func() float64 { return float64(cniLimit.Running()) })
	m.Gauge("cni_plugins_waiting", "CNI plugins waiting for a slot (--cni-max-plugins) now.", func() float64 { return float64(cniLimit.Waiting()) })
}

// registerGauges adds the metrics read from the daemon's state at each
// scrape: claims prepared by driver, devices and networks in pods now,
// status writes not landed yet.
func registerGauges(m *metrics.Metrics, store *claims.Store, writer *status.Writer) {
	m.GaugeByLabel("prepared_claims", "Claims prepared on the node, by driver.", "driver", func() map[string]float64 {
		out := map[string]float64{claims.DriverFastpath: 0}
		for _, c := range store.View() {
			// A pod's NPWG record, or an IPAMClaim's, is no claim.
			if c.Prepared && c.Driver != claims.DriverNPWG && c.Driver != claims.DriverIPAMClaim {
				out[c.Driver]++
			}
		}
		return out
	})
	m.Gauge("attached_devices", "Netdevs in pods and CNI networks added to pods now.", func() float64 {
		n := 0
		for _, c := range store.View() {
			for _, d := range c.Devices {
				if d.Attached != nil {
					n++
				}
			}
			for _, net := range c.Networks {
				if net.Added {
					n++
				}
			}
		}
		return float64(n)
	})
	m.Gauge("status_writes_pending", "Claims whose status is not written yet: the status writer's queue, one entry per claim.", func() float64 { return float64(writer.Pending()) })
	m.Gauge("status_writer_api_unreachable", "1 while the status writer finds the API server unreachable and its writes wait for it.", func() float64 {
		if writer.Unreachable() {
			return 1
		}
		return 0
	})
}

// foldOnStop calls fold as soon as ctx ends, and returns what to call as
// the daemon returns: it waits for that fold if it started, then folds
// again (the shutdown may have written since). The state directory is
// removed only after (leaveNoTrace): a fold still running then would
// write the checkpoint back, or leave its temporary file.
func foldOnStop(ctx context.Context, fold func()) (last func()) {
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		fold()
	})
	return func() {
		if !stop() {
			<-done
		}
		fold()
	}
}
