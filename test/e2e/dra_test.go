//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	memcache "k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

const driverName = "fastpath.dev"

// nodeSlices lists the node's ResourceSlices of fastpath.dev by name.
func nodeSlices(ctx context.Context) (map[string]resourceapi.ResourceSlice, error) {
	list, err := bed.Client().ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.driver=" + driverName + ",spec.nodeName=" + bed.NodeName(),
	})
	if err != nil {
		return nil, err
	}
	out := map[string]resourceapi.ResourceSlice{}
	for _, s := range list.Items {
		out[s.Name] = s
	}
	return out, nil
}

func deleteSlices(t *testing.T) {
	err := bed.Client().ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{},
		metav1.ListOptions{FieldSelector: "spec.driver=" + driverName})
	if err != nil {
		t.Errorf("delete ResourceSlices: %v", err)
	}
}

// dryRunCreate has the API server check every object of a manifest file, as
// it would create it (namespaced ones in default), whatever its kind: the
// CRDs' included.
func dryRunCreate(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(bed.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memcache.NewMemCacheClient(disco))
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) && gvk.Group == nadv1.SchemeGroupVersion.Group {
			// The chart installs the NetworkAttachmentDefinition CRD
			// with --npwg; TestNPWGDelegated checks the example then.
			t.Logf("%s: %s %s not checked: the NetworkAttachmentDefinition CRD is not installed yet", path, gvk.Kind, u.GetName())
			continue
		}
		if err != nil {
			t.Fatalf("%s: %s: %v", path, gvk, err)
		}
		var res dynamic.ResourceInterface = dynamicClient(t).Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			res = dynamicClient(t).Resource(m.Resource).Namespace("default")
		}
		if _, err := res.Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
			t.Errorf("%s: %s %s: %v", path, gvk.Kind, u.GetName(), err)
		}
	}
}

