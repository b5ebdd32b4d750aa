package nri

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// fakeIPAMClaims is an API server of IPAMClaims and pods: writes at an
// old resourceVersion conflict, as the real one's do.
type fakeIPAMClaims struct {
	mu     sync.Mutex
	claims map[string]*npwg.IPAMClaim // namespace/name
	pods   map[string]*corev1.Pod
	writes int
	// failWrites fails the next writes of a status.
	failWrites int
	// node is the node of the writer, as the chart's admission policy
	// reads it from its token: "" for none.
	node string
}

func newFakeIPAMClaims() *fakeIPAMClaims {
	return &fakeIPAMClaims{claims: map[string]*npwg.IPAMClaim{}, pods: map[string]*corev1.Pod{}}
}

func (f *fakeIPAMClaims) add(namespace, name, network string, ips ...string) *npwg.IPAMClaim {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &npwg.IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name + "-" + strconv.Itoa(len(f.claims))), ResourceVersion: "1"},
		Spec: npwg.IPAMClaimSpec{Network: network}, Status: npwg.IPAMClaimStatus{IPs: ips}}
	f.claims[namespace+"/"+name] = c
	return c
}

func (f *fakeIPAMClaims) get(namespace, name string) *npwg.IPAMClaim {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.claims[namespace+"/"+name]; ok {
		cp := *c
		return &cp
	}
	return nil
}

func (f *fakeIPAMClaims) remove(namespace, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.claims, namespace+"/"+name)
}

func (f *fakeIPAMClaims) setPod(pod Pod, phase corev1.PodPhase) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[pod.Namespace+"/"+pod.Name] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Status: corev1.PodStatus{Phase: phase}}
}

func (f *fakeIPAMClaims) deletePod(pod Pod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pods, pod.Namespace+"/"+pod.Name)
}

func (f *fakeIPAMClaims) GetIPAMClaim(_ context.Context, namespace, name string) (*npwg.IPAMClaim, error) {
	if c := f.get(namespace, name); c != nil {
		return c, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "k8s.cni.cncf.io", Resource: "ipamclaims"}, name)
}

func (f *fakeIPAMClaims) UpdateIPAMClaimStatus(_ context.Context, claim *npwg.IPAMClaim) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	gr := schema.GroupResource{Group: "k8s.cni.cncf.io", Resource: "ipamclaims"}
	cur, ok := f.claims[claim.Namespace+"/"+claim.Name]
	switch {
	case !ok:
		return apierrors.NewNotFound(gr, claim.Name)
	case cur.ResourceVersion != claim.ResourceVersion:
		return apierrors.NewConflict(gr, claim.Name, errors.New("the object has been modified"))
	case f.failWrites > 0:
		f.failWrites--
		return apierrors.NewServiceUnavailable("etcd is away")
	case len(cur.Status.IPs) > 0 && !slices.Equal(cur.Status.IPs, claim.Status.IPs):
		// The chart's admission policy.
		return apierrors.NewForbidden(gr, claim.Name, errors.New("status.ips are set once"))
	case f.node != "" && npwg.HeldOn(cur) != "" && npwg.HeldOn(cur) != f.node:
		return apierrors.NewForbidden(gr, claim.Name, fmt.Errorf("held on node %s", npwg.HeldOn(cur)))
	}
	rv, _ := strconv.Atoi(cur.ResourceVersion)
	next := *cur
	next.Status, next.ResourceVersion = claim.Status, strconv.Itoa(rv+1)
	f.claims[claim.Namespace+"/"+claim.Name] = &next
	f.writes++
	return nil
}

func (f *fakeIPAMClaims) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.pods[namespace+"/"+name]; ok {
		cp := *p
		return &cp, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
}

// ipamPool gives two addresses, 10.94.0.10 and .11.
var ipamPool = v1alpha1.IPPool{Name: "tenant", Subnet: "10.94.0.0/24", RangeStart: "10.94.0.10", RangeEnd: "10.94.0.11"}

type ipamRig struct {
	*npwgRig
	api *fakeIPAMClaims
}

