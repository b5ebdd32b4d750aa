package main

import (
	"context"
	"flag"
	"maps"
	"slices"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	ncv1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	fpv1 "github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/nodeconfig"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/watch"
)

// nodeConfigOptions are the flags of FastpathNodeConfig.
type nodeConfigOptions struct {
	enabled bool
}

func (o *nodeConfigOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.enabled, "node-config", false, "apply the FastpathNodeConfig that selects this node by label: its filter, share, resource names, IP pools and memif endpoints replace the flags' (--filter, --share*, --resource-name, --ip-pools, --memif-config), and it makes the VFs it asks for; two selecting the node apply neither")
}

// nodeConfigPermissions are the calls --node-config makes.
var nodeConfigPermissions = []permission{
	{group: ncv1.Group, resource: ncv1.Resource, verb: "list", why: "watching the FastpathNodeConfigs (--node-config)"},
	{group: ncv1.Group, resource: ncv1.Resource, verb: "watch", why: "watching the FastpathNodeConfigs (--node-config)"},
	{group: ncv1.Group, resource: ncv1.Resource, subresource: "status", verb: "patch", why: "the node's entry in a FastpathNodeConfig's status (--node-config)"},
	{group: "", resource: "nodes", verb: "list", why: "watching this node's labels (--node-config)"},
	{group: "", resource: "nodes", verb: "watch", why: "watching this node's labels (--node-config)"},
}

// startNodeConfig watches the FastpathNodeConfigs and the node's labels and
// applies the object that selects the node, until ctx ends.
func (o *runOptions) startNodeConfig(ctx context.Context, restConfig *rest.Config, client kubernetes.Interface, discoverer *devices.Discoverer,
	driver *dra.Driver, store *claims.Store, ipamClaims *nri.IPAMClaimOptions) error {
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	configs, err := watch.NewWatchCache[ncv1.FastpathNodeConfig](dyn, ncv1.GroupVersionResource)
	if err != nil {
		return err
	}
	node := watch.NewNodeLabels(client, o.nodeName)
	c := nodeconfig.New(nodeconfig.Options{
		NodeName: o.nodeName, Configs: configs, NodeLabels: node.Labels,
		Base: o.Selection(), BasePools: slices.Collect(maps.Values(o.ipPools)), Discovery: discoverer,
		SetPools: func(pools []fpv1.IPPool) {
			p := dra.NewIPPools(fpv1.IPPoolConfig{Pools: pools})
			driver.SetIPPools(p)
			o.gateways.set(p)
			if ipamClaims != nil {
				ipamClaims.SetPools(p)
			}
		},
		VFs: dataplane.PCIBinder{SysfsRoot: o.SysfsRoot, DevRoot: o.devRoot}, Links: dataplane.PFLinks{}, SysfsRoot: o.SysfsRoot,
		Prepared: func(pf string) []string { return claimsOnPF(store, pf) },
		LockPF:   func(pf string) (func(), bool) { return dra.TryLockPF(store, pf) },
		Status:   nodeconfig.APIStatus{Client: dyn, NodeName: o.nodeName},
	})
	if err := configs.OnChange(c.Changed); err != nil {
		return err
	}
	if err := node.OnChange(c.Changed); err != nil {
		return err
	}
	go configs.Run(ctx)
	go node.Run(ctx)
	go c.Run(ctx)
	// The first publish by the object, if the API server answers soon;
	// else by the flags, then by the object once it is read.
	select {
	case <-c.Reconciled():
	case <-time.After(10 * time.Second):
		klog.FromContext(ctx).Info("The FastpathNodeConfigs or the node's labels were not read within 10s: publishing by the flags until they are")
	case <-ctx.Done():
	}
	return nil
}

// claimsOnPF are the claims (namespace/name) that hold the PF at pf or one
// of its VFs.
func claimsOnPF(store *claims.Store, pf string) []string {
	var out []string
	for _, c := range store.Claims() {
		for _, d := range c.Devices {
			if d.PFPCIAddress == pf || d.PCIAddress == pf {
				out = append(out, c.String())
				break
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
