//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/validate"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// TestCNIAttacks: what a tenant who may create ResourceClaims tried on the
// CNI DRA driver, each refused at Prepare with an event naming the field,
// nothing left behind: no record in the checkpoint, no status, no host
// object touched. fastpathd runs with its defaults (allowlist, policy,
// RBAC), as an operator installs it. fastpathd validate names the same
// fields, for what can be told without the node.
func TestCNIAttacks(t *testing.T) {
	ctx := testContext(t)
	master := hostVethNamed(t, cniMaster, vethPrefix+"m1")
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	// The node's uplink, as far as a claim can tell.
	uplink := hostVethNamed(t, vethPrefix+"up0", vethPrefix+"up1").Attrs()
	// A plugin in the daemon's CNI directories but not on its allowlist:
	// cnirecord records every call it gets, so a refused config that ran
	// it anyway is seen.
	spyDir := filepath.Join(workDir, "cni-attack-spy")
	spyBin := filepath.Join(spyDir, "bin")
	if err := os.MkdirAll(spyBin, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(spyDir) })
	if err := os.Link(cniRecordBinary(t), filepath.Join(spyBin, "e2e-spy")); err != nil {
		t.Fatal(err)
	}
	cniSetup(t, ctx, 26191, []string{"--cni-interface", cniMaster, "--cni-devices", "2", "--cni-bin-dir", bed.Config().CNIBinDir() + "," + spyBin})
	d := lastDaemon
	evil := "/etc/" + vethPrefix + "-evil"
	t.Cleanup(func() { _ = os.RemoveAll(evil) })
	const bridge = vethPrefix + "cni0"
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(bridge); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	// A ConfigMap of another namespace, which the tenant may not read.
	secret := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: vethPrefix + "-secret"}, Data: map[string]string{"subnet": "10.66.0.0/16"}}
	if _, err := bed.Client().CoreV1().ConfigMaps("kube-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().CoreV1().ConfigMaps("kube-system").Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	})

	// What fastpathd validate checks, with the node's defaults.
	validate := validate.Check{Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins, ConfigNamespace: testbed.ChartNamespace}}
	for i, tc := range []struct {
		name   string
		params string // the request's parameters, JSON
		want   []string
		// onNode: only the node can tell (its ConfigMap grants, the
		// CNIConfigs in the cluster); fastpathd validate cannot.
		onNode bool
	}{
		{"host-device moving the node's uplink into the pod",
			`{"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1", "plugins": [{"type": "host-device", "config": {"device": "` + uplink.Name + `"}}]}`,
			[]string{`plugins[0].type: Forbidden: plugin type "host-device" is not on this node's allowlist`,
				"plugins[0].config.device: Forbidden: names an object of the host (device)"}, false},
		{"a bridge and host-local writing to a host path",
			`{"ifName": "net1", "plugins": [{"type": "bridge", "config": {"bridge": "` + bridge + `", "ipam": {"type": "host-local", "dataDir": "` + evil + `", "subnet": "10.67.0.0/24"}}}]}`,
			[]string{"plugins[0].config.bridge: Forbidden: names an object of the host (bridge)",
				"plugins[0].config.ipam.dataDir: Forbidden: names an object of the host (dataDir)"}, false},
		{"a ConfigMap of another namespace",
			`{"ifName": "net1", "plugins": [{"type": "macvlan", "config": {"mode": "bridge", "ipam": {"type": "host-local"}}, "arguments": [
				{"fieldPath": "master", "valueFrom": {"attributeRef": "name"}},
				{"fieldPath": "ipam.subnet", "valueFrom": {"configMapKeyRef": {"name": "` + secret.Name + `", "namespace": "kube-system", "key": "subnet"}}}]}]}`,
			[]string{"plugins[0].arguments[1].valueFrom.configMapKeyRef.namespace: Forbidden: unknown field: a ConfigMap is read from the claim's own namespace"}, false},
		{"a ConfigMap of its own namespace, which the operator did not open",
			`{"ifName": "net1", "plugins": [{"type": "macvlan", "config": {"mode": "bridge", "ipam": {"type": "host-local"}}, "arguments": [
				{"fieldPath": "master", "valueFrom": {"attributeRef": "name"}},
				{"fieldPath": "ipam.subnet", "valueFrom": {"configMapKeyRef": {"name": "` + secret.Name + `", "key": "subnet"}}}]}]}`,
			[]string{"plugins[0].arguments[1].valueFrom.configMapKeyRef.name: Forbidden: fastpathd may not read ConfigMaps of namespace default"}, true},
		{"cniVersion banana",
			`{"ifName": "net1", "cniVersion": "banana", "plugins": [{"type": "macvlan", "arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`,
			[]string{`cniVersion: Unsupported value: "banana"`}, false},
		{"a host link as a constant",
			`{"ifName": "net1", "plugins": [{"type": "macvlan", "arguments": [{"fieldPath": "master", "value": "` + uplink.Name + `"}]}]}`,
			[]string{"plugins[0].arguments[0].value: Forbidden: sets config.master, which names an object of the host (master)"}, false},
		// Plugins read their keys in any letter case: IPAM is ipam, Device
		// is device.
		{"IPAM and Device in capitals: a plugin not on the allowlist moving the uplink",
			`{"ifName": "net1", "plugins": [{"type": "macvlan", "config": {"IPAM": {"type": "e2e-spy"}, "Device": "` + uplink.Name + `"},
				"arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`,
			[]string{`plugins[0].config.IPAM.type: Forbidden: plugin type "e2e-spy" is not on this node's allowlist`,
				"plugins[0].config.Device: Forbidden: read by the plugin as device, names an object of the host (device)"}, false},
		{"IPAM host-device with Device the uplink",
			`{"ifName": "net1", "plugins": [{"type": "macvlan", "config": {"IPAM": {"type": "host-device"}, "Device": "` + uplink.Name + `"},
				"arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`,
			[]string{`plugins[0].config.IPAM.type: Forbidden: plugin type "host-device" is not on this node's allowlist`}, false},
		{"Master in capitals",
			`{"ifName": "net1", "plugins": [{"type": "macvlan", "config": {"MASTER": "` + uplink.Name + `", "ipam": {"type": "e2e-spy"}}}]}`,
			[]string{"plugins[0].config.MASTER: Forbidden: read by the plugin as master"}, false},
		{"master left out: the node's default-route interface",
			`{"ifName": "net1", "plugins": [{"type": "macvlan", "config": {"mode": "bridge", "ipam": {"type": "static", "addresses": [{"address": "10.68.0.2/24"}]}}}]}`,
			[]string{"plugins[0].config.master: Required value: left out, the plugin takes the node's default-route interface"}, false},
		{"a configName that names no CNIConfig",
			`{"ifName": "net1", "configName": "kube-system"}`,
			[]string{`configName: Not found: "kube-system"`}, true},
		{"the loopback's name",
			`{"ifName": "lo", "plugins": [{"type": "macvlan", "arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`,
			[]string{`ifName: Invalid value: "lo"`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("e2e-attack-%d", i)
			claim := attackClaim(t, ctx, name, tc.params)
			if !tc.onNode {
				// fastpathd validate says it before the claim is made.
				probs, _ := validate.Claim(claim.Namespace, claim.Name, claim.Spec, field.NewPath("spec"))
				var said []string
				for _, p := range probs {
					said = append(said, p.Err.Error())
				}
				for _, want := range tc.want {
					if !slices.ContainsFunc(said, func(s string) bool { return strings.Contains(s, want) }) {
						t.Errorf("fastpathd validate says %q, not %q", said, want)
					}
				}
			}
			pod := claimPod(name, "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimName: &claim.Name})
			msg := createPodWaitEvent(t, ctx, pod, tc.want[0])
			for _, want := range append([]string{"claim default/" + claim.Name, `request "net"`}, tc.want...) {
				if !strings.Contains(msg, want) {
					t.Errorf("event %q does not say %q", msg, want)
				}
			}
			if strings.Contains(msg, "10.66.0.0") {
				t.Errorf("event %q shows the ConfigMap's value", msg)
			}
			nothingLeft(t, ctx, d, claim.Name, claim.UID)
			if l, err := netlink.LinkByName(uplink.Name); err != nil || l.Attrs().Index != uplink.Index {
				t.Errorf("the uplink %s is not where it was: %v", uplink.Name, err)
			}
			if _, err := netlink.LinkByName(bridge); err == nil {
				t.Errorf("the bridge %s was made", bridge)
			}
			if _, err := os.Stat(evil); !os.IsNotExist(err) {
				t.Errorf("%s was written: %v", evil, err)
			}
			if calls, _ := os.ReadDir(filepath.Join(spyDir, "records")); len(calls) > 0 {
				t.Errorf("the plugin not on the allowlist ran: %d calls recorded in %s", len(calls), filepath.Join(spyDir, "records"))
			}
		})
	}

}

