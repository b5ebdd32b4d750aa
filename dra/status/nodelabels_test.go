package status

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
)

// judge is AttachableNetworks of a judgement the test sets, counting the
// judgements.
type judge struct {
	mu     sync.Mutex
	judged map[string]string
	err    error
	calls  atomic.Int32
}

func (j *judge) set(judged map[string]string, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.judged, j.err = judged, err
}

func (j *judge) Attachable(context.Context) (map[string]string, error) {
	j.calls.Add(1)
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.judged), j.err
}

// TestNodeLabels: the labels of the PodNetworks the node can attach
// appear on its Node, go when it no longer can, and no other label is
// touched; an unchanged judgement writes nothing; a new run removes at
// start the labels the last one applied that no longer hold; a failed
// apply is retried.
func TestNodeLabels(t *testing.T) {
	const node = "node-a"
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
		Labels: map[string]string{"kubernetes.io/hostname": node, pnv1.NodeLabel("by-hand"): "true"}}})
	patches := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" {
				n++
			}
		}
		return n
	}
	ctx := t.Context()
	eventually := func(what string, ok func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return ok(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	labels := func() map[string]string {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels
	}
	// labelled waits until the node's labels of PodNetworks are those of
	// names, and checks that the others are as they were.
	labelled := func(what string, names ...string) {
		t.Helper()
		want := map[string]string{"kubernetes.io/hostname": node, pnv1.NodeLabel("by-hand"): "true"}
		for _, n := range names {
			want[pnv1.NodeLabel(n)] = "true"
		}
		eventually(what, func() bool { return maps.Equal(labels(), want) })
	}
	long := strings.Repeat("n", 70)
	j := &judge{judged: map[string]string{"blue": "", "red": "PodNetwork red: plugin bridge: no executable in /opt/cni/bin", long: ""}}
	start := func() (*NodeLabels, context.CancelFunc) {
		l := NewNodeLabels(client, node, j)
		l.Period, l.Settle, l.Backoff, l.MaxBackoff = time.Hour, time.Millisecond, time.Millisecond, 10*time.Millisecond
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { l.Run(ctx); close(done) }()
		stop := func() { cancel(); <-done }
		t.Cleanup(stop)
		return l, stop
	}
	// judgedAgain has the networks judged twice more: the first
	// judgement's apply, if any, is done when the second starts.
	judgedAgain := func(l *NodeLabels) {
		t.Helper()
		for range 2 {
			before := j.calls.Load()
			l.Changed()
			eventually("judged again", func() bool { return j.calls.Load() > before })
		}
	}

	l, stop := start()
	labelled("blue and the long name", "blue", long)
	if got := pnv1.NodeLabel(long); !strings.HasPrefix(got, pnv1.NodeLabelPrefix+"h.") {
		t.Errorf("the long name's label %s", got)
	}
	before := patches()
	judgedAgain(l)
	if n := patches() - before; n != 0 {
		t.Errorf("%d writes of an unchanged judgement", n)
	}

	j.set(map[string]string{"blue": "", "green": ""}, nil)
	l.Changed()
	labelled("green added, the long name gone", "blue", "green")
	j.set(map[string]string{"green": "", "blue": "PodNetwork blue: macvlan: master ens1f0: no such interface on this node"}, nil)
	l.Changed()
	labelled("blue gone", "green")

	// A judgement that fails, then an apply: retried until they pass.
	j.set(nil, errors.New("the API server is away"))
	failures := atomic.Int32{}
	failures.Store(3)
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(-1) >= 0 {
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})
	l.Changed()
	calls := j.calls.Load()
	eventually("the failed judgement retried", func() bool { return j.calls.Load() >= calls+2 })
	j.set(map[string]string{"green": "", "blue": ""}, nil)
	labelled("blue added after failed writes", "green", "blue")
	if failures.Load() >= 0 {
		t.Errorf("%d failures left: the writes were not retried", failures.Load()+1)
	}

	// Stopped, the labels stay; the next run applies once at start, and
	// removes those that no longer hold.
	stop()
	labelled("after the run", "green", "blue")
	j.set(map[string]string{"green": ""}, nil)
	before = patches()
	l, _ = start()
	labelled("blue removed at start", "green")
	judgedAgain(l)
	if n := patches() - before; n != 1 {
		t.Errorf("%d writes at start and after, want 1", n)
	}
}
