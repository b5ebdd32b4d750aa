//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/devices/memif"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// applyDeviceClasses creates the DeviceClasses of a file of deploy/ for
// the test.
func applyDeviceClasses(t *testing.T, ctx context.Context, file string) {
	t.Helper()
	path := filepath.Join(bed.Config().RepoDir, "deploy", file)
	objs, err := testbed.DecodeYAML(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		class := obj.(*resourceapi.DeviceClass)
		// Create or update: the demo, run on the same bed, makes them too.
		classes := bed.Client().ResourceV1().DeviceClasses()
		_, err := classes.Create(ctx, class, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var old *resourceapi.DeviceClass
			if old, err = classes.Get(ctx, class.Name, metav1.GetOptions{}); err == nil {
				class.ResourceVersion = old.ResourceVersion
				_, err = classes.Update(ctx, class, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			t.Fatalf("apply DeviceClass %s: %v", class.Name, err)
		}
		name := class.Name
		t.Cleanup(func() {
			_ = bed.Client().ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
}

// claimTemplate creates a template with one request "dpdk" (or the given
// name) of class, narrowed by a CEL selector, with an optional config.
func claimTemplate(t *testing.T, ctx context.Context, name, request, class, selector string, config *v1alpha1.InterfaceConfig) *resourceapi.ResourceClaimTemplate {
	t.Helper()
	spec := netdevClaim("", config).Spec
	spec.Devices.Requests[0].Name = request
	spec.Devices.Requests[0].Exactly.DeviceClassName = class
	spec.Devices.Requests[0].Exactly.Selectors[0].CEL.Expression = selector
	if config != nil {
		spec.Devices.Config[0].Requests = []string{request}
	}
	return createTemplate(t, ctx, name, spec)
}

// createTemplate creates a ResourceClaimTemplate, deleted when the test ends.
func createTemplate(t *testing.T, ctx context.Context, name string, spec resourceapi.ResourceClaimSpec) *resourceapi.ResourceClaimTemplate {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: spec},
	}
	if _, err := bed.Client().ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceClaimTemplates("default").Delete(context.Background(), tmpl.Name, metav1.DeleteOptions{})
	})
	return tmpl
}

// podClaimStatus waits for the status of the pod's first claim to hold a
// device of fastpath.dev and returns it.
func podClaimStatus(t *testing.T, ctx context.Context, pod *corev1.Pod) resourceapi.AllocatedDeviceStatus {
	t.Helper()
	return podClaimStatusOf(t, ctx, pod, driverName)
}

// podClaimStatusOf waits for the status of the pod's first claim to hold a
// device of driver and returns it.
func podClaimStatusOf(t *testing.T, ctx context.Context, pod *corev1.Pod, driver string) resourceapi.AllocatedDeviceStatus {
	t.Helper()
	var st resourceapi.AllocatedDeviceStatus
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ResourceClaimStatuses) == 0 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			return false, nil
		}
		c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, d := range c.Status.Devices {
			if d.Driver == driver {
				st = d
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the claim of pod %s never got a status of %s", pod.Name, driver)
	}
	return st
}

// fixtureE810 writes a fixture E810 below a sysfs root, starts the kernel
// the tests play for it (binding functions, making /dev/vfio/<group> below
// a dev root) and applies the DeviceClasses; the slices a daemon publishes
// of it go at the end.
func fixtureE810(t *testing.T, ctx context.Context) (root, devRoot string, kernel *sysfsfixture.Kernel) {
	t.Helper()
	root, devRoot, kernel = fixtureTree(t, sysfsfixture.E810())
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	return root, devRoot, kernel
}

// fixtureTree writes the sysfs tree below a root of the test's and starts
// the kernel's stand-in on it (binding functions, making /dev/vfio/<group>
// below devRoot); the node's ResourceSlices are deleted after the test.
func fixtureTree(t *testing.T, tree sysfsfixture.Tree) (root, devRoot string, kernel *sysfsfixture.Kernel) {
	t.Helper()
	root, devRoot = sysfsfixture.TempDir(t), sysfsfixture.TempDir(t)
	if err := tree.Write(root); err != nil {
		t.Fatal(err)
	}
	kernel, err := sysfsfixture.StartKernel(root, devRoot, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kernel.Stop)
	t.Cleanup(func() { deleteSlices(t) })
	return root, devRoot, kernel
}

