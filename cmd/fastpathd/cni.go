package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// cniOptions are the flags of the CNI DRA driver (cni.dra.networking.x-k8s.io).
type cniOptions struct {
	enabled         bool
	pluginDir       string
	binDirs         string
	plugins         string
	devices         int
	iface           string
	configNamespace string
}

// defaultCNIPlugins are the reference plugins a CNI claim may run unless
// the operator says otherwise: a CNI config runs privileged code.
const defaultCNIPlugins = "bridge,host-device,host-local,ipvlan,macvlan,static,tuning,vlan"

func (o *cniOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.enabled, "cni", false, "also serve the CNI DRA driver "+dra.CNIDriverName)
	fs.StringVar(&o.pluginDir, "cni-plugin-dir", "/var/lib/kubelet/plugins/"+dra.CNIDriverName, "directory for the CNI driver's DRA socket")
	fs.StringVar(&o.binDirs, "cni-bin-dir", "/opt/cni/bin", "comma-separated directories of CNI plugin executables")
	fs.StringVar(&o.plugins, "cni-plugins", defaultCNIPlugins, "comma-separated plugin types (IPAM included) CNI claims may run")
	fs.IntVar(&o.devices, "cni-devices", 64, "CNI devices the node publishes: how many CNI networks its pods can have at once")
	fs.StringVar(&o.iface, "cni-interface", "", "value of the devices' attribute name, e.g. a macvlan master (default: the interface of the default route)")
	fs.StringVar(&o.configNamespace, "cni-config-namespace", "fastpath-system", "namespace of the operator-approved CNI configs (ConfigMaps) claims name with configName")
}

func (o *cniOptions) validate() error {
	if !o.enabled {
		return nil
	}
	switch {
	case o.devices < 1:
		return usagef("run: --cni-devices %d: must be at least 1", o.devices)
	case strings.TrimSpace(o.plugins) == "":
		return usagef("run: --cni-plugins must name at least one plugin type")
	case o.pluginDir == "" || o.binDirs == "":
		return usagef("run: --cni-plugin-dir and --cni-bin-dir must not be empty")
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// start starts the CNI driver.
func (o *cniOptions) start(ctx context.Context, client kubernetes.Interface, nodeName, registryDir string, store *claims.Store, writer *status.Writer, runtime dra.Runtime, m *metrics.Metrics, podUID types.UID) (*dra.CNIDriver, error) {
	attrs := map[string]string{}
	iface := o.iface
	if iface == "" {
		iface = defaultRouteInterface()
	}
	if iface != "" {
		attrs["name"] = iface
	}
	d, err := dra.NewCNIDriver(dra.CNIOptions{
		NodeName: nodeName, Client: client, PluginDir: o.pluginDir, RegistryDir: registryDir,
		Store: store, Status: writer, Runtime: runtime, Metrics: m, PodUID: podUID,
		Devices: o.devices, Attributes: attrs,
		Policy: dra.CNIPolicy{Plugins: splitList(o.plugins), ConfigNamespace: o.configNamespace},
	})
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, fmt.Errorf("CNI driver: %w", err)
	}
	return d, nil
}

// defaultRouteInterface is the interface of the IPv4 default route, "" if
// there is none.
func defaultRouteInterface() string {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return ""
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() {
			if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				return l.Attrs().Name
			}
		}
	}
	return ""
}