// TestDRAPlugin runs fastpathd on the node with a sysfs fixture of an E810
// with 129 VFs: it registers with the real kubelet and publishes 130 devices
// in three slices, and the PF's counter set in a fourth (the chart's
// pfCounters, on for this Kubernetes); a change of the PF's number of VFs
// rewrites the pool under a new generation; a claim with
// an invalid config fails with an error naming claim, request and field and
// leaves nothing behind; a valid claim's pod starts with the CDI edits and
// everything is removed when it goes.
func TestDRAPlugin(t *testing.T) {
	ctx := testContext(t)
	root, devRoot, _ := fixtureTree(t, sysfsfixture.Generated(129))
	d := startDaemon(t, ctx, 26180, "--sysfs-root", root, "--dev-root", devRoot)

	var slices map[string]resourceapi.ResourceSlice
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		slices, err = nodeSlices(ctx)
		return err == nil && len(slices) == 4 && countDevices(slices) == 130, nil
	})
	if err != nil {
		t.Fatalf("want 130 devices in 3 slices and a slice of counters, got %d in %d", countDevices(slices), len(slices))
	}
	var sizes []int
	countersSlice := ""
	for name, s := range slices {
		sizes = append(sizes, len(s.Spec.Devices))
		if s.Spec.Pool.Name != bed.NodeName() || s.Spec.Pool.ResourceSliceCount != 4 {
			t.Errorf("slice %s: pool %+v", s.Name, s.Spec.Pool)
		}
		if len(s.Spec.SharedCounters) > 0 {
			countersSlice = name
			if cs := s.Spec.SharedCounters; len(cs) != 1 || cs[0].Name != dra.PFCounterSet("pci-0000-3b-00-0") {
				t.Errorf("counter sets %+v, want the PF's", cs)
			} else if q := cs[0].Counters[dra.CounterVFs].Value; q.Value() != 129 {
				t.Errorf("the PF's counter set holds %s vfs, want 129", q.String())
			}
		}
	}
	sort.Ints(sizes)
	if fmt.Sprint(sizes) != "[0 2 64 64]" {
		t.Errorf("slice sizes = %v, want [0 2 64 64]", sizes)
	}

	t.Run("the PF's VFs change: the pool under a new generation", func(t *testing.T) {
		pfSlice := sliceWith(slices, "pci-0000-3b-00-0")
		if pfSlice == "" {
			t.Fatal("no slice holds the PF")
		}
		numvfs := filepath.Join(root, "sys", "bus", "pci", "devices", "0000:3b:00.0", "sriov_numvfs")
		if err := os.WriteFile(numvfs, []byte("100\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var after map[string]resourceapi.ResourceSlice
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			after, err = nodeSlices(ctx)
			if err != nil {
				return false, nil
			}
			s, ok := after[pfSlice]
			c, cok := after[countersSlice]
			if !ok || !cok || len(c.Spec.SharedCounters) != 1 {
				return false, nil
			}
			q := c.Spec.SharedCounters[0].Counters[dra.CounterVFs].Value
			return intAttr(s, "pci-0000-3b-00-0", "sriovNumVFs") == 100 && q.Value() == 100, nil
		})
		if err != nil {
			t.Fatalf("the PF's sriovNumVFs never became 100 in slice %s, and its counter set in slice %s", pfSlice, countersSlice)
		}
		// Two slices change (the PF's and its counter set's): the pool is
		// written under a new generation, every slice in place, so that
		// the scheduler never sees the PF's consumption and its set apart.
		// (One device's change rewrites one slice: TestPublisherWritesOnlyChanges.)
		for name, s := range slices {
			a, ok := after[name]
			switch {
			case !ok:
				t.Errorf("slice %s was replaced", name)
			case a.Spec.Pool.Generation != s.Spec.Pool.Generation+1:
				t.Errorf("slice %s: pool generation %d, want %d", name, a.Spec.Pool.Generation, s.Spec.Pool.Generation+1)
			}
		}
		for _, d := range after[pfSlice].Spec.Devices {
			if d.Name != "pci-0000-3b-00-0" {
				continue
			}
			if len(d.ConsumesCounters) != 1 {
				t.Fatalf("the PF consumes %+v", d.ConsumesCounters)
			}
			if q := d.ConsumesCounters[0].Counters[dra.CounterVFs].Value; q.Value() != 100 {
				t.Errorf("the PF consumes %s vfs, want its 100", q.String())
			}
		}
	})

	// The DeviceClasses of deploy/ are what the claims below use; the
	// examples must be valid for the API server.
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	examples, _ := filepath.Glob(filepath.Join(bed.Config().RepoDir, "deploy", "examples", "*.yaml"))
	if len(examples) != 12 {
		t.Errorf("deploy/examples holds %d files, want one per class (fastpath's seven and CNI), an approved CNIConfig, the toleration of unhealthy devices, a class pinning a VLAN and a pod asking for an extended resource", len(examples))
	}
	for _, ex := range examples {
		dryRunCreate(t, ctx, ex)
	}

	t.Run("invalid config", func(t *testing.T) {
		claim := netdevClaim("e2e-bad", &v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{MTU: 50}})
		created, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
		})
		pod := claimPod("e2e-bad", "env", &corev1.PodResourceClaim{Name: "fast", ResourceClaimName: &claim.Name})
		if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
		msg, err := waitEvent(ctx, pod.Name, "interface.mtu")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"claim default/e2e-bad", `request "nic"`, "device pci-0000-", "interface.mtu", "between 68 and"} {
			if !strings.Contains(msg, want) {
				t.Errorf("event %q does not name %q", msg, want)
			}
		}
		if _, err := os.Stat(filepath.Join(bed.CDIDir(), "fastpath.dev-claim-"+string(created.UID)+".json")); !os.IsNotExist(err) {
			t.Errorf("a CDI spec exists for the rejected claim (%v)", err)
		}
		if n := checkpointClaims(t, d); n != 0 {
			t.Errorf("the checkpoint holds %d claims after a rejected one", n)
		}
	})

	// The fixture's devices are not on this host, so the valid claim asks
	// for a VF already bound to vfio-pci: nothing to bind or attach, and
	// the container gets the CDI edits and the group's device node.
	t.Run("valid claim", func(t *testing.T) {
		spec := netdevClaim("", nil).Spec
		spec.Devices.Requests[0].Exactly.DeviceClassName = "vfio.fastpath.dev"
		spec.Devices.Requests[0].Exactly.Selectors[0].CEL.Expression = `device.attributes["fastpath.dev"].driver == "vfio-pci"`
		tmpl := &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "e2e-good"},
			Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: spec},
		}
		if _, err := bed.Client().ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = bed.Client().ResourceV1().ResourceClaimTemplates("default").Delete(context.Background(), tmpl.Name, metav1.DeleteOptions{})
		})
		pod := claimPod("e2e-good", "env", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &tmpl.Name})
		running, err := bed.RunPod(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "FASTPATH_DEVICE_INFO_NIC content", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"PCIDEVICE_FASTPATH_DEV_NIC=0000:3b:", `"type":"pci"`, `"version":"1.1.0"`, `"pf-pci-address":"0000:3b:00.0"`} {
			if !strings.Contains(logs, want) {
				t.Errorf("the pod's environment and device-info lack %q:\n%s", want, logs)
			}
		}
		if n := checkpointClaims(t, d); n != 1 {
			t.Errorf("checkpoint holds %d claims while the pod runs, want 1", n)
		}
		if err := bed.DeletePod(ctx, "default", running.Name); err != nil {
			t.Fatal(err)
		}
		// The kubelet unprepares the claim once the pod is gone.
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			specs, _ := filepath.Glob(filepath.Join(bed.CDIDir(), "fastpath.dev-*"))
			return len(specs) == 0 && checkpointClaims(t, d) == 0, nil
		})
		if err != nil {
			t.Errorf("after the pod went, CDI specs or checkpoint entries remain")
		}
	})
}

