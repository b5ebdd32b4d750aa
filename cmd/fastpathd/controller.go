package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/controller"
	"github.com/fastpath-dra/fastpath/dra/admission"
	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/validate"
)

// controllerOptions are the flags of fastpathd controller: the cluster's
// one writer of what fastpath says of cluster-scoped objects (today the
// status of CNIConfig objects and, with --podnetworks, of KEP-3698
// PodNetworks and PodNetworkAttachments).
type controllerOptions struct {
	cni         cniPolicyOptions
	podNetworks podNetworkOptions
	api         apiOptions
	namespace   string
	identity    string
	leaseName   string
	metricsAddr string
	resync      time.Duration
	webhook     webhookOptions
	ipamClaims  bool
}

// webhookOptions are the flags of the validating admission webhook, which
// every replica serves, leading or not.
type webhookOptions struct {
	port          int
	certDir       string
	secret        string
	service       string
	configuration string
	gates         string
	dnsNames      string
	// The NetworkAttachmentDefinitions' rules, as the nodes' flags.
	nads npwgConfigOptions
}

func (o *webhookOptions) addFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.port, "webhook-port", 0, "serve the validating admission webhook over HTTPS on this port (path "+admission.Path+"): ResourceClaims, ResourceClaimTemplates, DeviceClasses, "+
		"CNIConfigs, NetworkAttachmentDefinitions, PodNetworks, PodNetworkAttachments and the pods' network selection annotations judged as fastpathd validate does; 0: none")
	fs.StringVar(&o.certDir, "webhook-cert-dir", "", "with --webhook-port, the directory of the webhook's key pair ("+admission.CertFile+", "+admission.KeyFile+"), read again when it changes")
	fs.StringVar(&o.secret, "webhook-secret", "", "with --webhook-port, the Secret (in --leader-election-namespace) where the webhook's CA and key pair are made and rotated, "+
		"the CA bundle of --webhook-configuration kept the CA's (cert-controller); it must exist and be mounted at --webhook-cert-dir; empty: the key pair is someone else's")
	fs.StringVar(&o.service, "webhook-service", "fastpath-webhook", "with --webhook-secret, the webhook's Service (in --leader-election-namespace), whose DNS names the certificate is for")
	fs.StringVar(&o.configuration, "webhook-configuration", "fastpath-webhook", "with --webhook-secret, the ValidatingWebhookConfiguration whose CA bundles are kept the CA's")
	fs.StringVar(&o.gates, "webhook-gate-configuration", "", "with --webhook-secret, the MutatingWebhookConfiguration of the scheduling gates (path "+admission.GatePath+
		", which every --webhook-port serves: a pod created with a list of PodNetworks gets the gate "+pnv1.SchedulingGate+") whose CA bundles are kept the CA's; empty: none")
	fs.StringVar(&o.dnsNames, "webhook-dns-names", "", "with --webhook-secret, comma-separated DNS names the certificate is for besides the Service's "+
		"(the host of a configuration's clientConfig.url, such as localhost for a controller in the host network)")
	// No directory by default: the operator's configurations are the
	// nodes' files, not the controller's.
	o.nads.addFlags(fs, "")
}

func (o *webhookOptions) validate() error {
	if o.port == 0 {
		return nil
	}
	switch {
	case o.port < 0 || o.port > 65535:
		return usagef("controller: --webhook-port %d: not a port", o.port)
	case o.certDir == "":
		return usagef("controller: --webhook-port needs --webhook-cert-dir")
	case o.secret != "" && (len(validation.IsDNS1123Subdomain(o.secret)) > 0 || len(validation.IsDNS1123Label(o.service)) > 0 ||
		len(validation.IsDNS1123Subdomain(o.configuration)) > 0 || (o.gates != "" && len(validation.IsDNS1123Subdomain(o.gates)) > 0)):
		return usagef("controller: --webhook-secret %q, --webhook-service %q, --webhook-configuration %q, --webhook-gate-configuration %q: must be object names",
			o.secret, o.service, o.configuration, o.gates)
	}
	for _, name := range splitList(o.dnsNames) {
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			return usagef("controller: --webhook-dns-names: %q: %s", name, strings.Join(msgs, "; "))
		}
	}
	return o.nads.validate("controller")
}

