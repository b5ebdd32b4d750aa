package nri

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	cnitypes100 "github.com/containernetworking/cni/pkg/types/100"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/attach"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// NetworkConfigs are the node's network configurations by name: the CRI
// Network API's networks.
type NetworkConfigs interface {
	// Conflist is the CNI configuration list of the network, false when
	// the node has none of that name.
	Conflist(name string) ([]byte, bool)
	// IPRanges are the network's subnets (the CRI Network API's
	// ip_ranges), given to its plugins that declare the ipRanges
	// capability; nil for none.
	IPRanges(name string) []string
}

// PodNetworkStatusPatcher writes a pod's network.fastpath.dev/network-status.
type PodNetworkStatusPatcher interface {
	PatchPodNetworkStatus(ctx context.Context, namespace, name string, uid types.UID, entries []pnv1.NetworkStatus) error
}

// PodNetworkOptions turn on the PodNetworks (KEP-3698) pods name with the
// annotation network.fastpath.dev/networks (fastpathd run --podnetworks).
// They are attached as the networks of the NPWG annotation are, in the
// pod's one record of selected networks, after those.
type PodNetworkOptions struct {
	Objects attach.PodNetworkGetter
	// Networks are the node's networks by name (the CRI Network API); a
	// PodNetwork of that name is attached with that configuration. Nil:
	// none.
	Networks NetworkConfigs
	// Status writes the pod's network.fastpath.dev/network-status; nil
	// for none.
	Status PodNetworkStatusPatcher
}

// podNetworkRequest is the record's request of an attachment to a
// PodNetwork.
func podNetworkRequest(name string) string { return "podnetworks/" + name }

// podNetworkAttachments are the attachments of the PodNetworks the pod
// names, in its list's order, to resolve after the NPWG annotation's:
// the default PodNetwork is the runtime's (the pod's eth0) and is not
// among them. Their Attachment has the PodNetwork's name, and the
// interface the element asks for.
func (p *Plugin) podNetworkAttachments(ctx context.Context, pod Pod) ([]pnv1.Network, []npwg.Attachment, error) {
	if p.opts.PodNetworks == nil || strings.TrimSpace(pod.PodNetworks) == "" {
		return nil, nil, nil
	}
	nets, errs := pnv1.PodNetworks(map[string]string{pnv1.AnnotationNetworks: pod.PodNetworks}, false)
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("pod %s: %w", pod, bounds.Aggregate(errs))
	}
	var keep []pnv1.Network
	var atts []npwg.Attachment
	for i, n := range nets {
		if n.PodNetworkName == pnv1.DefaultPodNetworkName {
			if err := p.checkDefault(ctx, n); err != nil {
				return nil, nil, fmt.Errorf("pod %s, annotation %s, element %d: %w", pod, pnv1.AnnotationNetworks, i, err)
			}
			continue
		}
		var a npwg.Attachment
		a.Namespace, a.Name = "podnetworks", n.PodNetworkName+n.PodNetworkAttachmentName
		a.InterfaceRequest, a.Index = n.InterfaceName, i
		keep = append(keep, n)
		atts = append(atts, a)
	}
	return keep, atts, nil
}

// checkDefault refuses what fastpath cannot do with the default
// PodNetwork, the runtime's network on the pod's default interface: put it
// on another interface, or attach a new pod to it while it is disabled
// (the KEP's AdministrativelyDisabled). With no default PodNetwork object
// the runtime's network is the default, as it is.
func (p *Plugin) checkDefault(ctx context.Context, n pnv1.Network) error {
	if def := p.opts.NPWG.DefaultInterface; n.InterfaceName != "" && n.InterfaceName != def {
		return fmt.Errorf("PodNetwork %s is the runtime's network, on the pod's %s: interfaceName %s cannot move it (leave it out, or give %s)",
			pnv1.DefaultPodNetworkName, def, n.InterfaceName, def)
	}
	pn, err := p.opts.PodNetworks.Objects.GetPodNetwork(ctx, pnv1.DefaultPodNetworkName)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("PodNetwork %s: %w", pnv1.DefaultPodNetworkName, err)
	case !pn.Spec.IsEnabled():
		return fmt.Errorf("PodNetwork %s: %s: enabled is false, no new pod attaches to it", pnv1.DefaultPodNetworkName, pnv1.ReasonAdministrativelyDisabled)
	}
	return nil
}