// newIPAMRig is the NPWG rig with IPAMClaims: default/pooled names the
// pool, default/net-a none.
func newIPAMRig(t *testing.T, cls ...claims.Claim) *ipamRig {
	t.Helper()
	r := &ipamRig{npwgRig: newNPWGRig(t, cls...), api: newFakeIPAMClaims()}
	r.api.node = "node-a"
	pooled := nad("default", "pooled", fmt.Sprintf(macvlanConf, "pooled"))
	pooled.Annotations = map[string]string{npwg.IPPoolAnnotation: "tenant"}
	nads := r.plugin.opts.NPWG.NADs.(fakeNADs)
	nads["default/pooled"] = pooled
	nowhere := nad("default", "nowhere", fmt.Sprintf(macvlanConf, "nowhere"))
	nowhere.Annotations = map[string]string{npwg.IPPoolAnnotation: "missing"}
	nads["default/nowhere"] = nowhere
	r.plugin.opts.NPWG.IPAMClaims = NewIPAMClaimOptions(r.api, "node-a", map[string]v1alpha1.IPPool{"tenant": ipamPool}, time.Hour)
	return r
}

func ipamPod(uid, name, networks string) Pod {
	p := npwgPod(networks)
	p.UID, p.Name, p.SandboxID = types.UID(uid), name, "sandbox-"+uid
	return p
}

func (r *ipamRig) ips(t *testing.T, ifName string) string {
	t.Helper()
	return fmt.Sprint(r.cni.added[ifName].CapabilityArgs["ips"])
}

// TestIPAMClaimPool: an IPAMClaim of a network that names a node pool
// gets the pool's lowest free address, recorded before ADD and written to
// its status with its owner; the pod deleted and created again gets the
// same address; the address is not given to another IPAMClaim until the
// first is deleted, and is then.
func TestIPAMClaimPool(t *testing.T) {
	r := newIPAMRig(t)
	r.api.add("default", "vm-a", "pooled")
	r.api.add("default", "vm-b", "pooled")
	r.api.add("default", "vm-c", "pooled")
	pod := ipamPod("uid-1", "virt-launcher-1", `[{"name":"pooled","ipam-claim-reference":"vm-a"}]`)
	r.api.setPod(pod, corev1.PodRunning)
	if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := r.ips(t, "net1"); got != "[10.94.0.10/24]" {
		t.Errorf("ips capability %s, want [10.94.0.10/24]", got)
	}
	c := r.api.get("default", "vm-a")
	if !slices.Equal(c.Status.IPs, []string{"10.94.0.10/24"}) || c.Status.OwnerPod == nil || c.Status.OwnerPod.Name != pod.Name {
		t.Errorf("IPAMClaim status %+v, want its address and owner %s", c.Status, pod.Name)
	}
	rec, ok := r.store.Get(ipamClaimKey(c.UID))
	if !ok || !rec.Prepared || rec.Pod.UID != pod.UID || len(rec.Devices) != 1 || rec.Devices[0].IPAM.Address != "10.94.0.10/24" {
		t.Fatalf("record %+v, want held by the pod with its lease", rec)
	}

	// The pod goes: the address stays the IPAMClaim's.
	if err := r.plugin.DetachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	r.api.deletePod(pod)
	r.plugin.CheckIPAMClaims(r.ctx)
	if rec, ok := r.store.Get(ipamClaimKey(c.UID)); !ok || rec.Prepared || len(rec.Devices) != 1 {
		t.Fatalf("record %+v (%v) after the pod went, want it kept, held by no pod", rec, ok)
	}
	// Another IPAMClaim meanwhile gets the next address.
	other := ipamPod("uid-2", "virt-launcher-2", `[{"name":"pooled","ipam-claim-reference":"vm-b"}]`)
	r.api.setPod(other, corev1.PodRunning)
	if err := r.plugin.AttachPod(r.ctx, other); err != nil {
		t.Fatal(err)
	}
	if got := r.ips(t, "net1"); got != "[10.94.0.11/24]" {
		t.Errorf("the other IPAMClaim's ips %s, want [10.94.0.11/24]", got)
	}
	if err := r.plugin.DetachPod(r.ctx, other); err != nil {
		t.Fatal(err)
	}
	// The pod again, under a new UID: the same address.
	again := ipamPod("uid-3", "virt-launcher-1", `[{"name":"pooled","ipam-claim-reference":"vm-a"}]`)
	r.api.setPod(again, corev1.PodRunning)
	if err := r.plugin.AttachPod(r.ctx, again); err != nil {
		t.Fatal(err)
	}
	if got := r.ips(t, "net1"); got != "[10.94.0.10/24]" {
		t.Errorf("ips capability of the pod created again %s, want [10.94.0.10/24]", got)
	}
	if err := r.plugin.DetachPod(r.ctx, again); err != nil {
		t.Fatal(err)
	}

	// The pool is full: a third IPAMClaim is refused until one is deleted.
	third := ipamPod("uid-4", "virt-launcher-3", `[{"name":"pooled","ipam-claim-reference":"vm-c"}]`)
	r.api.setPod(third, corev1.PodRunning)
	err := r.plugin.AttachPod(r.ctx, third)
	if err == nil || !strings.Contains(err.Error(), "no free address") {
		t.Fatalf("error %v, want the pool full", err)
	}
	r.plugin.CheckIPAMClaims(r.ctx)
	if err := r.plugin.AttachPod(r.ctx, third); err == nil {
		t.Fatal("an address was released while its IPAMClaim exists")
	}
	r.api.remove("default", "vm-a")
	r.plugin.CheckIPAMClaims(r.ctx)
	if _, ok := r.store.Get(ipamClaimKey(c.UID)); ok {
		t.Fatal("the record of a deleted IPAMClaim was kept")
	}
	if err := r.plugin.AttachPod(r.ctx, third); err != nil {
		t.Fatal(err)
	}
	if got := r.ips(t, "net1"); got != "[10.94.0.10/24]" {
		t.Errorf("ips of the third IPAMClaim %s, want the released [10.94.0.10/24]", got)
	}
}

