//go:build privileged

package dra

import (
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/storewatch"
	"github.com/fastpath-dra/fastpath/test/fulldisk"
)

// nodeEvents records the events written on the node, as "type reason:
// message".
type nodeEvents struct {
	mu     sync.Mutex
	events []string
}

func (e *nodeEvents) Event(obj runtime.Object, kind, reason, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ref, ok := obj.(*corev1.ObjectReference); !ok || ref.Kind != "Node" || ref.Name != testNode {
		e.events = append(e.events, fmt.Sprintf("on %v: ", obj))
	}
	e.events = append(e.events, fmt.Sprintf("%s %s: %s", kind, reason, msg))
}

func (e *nodeEvents) Eventf(obj runtime.Object, kind, reason, format string, args ...any) {
	e.Event(obj, kind, reason, fmt.Sprintf(format, args...))
}

func (e *nodeEvents) AnnotatedEventf(obj runtime.Object, _ map[string]string, kind, reason, format string, args ...any) {
	e.Event(obj, kind, reason, fmt.Sprintf(format, args...))
}

func (e *nodeEvents) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.events
	e.events = nil
	return out
}

// TestStoreOnFullDisk: the claim store on a filesystem of its own (a
// tmpfs) that fills up. Below the room the store keeps for its writes, a
// new claim is refused before anything is done, naming the claim, the
// store's directory and what to do, while the claim prepared before is
// unprepared (its writes fit); the Node gets a Warning event and
// fastpath_store_fault is 1. On the disk full to the last block, the
// Unprepare that cannot write its record fails, and the store's fault
// names its file and ENOSPC. Once there is room again, the next look
// writes the store again (no claim is left to do it), the Node gets a
// Normal event, and the claim refused before is prepared.
func TestStoreOnFullDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	fulldisk.Tmpfs(t, dir, 1<<20)
	store, err := claims.Open(filepath.Join(dir, "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	events := &nodeEvents{}
	m := metrics.New()
	w := storewatch.New(storewatch.Options{Store: store, NodeName: testNode, Events: events, Metrics: m, MinFree: 128 << 10})
	first := testClaim("first", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"name": "net1"}, "vf": {"vlan": 10}`)))
	second := testClaim("second", []alloc{{Request: "nic", Device: vfNetdev2}}, fromClaim(config(`"interface": {"name": "net1"}, "vf": {"vlan": 20}`)))
	pf := &fakePF{}
	d, _, ctx := startTestDriverWith(t, pf, func(o *Options) {
		o.Store, o.StoreFault = store, w.Err
	}, &fakeObject{first}, &fakeObject{second})
	prepare := func(c *resourceapi.ResourceClaim) error {
		res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{c})
		return res[c.UID].Err
	}
	unprepare := func(c *resourceapi.ResourceClaim) error {
		out, _ := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: c.UID}})
		return out[c.UID]
	}
	metric := func(name string) string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Result().Body)
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, name+" ") || strings.HasPrefix(l, name+"{") {
				return l
			}
		}
		return ""
	}

	if err := prepare(first); err != nil {
		t.Fatal(err)
	}
	w.Check(ctx)
	if got := events.take(); len(got) > 0 || metric("fastpath_store_fault") != "fastpath_store_fault 0" {
		t.Fatalf("with room: events %q, %s", got, metric("fastpath_store_fault"))
	}

	// Below the room the store keeps: 64 KiB left.
	refill := fulldisk.Fill(t, dir, 64<<10)
	w.Check(ctx)
	if got := events.take(); len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+storewatch.ReasonNotWritable+": the claim store cannot be written: the filesystem of "+dir+" has") {
		t.Errorf("events on the node below the floor: %q", got)
	}
	if got := metric("fastpath_store_fault"); got != "fastpath_store_fault 1" {
		t.Errorf("below the floor: %s", got)
	}
	calls := len(pf.calls)
	err = prepare(second)
	t.Logf("refused: %v", err)
	if err == nil || !errors.Is(err, storewatch.ErrNotWritable) || !strings.Contains(err.Error(), "claim default/second: nothing done: ") ||
		!strings.Contains(err.Error(), "free space on the filesystem of "+dir) {
		t.Fatalf("prepare below the floor: %v, want it refused naming the claim and the store", err)
	}
	if _, ok := store.Get(claims.Key{Driver: claims.DriverFastpath, UID: second.UID}); ok || len(pf.calls) != calls || exists(cdiSpecPath(d.opts.CDIDir, second.UID)) {
		t.Errorf("the refused claim left a record (%v), VF settings %q or a CDI spec", ok, pf.calls[calls:])
	}
	// The claim prepared before is unprepared, and prepared again.
	if err := unprepare(first); err != nil {
		t.Fatalf("unprepare below the floor: %v", err)
	}
	if err := prepare(first); err == nil {
		t.Fatal("prepared a claim again below the floor")
	}
	refill()

	// Full to the last block, with the first claim prepared.
	w.Check(ctx)
	if err := prepare(first); err != nil {
		t.Fatal(err)
	}
	events.take()
	// The checkpoint written whole at each change (as beside a daemon of
	// the previous release): each write takes blocks of its own, where an
	// entry of the journal may fit in the last block it has.
	store.SetJournal(false)
	full := fulldisk.Fill(t, dir, 0)
	if err := unprepare(first); err == nil {
		t.Fatal("unprepared on a full disk")
	}
	t.Logf("the store's fault: %v", store.Fault())
	if err := w.Err(); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), dir+"/checkpoint.json") {
		t.Errorf("the fault on a full disk: %v, want ENOSPC naming the store's file", err)
	}
	// Every error's counter is there from the start, at 0.
	if got := metric(`fastpath_store_writes_failed_total{error="ENOSPC"}`); got == "" || strings.HasSuffix(got, " 0") {
		t.Errorf("failed writes: %q, want ENOSPC's counted", got)
	}
	if got := metric(`fastpath_store_writes_failed_total{error="EIO"}`); got != `fastpath_store_writes_failed_total{error="EIO"} 0` {
		t.Errorf("failed writes: %q, want EIO's at 0", got)
	}
	w.Check(ctx)
	if got := events.take(); len(got) != 1 || !strings.Contains(got[0], "no space left on device") {
		t.Errorf("events on the node on a full disk: %q", got)
	}
	full()
	w.Check(ctx)
	if store.Fault() != nil || w.Err() != nil {
		t.Errorf("with room again, after a look: the store's fault %v, the watcher's %v", store.Fault(), w.Err())
	}
	if got := events.take(); len(got) != 1 || !strings.HasPrefix(got[0], "Normal "+storewatch.ReasonWritable+": ") {
		t.Errorf("events on the node with room again: %q", got)
	}
	if got := metric("fastpath_store_fault"); got != "fastpath_store_fault 0" {
		t.Errorf("with room again: %s", got)
	}
	if err := unprepare(first); err != nil {
		t.Fatalf("the kubelet's next Unprepare: %v", err)
	}
	if err := prepare(second); err != nil {
		t.Fatalf("prepare with room again: %v", err)
	}
	if _, err := os.Stat(cdiSpecPath(d.opts.CDIDir, second.UID)); err != nil {
		t.Error(err)
	}
}
