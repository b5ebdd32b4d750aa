package nri

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	cni100 "github.com/containernetworking/cni/pkg/types/100"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// fakeCNI plays libcni: networks are added in memory; STATUS and CHECK
// fail with the errors set.
type fakeCNI struct {
	mu                  sync.Mutex
	calls               []string
	statusErr, checkErr error
	cached              []dataplane.CNIAttachment
	gcConflist          []string
	gcValid             [][]dataplane.CNIAttachment
}

var _ CNI = (*fakeCNI)(nil)

func (f *fakeCNI) log(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakeCNI) Add(_ context.Context, n dataplane.CNINetwork) (dataplane.CNIResult, error) {
	f.log("ADD " + n.ContainerID)
	return dataplane.CNIResult{Raw: []byte(`{"cniVersion":"1.1.0"}`), Current: &cni100.Result{CNIVersion: "1.1.0"}}, nil
}

func (f *fakeCNI) Added(_ context.Context, n dataplane.CNINetwork) (dataplane.CNIResult, bool, error) {
	return dataplane.CNIResult{Raw: []byte(`{"cniVersion":"1.1.0"}`), Current: &cni100.Result{CNIVersion: "1.1.0"}}, true, nil
}

func (f *fakeCNI) Cached(ctx context.Context, n dataplane.CNINetwork) (dataplane.CNIResult, bool, error) {
	return f.Added(ctx, n)
}

func (f *fakeCNI) Del(_ context.Context, n dataplane.CNINetwork) error {
	f.log("DEL " + n.ContainerID)
	return nil
}

func (f *fakeCNI) Status(context.Context, dataplane.CNINetwork) error {
	f.log("STATUS")
	return f.statusErr
}

func (f *fakeCNI) Check(_ context.Context, n dataplane.CNINetwork) error {
	f.log("CHECK " + n.ContainerID)
	return f.checkErr
}

func (f *fakeCNI) Attachments() ([]dataplane.CNIAttachment, error) { return f.cached, nil }

func (f *fakeCNI) GC(_ context.Context, conflist []byte, valid []dataplane.CNIAttachment) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gcConflist = append(f.gcConflist, string(conflist))
	f.gcValid = append(f.gcValid, valid)
	return nil
}

const verbsPod = "pod-verbs"

// verbsRig is a plugin over a store holding one CNI claim whose network
// read secret from a ConfigMap.
func verbsRig(t *testing.T) (*Plugin, *fakeCNI, *fake.Clientset, claims.Claim) {
	t.Helper()
	store, err := claims.Open(filepath.Join(t.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	c := claims.Claim{Driver: claims.DriverCNI, UID: "uid-net", Namespace: "default", Name: "net", Prepared: true,
		Pod: claims.Pod{UID: verbsPod, Name: verbsPod},
		Networks: []claims.Network{{Request: "a", Pool: "node", Device: "cni-0", IfName: "net1",
			Conflist: []byte(`{"cniVersion":"1.1.0","name":"default-net-a","plugins":[{"type":"macvlan","mode":"s3cret"}]}`), Redact: []string{"s3cret"}}}}
	if err := store.Admit(c); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "net", UID: "uid-net"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "a", Driver: claims.DriverCNI, Pool: "node", Device: "cni-0"}}}}}})
	_, ctx := ktesting.NewTestContext(t)
	writer := status.NewWriter(client)
	writer.Start(ctx)
	f := &fakeCNI{}
	return New(Options{Store: store, Status: writer, CNI: f, DelBackoff: time.Millisecond}), f, client, c
}

func deviceStatus(t *testing.T, ctx context.Context, client *fake.Clientset, want func(resourceapi.AllocatedDeviceStatus) bool) resourceapi.AllocatedDeviceStatus {
	t.Helper()
	var last resourceapi.AllocatedDeviceStatus
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		claim, err := client.ResourceV1().ResourceClaims("default").Get(ctx, "net", metav1.GetOptions{})
		if err != nil || len(claim.Status.Devices) != 1 {
			return false, nil
		}
		last = claim.Status.Devices[0]
		return want(last), nil
	})
	if err != nil {
		t.Fatalf("claim status %+v never came", last)
	}
	return last
}

func condition(st resourceapi.AllocatedDeviceStatus, typ string) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			return &st.Conditions[i]
		}
	}
	return nil
}

// A plugin whose STATUS fails is not asked to ADD; the sandbox fails, and
// neither its error nor the claim's status shows a ConfigMap's value.
func TestStatusBeforeAdd(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	p, f, client, _ := verbsRig(t)
	f.statusErr = errors.New(`plugin type="macvlan": not ready: mode "s3cret" has no addresses left`)
	err := p.AttachPod(ctx, Pod{UID: verbsPod, Namespace: "default", Name: verbsPod, SandboxID: "sb1", NetNS: "/run/netns/x"})
	if err == nil || !strings.Contains(err.Error(), "STATUS: the plugins cannot add networks now") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("AttachPod with STATUS failing: %v", err)
	}
	if slices.Contains(f.calls, "ADD sb1") {
		t.Errorf("ADD ran after STATUS failed: %v", f.calls)
	}
	st := deviceStatus(t, ctx, client, func(st resourceapi.AllocatedDeviceStatus) bool { return len(st.Conditions) > 0 })
	if c := condition(st, "Ready"); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "<redacted>") || strings.Contains(c.Message, "s3cret") {
		t.Errorf("status %+v", st.Conditions)
	}
	f.statusErr = nil
	if err := p.AttachPod(ctx, Pod{UID: verbsPod, Namespace: "default", Name: verbsPod, SandboxID: "sb1", NetNS: "/run/netns/x"}); err != nil {
		t.Fatal(err)
	}
	if i, j := slices.Index(f.calls, "STATUS"), slices.Index(f.calls, "ADD sb1"); i < 0 || j < i {
		t.Errorf("calls %v: STATUS, then ADD", f.calls)
	}
}