// podNetworkOptions are the flags of the PodNetwork controller.
type podNetworkOptions struct {
	enabled           bool
	noDefault         bool
	paramsRecheck     time.Duration
	allowedNamespaces string
}

func (o *podNetworkOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.enabled, "podnetworks", false, "run the KEP-3698 PodNetwork controller: Ready and ParamsReady of PodNetworks and PodNetworkAttachments, their InUse finalizers, the default PodNetwork (needs their CRDs), "+
		"and the lifting of the scheduling gate "+pnv1.SchedulingGate+" once a pod's networks exist, are Ready and enabled, with node affinity to the nodes that attach them")
	fs.BoolVar(&o.noDefault, "disable-default-podnetwork-creation", false, "with --podnetworks, leave the default PodNetwork to the operator rather than create it (and create it again when deleted)")
	fs.DurationVar(&o.paramsRecheck, "podnetwork-params-recheck", 30*time.Second, "with --podnetworks, read the objects parametersRefs name again this often (they are not watched)")
	fs.StringVar(&o.allowedNamespaces, "npwg-allowed-namespaces", "", "with --podnetworks, comma-separated namespaces whose NetworkAttachmentDefinitions a PodNetworkAttachment of every namespace may name (\"*\": all), "+
		"as the nodes' flag of that name; one of its own namespace it always may, and one of another namespace is never read")
}

// leaderTask is one of the controllers that run while a replica leads.
type leaderTask interface {
	Run(ctx context.Context) error
	Synced() error
}

func controllerCommand(args []string, stderr io.Writer) error {
	var o controllerOptions
	identity := os.Getenv("POD_NAME")
	if identity == "" {
		identity, _ = os.Hostname()
	}
	fs := newFlagSet("controller", stderr)
	o.cni.addFlags(fs)
	o.podNetworks.addFlags(fs)
	o.api.addFlags(fs)
	fs.StringVar(&o.namespace, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the leader election's Lease (default $POD_NAMESPACE)")
	fs.StringVar(&o.leaseName, "leader-election-lease", "fastpath-controller", "name of the leader election's Lease")
	fs.StringVar(&o.identity, "leader-election-identity", identity, "this replica's name in the Lease (default $POD_NAME, else the host name)")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "127.0.0.1:9179", "address for /healthz and /readyz; empty disables")
	fs.DurationVar(&o.resync, "resync", 10*time.Minute, "judge every CNIConfig again this often")
	fs.BoolVar(&o.ipamClaims, "ipamclaims", false, "let go, for the node that holds it, of an IPAMClaim whose node or holding pod is gone "+
		"(status condition "+npwg.IPAMClaimNodeCondition+" False), so that a pod of another node may take it (needs the IPAMClaim CRD); "+
		"looked at when it changes and every --resync")
	o.webhook.addFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := o.cni.validate("controller"); err != nil {
		return err
	}
	if err := o.webhook.validate(); err != nil {
		return err
	}
	switch {
	case len(validation.IsDNS1123Label(o.namespace)) > 0:
		return usagef("controller: --leader-election-namespace (or $POD_NAMESPACE) %q must be a namespace", o.namespace)
	case o.leaseName == "" || o.identity == "":
		return usagef("controller: --leader-election-lease and --leader-election-identity must not be empty")
	case o.resync < time.Minute:
		return usagef("controller: --resync %s: must be at least 1m", o.resync)
	case o.podNetworks.paramsRecheck < time.Second:
		return usagef("controller: --podnetwork-params-recheck %s: must be at least 1s", o.podNetworks.paramsRecheck)
	}
	if err := (npwg.Policy{AllowedNamespaces: splitList(o.podNetworks.allowedNamespaces)}).Validate(); err != nil {
		return usagef("controller: --npwg-allowed-namespaces: %v", err)
	}
	if o.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
			return usagef("controller: --metrics-addr %q: %v", o.metricsAddr, err)
		}
	}
	restConfig, err := o.api.restConfig()
	if err != nil {
		return usagef("controller: %v", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx = klog.NewContext(ctx, klog.Background().WithValues("identity", o.identity))
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	ctrls := []leaderTask{controller.NewCNIConfigController(dyn, o.cni.policy(), o.resync)}
	if o.podNetworks.enabled {
		ctrls = append(ctrls, controller.NewPodNetworkController(controller.PodNetworkControllerOptions{
			Client: dyn, Pods: client, Policy: o.cni.policy(), Resync: o.resync,
			ParamsRecheck: o.podNetworks.paramsRecheck, NoDefault: o.podNetworks.noDefault,
			AllowedNamespaces: splitList(o.podNetworks.allowedNamespaces),
			Events:            controllerEvents(ctx, client),
		}))
	}
	if o.ipamClaims {
		ctrls = append(ctrls, controller.NewIPAMClaimController(dyn, client, o.resync))
	}
	var hook *webhook
	if o.webhook.port != 0 {
		hook = &webhook{restConfig: restConfig, client: client}
	}
	return runController(ctx, o, client, ctrls, hook)
}

// controllerEvents records the controller's events on pods.
func controllerEvents(ctx context.Context, client kubernetes.Interface) record.EventRecorder {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "fastpath-controller"})
}

