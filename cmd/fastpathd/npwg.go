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
)

// npwgOptions are the flags of the networks pods select with the Network
// Plumbing WG annotation (k8s.v1.cni.cncf.io/networks).
type npwgOptions struct {
	enabled           bool
	confDir           string
	allowedNamespaces string
	defaultNetwork    string
	defaultInterface  string
	deviceInfoDir     string
	ipamClaims        bool
	podNetworks       bool
	ipamClaimInterval time.Duration
}

func (o *npwgOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.enabled, "npwg", false, "attach the NetworkAttachmentDefinitions a pod selects with the k8s.v1.cni.cncf.io/networks annotation at sandbox creation, "+
		"and write its network-status; off by default: leave it off where Multus does this (the plugin types a network may run are those of --cni-plugins, "+
		"from --cni-bin-dir)")
	fs.StringVar(&o.confDir, "npwg-conf-dir", "/etc/cni/multus/net.d", "directory where a NetworkAttachmentDefinition with an empty spec.config finds the CNI configuration of its name (as Multus does)")
	fs.StringVar(&o.allowedNamespaces, "npwg-allowed-namespaces", "", "comma-separated namespaces whose NetworkAttachmentDefinitions pods of every namespace may select (\"*\": all); "+
		"a pod may always select those of its own namespace")
	fs.StringVar(&o.defaultNetwork, "npwg-default-network", "default/cluster-network", "name of the cluster default network in the pods' network-status; empty leaves its entry out")
	fs.StringVar(&o.defaultInterface, "npwg-default-interface", "eth0", "the pods' interface on the cluster default network: no selected network may take its name")
	fs.StringVar(&o.deviceInfoDir, "npwg-device-info-dir", npwg.DefaultDeviceInfoDir, "where the device-info of devices claimed in mode delegate is written for the NetworkAttachmentDefinitions' CNI plugins (dp/RESOURCE-PCI-device.json, as the SR-IOV device plugin writes it)")
	fs.BoolVar(&o.podNetworks, "podnetworks", false, "attach the PodNetworks (KEP-3698, network.fastpath.dev) pods name with the annotation network.fastpath.dev/networks at sandbox creation, "+
		"with the configuration of the CRI Network API's network of that name or of the NetworkAttachmentDefinition of their parametersRefs, and write the pod's network.fastpath.dev/network-status; needs --npwg")
	fs.BoolVar(&o.ipamClaims, "npwg-ipamclaims", false, "give an attachment whose element names an IPAMClaim (ipam-claim-reference) the IPAMClaim's addresses, "+
		"allocated from the node pool its NetworkAttachmentDefinition names (annotation "+npwg.IPPoolAnnotation+", --ip-pools) or by the network's IPAM when they have none, "+
		"and keep a pool address until the IPAMClaim is deleted; off: the reference is left to the network's plugins")
	fs.DurationVar(&o.ipamClaimInterval, "npwg-ipamclaim-check-interval", time.Minute, "how often the IPAMClaims whose addresses the node keeps are checked, "+
		"to release those of deleted ones (besides after each pod's teardown and at start-up)")
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
	{group: pnv1.Group, resource: pnv1.ResourcePodNetworkAttachments, verb: "get", why: "the PodNetworkAttachments pods name (--podnetworks)"},
}

// podNetworkOptions are the NRI plugin's PodNetwork options; nil when
// --podnetworks is off.
func (o *npwgOptions) podNetworkOptions(restConfig *rest.Config, client kubernetes.Interface, configs nri.NetworkConfigs) (*nri.PodNetworkOptions, error) {
	if !o.podNetworks {
		return nil, nil
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	return &nri.PodNetworkOptions{Objects: dra.PodNetworks{Client: dyn}, Networks: configs, Status: status.PodNetworkStatus{Client: client}}, nil
}

// networkSources are the CRI Network API's networks from the cluster:
// the PodNetworks (--podnetworks) and the NetworkAttachmentDefinitions
// (--npwg) this node attaches.
func (o *npwgOptions) networkSources(restConfig *rest.Config) ([]netapi.Source, error) {
	if !o.enabled {
		return nil, nil
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	sources := []netapi.Source{dra.NADSource{Client: dyn, ConfDir: o.confDir}}
	if o.podNetworks {
		sources = append(sources, dra.PodNetworkSource{Client: dyn, NADs: dra.NADs{Client: dyn}, ConfDir: o.confDir})
	}
	return sources, nil
}

// networkAPIPermissions are the lists the CRI Network API makes of the
// networks of networkSources.
func (o *npwgOptions) networkAPIPermissions() []permission {
	var ps []permission
	if o.enabled {
		ps = append(ps, permission{group: "k8s.cni.cncf.io", resource: "network-attachment-definitions", verb: "list", why: "the CRI Network API lists them (--network-api-socket, --npwg)"})
	}
	if o.podNetworks {
		ps = append(ps, permission{group: pnv1.Group, resource: pnv1.ResourcePodNetworks, verb: "list", why: "the CRI Network API lists them (--network-api-socket, --podnetworks)"})
	}
	return ps
}

// ipamClaimPermissions are the calls --npwg-ipamclaims makes.
var ipamClaimPermissions = []permission{
	{group: "k8s.cni.cncf.io", resource: "ipamclaims", verb: "get", why: "the IPAMClaims pods name (--npwg-ipamclaims)"},
	{group: "k8s.cni.cncf.io", resource: "ipamclaims/status", verb: "update", why: "writing an IPAMClaim's addresses and owner pod (--npwg-ipamclaims)"},
}

func (o *npwgOptions) policy() npwg.Policy {
	return npwg.Policy{AllowedNamespaces: splitList(o.allowedNamespaces)}
}

func (o *npwgOptions) validate(cni *cniOptions) error {
	if err := o.policy().Validate(); err != nil {
		return usagef("run: --npwg-allowed-namespaces: %v", err)
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

// options are the NRI plugin's NPWG options, their watch of
// NetworkAttachmentDefinitions running until ctx ends; nil when --npwg is
// off.
func (o *npwgOptions) options(ctx context.Context, restConfig *rest.Config, client kubernetes.Interface, cni *cniOptions, pools dra.IPPools) (*nri.NPWGOptions, error) {
	if !o.enabled {
		return nil, nil
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	nads, err := dra.NewNADCache(dyn)
	if err != nil {
		return nil, err
	}
	go nads.Run(ctx)
	opts := &nri.NPWGOptions{NADs: nads, ConfDir: o.confDir, Policy: o.policy(), Plugins: splitList(cni.plugins),
		Status: status.PodNetworkStatus{Client: client}, DefaultNetwork: o.defaultNetwork, DefaultInterface: o.defaultInterface}
	if o.ipamClaims {
		opts.IPAMClaims = nri.NewIPAMClaimOptions(dra.IPAMClaims{Dynamic: dyn, Client: client}, pools, o.ipamClaimInterval)
	}
	return opts, nil
}
