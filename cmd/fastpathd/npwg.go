package main

import (
	"context"
	"flag"
	"path/filepath"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fastpath-dra/fastpath/dra"
	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/netapi"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/dra/watch"
)

// npwgOptions are the flags of the networks pods select with the Network
// Plumbing WG annotation (k8s.v1.cni.cncf.io/networks).
type npwgOptions struct {
	npwgConfigOptions
	enabled           bool
	allowedNamespaces string
	defaultNetwork    string
	defaultInterface  string
	deviceInfoDir     string
	ipamClaims        bool
	podNetworks       bool
	ipamClaimInterval time.Duration
	limits            limitOptions

	// The watches of the objects pods name (watch).
	dyn       dynamic.Interface
	nads      watch.NADCache
	pnObjects watch.PodNetworkCache
}

func (o *npwgOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.enabled, "npwg", false, "attach the NetworkAttachmentDefinitions a pod selects with the k8s.v1.cni.cncf.io/networks annotation at sandbox creation, "+
		"and write its network-status; off by default: leave it off where Multus does this (the plugin types a network may run are those of --cni-plugins, "+
		"from --cni-bin-dir)")
	o.npwgConfigOptions.addFlags(fs, "/etc/cni/multus/net.d")
	fs.StringVar(&o.allowedNamespaces, "npwg-allowed-namespaces", "", "comma-separated namespaces whose NetworkAttachmentDefinitions pods of every namespace may select (\"*\": all); "+
		"a pod may always select those of its own namespace")
	fs.StringVar(&o.defaultNetwork, "npwg-default-network", "default/cluster-network", "name of the cluster default network in the pods' network-status, whose entry is always written; empty: no entry, for a cluster whose default CNI (Multus) writes it")
	fs.StringVar(&o.defaultInterface, "npwg-default-interface", "eth0", "the pods' interface on the cluster default network: no selected network may take its name")
	fs.StringVar(&o.deviceInfoDir, "npwg-device-info-dir", npwg.DefaultDeviceInfoDir, "where the device-info of devices claimed in mode delegate is written for the NetworkAttachmentDefinitions' CNI plugins (dp/RESOURCE-PCI-device.json, as the SR-IOV device plugin writes it)")
	fs.BoolVar(&o.podNetworks, "podnetworks", false, "attach the PodNetworks (KEP-3698, network.fastpath.dev) pods name with the annotation network.fastpath.dev/networks at sandbox creation, "+
		"with the configuration of the CRI Network API's network of that name or of the NetworkAttachmentDefinition of their parametersRefs, and write the pod's network.fastpath.dev/network-status; needs --npwg")
	fs.BoolVar(&o.ipamClaims, "npwg-ipamclaims", false, "give an attachment whose element names an IPAMClaim (ipam-claim-reference) the IPAMClaim's addresses, "+
		"allocated from the node pool its NetworkAttachmentDefinition names (annotation "+npwg.IPPoolAnnotation+", --ip-pools) or by the network's IPAM when they have none, "+
		"and keep a pool address until the IPAMClaim is deleted; off: the reference is left to the network's plugins")
	fs.DurationVar(&o.ipamClaimInterval, "npwg-ipamclaim-check-interval", time.Minute, "how often the IPAMClaims whose addresses the node keeps are checked, "+
		"to release those of deleted ones (besides after each pod's teardown and at start-up)")
	o.limits.addFlags(fs)
}

// npwgConfigOptions are the flags of what a NetworkAttachmentDefinition's
// configuration may be (npwg.ConfigRules but the plugins, which are
// --cni-plugins): fastpathd run and validate take them alike.
type npwgConfigOptions struct {
	confDir        string
	confNamespaces string
	hostDevices    string
	hostPaths      string
	hostOptions    string
	vlanIDs        string
}