// webhook is what the admission webhook needs besides its flags.
type webhook struct {
	restConfig *rest.Config
	client     kubernetes.Interface
}

// claimIndexPermissions are what the webhook's index of the cluster's
// claims needs (admission.Claims).
var claimIndexPermissions = []permission{
	{group: "resource.k8s.io", resource: "resourceclaims", verb: "list", why: "checking a new claim's static addresses against the other claims"},
	{group: "resource.k8s.io", resource: "resourceclaims", verb: "watch", why: "checking a new claim's static addresses against the other claims"},
	{group: "resource.k8s.io", resource: "deviceclasses", verb: "list", why: "the classes' modes, for the claims' static addresses"},
	{group: "resource.k8s.io", resource: "deviceclasses", verb: "watch", why: "the classes' modes, for the claims' static addresses"},
}

// claimIndex starts the index of the cluster's claims the webhook checks
// a new claim's static addresses against, until ctx ends; nil when the
// controller may not list them (the nodes check them anyway).
func (w *webhook) claimIndex(ctx context.Context) admission.ClaimIndex {
	logger := klog.FromContext(ctx)
	if err := checkPermissions(ctx, w.client, claimIndexPermissions); err != nil {
		logger.Error(err, "The webhook does not check new claims' static addresses against the other claims; the nodes do, at Prepare")
		return nil
	}
	idx, err := admission.NewClaims(w.client)
	if err != nil {
		logger.Error(err, "The webhook does not check new claims' static addresses against the other claims; the nodes do, at Prepare")
		return nil
	}
	go idx.Run(ctx)
	return idx
}

