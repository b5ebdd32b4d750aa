package nri

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestConnectedSaysWhy: a runtime with NRI off has no socket, a runtime
// down leaves one nobody listens on; the plugin's readiness says which,
// and what to do.
func TestConnectedSaysWhy(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for socket, want := range map[string]string{
		filepath.Join(dir, "nri.sock"): "does not exist: NRI is off in the runtime",
		stale:                          "nothing listens on the runtime's NRI socket",
	} {
		p := New(Options{Socket: socket})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Run(ctx)
		}()
		var got error
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			got = p.Connected()
			return got != nil && strings.Contains(got.Error(), want), nil
		})
		cancel()
		<-done
		if err != nil {
			t.Errorf("socket %s: Connected() = %v, want it to say %q", socket, got, want)
		}
	}
}
