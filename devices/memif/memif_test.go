package memif

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// serve accepts connections on a SOCK_SEQPACKET socket at path and hands
// each to handle.
func serve(t *testing.T, path string, handle func(*net.UnixConn)) {
	t.Helper()
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			go func() { defer func() { _ = c.Close() }(); handle(c) }()
		}
	}()
}

func TestGreetAndProbe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vpp.sock")
	inits := make(chan Init, 1)
	l, err := ListenAndServe(path, Hello{Name: "vswitch", MaxRegion: 255, MaxM2SRing: 255, MaxS2MRing: 255, MaxLog2RingSize: 14}, func(in Init) { inits <- in })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	h, err := Probe(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "vswitch" || h.MinVersion != Version || h.MaxVersion != Version || h.MaxLog2RingSize != 14 {
		t.Errorf("hello = %+v", h)
	}
	if _, err := Greet(ctx, path, Init{ID: 7, Mode: 1, Name: "cnf"}); err != nil {
		t.Fatal(err)
	}
	select {
	case in := <-inits:
		if in.ID != 7 || in.Mode != 1 || in.Name != "cnf" || in.Version != Version {
			t.Errorf("init = %+v", in)
		}
	case <-ctx.Done():
		t.Fatal("the master never got the INIT")
	}
}

func TestProbeUnhealthy(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Nobody listens.
	if _, err := Probe(ctx, filepath.Join(dir, "none.sock")); err == nil {
		t.Error("probe of a missing socket: no error")
	}
	// A listener that says something else.
	other := filepath.Join(dir, "other.sock")
	serve(t, other, func(c *net.UnixConn) { _, _ = c.Write([]byte("hello, world")) })
	if _, err := Probe(ctx, other); !errors.Is(err, ErrNotMemif) {
		t.Errorf("probe of a non-memif listener: %v, want ErrNotMemif", err)
	}
	// A master of another protocol version.
	old := filepath.Join(dir, "old.sock")
	serve(t, old, func(c *net.UnixConn) {
		_, _ = c.Write(Hello{Name: "old", MinVersion: 1 << 8, MaxVersion: 1 << 8}.marshal())
	})
	if _, err := Probe(ctx, old); err == nil {
		t.Error("probe of a version 1 master: no error")
	}
	// A listener that never answers: the deadline ends the probe.
	silent := filepath.Join(dir, "silent.sock")
	serve(t, silent, func(c *net.UnixConn) { _, _ = c.Read(make([]byte, 1)) })
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if _, err := Probe(short, silent); err == nil {
		t.Error("probe of a silent listener: no error")
	}
}