// TestCNIRequireApproved: with --cni-require-approved, a claim's own config
// is refused at Prepare, and a claim naming an approved config runs.
func TestCNIRequireApproved(t *testing.T) {
	ctx := testContext(t)
	master := hostVethNamed(t, cniMaster, vethPrefix+"m1")
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	cniSetup(t, ctx, 26192, []string{"--cni-interface", cniMaster, "--cni-devices", "2", "--cni-require-approved"})
	d := lastDaemon

	claim := attackClaim(t, ctx, "e2e-attack", `{"ifName": "net1", "plugins": [{"type": "macvlan", "arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`)
	pod := claimPod("e2e-attack", "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimName: &claim.Name})
	msg := createPodWaitEvent(t, ctx, pod, "--cni-require-approved")
	if !strings.Contains(msg, `request "net"`) || !strings.Contains(msg, "plugins: Forbidden: this node runs only approved configs") {
		t.Errorf("event %q", msg)
	}
	nothingLeft(t, ctx, d, claim.Name, claim.UID)

	if _, err := createYAML(t, ctx, cniConfigs, false, designCNIConfig(t)); err != nil {
		t.Fatal(err)
	}
	accepted(t, ctx, "macvlan-host-local", metav1.ConditionTrue)
	tmpl := createTemplate(t, ctx, "e2e-cni-approved", cniClaimSpec(map[string]v1alpha1.CNIConfig{"macvlan0": {ConfigName: "macvlan-host-local"}}))
	named := claimPod("e2e-cni-approved", "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimTemplateName: &tmpl.Name})
	if _, err := bed.RunPod(ctx, named); err != nil {
		t.Fatal(err)
	}
	if _, err := bed.WaitPodLog(ctx, "default", named.Name, "net1 ", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ipam := ipamDir(t, ctx, named.Name, "cni", "macvlan0")
	if err := bed.DeletePod(ctx, "default", named.Name); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, ctx, ipam)
}

// attackClaim creates the claim name in namespace default with one CNI
// request, net, of the parameters, deleted when the test ends. Each attack
// has a name of its own: a claim made again under a name just freed may
// be allocated from the scheduler's copy of the one before.
func attackClaim(t *testing.T, ctx context.Context, name, params string) *resourceapi.ResourceClaim {
	t.Helper()
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "net", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "cni.networking.x-k8s.io"}}},
			Config: []resourceapi.DeviceClaimConfiguration{{Requests: []string{"net"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: cniDriver, Parameters: rawParams(params)}}}},
		}}}
	created, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteClaim(t, created.Name) })
	return created
}

// nothingLeft: the daemon recorded nothing of the claim, and wrote no
// status for it.
func nothingLeft(t *testing.T, ctx context.Context, d *daemon, name string, uid types.UID) {
	t.Helper()
	cls, _, err := claims.Read(d.checkpoint())
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	for k := range cls {
		if k.UID == uid {
			t.Errorf("the refused claim is in the checkpoint: %+v", cls[k])
		}
	}
	c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Status.Devices) != 0 {
		t.Errorf("the refused claim has a status: %+v", c.Status.Devices)
	}
}

// rawParams are opaque parameters as written, not re-encoded.
func rawParams(params string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(params)} }

// deleteClaim deletes a claim of namespace default and waits until it is
// gone (its pod gone, deallocated).
func deleteClaim(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	claims := bed.Client().ResourceV1().ResourceClaims("default")
	_ = claims.Delete(ctx, name, metav1.DeleteOptions{})
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := claims.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("claim %s is still there", name)
	}
}
