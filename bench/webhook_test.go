package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/admission"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/validate"
)

// webhookPods are the pods of a burst, in turn: networks selected with
// each annotation, and one selecting a network twice as one interface
// (refused).
var webhookPods = []string{
	`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p%d", "namespace": "app", "annotations": {"k8s.v1.cni.cncf.io/networks": "net-a,net-b@n2,other/net-c"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}`,
	`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p%d", "namespace": "app", "annotations": {"network.fastpath.dev/networks": "[{\"podNetworkName\": \"dataplane1\", \"interfaceName\": \"net1\"}, {\"podNetworkName\": \"dataplane2\", \"interfaceName\": \"net2\"}]"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}`,
	`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p%d", "namespace": "app", "annotations": {"k8s.v1.cni.cncf.io/networks": "[{\"name\": \"net-a\", \"interface\": \"n1\"}, {\"name\": \"net-a\", \"interface\": \"n1\"}]"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}`,
}

// BenchmarkWebhookReview: bursts of 200 Pod reviews sent to the admission
// webhook over HTTPS (HTTP/2, as the API server's client), 8 in flight at
// once (the pods of a Deployment scaled up arrive in the ReplicaSet
// controller's batches of 1, 2, 4, 8...), each timed from its send to its
// answer; the client runs in the same process, on the same CPUs. It
// reports the p50 and p99 of a review (the target: p99 under 10 ms, far
// within the API server's 2 s timeout).
func BenchmarkWebhookReview(b *testing.B) {
	const burst, inFlight = 200, 8
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(10)))
	defer cancel()
	dir := b.TempDir()
	cr := &rotator.CertRotator{CAName: "fastpath-webhook-ca", CAOrganization: "fastpath", DNSName: "localhost",
		ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	now := time.Now()
	ca, err := cr.CreateCACert(now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	cert, key, err := cr.CreateCertPEM(ca, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, admission.CertFile), cert, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, admission.KeyFile), key, 0o600); err != nil {
		b.Fatal(err)
	}
	h := &admission.Handler{
		Check:   validate.Check{Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}},
		NADs:    npwg.ConfigRules{Plugins: cnipolicy.DefaultPlugins},
		Metrics: metrics.New(),
	}
	srv, err := admission.Listen(ctx, "127.0.0.1:0", dir, map[string]http.Handler{admission.Path: h})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true, MaxIdleConnsPerHost: burst,
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}}}
	url := "https://" + srv.Addr().String() + admission.Path
	bodies := make([][]byte, burst)
	for i := range bodies {
		bodies[i], err = json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "app", Operation: admissionv1.Create,
				Object: runtime.RawExtension{Raw: fmt.Appendf(nil, webhookPods[i%len(webhookPods)], i)}},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	review := func(body []byte) (bool, error) {
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return false, err
		}
		defer func() { _ = resp.Body.Close() }()
		var out admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return false, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if out.Response == nil {
			return false, fmt.Errorf("no response: status %s", resp.Status)
		}
		return out.Response.Allowed, nil
	}
	// The connection is made before the clock runs, as the API server's is.
	if _, err := review(bodies[0]); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	var mu sync.Mutex
	for b.Loop() {
		var wg sync.WaitGroup
		errs := make(chan error, burst)
		slots := make(chan struct{}, inFlight)
		for i := range burst {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				start := time.Now()
				allowed, err := review(bodies[i])
				took := time.Since(start)
				if err == nil && allowed != (i%len(webhookPods) != 2) {
					err = fmt.Errorf("pod %d: allowed %v", i, allowed)
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				lat = append(lat, took)
				mu.Unlock()
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Nanoseconds()) }
	b.ReportMetric(at(0.5), "p50-ns/review")
	b.ReportMetric(at(0.99), "p99-ns/review")
}
