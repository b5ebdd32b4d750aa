package dra

import (
	"context"
	"testing"
	"time"

	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// heldBinder is a PCI binder whose vfio binds wait until the test lets
// them go, telling it when one started.
type heldBinder struct {
	PCIBinder
	started chan struct{}
	release chan struct{}
}

func (b *heldBinder) BindVFIO(ctx context.Context, addr string, group int) error {
	close(b.started)
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.PCIBinder.BindVFIO(ctx, addr, group)
}

// TestPreparesAtOnce: the kubelet's calls for different pods run at once,
// with rolling updates on (the helper's serialization off): while one
// claim's Prepare waits in its vfio bind, another claim's Prepare and
// Unprepare answer; a Reconcile (another daemon of the node starting)
// waits for the Prepare under way, and Prepares for it.
func TestPreparesAtOnce(t *testing.T) {
	slow := testClaim("slow", []alloc{{Request: "dpdk", Device: vfVFIO}}, fromClaim(config(`"mode": "vfio"`)))
	quick := testClaim("quick", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaimFor("nic", config(`"interface": {"name": "net1"}`)))
	d, k, ctx := startTestDriverWith(t, &fakePF{}, func(o *Options) { o.PodUID = "daemon-pod-1" }, &fakeObject{slow}, &fakeObject{quick})
	binder := &heldBinder{PCIBinder: d.Driver.opts.PCI, started: make(chan struct{}), release: make(chan struct{})}
	d.Driver.opts.PCI = binder

	prepare := func(c *fakeObject) (string, error) {
		resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{
			{Namespace: c.claim.Namespace, Name: c.claim.Name, Uid: string(c.claim.UID)}}})
		if err != nil {
			return "", err
		}
		return resp.Claims[string(c.claim.UID)].Error, nil
	}
	slowDone := make(chan error, 1)
	go func() {
		msg, err := prepare(&fakeObject{slow})
		if err == nil && msg != "" {
			err = errorString(msg)
		}
		slowDone <- err
	}()
	select {
	case <-binder.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow claim's Prepare never reached its vfio bind")
	}

	if msg, err := prepare(&fakeObject{quick}); err != nil || msg != "" {
		t.Fatalf("the other claim's Prepare while the first waits: %v %s", err, msg)
	}
	if c, ok := d.store.Get(claims.Key{Driver: claims.DriverFastpath, UID: quick.UID}); !ok || !c.Prepared {
		t.Fatalf("the other claim is not recorded prepared: %+v", c)
	}
	unprepare(t, ctx, k, quick)

	// A starting daemon's Reconcile waits for the Prepare under way.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := d.Reconcile(short)
	cancel()
	if err == nil {
		t.Fatal("Reconcile ran while a Prepare was under way")
	}
	select {
	case err := <-slowDone:
		t.Fatalf("the slow Prepare ended (%v) before Reconcile could be shown to wait", err)
	default:
	}
	close(binder.release)
	if err := <-slowDone; err != nil {
		t.Fatalf("the slow claim: %v", err)
	}
	if err := d.Reconcile(ctx); err != nil {
		t.Fatalf("Reconcile once the Prepare ended: %v", err)
	}
	if c, ok := d.store.Get(claims.Key{Driver: claims.DriverFastpath, UID: slow.UID}); !ok || !c.Prepared {
		t.Fatalf("the slow claim after Reconcile: %+v", c)
	}
	unprepare(t, ctx, k, slow)
}

type errorString string

func (e errorString) Error() string { return string(e) }