func countDevices(slices map[string]resourceapi.ResourceSlice) int {
	n := 0
	for _, s := range slices {
		n += len(s.Spec.Devices)
	}
	return n
}

func sliceWith(slices map[string]resourceapi.ResourceSlice, device string) string {
	for name, s := range slices {
		for _, d := range s.Spec.Devices {
			if d.Name == device {
				return name
			}
		}
	}
	return ""
}

func intAttr(s resourceapi.ResourceSlice, device, attr string) int64 {
	for _, d := range s.Spec.Devices {
		if d.Name == device {
			if a, ok := d.Attributes[resourceapi.QualifiedName(attr)]; ok && a.IntValue != nil {
				return *a.IntValue
			}
		}
	}
	return -1
}

// netdevClaim is a claim for one netdev-capable VF, with an optional claim
// config.
func netdevClaim(name string, config *v1alpha1.InterfaceConfig) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "netdev.fastpath.dev",
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: `device.attributes["fastpath.dev"].kind == "sriov-vf"`,
				}}},
			}}},
		}},
	}
	if config != nil {
		c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{
			Requests: []string{"nic"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: driverName, Parameters: opaque(config),
			}},
		}}
	}
	return c
}

// opaque is a config as a claim's opaque parameters.
func opaque(config any) runtime.RawExtension {
	data, err := json.Marshal(config)
	if err != nil {
		panic(fmt.Sprintf("a config does not marshal: %v", err))
	}
	return runtime.RawExtension{Raw: data}
}

func claimPod(name, cmd string, claim *corev1.PodResourceClaim) *corev1.Pod {
	pod := testbed.WorkloadPod("default", name, cmd)
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{*claim}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: claim.Name}}
	return pod
}

// waitEvent waits for an event on the pod of the default namespace (this
// very pod: events of an earlier one of the same name do not count) whose
// message contains want.
func waitEvent(ctx context.Context, pod, want string) (string, error) {
	return waitEventIn(ctx, "default", pod, want)
}

func checkpointClaims(t *testing.T, d *daemon) int {
	t.Helper()
	cls, _, err := claims.Read(d.checkpoint())
	if err != nil {
		t.Fatalf("checkpoint %s: %v", d.checkpoint(), err)
	}
	return len(cls)
}