// resolvePodNetwork is the record of an attachment to a PodNetwork, directly
// or through a PodNetworkAttachment of the pod's namespace. Both must exist
// and be Ready, the PodNetwork enabled (the KEP's active validation: the
// sandbox fails, with the reason, until they are; the runtime tries again).
// The configuration is the node's network of the PodNetwork's name (CRI
// Network API), else the NetworkAttachmentDefinition of its (or its
// attachment's) parametersRefs. ok is false for a PodNetwork of another
// provider.
func (p *Plugin) resolvePodNetwork(ctx context.Context, pod Pod, n pnv1.Network, a *npwg.Attachment) (_ claims.Network, ok bool, _ error) {
	pn, refs, err := attach.LookupPodNetwork(ctx, p.opts.PodNetworks.Objects, pod.Namespace, n.PodNetworkName, n.PodNetworkAttachmentName)
	if err != nil {
		return claims.Network{}, false, err
	}
	name, tenantRefs := pn.Name, len(refs) > 0
	if !attach.OurProvider(pn) {
		klog.FromContext(ctx).V(2).Info("Not attaching a PodNetwork of another provider", "pod", pod.String(), "podNetwork", name, "provider", pn.Spec.Provider)
		return claims.Network{}, false, nil
	}
	if err := attach.Usable(pn); err != nil {
		return claims.Network{}, false, err
	}
	if len(refs) == 0 {
		refs = pn.Spec.ParametersRefs
	}
	list, source, err := p.podNetworkConfig(ctx, pod, name, refs, tenantRefs)
	if err != nil {
		return claims.Network{}, false, fmt.Errorf("PodNetwork %s: %w", name, err)
	}
	a.Name = name
	inv, err := npwg.BuildInvocation(a, list.List)
	if err != nil {
		return claims.Network{}, false, fmt.Errorf("PodNetwork %s (%s): %w", name, source, err)
	}
	if err := p.opts.NPWG.Policy.InvocationHostObjects(inv, list.Source != npwg.SourceSpec); err != nil {
		return claims.Network{}, false, fmt.Errorf("PodNetwork %s (%s): %w (--npwg-host-devices, --npwg-host-paths, --npwg-host-options)", name, source, err)
	}
	net := claims.Network{Request: podNetworkRequest(name), Device: a.InterfaceRequest, IfName: a.InterfaceRequest, Conflist: inv.List.Bytes,
		DefaultRoute: n.IsDefaultGW, PodNetwork: name}
	// A network of the CRI Network API (it wins over parametersRefs)
	// gives its subnets to the plugins that declare ipRanges.
	if nets := p.opts.PodNetworks.Networks; nets != nil {
		if ranges := nets.IPRanges(name); len(ranges) > 0 {
			net.CapabilityArgs = map[string]any{npwg.CapabilityIPRanges: npwg.IPRangeSets(ranges)}
		}
	}
	return net, true, nil
}

// ready is nil when the conditions say Ready, else the error of the
// KEP's reason and message.

// podNetworkConfig is the CNI configuration of a PodNetwork on this node,
// and where it comes from.
func (p *Plugin) podNetworkConfig(ctx context.Context, pod Pod, name string, refs []pnv1.ParametersRef, tenant bool) (*npwg.Config, string, error) {
	if nets := p.opts.PodNetworks.Networks; nets != nil {
		if data, ok := nets.Conflist(name); ok {
			source := "the node's network " + name + " (CRI Network API)"
			cfg, err := npwg.ParseConfigList(data, name, source)
			if err != nil {
				return nil, "", fmt.Errorf("%s: %w", source, err)
			}
			return cfg, source, nil
		}
	}
	for _, ref := range refs {
		if !ref.NamesNAD() {
			continue
		}
		ns := ref.Namespace
		if ns == "" {
			ns = pod.Namespace
		}
		if tenant && ns != pod.Namespace {
			// A PodNetworkAttachment is the tenant's: its objects are of
			// its namespace, as the NPWG policy has it.
			var att npwg.Attachment
			att.Namespace, att.Name = ns, ref.Name
			if err := p.opts.NPWG.Policy.Check(pod.Namespace, &att); err != nil {
				return nil, "", fmt.Errorf("parametersRefs: %w (--npwg-allowed-namespaces)", err)
			}
		}
		nad, err := p.opts.NPWG.NADs.GetNAD(ctx, ns, ref.Name)
		if err != nil {
			return nil, "", fmt.Errorf("parametersRefs: NetworkAttachmentDefinition %s/%s: %w", ns, ref.Name, err)
		}
		cfg, err := p.nadConfig(nad)
		if err != nil {
			return nil, "", err
		}
		return cfg, "NetworkAttachmentDefinition " + ns + "/" + ref.Name, nil
	}
	return nil, "", fmt.Errorf("no configuration on this node: no network %s in the CRI Network API, and no NetworkAttachmentDefinition (k8s.cni.cncf.io) in parametersRefs", name)
}

