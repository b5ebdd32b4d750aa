package kubelet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// Metadata writes the device metadata of prepared claims (KEP-5304)
// through the drivers' helpers: at Prepare, each request's devices with
// their attributes, in a file of the driver's plugin directory that a CDI
// spec of its own mounts into every container of the pod at
// /var/run/kubernetes.io/dra-device-attributes/…; once the runtime's hooks
// put a device in its pod, its network data (interface, addresses,
// hardware address) too. A nil *Metadata writes none.
//
// The file is its own record: a Prepare done again (the kubelet restarted)
// keeps the network data it holds, and an update reads the attributes
// from it.
type Metadata struct {
	// CDIDir is where the helpers write the CDI specs that mount the
	// files, the directory of fastpath's own CDI specs.
	CDIDir string

	mu      sync.Mutex // serializes the updates of a file
	helpers map[string]registered
}

type registered struct {
	helper    *kubeletplugin.Helper
	pluginDir string
}

// metadataVersions are the versions the files are written in, newest
// first.
var metadataVersions = []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}

// options are the helper's options for a driver.
func (m *Metadata) options() []kubeletplugin.Option {
	if m == nil {
		return nil
	}
	return []kubeletplugin.Option{kubeletplugin.EnableDeviceMetadata(true, metadataVersions), kubeletplugin.CDIDirectory(m.CDIDir)}
}

func (m *Metadata) register(driver, pluginDir string, h *kubeletplugin.Helper) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.helpers == nil {
		m.helpers = map[string]registered{}
	}
	m.helpers[driver] = registered{helper: h, pluginDir: pluginDir}
}

// MetadataClaim names a prepared claim whose metadata is written.
type MetadataClaim struct {
	Driver          string
	Namespace, Name string
	UID             types.UID
}

// DeviceRef names a device of a claim's request.
type DeviceRef struct {
	Request, Pool, Device string
}

// SetNetworkData records the network data of one device of a claim in its
// request's metadata file. A claim prepared without metadata (by a daemon
// with it off) is left so.
func (m *Metadata) SetNetworkData(ctx context.Context, c MetadataClaim, dev DeviceRef, data *resourceapi.NetworkDeviceData) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.helpers[c.Driver]
	if !ok {
		return nil
	}
	request := resourceclaim.BaseRequestRef(dev.Request)
	dm, err := readMetadata(metadataFile(r.pluginDir, c.Namespace, c.Name, request))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("claim %s/%s, request %q: device metadata: %w", c.Namespace, c.Name, dev.Request, err)
	}
	var devs []kubeletplugin.Device
	found := false
	for _, req := range dm.Requests {
		for _, d := range req.Devices {
			kd := kubeletplugin.Device{Requests: []string{req.Name}, PoolName: d.Pool, DeviceName: d.Name,
				Metadata: &kubeletplugin.DeviceMetadata{NetworkData: d.NetworkData}}
			if len(d.Attributes) > 0 {
				kd.Metadata.Attributes = make(map[string]resourceapi.DeviceAttribute, len(d.Attributes))
				for k, v := range d.Attributes {
					kd.Metadata.Attributes[string(k)] = v
				}
			}
			if d.Pool == dev.Pool && d.Name == dev.Device {
				kd.Metadata.NetworkData, found = data, true
			}
			devs = append(devs, kd)
		}
	}
	if !found {
		return fmt.Errorf("claim %s/%s, request %q: device metadata has no device %s of pool %s", c.Namespace, c.Name, dev.Request, dev.Device, dev.Pool)
	}
	if err := r.helper.UpdateRequestMetadata(ctx, c.Namespace, c.Name, c.UID, dev.Request, devs); err != nil {
		return fmt.Errorf("claim %s/%s, request %q, device %s: device metadata: %w", c.Namespace, c.Name, dev.Request, dev.Device, err)
	}
	return nil
}

// networkData is the network data the request's metadata file holds for
// each device, by pool and device.
func (m *Metadata) networkData(driver, namespace, name, request string) map[[2]string]*resourceapi.NetworkDeviceData {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	r, ok := m.helpers[driver]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	dm, err := readMetadata(metadataFile(r.pluginDir, namespace, name, resourceclaim.BaseRequestRef(request)))
	if err != nil {
		return nil
	}
	out := map[[2]string]*resourceapi.NetworkDeviceData{}
	for _, req := range dm.Requests {
		for _, d := range req.Devices {
			if d.NetworkData != nil {
				out[[2]string{d.Pool, d.Name}] = d.NetworkData
			}
		}
	}
	return out
}

// metadataFile is where the helper keeps a request's metadata (the layout
// of k8s.io/dynamic-resource-allocation/kubeletplugin's writer).
func metadataFile(pluginDir, namespace, name, request string) string {
	return filepath.Join(pluginDir, "dra-device-metadata", namespace+"_"+name, request, "metadata.json")
}

func readMetadata(path string) (*metadata.DeviceMetadata, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var dm metadata.DeviceMetadata
	if err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(f), &dm); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &dm, nil
}