// serve starts the webhook's server and, with --webhook-secret, the
// rotation of its certificates; ready learns whether it has a
// certificate. The returned channel reports the failure of either.
func (w *webhook) serve(ctx context.Context, o controllerOptions, m *metrics.Metrics, ready *readiness) (*admission.Server, <-chan error, error) {
	errs := make(chan error, 2)
	if o.webhook.secret != "" {
		rotErrs, err := admission.RunCertRotator(ctx, w.restConfig, admission.CertOptions{
			Namespace: o.namespace, Secret: o.webhook.secret, CertDir: o.webhook.certDir,
			Service: o.webhook.service, Configuration: o.webhook.configuration, GateConfiguration: o.webhook.gates,
			DNSNames: splitList(o.webhook.dnsNames),
		})
		if err != nil {
			return nil, nil, err
		}
		go func() {
			if err, ok := <-rotErrs; ok {
				errs <- err
			}
		}()
	}
	h := &admission.Handler{
		Check: validate.Check{Policy: o.cni.policy()},
		NADs: npwg.ConfigRules{ConfDir: o.webhook.nads.confDirRules(), Plugins: splitList(o.cni.plugins),
			Policy: o.webhook.nads.hostPolicy()},
		Metrics: m,
		Claims:  w.claimIndex(ctx),
	}
	srv, err := admission.Listen(ctx, fmt.Sprintf(":%d", o.webhook.port), o.webhook.certDir,
		map[string]http.Handler{admission.Path: h, admission.GatePath: &admission.Gate{Metrics: m}})
	if err != nil {
		return nil, nil, err
	}
	ready.add(srv.Ready)
	go func() {
		if err, ok := <-srv.Errs(); ok {
			errs <- fmt.Errorf("webhook server: %w", err)
		}
	}()
	return srv, errs, nil
}

// runController serves health and, while it leads, runs the controllers.
// It returns when ctx ends, or with an error when it loses the lead or a
// controller stops (the pod restarts and campaigns again).
func runController(ctx context.Context, o controllerOptions, client kubernetes.Interface, ctrls []leaderTask, hook *webhook) error {
	logger := klog.FromContext(ctx)
	// Ready: a replica that leads has listed every object; one that waits
	// is ready to take over.
	var leading atomic.Bool
	var ready readiness
	ready.add(func() error {
		if !leading.Load() {
			return nil
		}
		for _, c := range ctrls {
			if err := c.Synced(); err != nil {
				return err
			}
		}
		return nil
	})
	m := metrics.New()
	var hookErrs <-chan error
	if hook != nil {
		hookSrv, errs, err := hook.serve(ctx, o, m, &ready)
		if err != nil {
			return err
		}
		hookErrs = errs
		defer func() {
			shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = hookSrv.Shutdown(shutdownCtx)
		}()
	}
	srv, err := serveHealth(ctx, o.metricsAddr, "", false, ready.check, m.Handler())
	if err != nil {
		return err
	}
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.shutdown(shutdownCtx)
	}()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.namespace, o.leaseName, client.CoreV1(), client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: o.identity})
	if err != nil {
		return err
	}
	lost := make(chan error, 1)
	runErr := make(chan error, len(ctrls))
	leCtx, stop := context.WithCancel(ctx)
	defer stop()
	go leaderelection.RunOrDie(leCtx, leaderelection.LeaderElectionConfig{
		Lock: lock, Name: o.leaseName, ReleaseOnCancel: true,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				logger.Info("Leading: writing the status of CNIConfig objects", "lease", o.namespace+"/"+o.leaseName, "podNetworks", o.podNetworks.enabled)
				leading.Store(true)
				for _, c := range ctrls {
					go func() { runErr <- c.Run(ctx) }()
				}
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost <- fmt.Errorf("lost the lease %s/%s", o.namespace, o.leaseName)
				}
			},
			OnNewLeader: func(id string) {
				if id != o.identity {
					logger.Info("Another replica leads", "leader", id)
				}
			},
		},
	})
	logger.Info("fastpathd controller running", "version", version, "plugins", o.cni.policy().Plugins)
	select {
	case <-ctx.Done():
		logger.Info("Shutting down")
		return nil
	case err := <-lost:
		return err
	case err := <-runErr:
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("it stopped leading")
		}
		return fmt.Errorf("controller: %w", err)
	case err := <-srv.errs:
		return fmt.Errorf("health server on %s: %w", o.metricsAddr, err)
	case err := <-hookErrs:
		return err
	}
}
