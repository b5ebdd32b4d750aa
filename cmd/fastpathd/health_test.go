package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// Two daemons of a node share the metrics address during a rolling update;
// each answers its own probes on its own socket.
func TestHealthOfTwoDaemons(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	dir := t.TempDir()
	old, new := filepath.Join(dir, "old.sock"), filepath.Join(dir, "new", "health.sock")
	ready := func() error { return nil }
	notYet := func() error { return errors.New("not registered with the kubelet yet") }
	metrics := http.NotFoundHandler()
	a, err := serveHealth(t.Context(), addr, old, false, ready, metrics)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.shutdown(context.Background()) })
	b, err := serveHealth(t.Context(), addr, new, false, notYet, metrics)
	if err != nil {
		t.Fatalf("a second daemon cannot share %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = b.shutdown(context.Background()) })

	probe := func(socket, what string) (string, error) {
		var out, errOut bytes.Buffer
		err := probeCommand([]string{"--socket", socket, what}, &out, &errOut)
		return out.String() + errOut.String(), err
	}
	if out, err := probe(old, "ready"); err != nil || out != "ok\n" {
		t.Errorf("the ready daemon: %q, %v", out, err)
	}
	if _, err := probe(new, "ready"); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("the daemon not ready yet: %v, want its reason", err)
	}
	if _, err := probe(new, "alive"); err != nil {
		t.Errorf("the daemon not ready yet is alive: %v", err)
	}
	if _, err := probe(filepath.Join(dir, "none.sock"), "alive"); err == nil {
		t.Error("a probe of no daemon succeeded")
	}
	var u usageError
	if err := probeCommand([]string{"sideways"}, &bytes.Buffer{}, &bytes.Buffer{}); !errors.As(err, &u) {
		t.Errorf("probe sideways = %v, want a usage error", err)
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/healthz", addr))
	if err != nil {
		t.Fatalf("GET /healthz on the shared address: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz on the shared address: %s", resp.Status)
	}
}