// addFlags adds the flags; confDir is --npwg-conf-dir's default.
func (o *npwgConfigOptions) addFlags(fs *flag.FlagSet, confDir string) {
	fs.StringVar(&o.confDir, "npwg-conf-dir", confDir, "directory where a NetworkAttachmentDefinition with an empty spec.config finds the CNI configuration of its name (as Multus does), "+
		"if its namespace is one of --npwg-conf-namespaces")
	fs.StringVar(&o.confNamespaces, "npwg-conf-namespaces", "", "comma-separated namespaces whose NetworkAttachmentDefinitions with an empty spec.config get the configuration of their name "+
		"in --npwg-conf-dir (\"*\": all); none by default: those configurations are the operator's and may name any object of the host, "+
		"and a NetworkAttachmentDefinition of another namespace with an empty spec.config is refused")
	fs.StringVar(&o.hostDevices, "npwg-host-devices", "", "comma-separated host devices a NetworkAttachmentDefinition's spec.config may name "+
		"(interface names, PCI addresses or MACs in fields such as master, bridge, device or pciBusID; shell patterns, \"*\": all); "+
		"none by default: whoever may write one in a namespace is not trusted with the node (configurations of --npwg-conf-dir may name any)")
	fs.StringVar(&o.hostPaths, "npwg-host-paths", "", "comma-separated host directories under which a NetworkAttachmentDefinition's spec.config may name files "+
		"(host-local's dataDir, any absolute path; \"/\": all); none by default")
	fs.StringVar(&o.hostOptions, "npwg-host-options", "", "comma-separated options that change the node which a NetworkAttachmentDefinition's spec.config, "+
		"or a pod's element (its cni-args, its portMappings), may turn on, as <plugin type>.<option> patterns "+
		"(bridge.isGateway, bridge.ipMasq, bridge.*, tuning.sysctl for sysctls outside net.*, tuning.promisc, portmap.portMappings, "+
		"macvlan.passthru for a macvlan that takes its master whole; \"*\": all); none by default")
	fs.StringVar(&o.vlanIDs, "npwg-vlan-ids", "", "comma-separated VLAN IDs and ranges (100,200-299; 0-4094) of a host device a NetworkAttachmentDefinition's spec.config may make its interface on "+
		"(the vlan plugin's vlanId, 0 when left out; a device delegated to the pod excepted); none by default")
}

// hostPolicy is the policy's part for objects of the host.
func (o *npwgConfigOptions) hostPolicy() npwg.Policy {
	return npwg.Policy{HostDevices: splitList(o.hostDevices), HostPaths: splitList(o.hostPaths), HostOptions: splitList(o.hostOptions),
		VLANIDs: splitList(o.vlanIDs)}
}

// confDirRules are the operator's directory and who may use it.
func (o *npwgConfigOptions) confDirRules() npwg.ConfDir {
	return npwg.ConfDir{Path: o.confDir, Namespaces: splitList(o.confNamespaces)}
}

// validate says why the flags are not ones an operator can mean (cmd is
// the command, for the message), or nil.
func (o *npwgConfigOptions) validate(cmd string) error {
	if err := o.confDirRules().Validate(); err != nil {
		return usagef("%s: --npwg-conf-namespaces: %v", cmd, err)
	}
	if err := o.hostPolicy().Validate(); err != nil {
		return usagef("%s: --npwg-host-devices, --npwg-host-paths, --npwg-host-options, --npwg-vlan-ids: %v", cmd, err)
	}
	return nil
}

// npwgPermissions are the calls --npwg makes.
var npwgPermissions = []permission{
	{group: "k8s.cni.cncf.io", resource: "network-attachment-definitions", verb: "get", why: "the networks pods select (--npwg)"},
	{group: "k8s.cni.cncf.io", resource: "network-attachment-definitions", verb: "list", why: "watching the networks pods select (--npwg)"},
	{group: "k8s.cni.cncf.io", resource: "network-attachment-definitions", verb: "watch", why: "watching the networks pods select (--npwg)"},
	{group: "", resource: "pods", verb: "get", why: "reading a pod's network-status to merge into it (--npwg)"},
	{group: "", resource: "pods", verb: "patch", why: "writing a pod's network-status (--npwg)"},
}