// TestIPAMClaimInterrupted: a status write that fails after the address
// was recorded fails the pod; the next attempt gives the same address.
func TestIPAMClaimInterrupted(t *testing.T) {
	r := newIPAMRig(t)
	c := r.api.add("default", "vm-a", "pooled")
	pod := ipamPod("uid-1", "virt-launcher-1", `[{"name":"pooled","ipam-claim-reference":"vm-a"}]`)
	r.api.setPod(pod, corev1.PodRunning)
	r.api.failWrites = 1
	if err := r.plugin.AttachPod(r.ctx, pod); err == nil || !strings.Contains(err.Error(), "write the status of IPAMClaim default/vm-a") {
		t.Fatalf("error %v, want the status write's", err)
	}
	if len(r.cni.order) != 0 {
		t.Errorf("CNI ran before the IPAMClaim's status was written: %v", r.cni.order)
	}
	if rec, ok := r.store.Get(ipamClaimKey(c.UID)); !ok || len(rec.Devices) != 1 {
		t.Fatalf("record %+v: want the address kept for the next attempt", rec)
	}
	r.plugin.CheckIPAMClaims(r.ctx)
	if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := r.ips(t, "net1"); got != "[10.94.0.10/24]" {
		t.Errorf("ips %s, want [10.94.0.10/24]", got)
	}
}

// TestIPAMClaimStatusIPs: an IPAMClaim with addresses gives them, and a
// network without a pool gets them as they are; one without addresses
// gets those the network's IPAM gave, written back after ADD.
func TestIPAMClaimStatusIPs(t *testing.T) {
	r := newIPAMRig(t)
	r.api.add("default", "vm-a", "net-a", "10.1.0.77/24")
	r.api.add("default", "vm-b", "default/net-b")
	pod := ipamPod("uid-1", "virt-launcher-1", `[{"name":"net-a","ipam-claim-reference":"vm-a"},{"name":"net-b","ipam-claim-reference":"vm-b"}]`)
	r.api.setPod(pod, corev1.PodRunning)
	if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	r.plugin.reports.Wait()
	if got := r.ips(t, "net1"); got != "[10.1.0.77/24]" {
		t.Errorf("ips capability %s, want the IPAMClaim's [10.1.0.77/24]", got)
	}
	if args := r.cni.added["net2"].CapabilityArgs; args["ips"] != nil {
		t.Errorf("the network's IPAM was given %v, want nothing: it allocates", args)
	}
	b := r.api.get("default", "vm-b")
	if len(b.Status.IPs) != 1 || !strings.HasPrefix(b.Status.IPs[0], "10.1.0.") || b.Status.OwnerPod.Name != pod.Name {
		t.Errorf("status of the IPAMClaim the IPAM allocated for: %+v, want the result's address and the owner", b.Status)
	}
	if rec, ok := r.store.Get(npwgKey(pod.UID)); !ok || rec.Networks[0].IPAMClaim != "vm-a" {
		t.Errorf("record %+v, want the network's IPAMClaim", rec)
	}
}

