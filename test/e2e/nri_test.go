//go:build e2e

package e2e

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/test/testbed"
)

// sandboxRecorder is an NRI plugin that records the pod sandbox events the
// runtime sends it.
type sandboxRecorder struct {
	mu     sync.Mutex
	events map[string][]string // pod name -> event names
	netns  map[string]string   // pod name -> network namespace path
	ids    map[string]string   // pod name -> sandbox ID
	synced chan struct{}
}

func (r *sandboxRecorder) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	close(r.synced)
	return nil, nil
}

func (r *sandboxRecorder) record(event string, pod *api.PodSandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[pod.GetName()] = append(r.events[pod.GetName()], event)
	r.ids[pod.GetName()] = pod.GetId()
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" && ns.GetPath() != "" {
			r.netns[pod.GetName()] = ns.GetPath()
		}
	}
}

func (r *sandboxRecorder) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	r.record("RunPodSandbox", pod)
	return nil
}

func (r *sandboxRecorder) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	r.record("StopPodSandbox", pod)
	return nil
}

func (r *sandboxRecorder) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	r.record("RemovePodSandbox", pod)
	return nil
}

func (r *sandboxRecorder) seen(pod, event string) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events[pod] {
		if e == event {
			return true, r.netns[pod]
		}
	}
	return false, r.netns[pod]
}

// TestNRIPodSandboxEvents proves the node's containerd runs NRI: a plugin on
// the bed's NRI socket sees a pod's sandbox start with its network namespace,
// and its stop and removal.
func TestNRIPodSandboxEvents(t *testing.T) {
	ctx := testContext(t)
	rec := &sandboxRecorder{events: map[string][]string{}, netns: map[string]string{}, ids: map[string]string{}, synced: make(chan struct{})}
	connectNRI(t, ctx, rec, "e2e-recorder", "90", rec.synced)

	const ns, name = "default", "e2e-nri"
	if _, err := bed.RunPod(ctx, testbed.WorkloadPod(ns, name, "sleep")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.WithoutCancel(ctx), ns, name) })
	ok, netns := rec.seen(name, "RunPodSandbox")
	if !ok {
		t.Fatalf("the running pod's RunPodSandbox never reached the NRI plugin")
	}
	if netns == "" {
		t.Fatalf("RunPodSandbox carried no network namespace path")
	}
	if _, err := os.Stat(netns); err != nil {
		t.Errorf("RunPodSandbox netns path %s: %v", netns, err)
	}
	if err := bed.DeletePod(ctx, ns, name); err != nil {
		t.Fatal(err)
	}
	for _, event := range []string{"StopPodSandbox", "RemovePodSandbox"} {
		if event == "RemovePodSandbox" {
			// The kubelet removes a deleted pod's sandbox in its garbage
			// collection, up to a minute later; the test makes the same
			// CRI call now.
			if err := bed.RemoveSandbox(ctx, rec.id(name)); err != nil {
				t.Fatal(err)
			}
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			ok, _ := rec.seen(name, event)
			return ok, nil
		})
		if err != nil {
			t.Fatalf("%s never reached the NRI plugin after the pod was deleted: %v", event, err)
		}
	}
}

// connectNRI connects plugin to the bed's containerd as an NRI plugin of
// the name and index, until the test ends, and waits until the runtime has
// synchronized it (its Synchronize closes synced).
func connectNRI(t *testing.T, ctx context.Context, plugin any, name, index string, synced <-chan struct{}) {
	t.Helper()
	s, err := stub.New(plugin, stub.WithPluginName(name), stub.WithPluginIdx(index), stub.WithSocketPath(bed.NRISocket()))
	if err != nil {
		t.Fatalf("NRI stub %s: %v", name, err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("connect %s to NRI socket %s: %v", name, bed.NRISocket(), err)
	}
	t.Cleanup(s.Stop)
	select {
	case <-synced:
	case <-ctx.Done():
		t.Fatalf("the runtime never synchronized the NRI plugin %s", name)
	}
}

func (r *sandboxRecorder) id(pod string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ids[pod]
}
