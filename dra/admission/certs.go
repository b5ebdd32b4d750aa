package admission

import (
	"context"
	"fmt"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// CertOptions say which certificates cert-controller keeps.
type CertOptions struct {
	// Namespace and Secret are the Secret the key pairs are kept in (it
	// must exist: the chart makes it empty); CertDir is where it is
	// mounted.
	Namespace, Secret, CertDir string
	// Service is the webhook's Service, in Namespace: the certificate is
	// for its DNS names, and for DNSNames.
	Service  string
	DNSNames []string
	// Configuration is the ValidatingWebhookConfiguration whose CA bundles
	// are kept the CA's; GateConfiguration, the MutatingWebhookConfiguration
	// of the scheduling gates ("": none).
	Configuration, GateConfiguration string
	// CAValidity and ServerValidity are how long the CA and the serving
	// certificate are valid; Lookahead, how long before its end a
	// certificate is made again; Check, how often that is looked at.
	// Zero: cert-controller's (10 years, 1 year, 90 days, 12 hours).
	CAValidity, ServerValidity, Lookahead, Check time.Duration
}

// RunCertRotator makes the key pairs if the Secret has none, makes them
// again before they end, and keeps the configuration's CA bundles the
// CA's, until ctx ends. Every replica runs it: their writes of the Secret
// are ordered by its resourceVersion, and the one that loses reads the
// winner's. The returned channel reports the rotator's failure.
func RunCertRotator(ctx context.Context, config *rest.Config, o CertOptions) (<-chan error, error) {
	// controller-runtime logs through klog like the rest of fastpathd.
	ctrllog.SetLogger(klog.FromContext(ctx).WithName("cert-rotator"))
	mgr, err := manager.New(config, manager.Options{
		Scheme:                 scheme.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		return nil, fmt.Errorf("the webhook's certificate rotator: %w", err)
	}
	webhooks := []rotator.WebhookInfo{{Name: o.Configuration, Type: rotator.Validating}}
	if o.GateConfiguration != "" {
		webhooks = append(webhooks, rotator.WebhookInfo{Name: o.GateConfiguration, Type: rotator.Mutating})
	}
	cr := &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: o.Secret},
		CertDir:        o.CertDir,
		CAName:         "fastpath-webhook-ca",
		CAOrganization: "fastpath",
		DNSName:        o.Service + "." + o.Namespace + ".svc",
		ExtraDNSNames:  append([]string{o.Service + "." + o.Namespace + ".svc.cluster.local", o.Service + "." + o.Namespace}, o.DNSNames...),
		// Closed by cert-controller once the CA is injected (it must not
		// be nil); readiness is the server's, which has a key pair or not.
		IsReady:                make(chan struct{}),
		Webhooks:               webhooks,
		FieldOwner:             "fastpathd-controller",
		RequireLeaderElection:  false,
		RestartOnSecretRefresh: false,
		CaCertDuration:         o.CAValidity,
		ServerCertDuration:     o.ServerValidity,
		LookaheadInterval:      o.Lookahead,
		RotationCheckFrequency: o.Check,
	}
	if err := rotator.AddRotator(mgr, cr); err != nil {
		return nil, fmt.Errorf("the webhook's certificate rotator: %w", err)
	}
	out := make(chan error, 1)
	go func() {
		if err := mgr.Start(ctx); err != nil {
			out <- fmt.Errorf("the webhook's certificate rotator: %w", err)
		}
	}()
	return out, nil
}
