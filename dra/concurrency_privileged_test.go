//go:build privileged

package dra_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// slowBinder is a PCI binder whose vfio binds wait for the test (at most
// 3 s), telling it when one started.
type slowBinder struct {
	dra.PCIBinder
	started chan struct{}
	release chan struct{}
}

func (b *slowBinder) BindVFIO(ctx context.Context, addr string, group int) error {
	close(b.started)
	select {
	case <-b.release:
	case <-time.After(3 * time.Second):
	}
	return b.PCIBinder.BindVFIO(ctx, addr, group)
}

// TestHookDuringSlowPrepare: while one claim's Prepare waits in a vfio
// bind, another pod's RunPodSandbox hook for a claim prepared before
// completes: each claim has its own lock, and the hooks read the store in
// memory.
func TestHookDuringSlowPrepare(t *testing.T) {
	slow := testClaim("slow", []alloc{{Request: "dpdk", Device: vfNetdev}}, fromClaim(config(`"mode": "vfio"`)))
	d, k, ctx := startTestDriver(t, dra.NewFakeObject(slow))
	binder := &slowBinder{PCIBinder: d.DriverOptions().PCI, started: make(chan struct{}), release: make(chan struct{})}
	d.DriverOptions().PCI = binder

	// Another pod's claim, prepared: a veth standing in for its VF.
	name := fmt.Sprintf("fpc%d", os.Getpid()%100000)
	host := netnstest.Veth(t, name+"a", name+"b")
	ready := claims.Claim{Driver: claims.DriverFastpath, UID: "uid-ready", Namespace: "default", Name: "ready", Prepared: true,
		Pod: claims.Pod{UID: "pod-ready", Name: "ready"},
		Devices: []claims.Device{{Request: "nic", Pool: testNode, Device: "netdev-" + host.Attrs().Name, Mode: "netdev",
			Host: &claims.HostNetdev{Name: host.Attrs().Name, MTU: host.Attrs().MTU, MAC: host.Attrs().HardwareAddr.String()},
			Pod:  &claims.PodInterface{Name: "net1", Addresses: []string{"10.68.0.2/24"}}}}}
	if err := d.Store().Admit(ready); err != nil {
		t.Fatal(err)
	}
	attacher, err := dataplane.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = attacher.Close() })
	plugin := nri.New(nri.Options{Store: d.Store(), Attacher: attacher, Status: d.Opts().Status})
	podNS := netnstest.New(t, name)

	prepared := make(chan string, 1)
	go func() {
		resp, err := k.DRA().NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{
			{Namespace: slow.Namespace, Name: slow.Name, Uid: string(slow.UID)}}})
		if err != nil {
			prepared <- err.Error()
			return
		}
		prepared <- resp.Claims[string(slow.UID)].Error
	}()
	select {
	case <-binder.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow claim's Prepare never reached its vfio bind")
	}
	start := time.Now()
	err = plugin.AttachPod(ctx, nri.Pod{UID: types.UID("pod-ready"), Namespace: "default", Name: "ready", SandboxID: "s1", NetNS: podNS})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-prepared:
		t.Fatalf("the slow Prepare finished (%q) before the hook could be shown not to wait for it", msg)
	default:
	}
	t.Logf("the hook took %v while another claim's Prepare waited in its vfio bind", took)
	if took > 100*time.Millisecond {
		t.Errorf("the hook took %v, want under 100ms", took)
	}
	close(binder.release)
	if msg := <-prepared; msg != "" {
		t.Fatalf("the slow claim: %s", msg)
	}
	if err := plugin.DetachPod(ctx, nri.Pod{UID: "pod-ready", NetNS: podNS}); err != nil {
		t.Fatal(err)
	}
	unprepare(t, ctx, k, slow)
}