// PodNetworkStatus is the pod's network.fastpath.dev/network-status: the
// default PodNetwork on the pod's default interface with the runtime's
// IPs, then each PodNetwork the pod is attached to by fastpath, from the
// results libcni cached, with the one that holds the default gateway
// marked (the default PodNetwork when none is). Nil when the pod lists no
// PodNetwork and none of its claims' devices is an attachment to one.
func (p *Plugin) PodNetworkStatus(ctx context.Context, pod Pod) ([]pnv1.NetworkStatus, error) {
	if p.opts.PodNetworks == nil || p.opts.NPWG == nil {
		return nil, nil
	}
	var out []pnv1.NetworkStatus
	var errs []error
	gw := false
	// The pod's claims' devices that are its attachments to a PodNetwork,
	// in the order they were attached: before the annotation's.
	for _, c := range p.opts.Store.PodClaims(pod.UID) {
		if c.Driver != claims.DriverFastpath {
			continue
		}
		for _, d := range c.Devices {
			if d.PodNetwork == "" || d.Attached == nil || d.Pod == nil {
				continue
			}
			out = append(out, pnv1.NewNetworkStatus(d.PodNetwork, d.Pod.Name, false, podAddrs(d.Pod)))
		}
	}
	rec, _ := p.opts.Store.Get(npwgKey(pod.UID))
	for _, n := range rec.Networks {
		if n.PodNetwork == "" || !n.Added {
			continue
		}
		var addrs []netip.Addr
		res, ok, err := p.opts.CNI.Cached(ctx, runtimeConf(rec, n))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", networkOf(rec, n), err))
		case ok && res.Current != nil:
			addrs = resultAddrs(res.Current)
		}
		out = append(out, pnv1.NewNetworkStatus(n.PodNetwork, n.IfName, n.DefaultRoute, addrs))
		gw = gw || n.DefaultRoute
	}
	// A pod that lists its PodNetworks has the default's status at least;
	// one that lists none has a status only for its claims' devices.
	if len(out) == 0 && strings.TrimSpace(pod.PodNetworks) == "" {
		return nil, errors.Join(errs...)
	}
	var addrs []netip.Addr
	for _, ip := range pod.IPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			addrs = append(addrs, a)
		}
	}
	def := pnv1.NewNetworkStatus(pnv1.DefaultPodNetworkName, p.opts.NPWG.DefaultInterface, !gw, addrs)
	return append([]pnv1.NetworkStatus{def}, out...), errors.Join(errs...)
}

// resultAddrs are the addresses of a CNI result's sandbox interface (or
// all of them when it names none).
func resultAddrs(res *cnitypes100.Result) []netip.Addr {
	sandbox := -1
	for i, iface := range res.Interfaces {
		if iface != nil && iface.Sandbox != "" {
			sandbox = i
			break
		}
	}
	var out []netip.Addr
	for _, ipc := range res.IPs {
		if ipc == nil || (sandbox >= 0 && ipc.Interface != nil && *ipc.Interface != sandbox) {
			continue
		}
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// reportPodNetworks writes the pod's network.fastpath.dev/network-status
// in the background, as reportNPWG does the NPWG one.
func (p *Plugin) reportPodNetworks(ctx context.Context, pod Pod) {
	if p.opts.PodNetworks == nil || p.opts.PodNetworks.Status == nil || pod.NetNS == "" {
		return
	}
	logger := klog.FromContext(ctx).WithValues("pod", pod.String())
	p.reports.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusTimeout)
		defer cancel()
		entries, err := p.PodNetworkStatus(ctx, pod)
		if err != nil {
			logger.Error(err, "Reading the results of the pod's PodNetworks for its network status")
		}
		if len(entries) == 0 {
			return
		}
		if err := p.opts.PodNetworks.Status.PatchPodNetworkStatus(ctx, pod.Namespace, pod.Name, pod.UID, entries); err != nil {
			logger.Error(err, "Writing the pod's PodNetwork status annotation")
		}
	})
}