// podNetworkPermissions are the calls --podnetworks makes.
var podNetworkPermissions = []permission{
	{group: pnv1.Group, resource: pnv1.ResourcePodNetworks, verb: "get", why: "the PodNetworks pods name (--podnetworks)"},
	{group: pnv1.Group, resource: pnv1.ResourcePodNetworks, verb: "list", why: "watching the PodNetworks pods name (--podnetworks)"},
	{group: pnv1.Group, resource: pnv1.ResourcePodNetworks, verb: "watch", why: "watching the PodNetworks pods name (--podnetworks)"},
	{group: pnv1.Group, resource: pnv1.ResourcePodNetworkAttachments, verb: "get", why: "the PodNetworkAttachments pods name (--podnetworks)"},
	{group: pnv1.Group, resource: pnv1.ResourcePodNetworkAttachments, verb: "list", why: "watching the PodNetworkAttachments pods name (--podnetworks)"},
	{group: pnv1.Group, resource: pnv1.ResourcePodNetworkAttachments, verb: "watch", why: "watching the PodNetworkAttachments pods name (--podnetworks)"},
	{group: "", resource: "nodes", verb: "patch", why: "labelling this node with the PodNetworks it attaches (--podnetworks)"},
}

// watch starts the watches of the objects pods name: the
// NetworkAttachmentDefinitions (--npwg) and the PodNetworks and
// PodNetworkAttachments (--podnetworks), until ctx ends. Until a watch has
// listed its objects, they are read from the API server.
func (o *npwgOptions) watch(ctx context.Context, restConfig *rest.Config) error {
	if !o.enabled {
		return nil
	}
	var err error
	if o.dyn, err = dynamic.NewForConfig(restConfig); err != nil {
		return err
	}
	if o.nads, err = watch.NewNADCache(o.dyn); err != nil {
		return err
	}
	go o.nads.Run(ctx)
	if o.podNetworks {
		if o.pnObjects, err = watch.NewPodNetworkCache(o.dyn); err != nil {
			return err
		}
		go o.pnObjects.Run(ctx)
	}
	return nil
}

// podNetworkOptions are the NRI plugin's PodNetwork options; nil when
// --podnetworks is off. watch has run.
func (o *npwgOptions) podNetworkOptions(client kubernetes.Interface, configs nri.NetworkConfigs) *nri.PodNetworkOptions {
	if !o.podNetworks {
		return nil
	}
	return &nri.PodNetworkOptions{Objects: o.pnObjects, Networks: configs, Status: status.PodNetworkStatus{Client: client}}
}

// networkSources are the CRI Network API's networks from the cluster:
// the PodNetworks (--podnetworks) and the NetworkAttachmentDefinitions
// (--npwg) this node attaches, judged by the node's rules (plugins:
// --cni-plugins). watch has run.
func (o *npwgOptions) networkSources(plugins []string) []netapi.Source {
	if !o.enabled {
		return nil
	}
	sources := []netapi.Source{netapi.NADSource{NADs: o.nads, Rules: o.rules(plugins)}}
	if o.podNetworks {
		sources = append(sources, netapi.PodNetworkSource{Objects: o.pnObjects, NADs: o.nads, Rules: o.rules(plugins)})
	}
	return sources
}

// rules are what the node holds a network's configuration to, as the
// runtime's hook does (nri.NPWGOptions): plugins are --cni-plugins.
func (o *npwgOptions) rules(plugins []string) npwg.ConfigRules {
	return npwg.ConfigRules{ConfDir: o.confDirRules(), Plugins: plugins, Policy: o.policy()}
}

