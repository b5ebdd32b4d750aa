package admission

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
)

// sharedClaim is a claim of class with one request "fast" whose config
// body (an InterfaceConfig's fields) its own config gives.
func sharedClaim(namespace, name, class, body string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + name),
		Annotations: map[string]string{"note": strings.Repeat("x", 64)}},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "fast", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}},
			Config: []resourceapi.DeviceClaimConfiguration{{Requests: []string{"fast"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "fastpath.dev", Parameters: runtime.RawExtension{
					Raw: []byte(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", ` + body + `}`)}}}}}}}}
}

// claimIndex runs Claims over a fake API server with the objects, until
// the test ends, and waits for it to list them.
func claimIndex(t *testing.T, objects ...runtime.Object) *Claims {
	t.Helper()
	c, err := NewClaims(fake.NewClientset(objects...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return c.Synced(), nil }); err != nil {
		t.Fatal("the informers did not list the objects")
	}
	return c
}

// The webhook refuses, at a claim's creation, a static address that
// another ResourceClaim of the same DeviceClass (allocated or not) has
// for a request in a shared mode on the same VLAN: of the chart's class
// shared.fastpath.dev, or of any class whose config sets a shared mode.
// It names the field, and the other claim only when it is of the same
// namespace. Another mode, VLAN or class is not its concern (the node
// judges the parents).
func TestWebhookSharedStaticAddress(t *testing.T) {
	ipvlanClass := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "fast-ipvlan"}, Spec: resourceapi.DeviceClassSpec{
		Config: []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: "fastpath.dev", Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "ipvlan"}`)}}}}}}}
	vlanClass := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "fast-vlan"}, Spec: resourceapi.DeviceClassSpec{
		Config: []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: "fastpath.dev", Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "vlan", ` +
				`"sharedParent": {"vlanIDs": ["1-4094"]}}`)}}}}}}}
	idx := claimIndex(t, ipvlanClass, vlanClass,
		sharedClaim("tenant-a", "a", "shared.fastpath.dev", `"interface": {"addresses": ["10.9.0.5/24", "fd00:9::5/64"]}`),
		sharedClaim("tenant-b", "b", "shared.fastpath.dev", `"interface": {"addresses": ["10.9.0.6/24"]}`),
		sharedClaim("tenant-a", "v", "fast-vlan", `"vlan": {"id": 42}, "interface": {"addresses": ["10.9.0.7/24"]}`),
		sharedClaim("tenant-a", "whole", "netdev.fastpath.dev", `"interface": {"addresses": ["10.9.0.8/24"]}`),
		sharedClaim("tenant-a", "i", "fast-ipvlan", `"interface": {"addresses": ["10.9.0.9/24"]}`))
	h := newHandler(nil)
	h.Claims = idx
	const at = `request "fast": spec.devices.config[0].opaque.parameters.interface.addresses[0]: Invalid value: `
	for _, tc := range []struct {
		name, class, body, want string
		leaks                   []string
	}{
		{"same address", "shared.fastpath.dev", `"interface": {"addresses": ["10.9.0.5/32"]}`,
			at + `"10.9.0.5/32": 10.9.0.5 is already the address of claim tenant-a/a of class shared.fastpath.dev, on the class's shared parent: ` +
				`an address on a shared parent is one interface's at a time; choose another address`, nil},
		{"IPv6", "shared.fastpath.dev", `"interface": {"addresses": ["fd00:9::5/120"]}`, `fd00:9::5 is already the address of claim tenant-a/a`, nil},
		{"another namespace's", "shared.fastpath.dev", `"interface": {"addresses": ["10.9.0.6/24"]}`,
			at + `"10.9.0.6/24": 10.9.0.6 is already the address of another claim of class shared.fastpath.dev`, []string{"tenant-b", "/b "}},
		{"same VLAN", "fast-vlan", `"vlan": {"id": 42}, "interface": {"addresses": ["10.9.0.7/24"]}`, `10.9.0.7 is already the address of claim tenant-a/v`, nil},
		{"a class of the cluster", "fast-ipvlan", `"interface": {"addresses": ["10.9.0.9/24"]}`, `10.9.0.9 is already the address of claim tenant-a/i of class fast-ipvlan`, nil},
		{"route through itself", "shared.fastpath.dev", `"interface": {"addresses": ["10.9.0.20/24"], "routes": [{"destination": "0.0.0.0/0", "gateway": "10.9.0.20"}]}`,
			at + `"10.9.0.20/24": 10.9.0.20 is also the gateway of interface.routes[0]`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _, verdict := h.Review(claimRequest(t, sharedClaim("tenant-a", "new", tc.class, tc.body)))
			if verdict != VerdictDenied || !strings.Contains(resp.Result.Message, tc.want) {
				t.Fatalf("%s: %+v, want denied with %q", verdict, resp.Result, tc.want)
			}
			for _, leak := range tc.leaks {
				if strings.Contains(resp.Result.Message, leak) {
					t.Errorf("the message %q names %q, another namespace's", resp.Result.Message, leak)
				}
			}
		})
	}
	for name, tc := range map[string]struct{ class, body string }{
		"another address":  {"shared.fastpath.dev", `"interface": {"addresses": ["10.9.0.10/24"]}`},
		"untagged":         {"shared.fastpath.dev", `"interface": {"addresses": ["10.9.0.7/24"]}`},
		"another VLAN":     {"fast-vlan", `"vlan": {"id": 43}, "interface": {"addresses": ["10.9.0.7/24"]}`},
		"not shared":       {"shared.fastpath.dev", `"interface": {"addresses": ["10.9.0.8/24"]}`},
		"a device whole":   {"netdev.fastpath.dev", `"interface": {"addresses": ["10.9.0.5/24"]}`},
		"another class":    {"fast-ipvlan", `"interface": {"addresses": ["10.9.0.5/24"]}`},
		"the claim itself": {"shared.fastpath.dev", `"interface": {"addresses": ["10.9.0.5/24"]}`},
	} {
		t.Run(name, func(t *testing.T) {
			claimName := "new"
			if name == "the claim itself" {
				claimName = "a"
			}
			if resp, _, verdict := h.Review(claimRequest(t, sharedClaim("tenant-a", claimName, tc.class, tc.body))); verdict != VerdictAllowed {
				t.Errorf("%s: %+v", verdict, resp.Result)
			}
		})
	}
	// The index keeps no more of a claim than its spec and its names.
	if got := idx.WithAddress("shared.fastpath.dev", netip.MustParseAddr("10.9.0.5")); len(got) != 1 || len(got[0].Annotations) > 0 {
		t.Errorf("indexed: %+v", got)
	}
}

