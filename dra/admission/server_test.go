package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"golang.org/x/sync/semaphore"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
)

// mountedSecret writes a key pair as the kubelet updates a mounted
// Secret: the files of a new directory, then the ..data link swapped to
// it at once; tls.crt and tls.key link through ..data.
func mountedSecret(t *testing.T, dir string, n int, cert, key []byte) {
	t.Helper()
	data := filepath.Join(dir, fmt.Sprintf("..%d", n))
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{CertFile: cert, KeyFile: key} {
		if err := os.WriteFile(filepath.Join(data, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(data), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// TestRotationWhileServing: the serving certificate is made again (by
// cert-controller's code, valid for a minute) three times while reviews
// flow, over new connections and kept-alive ones; every review is
// answered, and new connections get the new certificate.
func TestRotationWhileServing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cr := &rotator.CertRotator{CAName: "fastpath-webhook-ca", CAOrganization: "fastpath", DNSName: "localhost",
		ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	now := time.Now()
	ca, err := cr.CreateCACert(now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	issue := func(n int) []byte {
		cert, key, err := cr.CreateCertPEM(ca, time.Now().Add(-time.Minute), time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		mountedSecret(t, dir, n, cert, key)
		return cert
	}
	issue(0)
	srv, err := Listen(ctx, "127.0.0.1:0", dir, map[string]http.Handler{Path: newHandler(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	if err := srv.Ready(); err != nil {
		t.Fatalf("not ready with a key pair: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	client := func(keepAlive bool) *http.Client {
		return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}, DisableKeepAlives: !keepAlive}}
	}
	url := "https://" + srv.Addr().String() + Path
	body, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: request(t, admissionv1.Create, "Pod", "app", goodPod, "")})
	if err != nil {
		t.Fatal(err)
	}
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			c := client(i%2 == 0)
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				resp, err := c.Post(url, "application/json", bytes.NewReader(body))
				if err == nil {
					var out admissionv1.AdmissionReview
					err = json.NewDecoder(resp.Body).Decode(&out)
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if err == nil && (out.Response == nil || !out.Response.Allowed) {
						err = fmt.Errorf("answer %+v, want allowed", out.Response)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	// served is the certificate a new connection gets.
	served := func() []byte {
		conn, err := tls.Dial("tcp", srv.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Errorf("a new connection: %v", err)
			return nil
		}
		defer func() { _ = conn.Close() }()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	for n := 1; n <= 3; n++ {
		block, _ := pem.Decode(issue(n))
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return bytes.Equal(served(), block.Bytes), nil
		})
		if err != nil {
			t.Fatalf("rotation %d: new connections still get the old certificate after 10 s: %v", n, err)
		}
	}
	close(stop)
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of %d reviews failed while the certificate was rotated; the first: %v", failed.Load(), sent.Load(), firstErr.Load())
	}
	if sent.Load() < 20 {
		t.Fatalf("only %d reviews were sent", sent.Load())
	}
	t.Logf("%d reviews answered across 3 rotations", sent.Load())
}

// TestReadyWithKeyPair: a replica is not ready before the kubelet has
// written the key pair, and is once it has, without a restart.
func TestReadyWithKeyPair(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	srv, err := Listen(ctx, "127.0.0.1:0", dir, map[string]http.Handler{Path: newHandler(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	if err := srv.Ready(); err == nil || !strings.Contains(err.Error(), "the webhook's certificate") {
		t.Fatalf("ready without a key pair (%v), want not", err)
	}
	cr := &rotator.CertRotator{CAName: "ca", CAOrganization: "fastpath", DNSName: "localhost", ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	ca, err := cr.CreateCACert(time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := cr.CreateCertPEM(ca, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	mountedSecret(t, dir, 0, cert, key)
	if err := srv.Ready(); err != nil {
		t.Fatalf("not ready with a key pair: %v", err)
	}
}

// TestLimitInflight: a review waits while those in flight hold the
// bodies' bound, and is not served when its client gives up; one too
// large to be read weighs nothing.
func TestLimitInflight(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	served := 0
	h := limitInflight(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		if r.Header.Get("Block") != "" {
			started <- struct{}{}
			<-release
		}
	}), semaphore.NewWeighted(10))
	send := func(ctx context.Context, length int64, block bool) int {
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, Path, strings.NewReader(""))
		r.ContentLength = length
		if block {
			r.Header.Set("Block", "1")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	done := make(chan int)
	go func() { done <- send(context.Background(), 8, true) }()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if code := send(ctx, 8, false); code != http.StatusServiceUnavailable {
		t.Errorf("a review over what is left, its client gone: status %d, want 503", code)
	}
	if code := send(context.Background(), 2, false); code != http.StatusOK {
		t.Errorf("a review within what is left: status %d, want 200", code)
	}
	if code := send(context.Background(), maxReviewBytes+1, false); code != http.StatusOK {
		t.Errorf("a review too large to be read: status %d, want it handed on", code)
	}
	close(release)
	<-done
	if code := send(context.Background(), 8, false); code != http.StatusOK || served != 4 {
		t.Errorf("after the first: status %d, %d served; want 200, 4", code, served)
	}
}
