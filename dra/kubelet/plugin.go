package kubelet

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"path/filepath"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// Runtime releases what the runtime's hooks put in place for a claim
// (nri.Plugin): Unprepare calls it first, for pods whose sandbox stopped
// without fastpath.
type Runtime interface {
	ReleaseClaim(ctx context.Context, key claims.Key) error
}

// Start starts the kubelet plugin helper for one driver; with meta, it
// writes the device metadata of the claims it prepares. extra are more of
// the helper's options (Serialize(false) for a driver whose Prepare and
// Unprepare order themselves).
func Start(ctx context.Context, p kubeletplugin.DRAPlugin, driver string, client kubernetes.Interface, node, pluginDir, registryDir string, podUID types.UID, health bool, meta *Metadata, extra ...kubeletplugin.Option) (*kubeletplugin.Helper, error) {
	opts := append([]kubeletplugin.Option{
		// Two daemons of the node serve at once while one replaces the
		// other; the helper serializes the kubelet's calls across them,
		// and the claim store is shared between them.
		kubeletplugin.RollingUpdate(podUID),
		kubeletplugin.DriverName(driver),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(node),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
		kubeletplugin.PluginSocket(PluginSocket(pluginDir, podUID)),
		kubeletplugin.RegistrarDirectoryPath(registryDir),
		// A driver without device health says so: the kubelet does not
		// subscribe (else it logs an error at every pod start).
		kubeletplugin.HealthService(health),
	}, meta.options()...)
	opts = append(opts, extra...)
	h, err := kubeletplugin.Start(ctx, p, opts...)
	if err != nil {
		return nil, fmt.Errorf("start the kubelet plugin of %s: %w", driver, err)
	}
	meta.register(driver, pluginDir, h)
	return h, nil
}

// maxSocketPath is the longest path a unix socket can be bound at
// (sun_path, less its NUL).
const maxSocketPath = 107

// PluginSocket names the DRA socket in pluginDir: dra.sock, and with
// rolling updates dra-<pod UID>.sock as the helper would; if that path is
// too long for a socket (a deep kubelet root), a hash of the UID stands in
// for it.
func PluginSocket(pluginDir string, podUID types.UID) string {
	if podUID == "" {
		return "dra.sock"
	}
	name := "dra-" + string(podUID) + ".sock"
	if len(filepath.Join(pluginDir, name)) <= maxSocketPath {
		return name
	}
	sum := sha256.Sum256([]byte(podUID))
	return "dra-" + base64.RawURLEncoding.EncodeToString(sum[:12]) + ".sock"
}

// RegistrationStatus is the kubelet's answer to a helper's registration.
func RegistrationStatus(h *kubeletplugin.Helper, driver string) error {
	if h == nil {
		return fmt.Errorf("%s: not started", driver)
	}
	st := h.RegistrationStatus()
	switch {
	case st == nil:
		return fmt.Errorf("%s: the kubelet has not answered the registration yet", driver)
	case !st.PluginRegistered:
		return fmt.Errorf("%s: the kubelet refused the registration: %s", driver, st.Error)
	}
	return nil
}

// Attributes are the attributes a device of a claim was published with.
type Attributes func(pool, device string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute

// Result is what the kubelet gets for a prepared claim. With meta, each
// device carries its metadata: attrs' attributes, and the network data
// its metadata file holds (written for the pod's sandbox, kept when the
// kubelet prepares the claim again).
func Result(c *claims.Claim, meta *Metadata, attrs Attributes) kubeletplugin.PrepareResult {
	var res kubeletplugin.PrepareResult
	written := map[string]map[[2]string]*resourceapi.NetworkDeviceData{}
	withMetadata := func(kd *kubeletplugin.Device, request string) {
		if meta == nil {
			return
		}
		nd, ok := written[request]
		if !ok {
			nd = meta.networkData(c.Driver, c.Namespace, c.Name, request)
			written[request] = nd
		}
		kd.Metadata = &kubeletplugin.DeviceMetadata{NetworkData: nd[[2]string{kd.PoolName, kd.DeviceName}]}
		if attrs == nil {
			return
		}
		if a := attrs(kd.PoolName, kd.DeviceName); len(a) > 0 {
			kd.Metadata.Attributes = make(map[string]resourceapi.DeviceAttribute, len(a))
			for k, v := range a {
				kd.Metadata.Attributes[string(k)] = v
			}
		}
	}
	for _, dev := range c.Devices {
		kd := kubeletplugin.Device{
			Requests: []string{dev.Request}, PoolName: dev.Pool, DeviceName: dev.Device, CDIDeviceIDs: []string{dev.CDIDevice},
		}
		if dev.Shared != nil && dev.Shared.ShareID != "" {
			kd.ShareID = new(types.UID(dev.Shared.ShareID))
		}
		withMetadata(&kd, dev.Request)
		res.Devices = append(res.Devices, kd)
	}
	for _, n := range c.Networks {
		kd := kubeletplugin.Device{Requests: []string{n.Request}, PoolName: n.Pool, DeviceName: n.Device}
		if n.ShareID != "" {
			kd.ShareID = new(types.UID(n.ShareID))
		}
		withMetadata(&kd, n.Request)
		res.Devices = append(res.Devices, kd)
	}
	return res
}
