package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// sharedStore is a store shared as a daemon in a pod shares it, whose
// peers are asked (peers.present) before each write, with the journal on.
func sharedStore(t *testing.T, pluginDir string) (*claims.Store, *peers) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	store, err := claims.Open(path, claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Share(); err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	p := newPeers(ctx, store, "uid-self", pluginDir, filepath.Join(pluginDir, "self.sock"))
	store.SetPeerCheck(p.present)
	store.SetJournal(true)
	return store, p
}

// change admits a claim of its own to the store and returns the
// checkpoint's version after the write.
func change(t *testing.T, store *claims.Store, i int) int {
	t.Helper()
	c := claims.Claim{Driver: claims.DriverFastpath, UID: claimUID(i), Namespace: "ns", Name: fmt.Sprint("c", i), Pod: claims.Pod{UID: claimUID(i)}}
	if err := store.Put(c); err != nil {
		t.Fatal(err)
	}
	return storeVersion(t, store)
}

func claimUID(i int) types.UID { return types.UID(fmt.Sprint("uid-", i)) }

func storeVersion(t *testing.T, store *claims.Store) int {
	t.Helper()
	_, v, err := claims.Read(store.Path())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func sandbox(uid, namespace, name string) *api.PodSandbox {
	return &api.PodSandbox{Uid: uid, Namespace: namespace, Name: name}
}

// A rollback's new pod of the DaemonSet, as the runtime tells of it: the
// checkpoint is version 2 before RunPodSandbox's hook returns (so before
// the pod's container starts, which may be v0.1.0's, which refuses
// version 3 at its start), every write is of version 2 while the pod
// runs, and of version 3 again once its sandbox stopped. Pods of another
// DaemonSet or namespace change nothing.
func TestPeerPodsSettleTheStore(t *testing.T) {
	store, p := sharedStore(t, t.TempDir())
	_, ctx := ktesting.NewTestContext(t)
	self := sandbox("uid-self", "fastpath-system", "fastpath-x7k2q")
	p.Synchronized(ctx, []*api.PodSandbox{self, sandbox("uid-app", "default", "app-5d8f7-abcde")}, nil)
	if v := change(t, store, 1); v != claims.Version {
		t.Fatalf("alone, the store wrote version %d, want %d", v, claims.Version)
	}
	for _, pod := range []*api.PodSandbox{
		sandbox("uid-other-ns", "default", "fastpath-h2x9p"),
		sandbox("uid-controller", "fastpath-system", "fastpath-controller-5d8f7-abcde"),
	} {
		p.Started(ctx, pod)
		if v := change(t, store, 2); v != claims.Version {
			t.Errorf("with %s/%s, no daemon, started, the store wrote version %d, want %d", pod.Namespace, pod.Name, v, claims.Version)
		}
	}

	// Each time the daemon is alone again, what the other left is cleared
	// up, through the store.
	alone := make(chan struct{}, 16)
	p.setOnAlone(func() {
		_ = store.Hold(func([]*claims.Claim, []*claims.CorruptError) error { return nil })
		alone <- struct{}{}
	})
	older := sandbox("uid-older", "fastpath-system", "fastpath-b8w4z")
	p.Started(ctx, older)
	if v := storeVersion(t, store); v != 2 {
		t.Fatalf("once RunPodSandbox of the DaemonSet's other pod returned, the checkpoint is of version %d, want 2", v)
	}
	for i := 3; i < 6; i++ {
		if v := change(t, store, i); v != 2 {
			t.Errorf("with the DaemonSet's other pod running, the store wrote version %d, want 2", v)
		}
	}
	if len(alone) != 0 {
		t.Errorf("with the DaemonSet's other pod running, the daemon was told %d times it is alone", len(alone))
	}
	p.Stopped(ctx, older)
	if v := change(t, store, 6); v != claims.Version {
		t.Errorf("once the other pod stopped, the store wrote version %d, want %d", v, claims.Version)
	}
	select {
	case <-alone:
	case <-time.After(10 * time.Second):
		t.Errorf("once the other pod stopped, the daemon was not told it is alone")
	}

	// A daemon restarted while the pod of one that went is being deleted:
	// the runtime lists its stopped sandbox (no PID, no container) at
	// Synchronize.
	older.Id = "sandbox-older"
	p.Synchronized(ctx, []*api.PodSandbox{self, older}, []*api.Container{{Id: "app", PodSandboxId: "sandbox-app"}})
	if v := change(t, store, 7); v != claims.Version {
		t.Errorf("with the DaemonSet's other pod stopped at Synchronize, the store wrote version %d, want %d", v, claims.Version)
	}

	// A daemon restarted beside one of the previous release: the runtime
	// lists both pods at Synchronize, the other's container running; or its
	// sandbox running (its PID), its container not yet created.
	p.Synchronized(ctx, []*api.PodSandbox{self, older}, []*api.Container{{Id: "fastpathd", PodSandboxId: older.Id}})
	if v := storeVersion(t, store); v != 2 {
		t.Errorf("after Synchronize listed the DaemonSet's other pod with its container, the checkpoint is of version %d, want 2", v)
	}
	p.Synchronized(ctx, []*api.PodSandbox{self}, nil)
	if v := change(t, store, 8); v != claims.Version {
		t.Errorf("alone at Synchronize, the store wrote version %d, want %d", v, claims.Version)
	}
	older.Pid = 4242
	p.Synchronized(ctx, []*api.PodSandbox{self, older}, nil)
	if v := storeVersion(t, store); v != 2 {
		t.Errorf("after Synchronize listed the DaemonSet's other pod's running sandbox, the checkpoint is of version %d, want 2", v)
	}
}

// A daemon started by hand beside this one, in no pod the runtime tells
// of: the store writes version 2 from the first write after its DRA socket
// answers (not within some seconds of it), and version 3 again once it
// no longer does.
func TestPeerSocketSettlesTheStore(t *testing.T) {
	dir, err := os.MkdirTemp("", "fp-peers")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	store, _ := sharedStore(t, dir)
	if v := change(t, store, 1); v != claims.Version {
		t.Fatalf("alone, the store wrote version %d, want %d", v, claims.Version)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "other.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if v := change(t, store, 2); v != 2 {
		t.Errorf("at once after another daemon's socket answers, the store wrote version %d, want 2", v)
	}
	_ = l.Close()
	if v := change(t, store, 3); v != claims.Version {
		t.Errorf("once the socket no longer answers, the store wrote version %d, want %d", v, claims.Version)
	}
}