// TestIPAMClaimRefused: what may not be is refused with an error naming
// the pod, the element and what is wrong, and nothing is added.
func TestIPAMClaimRefused(t *testing.T) {
	r := newIPAMRig(t)
	r.api.add("default", "vm-a", "pooled")
	r.api.add("default", "other-net", "net-b")
	r.api.add("default", "held", "net-a").Status.OwnerPod = &npwg.OwnerPod{Name: "elsewhere"}
	r.api.setPod(Pod{Namespace: "default", Name: "elsewhere", UID: "uid-elsewhere"}, corev1.PodRunning)
	holder := ipamPod("uid-1", "virt-launcher-1", `[{"name":"pooled","ipam-claim-reference":"vm-a"}]`)
	r.api.setPod(holder, corev1.PodRunning)
	if err := r.plugin.AttachPod(r.ctx, holder); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		networks string
		want     []string
		is       error
	}{
		"a second pod at once": {`[{"name":"pooled","ipam-claim-reference":"vm-a"}]`,
			[]string{"element 0", "ipam-claim-reference \"vm-a\"", "held by pod default/virt-launcher-1"}, ErrIPAMClaimHeld},
		"an owner on another node": {`[{"name":"net-a","ipam-claim-reference":"held"}]`,
			[]string{"held by pod default/elsewhere (status.ownerPod)"}, ErrIPAMClaimHeld},
		"another network's IPAMClaim": {`[{"name":"net-a","ipam-claim-reference":"other-net"}]`,
			[]string{`spec.network "net-b"`, "default/net-a"}, npwg.ErrIPAMClaimMismatch},
		"no such IPAMClaim": {`[{"name":"net-a","ipam-claim-reference":"none"}]`,
			[]string{"IPAMClaim default/none not found"}, nil},
		"a plugin without the ips capability": {`[{"name":"plain","ipam-claim-reference":"vm-a"}]`,
			[]string{`capability "ips"`, "macvlan"}, npwg.ErrCapability},
		"a pool the node lacks": {`[{"name":"nowhere","ipam-claim-reference":"vm-a"}]`,
			[]string{`IP pool "missing"`, npwg.IPPoolAnnotation}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			pod := ipamPod("uid-2", "virt-launcher-2", tc.networks)
			r.api.setPod(pod, corev1.PodRunning)
			r.cni.order = nil
			err := r.plugin.AttachPod(r.ctx, pod)
			if err == nil {
				t.Fatal("attached")
			}
			for _, want := range append(tc.want, "pod default/virt-launcher-2", nadAnnot) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if len(r.cni.order) != 0 {
				t.Errorf("CNI ran: %v", r.cni.order)
			}
		})
	}
	// The holder gone without its teardown (killed, its sandbox never
	// stopped): another pod takes the IPAMClaim over.
	r.api.deletePod(holder)
	if err := r.store.Delete(npwgKey(holder.UID)); err != nil {
		t.Fatal(err)
	}
	pod := ipamPod("uid-2", "virt-launcher-1", `[{"name":"pooled","ipam-claim-reference":"vm-a"}]`)
	r.api.setPod(pod, corev1.PodRunning)
	if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
}

const nadAnnot = "k8s.v1.cni.cncf.io/networks"

// TestIPAMClaimsOff: without the option, a reference is the network's
// plugins' to read, as before.
func TestIPAMClaimsOff(t *testing.T) {
	r := newNPWGRig(t)
	if err := r.plugin.AttachPod(r.ctx, npwgPod(`[{"name":"net-a","ipam-claim-reference":"vm-a"}]`)); err != nil {
		t.Fatal(err)
	}
	if args := r.cni.added["net1"].CapabilityArgs; args["ips"] != nil {
		t.Errorf("capability args %v, want none", args)
	}
}

