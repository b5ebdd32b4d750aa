package nri

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// TestRuntimeConnects: a runtime (NRI's own runtime side, in this
// process) connects the plugin, which learns its name, version and NRI
// version and tells OnRuntime once. A test binary's NRI does not know its
// own version and says none, so the plugin's is inferred from the
// runtime's name and version: containerd 1.7.32 runs NRI v0.8.0, which
// has no default validator. The plugin's Run ends with its context.
func TestRuntimeConnects(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "nri.sock")
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	r, err := adaptation.New("containerd", "v1.7.32", syncFn, update, adaptation.WithSocketPath(socket), adaptation.WithPluginPath(t.TempDir()),
		adaptation.WithPluginConfigPath(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)

	store, err := claims.Open(filepath.Join(t.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var told []Runtime
	p := New(Options{Socket: socket, Store: store, OnRuntime: func(_ context.Context, r Runtime) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, r)
	}})
	if _, ok := p.Runtime(); ok {
		t.Error("a runtime before any connected")
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := p.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	got, ok := p.Runtime()
	if want := (Runtime{Name: "containerd", Version: "v1.7.32", NRIVersion: "v0.8.0"}); !ok || got != want {
		t.Fatalf("Runtime() = %+v, %v; want %+v", got, ok, want)
	}
	if has, known := got.Has(RuntimeFeatures[0]); !known || has {
		t.Errorf("runtime %s: %s has=%v known=%v, want not had, known", got, RuntimeFeatures[0].Name, has, known)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(told) == 1, nil
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil || told[0] != got {
		t.Errorf("OnRuntime told %v, want once %v", told, got)
	}
}

// TestRuntimeHas: each NRI version a runtime may run, or none known,
// against the features' first versions.
func TestRuntimeHas(t *testing.T) {
	f := RuntimeFeature{Name: "required_plugins", Since: "v0.10.0"}
	for _, c := range []struct {
		nri        string
		has, known bool
	}{
		{"v0.12.5", true, true},
		{"v0.10.0", true, true},
		{"v0.9.1-0.20250219030224-e597e7849f24", false, true}, // CRI-O 1.34
		{"v0.8.0", false, true},                               // containerd 1.7.26 to 2.1
		{"v0.3.1-0.20230504231226-94185418e253", false, true},
		{"unknown", true, false},
		{"0.0.0-unknown", true, false},
		{"", true, false},
		{"devel", true, false},
	} {
		has, known := Runtime{Name: "r", Version: "1", NRIVersion: c.nri}.Has(f)
		if has != c.has || known != c.known {
			t.Errorf("NRI %q: has=%v known=%v, want %v %v", c.nri, has, known, c.has, c.known)
		}
	}
	for _, f := range RuntimeFeatures {
		if _, err := (Runtime{NRIVersion: f.Since}).Has(f); !err {
			t.Errorf("feature %s: Since %q is not a version", f.Name, f.Since)
		}
	}
}

// TestRuntimeNRIVersion: the runtime's NRI version as it said it, else
// inferred from its version however the runtime writes it, CRI-O 1.34.0's
// from its go.mod rather than NRI's table; unknown when nothing tells.
func TestRuntimeNRIVersion(t *testing.T) {
	for _, c := range []struct{ said, name, version, want string }{
		{"v0.12.5", "containerd", "v2.3.0", "v0.12.5"},
		{"", "containerd", "v2.2.9", "v0.11.0"},
		{"0.0.0-unknown", "containerd", "2.2.9+unknown", "v0.11.0"},
		{"", "containerd", "v1.7.32", "v0.8.0"},
		{"", "cri-o", "1.34.0", "v0.9.1-0.20250219030224-e597e7849f24"},
		{"v0.10.0", "cri-o", "1.34.0", "v0.9.1-0.20250219030224-e597e7849f24"},
		{"", "cri-o", "1.33.4", "v0.9.1-0.20250219030224-e597e7849f24"},
		{"", "someruntime", "1.0", "unknown"},
		{"", "containerd", "", "unknown"},
	} {
		if got := runtimeNRIVersion(c.said, c.name, c.version); got != c.want {
			t.Errorf("%s %s, said %q: NRI %s, want %s", c.name, c.version, c.said, got, c.want)
		}
	}
}
