package kubelet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/fastpath-dra/fastpath/dra/claims"
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
	return []kubeletplugin.Option{kubeletplugin.EnableDeviceMetadata(true, metadataVersions), kubeletplugin.CDIDirectory(m.CDIDir),
		kubeletplugin.MetadataFileOps(kubeletplugin.MetadataFileOperations{WriteFile: m.writeFile})}
}

// writeFile is the helper's write of a metadata file or of the CDI spec
// that mounts it. A CDI spec is not synced (it is written again at start
// if a power cut lost it: RestoreMetadataSpecs), which spares a pod's
// start two waits for the disk; the metadata file, the spec's source
// after a reboot, is. The file is written again in place
// (claims.OverwriteFile), not replaced: the spec mounts the file itself
// into the containers, and the runtime makes a container's mounts before
// the attach that writes the device's network data has ended (the
// container's start waits for it, not its creation: --attach-overlap).
//
// A CDI spec is always replaced, never left alone for holding the same
// bytes: its rename has the runtime read every spec of the directory
// again, the driver's own spec of the claim too, which the driver moved
// in quietly just before (dra's writeCDISpec).
func (m *Metadata) writeFile(name string, data []byte, perm os.FileMode) error {
	if filepath.Dir(name) == filepath.Clean(m.CDIDir) {
		return claims.ReplaceFileUnsynced(name, data, perm)
	}
	return claims.OverwriteFile(name, data, perm)
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

// SweepMetadata removes the device metadata of the claims the store does
// not hold: their CDI specs in cdiDir ({driver}_metadata_{claim UID}_
// {request}.json) and their files in each driver's plugin directory
// (pluginDirs, by driver). A daemon of the previous release, which knows
// nothing of metadata, leaves them when it unprepares a claim this build
// prepared (a rollback), and so does a daemon killed between a claim's
// Unprepare and its metadata's removal. It runs under the store's file
// lock (claims.Store.Hold): a daemon sharing the node writes a claim's
// metadata only once the claim's record is in the store. The files of a
// claim whose record is held aside are kept; while one is, so is every
// plugin directory's (they are named by claim, which such a record may
// not say). It returns what it removed.
func SweepMetadata(store *claims.Store, cdiDir string, pluginDirs map[string]string) (removed []string, _ error) {
	err := store.Hold(func(held []*claims.Claim, aside []*claims.CorruptError) error {
		keep := map[string]bool{} // driver/UID, and driver/namespace_name
		for _, c := range held {
			keep[c.Driver+"/"+string(c.UID)] = true
			keep[c.Driver+"/"+c.Namespace+"_"+c.Name] = true
		}
		for _, e := range aside {
			keep[e.Claim] = true
		}
		var errs []error
		remove := func(path string, all bool) {
			var err error
			if all {
				err = os.RemoveAll(path)
			} else {
				err = os.Remove(path)
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
				return
			}
			removed = append(removed, path)
		}
		for driver, pluginDir := range pluginDirs {
			specs, err := filepath.Glob(filepath.Join(cdiDir, driver+"_metadata_*_*.json"))
			if err != nil {
				return err
			}
			for _, spec := range specs {
				uid, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(spec), driver+"_metadata_"), "_")
				if ok && !keep[driver+"/"+uid] {
					remove(spec, false)
				}
			}
			if len(aside) > 0 {
				continue
			}
			dir := filepath.Join(pluginDir, "dra-device-metadata")
			entries, err := os.ReadDir(dir)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
				continue
			}
			for _, e := range entries {
				if e.IsDir() && !keep[driver+"/"+e.Name()] {
					remove(filepath.Join(dir, e.Name()), true)
				}
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return removed, fmt.Errorf("remove the device metadata of claims not prepared: %w", err)
	}
	return removed, nil
}

// RestoreMetadataSpecs writes again, for the claims the store holds, the
// CDI spec of each request's metadata file that is there without it, or
// with a spec of other content (a power cut can leave one empty: the
// helper's specs are not synced, Metadata.writeFile), and removes the
// temporary files of the helper's writes a kill interrupted; a write of a
// metadata file in place that one interrupted is completed first
// (claims.FinishOverwrite). The
// specs are in the CDI directory, a tmpfs on most nodes, which a reboot
// empties; the files (in the drivers' plugin directories) and the
// kubelet's memory of the claims as prepared outlast it, and the kubelet
// does not prepare a claim it remembers as prepared: it names the spec's
// device when it creates each container of the pod again, and the
// runtime refuses a device no spec gives. The spec is the one the helper
// writes (k8s.io/dynamic-resource-allocation/kubeletplugin), and the
// metadata file says the pod's name of the claim, which its path in the
// container holds. pluginDirs are the drivers' plugin directories, by
// driver. It returns the specs written.
func RestoreMetadataSpecs(store *claims.Store, cdiDir string, pluginDirs map[string]string) (restored []string, _ error) {
	var errs []error
	for driver := range pluginDirs {
		// The temporary files of the helper's writes this daemon's
		// predecessor was killed in.
		if err := claims.RemoveTemps(cdiDir, driver+"_metadata_"); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	for _, c := range store.Claims() {
		pluginDir, ok := pluginDirs[c.Driver]
		if !ok || !c.Prepared {
			continue
		}
		files, err := filepath.Glob(metadataFile(pluginDir, c.Namespace, c.Name, "*"))
		if err != nil {
			return restored, err
		}
		for _, file := range files {
			request := filepath.Base(filepath.Dir(file))
			// A write of the file a kill or a power cut interrupted.
			if _, err := claims.FinishOverwrite(file); err != nil {
				errs = append(errs, fmt.Errorf("claim %s, request %q: its device metadata: %w", c.String(), request, err))
				continue
			}
			spec := filepath.Join(cdiDir, fmt.Sprintf("%s_metadata_%s_%s.json", c.Driver, c.UID, request))
			wrote, err := writeMetadataSpec(spec, file, c.Driver, c.UID, c.Name, request)
			if err != nil {
				errs = append(errs, fmt.Errorf("claim %s, request %q: the CDI spec of its device metadata: %w", c.String(), request, err))
				continue
			}
			if wrote {
				restored = append(restored, spec)
			}
		}
	}
	return restored, errors.Join(errs...)
}

// writeMetadataSpec writes the CDI spec that mounts a request's metadata
// file into the pod's containers, as the helper does, unless path holds it
// already; it says whether it wrote. A spec of other content (emptied by
// a power cut: the helper's are not synced) is written again.
func writeMetadataSpec(path, file, driver string, uid types.UID, claimName, request string) (bool, error) {
	dm, err := readMetadata(file)
	if err != nil {
		return false, err
	}
	container := metadata.ResourceClaimFilePath(driver, claimName, request)
	if dm.PodClaimName != nil && *dm.PodClaimName != "" {
		container = metadata.ResourceClaimTemplateFilePath(driver, *dm.PodClaimName, request)
	}
	spec := &cdispec.Spec{
		Kind: driver + "/metadata",
		Devices: []cdispec.Device{{
			Name: string(uid) + "_" + request,
			ContainerEdits: cdispec.ContainerEdits{Mounts: []*cdispec.Mount{{
				HostPath: file, ContainerPath: container, Options: []string{"ro", "bind"},
			}}},
		}},
	}
	if spec.Version, err = cdispec.MinimumRequiredVersion(spec); err != nil {
		return false, err
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return false, err
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	return true, claims.WriteFileAtomic(path, data, 0o644)
}