// An index that has not listed the cluster's claims lets the claim be
// written, and says it did not check it.
func TestWebhookAddressesNotListed(t *testing.T) {
	h := newHandler(nil)
	h.Claims = unsynced{}
	resp, _, verdict := h.Review(claimRequest(t, sharedClaim("tenant-a", "new", "shared.fastpath.dev", `"interface": {"addresses": ["10.9.0.5/24"]}`)))
	if verdict != VerdictAllowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "did not check the claim's static addresses") {
		t.Errorf("%s, warnings %q", verdict, resp.Warnings)
	}
}

type unsynced struct{}

func (unsynced) Synced() bool { return false }
func (unsynced) WithAddress(string, netip.Addr) []*resourceapi.ResourceClaim {
	panic("read before synced")
}
func (unsynced) Class(string) *resourceapi.DeviceClass { return nil }
func (unsynced) Classes() map[string]*resourceapi.DeviceClass {
	panic("read before synced")
}

// claimRequest is the review of a claim's creation.
func claimRequest(t *testing.T, claim *resourceapi.ResourceClaim) *admissionv1.AdmissionRequest {
	t.Helper()
	claim.APIVersion, claim.Kind = "resource.k8s.io/v1", "ResourceClaim"
	raw, err := json.Marshal(claim)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{UID: "1", Kind: metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"},
		Namespace: claim.Namespace, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}}
}

// Once the index has listed the cluster's DeviceClasses, the webhook
// judges a claim by its class as the cluster has it, as the node does:
// an operator's shared.fastpath.dev allowing VLANs 100-199 lets a claim
// have VLAN 150, and still refuses VLAN 42. Without the index, the
// chart's defaults refuse both.
func TestWebhookClusterClasses(t *testing.T) {
	operators := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "shared.fastpath.dev"}, Spec: resourceapi.DeviceClassSpec{
		Config: []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: "fastpath.dev", Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "vlan", ` +
				`"pinned": ["mode"], "sharedParent": {"vlanIDs": ["100-199"]}}`)}}}}}}}
	vlan := func(id string) *admissionv1.AdmissionRequest {
		return claimRequest(t, sharedClaim("tenant-a", "vlan-"+id, "shared.fastpath.dev", `"vlan": {"id": `+id+`}`))
	}
	chart := newHandler(nil)
	for _, id := range []string{"150", "42"} {
		if _, _, verdict := chart.Review(vlan(id)); verdict != VerdictDenied {
			t.Errorf("VLAN %s with the chart's class: %s, want denied", id, verdict)
		}
	}
	h := newHandler(nil)
	h.Claims = claimIndex(t, operators)
	if resp, _, verdict := h.Review(vlan("150")); verdict != VerdictAllowed {
		t.Errorf("VLAN 150 with the operator's class: %s %+v", verdict, resp.Result)
	}
	resp, _, verdict := h.Review(vlan("42"))
	if want := "VLAN 42 is not among the VLAN IDs DeviceClass shared.fastpath.dev allows on its shared devices (100-199)"; verdict != VerdictDenied || !strings.Contains(resp.Result.Message, want) {
		t.Errorf("VLAN 42 with the operator's class: %s %+v, want denied with %q", verdict, resp.Result, want)
	}
}