// TestIPAMClaimSkipsStaticAddress: an address of the pool that a claim
// gives its pod's interface statically is held: an IPAMClaim gets the
// next one.
func TestIPAMClaimSkipsStaticAddress(t *testing.T) {
	static := claims.Claim{Driver: claims.DriverFastpath, UID: "uid-static", Namespace: "default", Name: "static", Prepared: true,
		Pod:     claims.Pod{UID: "pod-static", Name: "other"},
		Devices: []claims.Device{{Request: "nic", Pool: "node", Device: "pci-0", Pod: &claims.PodInterface{Name: "net1", Addresses: []string{"10.94.0.10/24"}}}}}
	// A CNI claim's static address on a shared parent is held too.
	cni := claims.Claim{Driver: claims.DriverCNI, UID: "uid-cni", Namespace: "default", Name: "cni", Prepared: true,
		Pod: claims.Pod{UID: "pod-cni", Name: "another"},
		Networks: []claims.Network{{Request: "a", Pool: "node", Device: "cni-0", IfName: "net1",
			Conflist: []byte(`{"plugins": [{"type": "macvlan", "master": "eth9", "ipam": {"type": "static", "addresses": [{"address": "10.94.0.10/24"}]}}]}`)}}}
	for _, holder := range []claims.Claim{static, cni} {
		t.Run(holder.Name, func(t *testing.T) {
			r := newIPAMRig(t, holder)
			r.api.add("default", "vm-a", "pooled")
			pod := ipamPod("uid-1", "virt-launcher-1", `[{"name":"pooled","ipam-claim-reference":"vm-a"}]`)
			r.api.setPod(pod, corev1.PodRunning)
			if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
				t.Fatal(err)
			}
			if got := r.ips(t, "net1"); got != "[10.94.0.11/24]" {
				t.Errorf("ips capability %s, want [10.94.0.11/24]: 10.94.0.10 is claim default/%s's", got, holder.Name)
			}
		})
	}
}

// The node's IPAMClaim writes name it (status condition
// npwg.IPAMClaimNodeCondition), as the admission policies require; once
// no pod of the node holds the IPAMClaim, the node lets it go. One a
// pod of another node holds is refused, without a write, until that node
// let it go.
func TestIPAMClaimNode(t *testing.T) {
	r := newIPAMRig(t)
	r.api.add("default", "vm-a", "pooled")
	pod := ipamPod("uid-1", "virt-launcher-1", `[{"name":"pooled","ipam-claim-reference":"vm-a"}]`)
	r.api.setPod(pod, corev1.PodRunning)
	if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if c := r.api.get("default", "vm-a"); npwg.HeldOn(c) != "node-a" {
		t.Fatalf("IPAMClaim status %+v, want it held on node-a", c.Status)
	}
	if err := r.plugin.DetachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	r.api.deletePod(pod)
	r.plugin.CheckIPAMClaims(r.ctx)
	c := r.api.get("default", "vm-a")
	if cond := meta.FindStatusCondition(c.Status.Conditions, npwg.IPAMClaimNodeCondition); npwg.HeldOn(c) != "" || cond == nil ||
		cond.Reason != npwg.ReasonReleased || cond.Message != "node-a" {
		t.Fatalf("IPAMClaim status %+v after its pod went, want node-a to have let it go", c.Status)
	}

	// A pod of node-b takes it; node-a's next pod is refused, unwritten.
	c.Status, _ = npwg.WithOwner(c, "virt-launcher-b", "node-b", nil)
	r.api.mu.Lock()
	r.api.claims["default/vm-a"] = c
	r.api.mu.Unlock()
	writes := r.api.writes
	again := ipamPod("uid-2", "virt-launcher-2", `[{"name":"pooled","ipam-claim-reference":"vm-a"}]`)
	r.api.setPod(again, corev1.PodRunning)
	err := r.plugin.AttachPod(r.ctx, again)
	if !errors.Is(err, ErrIPAMClaimHeld) || !strings.Contains(err.Error(), "IPAMClaim default/vm-a is held on node node-b (status condition "+npwg.IPAMClaimNodeCondition+")") {
		t.Fatalf("error %v, want the IPAMClaim held on node-b", err)
	}
	if r.api.writes != writes {
		t.Error("the IPAMClaim another node holds was written")
	}
	// node-b lets it go: node-a's pod takes it.
	c = r.api.get("default", "vm-a")
	c.Status, _ = npwg.Released(c, "node-b", npwg.ReasonReleased)
	r.api.mu.Lock()
	r.api.claims["default/vm-a"] = c
	r.api.mu.Unlock()
	if err := r.plugin.AttachPod(r.ctx, again); err != nil {
		t.Fatal(err)
	}
	if c := r.api.get("default", "vm-a"); npwg.HeldOn(c) != "node-a" || c.Status.OwnerPod.Name != again.Name {
		t.Errorf("IPAMClaim status %+v, want it held on node-a by %s", c.Status, again.Name)
	}
}