// nodeLabels keeps the labels of the PodNetworks this node can attach on
// its Node (--podnetworks), judged again when the watches of PodNetworks
// and NetworkAttachmentDefinitions change; nil when --podnetworks is off.
// A PodNetwork is judged as the runtime's hook judges it when a pod names
// it (enabled and Ready; its configuration by the node's rules, plugins
// being --cni-plugins), so that the node advertises none its hook would
// refuse. api are the CRI Network API's networks (nil when it is off),
// which override the PodNetworks' of their name. watch has run; the
// caller runs the labels.
func (o *npwgOptions) nodeLabels(client kubernetes.Interface, nodeName string, api netapi.NamedConfigs, binDirs, plugins []string) (*status.NodeLabels, error) {
	if !o.podNetworks {
		return nil, nil
	}
	judge := netapi.PodNetworkJudge{
		Source:  netapi.PodNetworkSource{Objects: o.pnObjects, NADs: o.nads, Rules: o.rules(plugins)},
		API:     api,
		BinDirs: binDirs,
	}
	labels := status.NewNodeLabels(client, nodeName, judge)
	if err := o.pnObjects.OnChange(labels.Changed); err != nil {
		return nil, err
	}
	if err := o.nads.OnChange(labels.Changed); err != nil {
		return nil, err
	}
	return labels, nil
}

// ipamClaimPermissions are the calls --npwg-ipamclaims makes.
var ipamClaimPermissions = []permission{
	{group: "k8s.cni.cncf.io", resource: "ipamclaims", verb: "get", why: "the IPAMClaims pods name (--npwg-ipamclaims)"},
	{group: "k8s.cni.cncf.io", resource: "ipamclaims/status", verb: "update", why: "writing an IPAMClaim's addresses and owner pod (--npwg-ipamclaims)"},
}

func (o *npwgOptions) policy() npwg.Policy {
	p := o.hostPolicy()
	p.AllowedNamespaces = splitList(o.allowedNamespaces)
	return p
}

func (o *npwgOptions) validate(cni *cniOptions) error {
	if err := o.npwgConfigOptions.validate("run"); err != nil {
		return err
	}
	if err := o.policy().Validate(); err != nil {
		return usagef("run: --npwg-allowed-namespaces, --npwg-host-devices, --npwg-host-paths, --npwg-host-options, --npwg-vlan-ids: %v", err)
	}
	if err := npwg.ValidInterfaceName(o.defaultInterface); err != nil {
		return usagef("run: --npwg-default-interface %q: %v", o.defaultInterface, err)
	}
	if o.enabled && (o.confDir == "" || len(splitList(cni.binDirs)) == 0) {
		return usagef("run: --npwg needs --npwg-conf-dir and --cni-bin-dir")
	}
	if o.enabled && !filepath.IsAbs(o.deviceInfoDir) {
		return usagef("run: --npwg-device-info-dir %q: must be an absolute path", o.deviceInfoDir)
	}
	if o.podNetworks && !o.enabled {
		return usagef("run: --podnetworks needs --npwg")
	}
	if o.ipamClaims && !o.enabled {
		return usagef("run: --npwg-ipamclaims needs --npwg")
	}
	if o.ipamClaimInterval <= 0 {
		return usagef("run: --npwg-ipamclaim-check-interval %s: must be positive", o.ipamClaimInterval)
	}
	if err := o.limits.validate(); err != nil {
		return err
	}
	return nil
}

// driverDeviceInfoDir is dra.Options.DeviceInfoDir: "" when --npwg is
// off, so that claims in mode delegate are refused.
func (o *npwgOptions) driverDeviceInfoDir() string {
	if !o.enabled {
		return ""
	}
	return o.deviceInfoDir
}

// options are the NRI plugin's NPWG options; nil when --npwg is off.
// watch has run.
func (o *npwgOptions) options(client kubernetes.Interface, nodeName string, cni *cniOptions, pools dra.IPPools) *nri.NPWGOptions {
	if !o.enabled {
		return nil
	}
	opts := &nri.NPWGOptions{NADs: o.nads, ConfDir: o.confDir, ConfNamespaces: splitList(o.confNamespaces), Policy: o.policy(), Plugins: splitList(cni.plugins),
		Status: status.PodNetworkStatus{Client: client}, DefaultNetwork: o.defaultNetwork, DefaultInterface: o.defaultInterface, Limits: o.limits.limits()}
	if o.ipamClaims {
		opts.IPAMClaims = nri.NewIPAMClaimOptions(watch.IPAMClaims{Dynamic: o.dyn, Client: client}, nodeName, pools, o.ipamClaimInterval)
	}
	return opts
}
