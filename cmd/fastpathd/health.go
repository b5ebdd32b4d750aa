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
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// healthServer serves /healthz, /readyz and /metrics on --metrics-addr,
// and /healthz and /readyz on --health-socket.
type healthServer struct {
	servers []*http.Server
	errs    chan error
}

// serveHealth serves /healthz (alive), /readyz (connected to the runtime
// and registered with the kubelet) and /metrics on addr, and the first
// two on socket, until ctx ends. Listening happens here, so a taken port
// is an error at start; a later failure arrives on errs. addr is shared
// (SO_REUSEPORT) with another daemon of the node during a rolling update:
// a probe there may reach either, so probes ask this daemon on its own
// socket (fastpathd probe). With profiling, Go's pprof handlers are served
// under /debug/pprof/ on addr as well.
func serveHealth(ctx context.Context, addr, socket string, profiling bool, ready func() error, metricsHandler http.Handler) (*healthServer, error) {
	h := &healthServer{errs: make(chan error, 2)}
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	if addr != "" {
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
				return err
			}
			return serr
		}}
		l, err := lc.Listen(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("--metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/healthz", health)
		mux.Handle("/readyz", health)
		mux.Handle("/metrics", metricsHandler)
		if profiling {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		h.serve(l, mux)
	}
	if socket != "" {
		// Not hostdir.Make: the directory is the pod's own, the chart's
		// emptyDir, which the kubelet makes sticky and writable by all;
		// the socket is made its owner's alone below.
		if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
			return nil, fmt.Errorf("--health-socket: %w", err)
		}
		// A socket left by this pod's previous container.
		if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("--health-socket: %w", err)
		}
		l, err := (&net.ListenConfig{}).Listen(ctx, "unix", socket)
		if err != nil {
			return nil, fmt.Errorf("--health-socket: %w", err)
		}
		if err := os.Chmod(socket, 0o600); err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("--health-socket: %w", err)
		}
		h.serve(l, health)
	}
	return h, nil
}

func (h *healthServer) serve(l net.Listener, handler http.Handler) {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	h.servers = append(h.servers, srv)
	go func() {
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			h.errs <- fmt.Errorf("%s: %w", l.Addr(), err)
		}
	}()
}

func (h *healthServer) shutdown(ctx context.Context) error {
	var errs []error
	for _, srv := range h.servers {
		errs = append(errs, srv.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// probeCommand asks the daemon of this pod, on its health socket, whether
// it is alive or ready: the container's probes run it.
func probeCommand(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fastpathd probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "/run/fastpath-probe/health.sock", "the daemon's --health-socket")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	var path string
	switch fs.Arg(0) {
	case "alive":
		path = "/healthz"
	case "ready":
		path = "/readyz"
	default:
		return usagef("probe: want alive or ready, not %q", strings.Join(fs.Args(), " "))
	}
	client := &http.Client{Timeout: *timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", *socket)
		},
	}}
	resp, err := client.Get("http://fastpathd" + path)
	if err != nil {
		return fmt.Errorf("probe %s: %w", *socket, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not %s: %s", fs.Arg(0), strings.TrimSpace(string(body)))
	}
	_, _ = stdout.Write(body)
	return nil
}
