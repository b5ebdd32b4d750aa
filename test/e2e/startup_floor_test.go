//go:build e2e && benche2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// floorDriver is the least a DRA driver can be: a kubelet plugin whose
// Prepare gives the kubelet the allocated devices and nothing else (no
// CDI device, no record, no hook), over a ResourceSlice of devices with
// no attributes. A pod with a claim of it costs what Kubernetes' DRA path
// costs: the claim made from its template, allocated, the kubelet's and
// its plugin helper's calls. Against it, a fastpath claim shows what
// fastpath adds.
const floorDriver = "floor.fastpath.test"

type floorPlugin struct{}

// floorPrepares are the floor driver's Prepares as it saw them, by the
// name of the pod whose claim it prepared: when each began and ended.
var floorPrepares sync.Map // pod name → [2]time.Time

func (floorPlugin) PrepareResourceClaims(_ context.Context, cls []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	began := time.Now()
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(cls))
	defer func() {
		ended := time.Now()
		for _, c := range cls {
			for _, o := range c.OwnerReferences {
				if o.Kind == "Pod" {
					floorPrepares.Store(o.Name, [2]time.Time{began, ended})
				}
			}
		}
	}()
	for _, c := range cls {
		var res kubeletplugin.PrepareResult
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == floorDriver {
				res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device})
			}
		}
		out[c.UID] = res
	}
	return out, nil
}

func (floorPlugin) UnprepareResourceClaims(_ context.Context, cls []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(cls))
	for _, c := range cls {
		out[c.UID] = nil
	}
	return out, nil
}

func (floorPlugin) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

// WatchHealthStatus is never called: the plugin says it has no health
// service.
func (floorPlugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return nil
}

// startFloorDriver registers the floor driver with the bed's kubelet,
// publishes n devices and its DeviceClass, and returns a claim template
// of one device of it; all of it goes with the test.
func startFloorDriver(t *testing.T, ctx context.Context, n int) *resourceapi.ResourceClaimTemplate {
	t.Helper()
	cfg := bed.Config()
	pluginDir := cfg.PluginDir(floorDriver)
	if err := os.MkdirAll(pluginDir, 0o750); err != nil {
		t.Fatal(err)
	}
	h, err := kubeletplugin.Start(ctx, floorPlugin{},
		kubeletplugin.DriverName(floorDriver), kubeletplugin.KubeClient(bed.Client()), kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.PluginDataDirectoryPath(pluginDir), kubeletplugin.RegistrarDirectoryPath(cfg.RegistryDir()),
		kubeletplugin.HealthService(false))
	if err != nil {
		t.Fatalf("start the floor driver: %v", err)
	}
	t.Cleanup(func() {
		h.Stop()
		_ = bed.Client().ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.driver=" + floorDriver})
		_ = os.RemoveAll(pluginDir)
	})
	devs := make([]resourceapi.Device, n)
	for i := range devs {
		devs[i].Name = fmt.Sprintf("dev-%d", i)
	}
	if err := h.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		cfg.NodeName: {Slices: []resourceslice.Slice{{Devices: devs}}},
	}}); err != nil {
		t.Fatal(err)
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: floorDriver},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", floorDriver)}}}}}
	if _, err := bed.Client().ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "startup-floor"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name}}},
		}}},
	}
	if _, err := bed.Client().ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceClaimTemplates("default").Delete(context.Background(), tmpl.Name, metav1.DeleteOptions{})
	})
	// The slice must be there before a pod is scheduled against it.
	err = pollSlices(ctx, floorDriver, n)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// pollSlices waits until the driver's ResourceSlices publish n devices.
func pollSlices(ctx context.Context, driver string, n int) error {
	var have int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := bed.Client().ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driver})
		if err != nil {
			return false, nil
		}
		have = 0
		for _, s := range list.Items {
			have += len(s.Spec.Devices)
		}
		return have == n, nil
	})
	if err != nil {
		return fmt.Errorf("the %s ResourceSlices publish %d devices, want %d: %w", driver, have, n, err)
	}
	return nil
}