// CHECK's outcome is the condition Healthy beside Ready, written when it
// changes, without a ConfigMap's value.
func TestCheckNetworks(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	p, f, client, _ := verbsRig(t)
	if err := p.AttachPod(ctx, Pod{UID: verbsPod, Namespace: "default", Name: verbsPod, SandboxID: "sb1", NetNS: "/run/netns/x"}); err != nil {
		t.Fatal(err)
	}
	reported := map[checkKey]string{}
	p.CheckOnce(ctx, reported)
	st := deviceStatus(t, ctx, client, func(st resourceapi.AllocatedDeviceStatus) bool { return condition(st, "Healthy") != nil })
	if c := condition(st, "Healthy"); c.Status != metav1.ConditionTrue || c.Reason != "CNICheckPassed" || condition(st, "Ready").Status != metav1.ConditionTrue {
		t.Errorf("after a passing CHECK: %+v", st.Conditions)
	}
	writes := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "update" && a.GetSubresource() == "status" {
				n++
			}
		}
		return n
	}
	p.opts.Status.Wait()
	before := writes()
	p.CheckOnce(ctx, reported)
	p.opts.Status.Wait()
	if writes() != before {
		t.Errorf("an unchanged CHECK outcome was written again")
	}
	f.checkErr = fmt.Errorf(`plugin type="macvlan" failed (check): mode "s3cret": interface net1 is gone`)
	p.CheckOnce(ctx, reported)
	st = deviceStatus(t, ctx, client, func(st resourceapi.AllocatedDeviceStatus) bool {
		return condition(st, "Healthy") != nil && condition(st, "Healthy").Status == metav1.ConditionFalse
	})
	if c := condition(st, "Healthy"); c.Reason != "CNICheckFailed" || !strings.Contains(c.Message, "interface net1 is gone") || strings.Contains(c.Message, "s3cret") {
		t.Errorf("after a failing CHECK: %+v", c)
	}
	f.checkErr = fmt.Errorf("configuration version %q %w", "0.3.1", dataplane.ErrCheckNotSupported)
	p.CheckOnce(ctx, reported)
	st = deviceStatus(t, ctx, client, func(st resourceapi.AllocatedDeviceStatus) bool {
		return condition(st, "Healthy") != nil && condition(st, "Healthy").Status == metav1.ConditionUnknown
	})
	if c := condition(st, "Healthy"); c.Reason != "CNICheckNotSupported" {
		t.Errorf("CHECK not supported: %+v", c)
	}
	// Networks no longer added are not checked.
	if err := p.DetachPod(ctx, Pod{UID: verbsPod}); err != nil {
		t.Fatal(err)
	}
	f.calls = nil
	p.CheckOnce(ctx, reported)
	if len(f.calls) != 0 || len(reported) != 0 {
		t.Errorf("CHECK of a network not added: %v, %v", f.calls, reported)
	}
}

// GC deletes the cached attachments no claim records whose sandbox is
// gone, keeping those of running sandboxes and recorded ones.
func TestCollectGarbage(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	p, f, _, c := verbsRig(t)
	if err := p.AttachPod(ctx, Pod{UID: verbsPod, Namespace: "default", Name: verbsPod, SandboxID: "sb1", NetNS: "/run/netns/x"}); err != nil {
		t.Fatal(err)
	}
	other := []byte(`{"cniVersion":"1.0.0","name":"gone-claim-a","plugins":[{"type":"macvlan"}]}`)
	quiet := []byte(`{"cniVersion":"1.0.0","name":"quiet-claim-a","plugins":[{"type":"macvlan"}]}`)
	f.cached = []dataplane.CNIAttachment{
		{Network: "default-net-a", ContainerID: "sb1", IfName: "net1", Conflist: c.Networks[0].Conflist}, // recorded
		{Network: "default-net-a", ContainerID: "sb0", IfName: "net1", Conflist: c.Networks[0].Conflist}, // an earlier sandbox of it
		{Network: "gone-claim-a", ContainerID: "sb7", IfName: "net1", Conflist: other},                   // a claim forgotten
		{Network: "gone-claim-a", ContainerID: "sb8", IfName: "net1", Conflist: other},                   // running, unknown
		{Network: "quiet-claim-a", ContainerID: "sb8", IfName: "net2", Conflist: quiet},                  // running, unknown
	}
	p.CollectGarbage(ctx, []*api.PodSandbox{{Id: "sb8"}, {Id: "sb1"}})
	if len(f.gcConflist) != 2 {
		t.Fatalf("GC of %d networks, want the 2 with stale attachments: %v", len(f.gcConflist), f.gcConflist)
	}
	if f.gcConflist[0] != string(c.Networks[0].Conflist) || len(f.gcValid[0]) != 1 || f.gcValid[0][0].ContainerID != "sb1" {
		t.Errorf("GC of the claim's network: %s, valid %+v", f.gcConflist[0], f.gcValid[0])
	}
	if f.gcConflist[1] != string(other) || len(f.gcValid[1]) != 1 || f.gcValid[1][0].ContainerID != "sb8" {
		t.Errorf("GC of a forgotten claim's network: %s, valid %+v", f.gcConflist[1], f.gcValid[1])
	}
	// Only at the first connection.
	p.setConnected(true)
	p.CollectGarbage(ctx, nil)
	if len(f.gcConflist) != 2 {
		t.Errorf("GC ran again after the first Synchronize")
	}
}
