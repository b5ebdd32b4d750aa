//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/test/gpudriver"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// pcieRoot is the standard attribute both drivers publish.
var pcieRoot = resourceapi.FullyQualifiedName(deviceattribute.StandardDeviceAttributePCIeRoot)

// TestPCIeRootAlignment: fastpathd on a sysfs fixture of two NICs on two
// PCIe roots (an E810 on pci0000:3a, an X710 on pci0000:5d) and a second
// DRA driver, the stand-in GPU driver of test/gpudriver, registered with
// the bed's kubelet and publishing a GPU on pci0000:ff, where no NIC is,
// listed first, and one on pci0000:5d.
//   - aligned: a claim of a GPU and a VF for DPDK with matchAttribute on
//     resource.kubernetes.io/pcieRoot is allocated both on pci0000:5d (the
//     X710's VF, the GPU listed second); the pod starts with both drivers'
//     devices: the GPU's CDI environment and the VF on vfio-pci.
//   - distinct: two VFs of one request (count 2) with distinctAttribute on
//     the same attribute get one VF of each NIC, both in the pod.
//   - apart: a GPU that must be on pci0000:ff and a VF on its root: no
//     device of fastpath is there; the claim is not allocated and the
//     scheduler says it cannot allocate it.
func TestPCIeRootAlignment(t *testing.T) {
	ctx := testContext(t)
	root, devRoot, kernel := fixtureTree(t, sysfsfixture.Tree{Functions: append(sysfsfixture.E810().Functions, sysfsfixture.X710().Functions...)})
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	d := startDaemon(t, ctx, 26292, "--sysfs-root", root, "--dev-root", devRoot)

	gpuDriver(t, ctx, []gpudriver.GPU{{Name: "gpu-ff", PCIeRoot: "pci0000:ff"}, {Name: "gpu-5d", PCIeRoot: "pci0000:5d"}})
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-gpu"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", gpudriver.Name)}}}}}
	if _, err := bed.Client().ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})

	// The VFs of both NICs are published with their roots.
	roots := map[string]string{}
	waitDevices(t, ctx, "the fixture's VFs with their PCIe roots", func(devs map[string]resourceapi.Device) bool {
		for name, dev := range devs {
			if a, ok := dev.Attributes[deviceattribute.StandardDeviceAttributePCIeRoot]; ok && a.StringValue != nil {
				roots[name] = *a.StringValue
			}
		}
		return roots["pci-0000-3b-01-0"] == "pci0000:3a" && roots["pci-0000-5e-01-0"] == "pci0000:5d"
	})
	gpu := &resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name}}
	nic := func(count int64) *resourceapi.DeviceRequest {
		return &resourceapi.DeviceRequest{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "vfio.fastpath.dev",
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}
	}

	t.Run("aligned", func(t *testing.T) {
		claim := alignedClaim(t, ctx, "e2e-pcie-aligned", []resourceapi.DeviceRequest{*gpu, *nic(1)},
			resourceapi.DeviceConstraint{Requests: []string{"gpu", "nic"}, MatchAttribute: &pcieRoot})
		pod := claimPod(claim.Name, "env", &corev1.PodResourceClaim{Name: "devs", ResourceClaimName: &claim.Name})
		if _, err := bed.RunPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		alloc := waitAllocated(t, ctx, claim.Name)
		g, n := resultOf(t, alloc, "gpu"), resultOf(t, alloc, "nic")
		if g.Driver != gpudriver.Name || g.Device != "gpu-5d" || n.Driver != driverName || roots[n.Device] != "pci0000:5d" {
			t.Errorf("allocated %s/%s and %s/%s (on %s), want %s/gpu-5d and an X710 VF, both on pci0000:5d",
				g.Driver, g.Device, n.Driver, n.Device, roots[n.Device], gpudriver.Name)
		}
		logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "STAND_IN_GPU_GPU_5D=pci0000:5d", 30*time.Second)
		if err != nil {
			t.Fatalf("the pod has not the GPU's environment: %v\n%s", err, logs)
		}
		// The workload prints a line a write: the log read may end before
		// the VF's line, which is waited for on its own.
		if addr := pciAddressOf(n.Device); kernel.Driver(addr) != "vfio-pci" {
			t.Errorf("the VF %s is on %q, want vfio-pci", addr, kernel.Driver(addr))
		} else if logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "="+addr, 30*time.Second); err != nil {
			t.Errorf("the pod's environment does not name the VF %s: %v\n%s", addr, err, logs)
		}
		t.Logf("allocated %s and %s on pci0000:5d", g.Device, n.Device)
		deletePodAndClaim(t, ctx, pod, claim)
	})

	t.Run("distinct", func(t *testing.T) {
		claim := alignedClaim(t, ctx, "e2e-pcie-distinct", []resourceapi.DeviceRequest{*nic(2)},
			resourceapi.DeviceConstraint{Requests: []string{"nic"}, DistinctAttribute: &pcieRoot})
		pod := claimPod(claim.Name, "env", &corev1.PodResourceClaim{Name: "devs", ResourceClaimName: &claim.Name})
		if _, err := bed.RunPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		alloc := waitAllocated(t, ctx, claim.Name)
		got := map[string]string{}
		for _, r := range alloc.Devices.Results {
			got[roots[r.Device]] = r.Device
		}
		if len(alloc.Devices.Results) != 2 || got["pci0000:3a"] == "" || got["pci0000:5d"] == "" {
			t.Fatalf("allocated %+v, want a VF on pci0000:3a and one on pci0000:5d", alloc.Devices.Results)
		}
		// The container prints its environment once it runs: wait for it.
		for _, dev := range got {
			addr := pciAddressOf(dev)
			if logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "="+addr, 30*time.Second); err != nil || kernel.Driver(addr) != "vfio-pci" {
				t.Errorf("the pod's environment does not name the VF %s (on %q): %v\n%s", addr, kernel.Driver(addr), err, logs)
			}
		}
		deletePodAndClaim(t, ctx, pod, claim)
	})

	t.Run("apart", func(t *testing.T) {
		onFF := *gpu
		onFF.Exactly = gpu.Exactly.DeepCopy()
		onFF.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.attributes[%q].pcieRoot == "pci0000:ff"`, "resource.kubernetes.io")}}}
		claim := alignedClaim(t, ctx, "e2e-pcie-apart", []resourceapi.DeviceRequest{onFF, *nic(1)},
			resourceapi.DeviceConstraint{Requests: []string{"gpu", "nic"}, MatchAttribute: &pcieRoot})
		if why := waitUnallocated(t, ctx, numaPod(t, ctx, claim), claim, "no VF is on pci0000:ff"); !strings.Contains(why, "cannot allocate all claims") {
			t.Errorf("the scheduler says %q, want that it cannot allocate the claim", why)
		}
	})

	// Nothing either driver prepared outlives the pods.
	waitNoClaims(t, ctx, d)
}

// gpuDriver starts the stand-in GPU driver on the bed's node, waits for
// the kubelet to register it, and publishes gpus; it stops at the test's
// end.
func gpuDriver(t *testing.T, ctx context.Context, gpus []gpudriver.GPU) *gpudriver.Driver {
	t.Helper()
	cfg := bed.Config()
	g, err := gpudriver.Start(klog.NewContext(ctx, klog.Background()), gpudriver.Config{Client: bed.Client(), Node: bed.NodeName(),
		RegistryDir: cfg.RegistryDir(), PluginDir: cfg.PluginDir(gpudriver.Name), CDIDir: cfg.CDIDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Stop(context.Background()); err != nil {
			t.Errorf("stop the stand-in GPU driver: %v", err)
		}
	})
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return g.Registered(), nil
	}); err != nil {
		t.Fatalf("the kubelet never registered %s", gpudriver.Name)
	}
	if err := g.Publish(ctx, gpus); err != nil {
		t.Fatal(err)
	}
	return g
}

// alignedClaim creates a claim of the requests under one constraint.
func alignedClaim(t *testing.T, ctx context.Context, name string, requests []resourceapi.DeviceRequest, constraint resourceapi.DeviceConstraint) *resourceapi.ResourceClaim {
	t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests, Constraints: []resourceapi.DeviceConstraint{constraint}}}}
	created, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create claim %s: %v", name, err)
	}
	t.Cleanup(func() { deleteClaim(t, name) })
	return created
}

// pciAddressOf is the PCI address of a fastpath device name:
// pci-0000-5e-01-0 is 0000:5e:01.0.
func pciAddressOf(device string) string {
	p := strings.Split(strings.TrimPrefix(device, "pci-"), "-")
	if len(p) != 4 {
		return device
	}
	return p[0] + ":" + p[1] + ":" + p[2] + "." + p[3]
}
