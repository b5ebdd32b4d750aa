//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// The shared parent of TestSharedParentGuard, its address, and the
// namespace the webhook does not judge.
const (
	guardParent     = "fpsg0a"
	guardParentPeer = "fpsg0b"
	guardParentAddr = "10.96.9.1/24"
	guardNamespace  = "e2e-guard"
	// guardUnjudged labels the namespace the webhook's namespaceSelector
	// leaves out: its claims reach the node unjudged.
	guardUnjudged = "fastpath.dev/e2e-unjudged"
)

// TestSharedParentGuard: two tenants' pods share a NIC (macvlans of one
// parent, bridge mode, static addresses) and reach each other through it.
// With the webhook on, a claim asking for a passthru macvlan, and one
// asking for the address another claim has, are refused when written,
// naming the field; in a namespace the webhook does not judge, the node
// refuses them at Prepare, naming claim, request, device and field, as it
// refuses the parent's own address; nothing of them is recorded. The first
// two pods keep running and reaching each other, and the parent is as the
// two left it: its MAC, flags, promiscuity and addresses.
func TestSharedParentGuard(t *testing.T) {
	ctx, cancel := context.WithTimeout(klog.NewContext(t.Context(), klog.Background()), 10*time.Minute)
	defer cancel()
	client := bed.Client()
	parent := hostVethNamed(t, guardParent, guardParentPeer)
	for _, n := range []string{guardParentPeer, guardParent} {
		if err := netlink.LinkSetUp(mustLink(t, n)); err != nil {
			t.Fatal(err)
		}
	}
	addr, err := netlink.ParseAddr(guardParentAddr)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(parent, addr); err != nil {
		t.Fatal(err)
	}

	// The webhook's configuration fails closed: never leave it behind.
	vwcs := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	t.Cleanup(func() { _ = vwcs.Delete(context.Background(), webhookName, metav1.DeleteOptions{}) })
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: guardNamespace, Labels: map[string]string{guardUnjudged: "true"}}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pods, _ := client.CoreV1().Pods(guardNamespace).List(ctx, metav1.ListOptions{})
		if pods != nil {
			for _, p := range pods.Items {
				_ = bed.DeletePod(ctx, guardNamespace, p.Name)
			}
		}
		_ = client.CoreV1().Namespaces().Delete(ctx, guardNamespace, metav1.DeleteOptions{})
	})
	t.Cleanup(func() { deleteSlices(t) })
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	d := newDaemon(t, 26310,
		"--filter", fmt.Sprintf(`device.attributes["fastpath.dev"].kind == "netdev" && device.attributes["fastpath.dev"].ifName == %q`, guardParent),
		"--share", fmt.Sprintf(`device.attributes["fastpath.dev"].ifName == %q`, guardParent), "--share-interfaces", "8")
	t.Cleanup(func() { d.stop(t) })
	d.values["webhook"] = map[string]any{"enabled": true, "port": webhookPort, "url": fmt.Sprintf("https://localhost:%d/validate", webhookPort),
		"namespaceSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": guardUnjudged, "operator": "DoesNotExist"}}}}
	d.start(t, ctx)
	// The webhook serves once the controller has made its certificates
	// and the kubelet has updated the Secret's files: until then a claim
	// cannot be written.
	good := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
		"metadata": map[string]any{"name": "e2e-guard-good", "namespace": "default"},
		"spec":     map[string]any{"devices": map[string]any{"requests": []any{map[string]any{"name": "fast", "exactly": map[string]any{"deviceClassName": "shared.fastpath.dev"}}}}}}}
	var serving error
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		serving = dryRun(ctx, t, claimsResource, good)
		return serving == nil, nil
	}); err != nil {
		t.Fatalf("the webhook does not serve: %v\n%s", serving, controllerState(t))
	}
	device := "netdev-" + guardParent
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := nodeSlices(ctx)
		return err == nil && sliceWith(s, device) != "", nil
	}); err != nil {
		t.Fatalf("%s was never published", device)
	}

	claim := func(namespace, name string, cfg v1alpha1.InterfaceConfig) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: "fast", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "shared.fastpath.dev"}}},
				Config: []resourceapi.DeviceClaimConfiguration{{Requests: []string{"fast"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
					Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driverName, Parameters: opaque(cfg)}}}},
			}}}
	}
	static := func(address string) v1alpha1.InterfaceConfig {
		return v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "fast0", Addresses: []string{address}}}
	}
	passthru := v1alpha1.InterfaceConfig{Macvlan: &v1alpha1.MacvlanConfig{Mode: v1alpha1.MacvlanPassthru}, Interface: &v1alpha1.InterfaceSpec{Name: "fast0"}}
	// run creates the claim and a pod of it in the claim's namespace.
	run := func(c *resourceapi.ResourceClaim) *corev1.Pod {
		t.Helper()
		if _, err := client.ResourceV1().ResourceClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatalf("claim %s/%s: %v", c.Namespace, c.Name, err)
		}
		name := c.Name
		pod := claimPod(name, "ifaces", &corev1.PodResourceClaim{Name: "fast", ResourceClaimName: &name})
		pod.Namespace = c.Namespace
		if _, err := client.CoreV1().Pods(c.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		namespace := c.Namespace
		t.Cleanup(func() {
			_ = bed.DeletePod(context.Background(), namespace, name)
			_ = client.ResourceV1().ResourceClaims(namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		return pod
	}

	// The other tenants: two pods on the parent, reaching each other.
	a := run(claim("default", "e2e-guard-a", static("10.96.9.5/24")))
	b := run(claim("default", "e2e-guard-b", static("10.96.9.6/24")))
	for _, p := range []*corev1.Pod{a, b} {
		if _, err := bed.WaitPodLog(ctx, p.Namespace, p.Name, "fast0 ", 150*time.Second); err != nil {
			t.Fatalf("%s: %v\n%s", p.Name, err, podState(ctx, p.Name))
		}
	}
	// sandbox is the network namespace of the pod's interface, as its
	// claim's status says (the claim is named as the pod).
	sandbox := func(p *corev1.Pod) string {
		t.Helper()
		var netns string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			c, err := client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil || len(c.Status.Devices) != 1 || c.Status.Devices[0].Data == nil {
				return false, nil
			}
			var data struct {
				Interfaces []struct{ Sandbox string } `json:"interfaces"`
			}
			if json.Unmarshal(c.Status.Devices[0].Data.Raw, &data) != nil || len(data.Interfaces) != 1 {
				return false, nil
			}
			netns = data.Interfaces[0].Sandbox
			return netns != "", nil
		})
		if err != nil {
			t.Fatalf("claim %s/%s: its status never named the pod's network namespace", p.Namespace, p.Name)
		}
		return netns
	}
	aNetNS := sandbox(a)
	reaches := func(when string) {
		t.Helper()
		if out, err := exec.CommandContext(ctx, "nsenter", "--net="+aNetNS, "ping", "-c", "3", "-W", "2", "10.96.9.6").CombinedOutput(); err != nil {
			t.Errorf("%s: %s cannot reach %s through the shared parent: %v\n%s", when, a.Name, b.Name, err, out)
		}
	}
	reaches("before")
	// The parent as the two tenants' macvlans leave it (a veth has no
	// unicast filter: their addresses make it promiscuous).
	before := mustLink(t, guardParent).Attrs()

	t.Run("refused when written, by the webhook", func(t *testing.T) {
		for _, tc := range []struct {
			what string
			c    *resourceapi.ResourceClaim
			want string
		}{
			{"a passthru macvlan", claim("default", "e2e-guard-passthru", passthru),
				`request "fast": spec.devices.config[0].opaque.parameters.macvlan.mode: Forbidden: macvlan mode passthru is not among those DeviceClass shared.fastpath.dev allows on its shared devices (bridge, private, vepa)`},
			{"another claim's address", claim("default", "e2e-guard-dup", static("10.96.9.5/24")),
				`request "fast": spec.devices.config[0].opaque.parameters.interface.addresses[0]: Invalid value: "10.96.9.5/24": 10.96.9.5 is already the address of claim default/e2e-guard-a of class shared.fastpath.dev`},
		} {
			tc.c.TypeMeta = metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"}
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			obj := &unstructured.Unstructured{Object: u}
			// The webhook knows the other claims once it has listed
			// them; until then it lets claims through, with a warning.
			var last error
			err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				last = dryRun(ctx, t, claimsResource, obj)
				return last != nil && strings.Contains(last.Error(), tc.want), nil
			})
			if err != nil {
				t.Errorf("%s: %v; want the webhook's denial %q\n%s", tc.what, last, tc.want, controllerState(t))
				continue
			}
			t.Logf("%s: %v", tc.what, last)
		}
	})

	t.Run("refused at Prepare without the webhook", func(t *testing.T) {
		const at = `claim ` + guardNamespace + `/%s, request "fast", device ` + "netdev-" + guardParent + `: `
		for _, tc := range []struct {
			name string
			cfg  v1alpha1.InterfaceConfig
			want string
		}{
			{"passthru", passthru, `parameters.macvlan.mode: Forbidden: macvlan mode passthru is not among those DeviceClass shared.fastpath.dev allows on its shared devices (bridge, private, vepa)`},
			{"dup", static("10.96.9.5/24"), `interface.addresses[0]: Invalid value: "10.96.9.5/24": 10.96.9.5 is already the address of a claim of another namespace on parent ` + guardParent},
			{"parent", static(guardParentAddr), `interface.addresses[0]: Invalid value: "10.96.9.1/24": 10.96.9.1 is an address of the parent ` + guardParent + ` itself`},
		} {
			p := run(claim(guardNamespace, tc.name, tc.cfg))
			msg, err := waitEventIn(ctx, p.Namespace, p.Name, tc.want)
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			if !strings.Contains(msg, fmt.Sprintf(at, tc.name)) {
				t.Errorf("%s: %q does not name the claim, request and device (%q)", tc.name, msg, fmt.Sprintf(at, tc.name))
			}
			if strings.Contains(msg, "e2e-guard-a") {
				t.Errorf("%s: %q names a claim of another namespace", tc.name, msg)
			}
			if got, err := client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err != nil || got.Status.Phase == corev1.PodRunning {
				t.Errorf("%s: the pod runs (%v)", tc.name, err)
			}
		}
		if n := checkpointClaims(t, d); n != 2 {
			t.Errorf("%d claims recorded, want the first two tenants' alone", n)
		}
	})

	// The first two keep working, and the parent is as it was.
	for _, p := range []*corev1.Pod{a, b} {
		if got := mustPod(t, ctx, p.Name); got.Status.Phase != corev1.PodRunning {
			t.Errorf("%s is %s", p.Name, got.Status.Phase)
		}
	}
	reaches("after the refusals")
	after := mustLink(t, guardParent).Attrs()
	if after.HardwareAddr.String() != before.HardwareAddr.String() || after.Flags != before.Flags || after.Promisc != before.Promisc || after.MTU != before.MTU {
		t.Errorf("the parent changed: %+v, was %+v", after, before)
	}
	if as, err := netlink.AddrList(mustLink(t, guardParent), netlink.FAMILY_V4); err != nil || len(as) != 1 || as[0].IPNet.String() != guardParentAddr {
		t.Errorf("the parent's addresses are %v (%v), want %s alone", as, err, guardParentAddr)
	}
	if after.Flags&net.FlagUp == 0 {
		t.Error("the parent is down")
	}
}

// waitEventIn waits for an event on the pod of namespace (this very pod:
// events of an earlier one of the same name do not count) whose message
// contains want. The wait allows for a kubelet that prepares a new pod's
// claim only at its next resync, a minute later.
func waitEventIn(ctx context.Context, namespace, pod, want string) (string, error) {
	p, err := bed.Client().CoreV1().Pods(namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	var seen []string
	var found string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 150*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := bed.Client().CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(p.UID)})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, e := range events.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if strings.Contains(e.Message, want) {
				found = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("no event on pod %s/%s mentions %q; events: %q", namespace, pod, want, seen)
	}
	return found, nil
}
