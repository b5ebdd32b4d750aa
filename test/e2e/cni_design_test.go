//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/watch"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// The CNI DRA driver design's examples (kubernetes-sigs/cni-dra-driver,
// docs/design/device-configuration-api.md), as it writes them.

// designInlineClaim is the design's ResourceClaim with its own config.
// upstreamFormClaim is a claim in the upstream driver's form
// (kubernetes-sigs/cni-dra-driver: ifName and config, a whole CNI
// configuration list), as the design's status example's config, without
// its master: the node fills it from the allocated device.
const upstreamFormClaim = `apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata:
  name: macvlan-eth0-attachment
spec:
  devices:
    requests:
    - name: macvlan0
      deviceClassName: cni.networking.x-k8s.io
      allocationMode: ExactCount
      count: 1
    config:
    - requests:
      - macvlan0
      opaque:
        driver: cni.dra.networking.x-k8s.io
        parameters:
          apiVersion: cni.dra.networking.x-k8s.io/v1alpha1
          kind: CNI
          ifName: "net1"
          config:
            cniVersion: 1.0.0
            name: macvlan0
            plugins:
            - type: macvlan
              mode: bridge
              ipam:
                type: host-local
                ranges:
                - - subnet: 10.10.2.0/24
`

const designInlineClaim = `apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata:
  name: one-macvlan-attachment
spec:
  devices:
    requests:
    - name: macvlan0
      deviceClassName: cni.networking.x-k8s.io
      allocationMode: ExactCount
      count: 1
    config:
    - requests:
      - macvlan0
      opaque:
        driver: cni.dra.networking.x-k8s.io
        parameters: # CNIParameters with the GVK, interface name and CNI Config (in YAML format).
          apiVersion: cni.networking.x-k8s.io/v1alpha1
          kind: CNI
          ifName: "net1"
          cniVersion: 1.0.0
          plugins:
          - type: macvlan
            config:
              mode: bridge
              ipam:
                type: host-local
                ranges:
                - - subnet: 10.10.1.0/24
            arguments:
            - fieldPath: master
              valueFrom:
                attributeRef: name
`

// designCNIConfig is the design's CNIConfig, with the apiVersion line the
// API server needs (the design leaves it out); the rest as it is, its
// attributeRef one level up included.
func designCNIConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../dra/api/v1alpha1/testdata/design-cniconfig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// designConfigNameClaim is the design's claim naming it.
const designConfigNameClaim = `apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaim
metadata:
  name: one-macvlan-attachment
spec:
  devices:
    requests:
    - name: macvlan0
      deviceClassName: cni.networking.x-k8s.io
      allocationMode: ExactCount
      count: 1
    config:
    - requests:
      - macvlan0
      opaque:
        driver: cni.dra.networking.x-k8s.io
        parameters:
          configName: macvlan-host-local
`

var (
	claimsV1beta1 = schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1beta1", Resource: "resourceclaims"}
	cniConfigs    = watch.CNIConfigResource
)

func dynamicClient(t *testing.T) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(bed.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// createYAML creates the object of doc as it is (in namespace default if
// namespaced) and deletes it when the test ends, waiting until it is gone.
func createYAML(t *testing.T, ctx context.Context, gvr schema.GroupVersionResource, namespaced bool, doc string) (*unstructured.Unstructured, error) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	var r dynamic.ResourceInterface = dynamicClient(t).Resource(gvr)
	if namespaced {
		r = dynamicClient(t).Resource(gvr).Namespace("default")
	}
	created, err := r.Create(ctx, u, metav1.CreateOptions{FieldValidation: "Strict"})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = r.Delete(ctx, created.GetName(), metav1.DeleteOptions{})
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := r.Get(ctx, created.GetName(), metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})
	return created, nil
}

// accepted waits for the CNIConfig's condition Accepted to be want.
func accepted(t *testing.T, ctx context.Context, name string, want metav1.ConditionStatus) metav1.Condition {
	t.Helper()
	var last *metav1.Condition
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := dynamicClient(t).Resource(cniConfigs).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		o, err := cnipolicy.FromUnstructured(u)
		if err != nil {
			return false, err
		}
		last = meta.FindStatusCondition(o.Status.Conditions, v1alpha1.CNIConfigAccepted)
		return last != nil && last.Status == want && last.ObservedGeneration == o.Generation, nil
	})
	if err != nil {
		t.Fatalf("CNIConfig %s: condition Accepted %+v, want %s (%v)", name, last, want, err)
	}
	return *last
}