// TestVFIO: on a fixture E810 whose kernel the test plays (binding
// functions, making /dev/vfio/<group> below a dev root), a pod claiming a
// VF from vfio.fastpath.dev that sits on iavf gets it on vfio-pci, with the
// group's device node, the PCI address and the device-info file; the claim
// is Ready without networkData; once the pod is gone the VF is back on
// iavf.
func TestVFIO(t *testing.T) {
	ctx := testContext(t)
	root, devRoot, kernel := fixtureE810(t, ctx)
	d := startDaemon(t, ctx, 26184, "--sysfs-root", root, "--dev-root", devRoot)

	tmpl := claimTemplate(t, ctx, "e2e-vfio", "dpdk", "vfio.fastpath.dev", `device.attributes["fastpath.dev"].driver == "iavf"`, nil)
	pod := claimPod("e2e-vfio", "env", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &tmpl.Name})
	running, err := bed.RunPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	st := podClaimStatus(t, ctx, running)
	// The E810's iavf VFs and their IOMMU groups.
	vf, ok := map[string]struct{ addr, group string }{
		"pci-0000-3b-01-0": {"0000:3b:01.0", "41"}, "pci-0000-3b-01-1": {"0000:3b:01.1", "42"},
	}[st.Device]
	if !ok {
		t.Fatalf("allocated %s, not an iavf VF", st.Device)
	}
	addr, group := vf.addr, vf.group
	logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "device node /dev/vfio/"+group, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PCIDEVICE_FASTPATH_DEV_DPDK=" + addr, `"pci-address":"` + addr + `"`, `"pf-pci-address":"0000:3b:00.0"`,
		"device node /dev/vfio/" + group + " Dc", "device node /dev/vfio/vfio Dc"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the pod's view lacks %q:\n%s", want, logs)
		}
	}
	if got := kernel.Driver(addr); got != "vfio-pci" {
		t.Errorf("%s is on %q while the pod runs, want vfio-pci", addr, got)
	}
	var data map[string]any
	if len(st.Conditions) != 1 || st.Conditions[0].Type != "Ready" || st.Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("conditions = %+v", st.Conditions)
	}
	if err := json.Unmarshal(st.Data.Raw, &data); err != nil || data["driver"] != "vfio-pci" || data["device-info"] == nil {
		t.Errorf("status data = %s (%v)", st.Data.Raw, err)
	}
	if st.NetworkData != nil {
		t.Errorf("networkData = %+v for a VF on vfio-pci", st.NetworkData)
	}

	if err := bed.DeletePod(ctx, "default", running.Name); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		return kernel.Driver(addr) == "iavf" && checkpointClaims(t, d) == 0, nil
	})
	if err != nil {
		t.Errorf("after the pod went, %s is on %q (want iavf back) and the checkpoint holds %d claims", addr, kernel.Driver(addr), checkpointClaims(t, d))
	}
}

// TestMemif: a vswitch stand-in serves a memif socket in the memif
// directory; a pod claiming from memif.fastpath.dev connects through the
// socket mounted into it and completes the memif handshake; once the pod is
// gone its directory is too, and the vswitch's socket is untouched.
func TestMemif(t *testing.T) {
	ctx := testContext(t)
	root, memifDir := sysfsfixture.TempDir(t), sysfsfixture.TempDir(t)
	if err := sysfsfixture.Plain().Write(root); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(memifDir, "vswitch.sock")
	var mu sync.Mutex
	var greeted []string
	l, err := memif.ListenAndServe(socket, memif.Hello{Name: "vswitch"}, func(in memif.Init) {
		mu.Lock()
		defer mu.Unlock()
		greeted = append(greeted, in.Name)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	t.Cleanup(func() { deleteSlices(t) })
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	d := startDaemon(t, ctx, 26185, "--sysfs-root", root, "--memif-dir", memifDir)

	tmpl := claimTemplate(t, ctx, "e2e-memif", "vs", "memif.fastpath.dev", `device.attributes["fastpath.dev"].memifRole == "slave"`,
		&v1alpha1.InterfaceConfig{Memif: &v1alpha1.MemifSpec{UID: new(int64(0)), GID: new(int64(0))}})
	pod := claimPod("e2e-memif", "memif", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &tmpl.Name})
	running, err := bed.RunPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "INIT acknowledged", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, `memif /run/fastpath/memif/vs/memif.sock: HELLO from "vswitch"`) {
		t.Errorf("workload log: %s", logs)
	}
	mu.Lock()
	if !slices.Contains(greeted, "workload") {
		t.Errorf("the vswitch got INITs from %q, want one from the workload", greeted)
	}
	mu.Unlock()
	st := podClaimStatus(t, ctx, running)
	var data map[string]any
	if err := json.Unmarshal(st.Data.Raw, &data); err != nil || data["hostSocketPath"] != socket || data["role"] != "slave" || data["device-info"] == nil {
		t.Errorf("status data = %s (%v)", st.Data.Raw, err)
	}
	claims := filepath.Join(d.stateDir, "claims")
	if entries, _ := os.ReadDir(claims); len(entries) != 1 {
		t.Errorf("claim directories while the pod runs: %v", entries)
	}

	if err := bed.DeletePod(ctx, "default", running.Name); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		entries, _ := os.ReadDir(claims)
		return len(entries) == 0 && checkpointClaims(t, d) == 0, nil
	})
	if err != nil {
		t.Errorf("the claim's memif directory or checkpoint entry outlived the pod")
	}
	if fi, err := os.Stat(socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the vswitch's socket: %v", err)
	}
}
