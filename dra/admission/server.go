package admission

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// The key pair's files in the certificate directory: a
// kubernetes.io/tls Secret's keys, as cert-controller writes them.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

// keyPair is the serving certificate of a directory, read again when its
// files change: the kubelet updates a mounted Secret's files in place
// when cert-controller rotates the certificate, and the server hands new
// connections the new one without a restart.
type keyPair struct {
	dir string

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // the files' sizes and times when cert was read
	checked time.Time
}

// recheck bounds how often the files are looked at.
const recheck = time.Second

// stampOf says when the files last changed, and how large they are.
func (k *keyPair) stampOf() (string, error) {
	s := ""
	for _, name := range []string{CertFile, KeyFile} {
		info, err := os.Stat(filepath.Join(k.dir, name))
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%d.%d;", info.Size(), info.ModTime().UnixNano())
	}
	return s, nil
}

// get is the current certificate: read again when its files changed. A
// pair that does not load (the files are being replaced) leaves the last
// good one served.
func (k *keyPair) get() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now()
	if k.cert != nil && now.Sub(k.checked) < recheck {
		return k.cert, nil
	}
	k.checked = now
	stamp, err := k.stampOf()
	if err != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, fmt.Errorf("the webhook's certificate: %w", err)
	}
	if stamp == k.stamp && k.cert != nil {
		return k.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(k.dir, CertFile), filepath.Join(k.dir, KeyFile))
	if err != nil {
		if k.cert != nil {
			return k.cert, nil
		}
		return nil, fmt.Errorf("the webhook's certificate: %w", err)
	}
	k.cert, k.stamp = &cert, stamp
	return k.cert, nil
}

// Server is the webhook's HTTPS server.
type Server struct {
	srv  *http.Server
	lis  net.Listener
	keys *keyPair
	errs chan error
}

// Listen listens on addr and serves each handler at its path (Path,
// GatePath) over TLS, with the key pair of certDir (tls.crt, tls.key),
// read again when it changes. Connections are served once a certificate
// is there; Ready says whether it is.
func Listen(ctx context.Context, addr, certDir string, handlers map[string]http.Handler) (*Server, error) {
	// SO_REUSEPORT, as the health server's: two replicas in the host
	// network of one node (a rolling update) serve side by side.
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
			return err
		}
		return serr
	}}
	lis, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	keys := &keyPair{dir: certDir}
	mux := http.NewServeMux()
	inflight := semaphore.NewWeighted(maxInflightBytes)
	for path, h := range handlers {
		mux.Handle(path, limitInflight(h, inflight))
	}
	logger := klog.FromContext(ctx)
	s := &Server{
		lis: lis, keys: keys, errs: make(chan error, 1),
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			// The API server waits 2 s at most for an answer.
			ReadTimeout:  10 * time.Second,
			WriteTimeout: 10 * time.Second,
			IdleTimeout:  90 * time.Second,
			BaseContext:  func(net.Listener) context.Context { return ctx },
			// A client that gives up on a handshake (one before the
			// kubelet has written the key pair) is the server's to log.
			ErrorLog: log.New(logWriter{logger}, "", 0),
			TLSConfig: &tls.Config{
				MinVersion:     tls.VersionTLS12,
				GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return keys.get() },
			},
		},
	}
	go func() {
		if err := s.srv.ServeTLS(lis, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.errs <- err
		}
	}()
	logger.Info("Serving the admission webhook", "addr", lis.Addr().String(), "certDir", certDir)
	return s, nil
}

// maxInflightBytes bounds the bodies of the reviews served at once: the
// API server sends several at once over one connection, and anyone who
// can reach the port can send more. With maxReviewBytes, it bounds the
// webhook's memory whatever is sent: two of the largest reviews at once,
// or many small ones; a review waits while those in flight hold the rest.
const maxInflightBytes = 2 * maxReviewBytes

// limitInflight serves h's reviews within inflight, each weighing its
// body: as its length says, or as the largest review when it does not
// say; nothing when it is over maxReviewBytes, which is refused unread. A
// review whose client gives up while it waits is not served.
func limitInflight(h http.Handler, inflight *semaphore.Weighted) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.ContentLength
		switch {
		case n > maxReviewBytes:
			n = 0
		case n < 0:
			n = maxReviewBytes
		}
		if err := inflight.Acquire(r.Context(), n); err != nil {
			http.Error(w, fmt.Sprintf("waiting for the reviews in flight: %v", err), http.StatusServiceUnavailable)
			return
		}
		defer inflight.Release(n)
		h.ServeHTTP(w, r)
	})
}

// logWriter hands the HTTP server's own messages to the logger.
type logWriter struct{ logger klog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.logger.V(2).Info("Webhook server", "message", strings.TrimSpace(string(p)))
	return len(p), nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Errs reports the server's failure.
func (s *Server) Errs() <-chan error { return s.errs }

// Ready says why the webhook cannot serve yet (no certificate), or nil.
func (s *Server) Ready() error {
	_, err := s.keys.get()
	return err
}

// Shutdown stops the server, letting reviews under way finish.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }
