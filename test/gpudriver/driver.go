// Package gpudriver is a second DRA driver for the test bed: it publishes
// stand-in GPUs, each on a PCIe root (the standard
// resource.kubernetes.io/pcieRoot attribute, as GPU drivers publish it),
// and serves the kubelet as a real driver does, so that a pod whose claim
// aligns a GPU with a fastpath device starts with both. Preparing a GPU
// gives the container one environment variable through CDI,
// STAND_IN_GPU_<NAME>=<pcieRoot> (the name in capitals, - as _); nothing
// else is touched on the node.
package gpudriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Name is the driver's name.
const Name = "gpu.e2e.fastpath.dev"

// cdiKind is the CDI kind of the driver's devices.
const cdiKind = "e2e.fastpath.dev/gpu"

// GPU is a stand-in GPU: its device name and its PCIe root.
type GPU struct{ Name, PCIeRoot string }

// Env is the environment variable preparing the GPU gives a container.
func (g GPU) Env() string {
	return "STAND_IN_GPU_" + strings.ToUpper(strings.ReplaceAll(g.Name, "-", "_")) + "=" + g.PCIeRoot
}

// Config is where the driver serves: the node's name, the kubelet's plugin
// registry and the driver's plugin directory, and the CDI directory the
// runtime reads.
type Config struct {
	Client      kubernetes.Interface
	Node        string
	RegistryDir string
	PluginDir   string
	CDIDir      string
}

// Driver is the running driver.
type Driver struct {
	cfg    Config
	helper *kubeletplugin.Helper
	gpus   []GPU
}

// Start registers the driver with the kubelet; it publishes nothing until
// Publish.
func Start(ctx context.Context, cfg Config) (*Driver, error) {
	d := &Driver{cfg: cfg}
	if err := os.MkdirAll(cfg.PluginDir, 0o750); err != nil {
		return nil, err
	}
	h, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(Name),
		kubeletplugin.KubeClient(cfg.Client),
		kubeletplugin.NodeName(cfg.Node),
		kubeletplugin.PluginDataDirectoryPath(cfg.PluginDir),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistryDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return nil, fmt.Errorf("start the kubelet plugin of %s: %w", Name, err)
	}
	d.helper = h
	return d, nil
}

// Registered says whether the kubelet accepted the driver's registration.
func (d *Driver) Registered() bool {
	st := d.helper.RegistrationStatus()
	return st != nil && st.PluginRegistered
}

// sliceName is the name of the driver's one ResourceSlice.
func (d *Driver) sliceName() string { return d.cfg.Node + "-" + Name }

// Publish writes the GPUs' CDI spec and the node's ResourceSlice of them,
// in the order given; a later Publish replaces both (a new pool
// generation).
func (d *Driver) Publish(ctx context.Context, gpus []GPU) error {
	spec := cdispec.Spec{Version: "0.6.0", Kind: cdiKind}
	var devices []resourceapi.Device
	for _, g := range gpus {
		spec.Devices = append(spec.Devices, cdispec.Device{Name: g.Name, ContainerEdits: cdispec.ContainerEdits{Env: []string{g.Env()}}})
		devices = append(devices, resourceapi.Device{Name: g.Name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			deviceattribute.StandardDeviceAttributePCIeRoot: {StringValue: new(g.PCIeRoot)},
			"model": {StringValue: new("stand-in")},
		}})
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.cfg.CDIDir, 0o755); err != nil {
		return err
	}
	tmp := d.cdiFile() + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, d.cdiFile()); err != nil {
		return err
	}
	slices := d.cfg.Client.ResourceV1().ResourceSlices()
	slice, err := slices.Get(ctx, d.sliceName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		slice = &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: d.sliceName()}, Spec: resourceapi.ResourceSliceSpec{
			Driver: Name, NodeName: new(d.cfg.Node), Pool: resourceapi.ResourcePool{Name: d.cfg.Node, ResourceSliceCount: 1}, Devices: devices,
		}}
		_, err = slices.Create(ctx, slice, metav1.CreateOptions{})
	case err == nil:
		slice.Spec.Pool.Generation++
		slice.Spec.Devices = devices
		_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("publish the ResourceSlice of %s: %w", Name, err)
	}
	d.gpus = gpus
	return nil
}

func (d *Driver) cdiFile() string { return filepath.Join(d.cfg.CDIDir, "e2e-stand-in-gpus.json") }

// Stop unregisters the driver and removes its slice and CDI spec.
func (d *Driver) Stop(ctx context.Context) error {
	d.helper.Stop()
	err := d.cfg.Client.ResourceV1().ResourceSlices().Delete(ctx, d.sliceName(), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		err = nil
	}
	if rmErr := os.Remove(d.cdiFile()); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		err = errors.Join(err, rmErr)
	}
	return err
}

// PrepareResourceClaims gives each of the driver's devices in a claim its
// CDI device; a device the driver does not publish fails the claim.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		var res kubeletplugin.PrepareResult
		if c.Status.Allocation == nil {
			res.Err = fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
			out[c.UID] = res
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != Name {
				continue
			}
			if !d.publishes(r.Device) {
				res.Err = fmt.Errorf("claim %s/%s, request %s: %s publishes no device %s", c.Namespace, c.Name, r.Request, Name, r.Device)
				break
			}
			res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
				CDIDeviceIDs: []string{cdiKind + "=" + r.Device}})
		}
		klog.FromContext(ctx).Info("Prepared stand-in GPUs", "claim", klog.KObj(c), "devices", len(res.Devices), "err", res.Err)
		out[c.UID] = res
	}
	return out, nil
}

func (d *Driver) publishes(name string) bool {
	for _, g := range d.gpus {
		if g.Name == name {
			return true
		}
	}
	return false
}

// UnprepareResourceClaims has nothing to undo.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError logs what the helper could not do in the background.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

// WatchHealthStatus: stand-in GPUs have no health.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