// claimStatus waits for the claim's status entry of the CNI driver to
// satisfy ok.
func claimStatus(t *testing.T, ctx context.Context, name string, ok func(resourceapi.AllocatedDeviceStatus) bool) resourceapi.AllocatedDeviceStatus {
	t.Helper()
	var last resourceapi.AllocatedDeviceStatus
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, d := range c.Status.Devices {
			if d.Driver == cniDriver {
				last = d
				return ok(d), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("claim %s: status %+v never came", name, last)
	}
	return last
}

func conditionOf(st resourceapi.AllocatedDeviceStatus, typ string) *metav1.Condition {
	return meta.FindStatusCondition(st.Conditions, typ)
}

// TestCNIDesign: the design's examples verbatim on the real node: the
// inline claim, the CNIConfig and the claim naming it (its ifName
// applying), the status shape; CHECK reports in the status; the API server
// refuses CNIConfigs the CRD's rules refuse, and fastpathd controller says
// which it does not accept.
func TestCNIDesign(t *testing.T) {
	ctx := testContext(t)
	master := hostVethNamed(t, cniMaster, vethPrefix+"m1")
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	// The default allowlist; CHECK every second.
	cniSetup(t, ctx, 26190, []string{"--cni-interface", cniMaster, "--cni-devices", "4", "--cni-check-interval", "1s"})
	t.Cleanup(func() { controllerLogClean(t) })

	t.Run("the inline example and the status shape", func(t *testing.T) {
		if _, err := createYAML(t, ctx, claimsV1beta1, true, designInlineClaim); err != nil {
			t.Fatal(err)
		}
		name := "one-macvlan-attachment"
		pod := claimPod("demo-a", "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimName: &name})
		running, err := bed.RunPod(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "net1 ", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		net1 := strings.Fields(interfaceLine(logs, "net1"))
		if len(net1) < 3 || !strings.HasPrefix(net1[2], "10.10.1.") {
			t.Fatalf("net1 in the pod: %q; the pod sees:\n%s", net1, logs)
		}
		// The design's status: device, driver, pool; Ready with its reason
		// and message; the CNI result as data; networkData from it.
		st := claimStatus(t, ctx, name, func(st resourceapi.AllocatedDeviceStatus) bool { return conditionOf(st, "Ready") != nil })
		if st.Driver != cniDriver || st.Pool != bed.NodeName() || !strings.HasPrefix(st.Device, "cni-") {
			t.Errorf("device %s/%s/%s", st.Driver, st.Pool, st.Device)
		}
		if c := conditionOf(st, "Ready"); c.Status != metav1.ConditionTrue || c.Reason != "NetworkInterfaceReady" || c.Message != "CNI-DRA-Driver has configured the device." {
			t.Errorf("Ready = %+v", c)
		}
		var data struct {
			CNIVersion string `json:"cniVersion"`
			Interfaces []struct{ Name, Mac, Sandbox string }
			IPs        []struct {
				Address, Gateway string
				Interface        *int
			}
		}
		if err := json.Unmarshal(st.Data.Raw, &data); err != nil || data.CNIVersion != "1.0.0" || len(data.IPs) != 1 {
			t.Fatalf("data = %s (%v), want the CNI result", st.Data.Raw, err)
		}
		ip := data.IPs[0]
		if ip.Address != net1[2] || ip.Gateway != "10.10.1.1" || ip.Interface == nil || *ip.Interface >= len(data.Interfaces) {
			t.Errorf("data.ips[0] = %+v", ip)
		}
		iface := data.Interfaces[*ip.Interface]
		if iface.Name != "net1" || iface.Mac != net1[1] || iface.Sandbox == "" {
			t.Errorf("data.interfaces = %+v", data.Interfaces)
		}
		if nd := st.NetworkData; nd == nil || nd.InterfaceName != "net1" || nd.HardwareAddress != net1[1] || strings.Join(nd.IPs, ",") != net1[2] {
			t.Errorf("networkData = %+v, want net1 %s %s", nd, net1[1], net1[2])
		}
		ipam := ipamDir(t, ctx, pod.Name, "cni", "macvlan0")
		if got := ipamAllocations(t, ipam); len(got) != 1 {
			t.Errorf("host-local allocations while the pod runs: %v", got)
		}

		// CHECK passes, then fails once net1 is gone from the pod.
		st = claimStatus(t, ctx, name, func(st resourceapi.AllocatedDeviceStatus) bool { return conditionOf(st, "Healthy") != nil })
		if c := conditionOf(st, "Healthy"); c.Status != metav1.ConditionTrue || c.Reason != "CNICheckPassed" {
			t.Errorf("Healthy = %+v", c)
		}
		deleteInPod(t, iface.Sandbox, "net1")
		st = claimStatus(t, ctx, name, func(st resourceapi.AllocatedDeviceStatus) bool {
			c := conditionOf(st, "Healthy")
			return c != nil && c.Status == metav1.ConditionFalse
		})
		if c := conditionOf(st, "Healthy"); c.Reason != "CNICheckFailed" || !strings.Contains(c.Message, "net1") || conditionOf(st, "Ready").Status != metav1.ConditionTrue {
			t.Errorf("after net1 went: %+v", st.Conditions)
		}
		if err := bed.DeletePod(ctx, "default", running.Name); err != nil {
			t.Fatal(err)
		}
		waitReleased(t, ctx, ipam)
	})

	t.Run("the upstream driver's form", func(t *testing.T) {
		if _, err := createYAML(t, ctx, claimsV1beta1, true, upstreamFormClaim); err != nil {
			t.Fatal(err)
		}
		name := "macvlan-eth0-attachment"
		pod := claimPod("demo-upstream", "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimName: &name})
		running, err := bed.RunPod(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "net1 ", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if net1 := strings.Fields(interfaceLine(logs, "net1")); len(net1) < 3 || !strings.HasPrefix(net1[2], "10.10.2.") {
			t.Fatalf("net1 in the pod: %q; the pod sees:\n%s", net1, logs)
		}
		st := claimStatus(t, ctx, name, func(st resourceapi.AllocatedDeviceStatus) bool { return conditionOf(st, "Ready") != nil })
		if c := conditionOf(st, "Ready"); c.Status != metav1.ConditionTrue || c.Reason != "NetworkInterfaceReady" {
			t.Errorf("Ready = %+v", c)
		}
		ipam := ipamDir(t, ctx, pod.Name, "cni", "macvlan0")
		if err := bed.DeletePod(ctx, "default", running.Name); err != nil {
			t.Fatal(err)
		}
		waitReleased(t, ctx, ipam)
	})

	t.Run("an approved CNIConfig and a claim naming it", func(t *testing.T) {
		if _, err := createYAML(t, ctx, cniConfigs, false, designCNIConfig(t)); err != nil {
			t.Fatal(err)
		}
		if c := accepted(t, ctx, "macvlan-host-local", metav1.ConditionTrue); c.Reason != "Accepted" {
			t.Errorf("Accepted = %+v", c)
		}
		if _, err := createYAML(t, ctx, claimsV1beta1, true, designConfigNameClaim); err != nil {
			t.Fatal(err)
		}
		name := "one-macvlan-attachment"
		pod := claimPod("demo-b", "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimName: &name})
		if _, err := bed.RunPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		// The approved config's ifName.
		logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "net1 ", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if f := strings.Fields(interfaceLine(logs, "net1")); len(f) < 3 || !strings.HasPrefix(f[2], "10.10.1.") {
			t.Errorf("net1 in the pod: %q", f)
		}
		st := claimStatus(t, ctx, name, func(st resourceapi.AllocatedDeviceStatus) bool { return conditionOf(st, "Ready") != nil })
		if nd := st.NetworkData; nd == nil || nd.InterfaceName != "net1" {
			t.Errorf("networkData = %+v", nd)
		}
		ipam := ipamDir(t, ctx, pod.Name, "cni", "macvlan0")
		if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
			t.Fatal(err)
		}
		waitReleased(t, ctx, ipam)

		// A claim naming it with an ifName of its own.
		own := cniClaimSpec(map[string]v1alpha1.CNIConfig{"macvlan0": {IfName: "net7", ConfigName: "macvlan-host-local"}})
		tmpl := createTemplate(t, ctx, "e2e-cni-named", own)
		pod = claimPod("e2e-cni-named", "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimTemplateName: &tmpl.Name})
		if _, err := bed.RunPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if logs, err = bed.WaitPodLog(ctx, "default", pod.Name, "net7 ", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(logs, "net1 ") {
			t.Errorf("the claim's ifName did not apply:\n%s", logs)
		}
		ipam = ipamDir(t, ctx, pod.Name, "cni", "macvlan0")
		if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
			t.Fatal(err)
		}
		waitReleased(t, ctx, ipam)
	})

	t.Run("an approved CNIConfig fastpathd does not accept", func(t *testing.T) {
		uplink := `apiVersion: cni.networking.x-k8s.io/v1alpha1
kind: CNIConfig
metadata: {name: e2e-uplink}
spec:
  ifName: net1
  plugins: [{type: host-device, config: {device: ` + cniMaster + `}}]
`
		if _, err := createYAML(t, ctx, cniConfigs, false, uplink); err != nil {
			t.Fatal(err)
		}
		if c := accepted(t, ctx, "e2e-uplink", metav1.ConditionFalse); c.Reason != "PluginNotAllowed" || !strings.Contains(c.Message, `"host-device"`) {
			t.Errorf("Accepted = %+v", c)
		}
		tmpl := createTemplate(t, ctx, "e2e-cni-uplink", cniClaimSpec(map[string]v1alpha1.CNIConfig{"net": {ConfigName: "e2e-uplink"}}))
		pod := claimPod("e2e-cni-uplink", "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimTemplateName: &tmpl.Name})
		msg := createPodWaitEvent(t, ctx, pod, "allowlist")
		for _, want := range []string{`request "net"`, "configName[e2e-uplink].spec.plugins[0].type", `"host-device"`} {
			if !strings.Contains(msg, want) {
				t.Errorf("event %q does not name %q", msg, want)
			}
		}
		if _, err := netlink.LinkByName(cniMaster); err != nil {
			t.Errorf("the host link %s is gone: %v", cniMaster, err)
		}
	})

	t.Run("the API server refuses what the CRD's rules refuse", func(t *testing.T) {
		for name, tc := range map[string]struct{ spec, want string }{
			"two sources":      {"plugins: [{type: macvlan, arguments: [{fieldPath: master, value: x, attributeRef: name}]}]", `"spec.plugins[0].arguments[0]" must validate one and only one schema (oneOf)`},
			"no source":        {"plugins: [{type: macvlan, arguments: [{fieldPath: master}]}]", `"spec.plugins[0].arguments[0]" must validate one and only one schema (oneOf)`},
			"the primary name": {"ifName: eth0\nplugins: [{type: macvlan}]", "must not be '.', '..', lo or eth0"},
			"banana":           {"cniVersion: banana\nplugins: [{type: macvlan}]", `spec.cniVersion: Unsupported value: "banana"`},
			"type in config":   {"plugins: [{type: macvlan, config: {type: bridge}}]", "the plugin's type is plugins[].type"},
			"a path as type":   {"plugins: [{type: ../../bin/sh}]", "spec.plugins[0].type"},
			"slice field":      {"plugins: [{type: macvlan, arguments: [{fieldPath: x, valueFrom: {resourceSliceFieldRef: {fieldPath: spec.devices}}}]}]", "spec.devices"},
			"no plugins":       {"ifName: net1", "spec.plugins: Required value"},
			"configName":       {"configName: other\nplugins: [{type: macvlan}]", `unknown field "spec.configName"`},
		} {
			t.Run(name, func(t *testing.T) {
				doc := "apiVersion: cni.networking.x-k8s.io/v1alpha1\nkind: CNIConfig\nmetadata: {name: e2e-refused}\nspec:\n  " +
					strings.ReplaceAll(tc.spec, "\n", "\n  ") + "\n"
				_, err := createYAML(t, ctx, cniConfigs, false, doc)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("create: %v, want %q", err, tc.want)
				}
			})
		}
	})
}

// linkInPod is the link name in the network namespace at netnsPath (a
// pod's), with a netlink handle in that namespace, closed when the test
// ends.
func linkInPod(t *testing.T, netnsPath, name string) (*netlink.Handle, netlink.Link) {
	t.Helper()
	ns, err := netns.GetFromPath(netnsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return h, l
}

// deleteInPod deletes the link name in the network namespace at netnsPath
// (a pod's).
func deleteInPod(t *testing.T, netnsPath, name string) {
	t.Helper()
	h, l := linkInPod(t, netnsPath, name)
	if err := h.LinkDel(l); err != nil {
		t.Fatal(err)
	}
}

// controllerLogClean fails the test if fastpathd controller's log shows
// a refused API call: the chart's RBAC must allow all it does.
func controllerLogClean(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := bed.Client().CoreV1().Pods(testbed.ChartNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=fastpath-controller"})
	if err != nil || len(pods.Items) == 0 {
		t.Errorf("no fastpathd controller pod: %v", err)
		return
	}
	for _, p := range pods.Items {
		log, err := bed.PodLogs(ctx, p.Namespace, p.Name)
		if err != nil {
			t.Errorf("log of %s: %v", p.Name, err)
			continue
		}
		if refused := forbidden(log); len(refused) > 0 {
			t.Errorf("the API server refused fastpathd controller %d calls:\n%s", len(refused), strings.Join(refused, "\n"))
		}
		if !strings.Contains(log, "Leading: writing the status of CNIConfig objects") {
			t.Errorf("controller %s never led:\n%s", p.Name, log)
		}
	}
}
