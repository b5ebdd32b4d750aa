package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fastpath-dra/fastpath/dataplane/nldump"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/cnidriver"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/sharedl2"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/dra/watch"
)

// cniPolicyOptions are the flags of the CNI driver's policy: what claims
// may run. fastpathd run and fastpathd controller (which says whether it
// accepts each approved config) take them alike; validate too.
type cniPolicyOptions struct {
	plugins         string
	configNamespace string
	requireApproved bool
	vlanIDs         string
}

func (o *cniPolicyOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.plugins, "cni-plugins", strings.Join(cnipolicy.DefaultPlugins, ","),
		"comma-separated plugin types (IPAM included) CNI configs may run")
	fs.StringVar(&o.configNamespace, "cni-config-namespace", "fastpath-system",
		"namespace approved configs (CNIConfig objects) read ConfigMaps from (configMapKeyRef)")
	fs.BoolVar(&o.requireApproved, "cni-require-approved", false,
		"claims may only name approved configs (configName), not carry plugins of their own")
	fs.StringVar(&o.vlanIDs, "cni-vlan-ids", "",
		"comma-separated VLAN IDs and ranges (100,200-299; 0-4094) of the CNI devices' interface a claim's own config may make its interface on (the vlan plugin's vlanId, 0 when left out); "+
			"none by default: a VLAN of the node's interface is a network of the node's (approved configs may use any)")
}

func (o *cniPolicyOptions) validate(cmd string) error {
	plugins := splitList(o.plugins)
	if len(plugins) == 0 {
		return usagef("%s: --cni-plugins must name at least one plugin type", cmd)
	}
	for _, p := range plugins {
		if err := v1alpha1.ValidCNIPluginType(p); err != nil {
			return usagef("%s: --cni-plugins: %q: %v", cmd, p, err)
		}
	}
	if msgs := validation.IsDNS1123Label(o.configNamespace); len(msgs) > 0 {
		return usagef("%s: --cni-config-namespace %q: %s", cmd, o.configNamespace, strings.Join(msgs, "; "))
	}
	if err := cnipolicy.ValidateVLANIDs(splitList(o.vlanIDs)); err != nil {
		return usagef("%s: --cni-vlan-ids: %v", cmd, err)
	}
	return nil
}

func (o *cniPolicyOptions) policy() cnipolicy.Options {
	return cnipolicy.Options{Plugins: splitList(o.plugins), ConfigNamespace: o.configNamespace, RequireApproved: o.requireApproved,
		VLANIDs: splitList(o.vlanIDs)}
}

// cniOptions are the flags of the CNI DRA driver (cni.dra.networking.x-k8s.io).
type cniOptions struct {
	cniPolicyOptions
	enabled       bool
	pluginDir     string
	binDirs       string
	devices       int
	sharedDevice  bool
	iface         string
	checkInterval time.Duration
	maxPlugins    int
}

func (o *cniOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.enabled, "cni", false, "also serve the CNI DRA driver "+cnidriver.DriverName)
	fs.StringVar(&o.pluginDir, "cni-plugin-dir", "/var/lib/kubelet/plugins/"+cnidriver.DriverName, "directory for the CNI driver's DRA socket")
	fs.StringVar(&o.binDirs, "cni-bin-dir", "/opt/cni/bin", "comma-separated directories of CNI plugin executables")
	o.cniPolicyOptions.addFlags(fs)
	fs.IntVar(&o.devices, "cni-devices", 64, "CNI devices the node publishes: how many CNI networks its pods can have at once")
	fs.BoolVar(&o.sharedDevice, "cni-shared-device", false, "publish one CNI device allocated many times (allowMultipleAllocations, capacity \"networks\" = --cni-devices; Kubernetes 1.36 or newer) instead of --cni-devices interchangeable ones")
	fs.StringVar(&o.iface, "cni-interface", "", "value of the devices' attribute name, e.g. a macvlan master (default: the interface of the default route)")
	fs.DurationVar(&o.checkInterval, "cni-check-interval", 0, "run CNI CHECK for every added network this often, and report it in the claim's status (condition Healthy); 0: never")
	fs.IntVar(&o.maxPlugins, "cni-max-plugins", defaultMaxPlugins, "CNI plugin processes (of CNI claims, NetworkAttachmentDefinitions and PodNetworks) that run at once on the node, the rest queued in order; they run within the daemon's memory limit; 0: no bound")
}

// defaultMaxPlugins is --cni-max-plugins's default, sized to the chart's
// 256 MiB memory limit: the daemon's own 100 MiB or so with 1,024 devices,
// and up to some 20 MiB for each plugin process (a Go binary such as
// macvlan, host-local or sriov).
const defaultMaxPlugins = 8

func (o *cniOptions) validate() error {
	if err := o.cniPolicyOptions.validate("run"); err != nil {
		return err
	}
	if o.maxPlugins < 0 {
		return usagef("run: --cni-max-plugins %d: must not be negative (0: no bound)", o.maxPlugins)
	}
	if !o.enabled {
		return nil
	}
	switch {
	case o.devices < 1:
		return usagef("run: --cni-devices %d: must be at least 1", o.devices)
	case o.pluginDir == "" || len(splitList(o.binDirs)) == 0:
		return usagef("run: --cni-plugin-dir and --cni-bin-dir must not be empty")
	case o.checkInterval < 0:
		return usagef("run: --cni-check-interval %s: must not be negative (0: no CHECK)", o.checkInterval)
	case o.checkInterval > 0 && o.checkInterval < time.Second:
		return usagef("run: --cni-check-interval %s: must be at least 1s (each CHECK runs the plugins)", o.checkInterval)
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

// start starts the CNI driver, and the periodic CHECK of its networks.
func (o *cniOptions) start(ctx context.Context, restConfig *rest.Config, client kubernetes.Interface, nodeName, registryDir string,
	store *claims.Store, storeFault func() error, writer *status.Writer, plugin *nri.Plugin, m *metrics.Metrics, podUID types.UID, meta *kubelet.Metadata,
	prefetch *kubelet.Prefetch, gateways func() sharedl2.Gateways) (*cnidriver.Driver, error) {
	attrs := map[string]string{}
	iface := o.iface
	if iface == "" {
		iface = defaultRouteInterface()
	}
	if iface != "" {
		attrs["name"] = iface
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	d, err := cnidriver.New(cnidriver.Options{
		NodeName: nodeName, Client: client, PluginDir: o.pluginDir, RegistryDir: registryDir,
		Store: store, Status: writer, Runtime: plugin, Metrics: m, PodUID: podUID,
		Devices: o.devices, SharedDevice: o.sharedDevice, Attributes: attrs,
		Policy: o.policy(), Approved: watch.NewApprovedConfigs(dyn), Metadata: meta, Prefetch: prefetch, PoolGateways: gateways,
		StoreFault: storeFault,
	})
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, fmt.Errorf("CNI driver: %w", err)
	}
	go plugin.CheckNetworks(ctx, o.checkInterval)
	return d, nil
}

// defaultRouteInterface is the interface of the IPv4 default route, "" if
// there is none.
func defaultRouteInterface() string {
	routes, err := nldump.Read(func() ([]netlink.Route, error) { return netlink.RouteList(nil, netlink.FAMILY_V4) })
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
