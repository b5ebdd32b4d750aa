package nri

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/sharedl2"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// NADGetter reads NetworkAttachmentDefinitions.
type NADGetter interface {
	GetNAD(ctx context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error)
}

// StatusPatcher writes a pod's network-status annotation: entries are
// fastpath's, merged with those of other writers (npwg.MergeNetworkStatus).
type StatusPatcher interface {
	PatchNetworkStatus(ctx context.Context, namespace, name string, uid types.UID, entries []nadv1.NetworkStatus) error
}

// NPWGOptions turn on the networks pods select with the Network Plumbing
// WG annotation (fastpathd run --npwg).
type NPWGOptions struct {
	NADs NADGetter
	// ConfDir is where a NetworkAttachmentDefinition with an empty
	// spec.config finds its configuration by name, ConfNamespaces the
	// namespaces whose objects may (npwg.ConfDir).
	ConfDir        string
	ConfNamespaces []string
	Policy         npwg.Policy
	// Plugins are the plugin types (IPAM included) a network's
	// configuration may run: the CNI driver's allowlist.
	Plugins []string
	// Status writes the pod's network-status; nil for none.
	Status StatusPatcher
	// DefaultNetwork is the network-status name of the cluster default
	// network, DefaultInterface the pod's interface on it (eth0).
	DefaultNetwork, DefaultInterface string
	// SetDefaultRoute makes the pod's default route go through gateways
	// on one of its interfaces (dataplane.SetDefaultRoute, the default).
	SetDefaultRoute func(podNetNS, ifName string, gateways []net.IP) error
	// InspectLink reads a pod's interface (dataplane.InspectPodLink, the
	// default): the default network's entry of its network-status.
	InspectLink func(podNetNS, ifName string) (dataplane.PodLink, error)
	// IPAMClaims, when set, gives attachments the addresses of the
	// IPAMClaims their elements name (npwg_ipamclaim.go).
	IPAMClaims *IPAMClaimOptions
	// Limits bound the networks and interfaces of a pod; zero: the
	// defaults.
	Limits npwg.Limits
	// HostAddresses reads the addresses of a host netdev, the parent
	// (master) of a network's sub-interface (dataplane.LinkAddresses, the
	// default).
	HostAddresses func(netdev string) ([]netip.Addr, error)
	// PoolGateways are the gateways of the node's IP pools (--ip-pools),
	// which no network's static address may be; nil for none.
	PoolGateways func() sharedl2.Gateways
}

// errNPWG is the error of a pod whose selection annotation cannot be
// honoured: it names the pod, the annotation and, where one is at fault,
// the element.
func errNPWG(pod Pod, att *npwg.Attachment, err error) error {
	if att == nil {
		return fmt.Errorf("pod %s, annotation %s: %w", pod, nadv1.NetworkAttachmentAnnot, err)
	}
	return fmt.Errorf("pod %s, annotation %s, element %d (network %s, interface %s): %w",
		pod, nadv1.NetworkAttachmentAnnot, att.Index, att.Network(), att.InterfaceRequest, err)
}

// npwgKey is the key of the pod's NPWG record.
func npwgKey(uid types.UID) claims.Key { return claims.Key{Driver: claims.DriverNPWG, UID: uid} }

// wantsNPWG says whether the pod selects networks that this plugin
// attaches.
func (p *Plugin) wantsNPWG(pod Pod) bool {
	return p.opts.NPWG != nil && selects(pod, p.opts.PodNetworks != nil) && pod.NetNS != ""
}

// selects says whether the pod selects networks: with the NPWG annotation,
// or (podNetworks) with the PodNetwork one.
func selects(pod Pod, podNetworks bool) bool {
	return strings.TrimSpace(pod.Networks) != "" || podNetworks && strings.TrimSpace(pod.PodNetworks) != ""
}

// admitNPWG records the attachments of the networks the pod selects, as
// one record of the pod, before any of them is added: the CNI networks of
// the pod's claims then run them (addNetworks), and its teardown and the
// recovery after a crash find them. A record with networks added is kept
// as it is (a later hook of the same pod completes it); one without is
// made again, from the annotation and the objects as they are now. A
// record made now has every network marked added to the sandbox already
// (ADD may run from here on), so that one write of the store covers them
// all; fresh says so, for addNetworks to run their ADDs without marking
// each. The record is in the store from here on, a process killed at any
// later point finds it, and it outlives a power loss once durable returns
// (Store.AdmitPending: the write is synced while the networks are added).
func (p *Plugin) admitNPWG(ctx context.Context, pod Pod) (fresh bool, durable func() error, _ error) {
	if p.opts.NPWG == nil || !selects(pod, p.opts.PodNetworks != nil) {
		return false, nil, nil
	}
	if pod.NetNS == "" {
		// As Multus does: a pod of the host's network has no
		// namespace to attach networks to.
		klog.FromContext(ctx).Info("Not attaching the networks a pod of the host's network selects", "pod", pod.String())
		return false, nil, nil
	}
	if c, ok := p.opts.Store.Get(npwgKey(pod.UID)); ok && slices.ContainsFunc(c.Networks, func(n claims.Network) bool { return n.Added }) {
		return false, nil, nil
	}
	rec, elements, err := p.resolveNPWG(ctx, pod)
	if err != nil {
		p.dropNPWG(pod.UID)
		return false, nil, err
	}
	if len(rec.Networks) == 0 {
		p.dropNPWG(pod.UID)
		return false, nil, nil
	}
	own, err := p.checkHost(pod, &rec, elements)
	if err != nil {
		p.dropNPWG(pod.UID)
		return false, nil, err
	}
	for i := range rec.Networks {
		n := &rec.Networks[i]
		n.Added, n.SandboxID, n.NetNS = true, pod.SandboxID, pod.NetNS
	}
	// The store checks the addresses against every other record's in the
	// same write.
	durable, err = p.opts.Store.AdmitPendingWith(rec, admitter(pod, own, elements))
	if err != nil {
		p.dropNPWG(pod.UID)
		if _, taken := errors.AsType[*takenError](err); taken {
			return false, nil, err
		}
		return false, nil, errNPWG(pod, nil, err)
	}
	fault.Point("npwg.admitted")
	return true, durable, nil
}

// resolveNPWG is the pod's NPWG record: the annotation parsed, interface
// names given, each network allowed, read, configured and checked against
// the allowlist, in the annotation's order. Nothing is recorded. elements
// name the element of each of the record's networks, for errors.
func (p *Plugin) resolveNPWG(ctx context.Context, pod Pod) (rec claims.Claim, elements []string, _ error) {
	o := p.opts.NPWG
	rec = claims.Claim{Driver: claims.DriverNPWG, UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name,
		Pod: claims.Pod{UID: pod.UID, Name: pod.Name}, Prepared: true}
	var atts []npwg.Attachment
	if strings.TrimSpace(pod.Networks) != "" {
		var errs field.ErrorList
		if atts, errs = npwg.ParseNetworks(pod.Namespace, pod.Networks); len(errs) > 0 {
			return rec, nil, errNPWG(pod, nil, bounds.Aggregate(errs))
		}
	}
	// The PodNetworks the pod names come after, their names given with
	// the same rules.
	kep, kepAtts, err := p.podNetworkAttachments(ctx, pod)
	if err != nil {
		return rec, nil, err
	}
	nNPWG := len(atts)
	if err := p.checkLimits(pod, nNPWG, len(kepAtts)); err != nil {
		return rec, nil, err
	}
	atts = append(atts, kepAtts...)
	taken := map[string]bool{o.DefaultInterface: true}
	for _, c := range p.opts.Store.PodClaims(pod.UID) {
		if c.Driver == claims.DriverNPWG {
			continue
		}
		for _, name := range c.InterfaceNames() {
			taken[name] = true
		}
	}
	if err := npwg.AssignInterfaces(atts, taken); err != nil {
		return rec, nil, errNPWG(pod, nil, err)
	}
	used := map[string]bool{}
	// The element that attached each PodNetwork: a pod references one
	// once, also through PodNetworkAttachments (the KEP's active
	// validation).
	attached := map[string]int{}
	for i := range atts {
		a := &atts[i]
		if i >= nNPWG {
			el := kep[i-nNPWG]
			n, ok, err := p.resolvePodNetwork(ctx, pod, el, a)
			if err != nil {
				return rec, nil, fmt.Errorf("pod %s, annotation %s, element %d (interface %s): %w", pod, pnv1.AnnotationNetworks, a.Index, a.InterfaceRequest, err)
			}
			if !ok {
				continue
			}
			if first, dup := attached[n.PodNetwork]; dup {
				via := ""
				if el.PodNetworkAttachmentName != "" {
					via = " through PodNetworkAttachment " + el.PodNetworkAttachmentName
				}
				return rec, nil, fmt.Errorf("pod %s, annotation %s: elements %d and %d both attach PodNetwork %s (element %d%s): a pod references a PodNetwork once",
					pod, pnv1.AnnotationNetworks, first, a.Index, n.PodNetwork, a.Index, via)
			}
			attached[n.PodNetwork] = a.Index
			rec.Networks = append(rec.Networks, n)
			elements = append(elements, fmt.Sprintf("annotation %s, element %d (interface %s)", pnv1.AnnotationNetworks, a.Index, a.InterfaceRequest))
			continue
		}
		n, err := p.resolveAttachment(ctx, pod, a, used)
		if err != nil {
			return rec, nil, errNPWG(pod, a, err)
		}
		rec.Networks = append(rec.Networks, n)
		elements = append(elements, fmt.Sprintf("annotation %s, element %d (network %s, interface %s)",
			nadv1.NetworkAttachmentAnnot, a.Index, a.Network(), a.InterfaceRequest))
	}
	return rec, elements, nil
}

// resolveAttachment is the record of one attachment. used are the pod's
// delegated devices earlier attachments took.
func (p *Plugin) resolveAttachment(ctx context.Context, pod Pod, a *npwg.Attachment, used map[string]bool) (claims.Network, error) {
	o := p.opts.NPWG
	if err := o.Policy.Check(pod.Namespace, a); err != nil {
		return claims.Network{}, fmt.Errorf("%w (--npwg-allowed-namespaces)", err)
	}
	nad, err := o.NADs.GetNAD(ctx, a.Namespace, a.Name)
	if err != nil {
		return claims.Network{}, fmt.Errorf("NetworkAttachmentDefinition %s: %w", a.Network(), err)
	}
	cfg, err := p.nadConfig(nad)
	if err != nil {
		return claims.Network{}, err
	}
	inv, err := npwg.BuildInvocation(a, cfg.List)
	if err != nil {
		return claims.Network{}, err
	}
	var delegated *claims.Delegated
	if rn := nad.Annotations[npwg.ResourceNameAnnot]; rn != "" {
		if delegated, err = p.delegatedDevice(pod, rn, used); err != nil {
			return claims.Network{}, fmt.Errorf("NetworkAttachmentDefinition %s (annotation %s): %w", a.Network(), npwg.ResourceNameAnnot, err)
		}
		if err := inv.GiveDevice(npwg.Device{PCIAddress: delegated.PCIAddress, Netdev: delegated.Netdev}); err != nil {
			return claims.Network{}, err
		}
	}
	// Judged again as libcni runs it: the element's cni-args and
	// capability values in each plugin's configuration.
	if err := o.Policy.InvocationHostObjects(inv, cfg.Source != npwg.SourceSpec); err != nil {
		return claims.Network{}, &npwg.ConfigError{NAD: a.Network(), Source: cfg.Source, Err: fmt.Errorf("%w (--npwg-host-devices, --npwg-host-paths, --npwg-host-options)", err)}
	}
	n := claims.Network{Request: a.Network(), Device: a.InterfaceRequest, IfName: a.InterfaceRequest, Conflist: inv.List.Bytes,
		DefaultRoute: a.DefaultRoute(), Delegated: delegated}
	if len(inv.CapabilityArgs) > 0 {
		n.CapabilityArgs = inv.CapabilityArgs
	}
	for _, gw := range a.GatewayRequest {
		n.Gateways = append(n.Gateways, gw.String())
	}
	if err := p.ipamClaimAddresses(ctx, pod, a, nad, cfg.List, &n); err != nil {
		return claims.Network{}, err
	}
	return n, nil
}

// nadConfig is the CNI configuration of a NetworkAttachmentDefinition,
// judged by the node's rules (npwg.ConfigRules). That of a spec.config
// is kept by the object's UID and resourceVersion, which change with it,
// for the next pod that selects the network; a configuration read from
// disk is read each time. The configuration is shared: it is not to be
// changed (npwg.BuildInvocation copies what it changes).
func (p *Plugin) nadConfig(nad *nadv1.NetworkAttachmentDefinition) (*npwg.Config, error) {
	o := p.opts.NPWG
	key := string(nad.UID) + "/" + nad.ResourceVersion
	cacheable := nad.UID != "" && nad.ResourceVersion != "" && !npwg.OnDisk(nad)
	if cacheable {
		p.nadConfigsMu.Lock()
		cfg, ok := p.nadConfigs[key]
		p.nadConfigsMu.Unlock()
		if ok {
			return cfg, nil
		}
	}
	cfg, err := o.rules().Config(nad)
	if err != nil {
		return nil, err
	}
	if cacheable {
		p.nadConfigsMu.Lock()
		if p.nadConfigs == nil || len(p.nadConfigs) >= maxNADConfigs {
			p.nadConfigs = map[string]*npwg.Config{}
		}
		p.nadConfigs[key] = cfg
		p.nadConfigsMu.Unlock()
	}
	return cfg, nil
}

// maxNADConfigs bounds the configurations kept: past it, they are read
// again.
const maxNADConfigs = 512

// ErrNoDevice is the error of a network whose NetworkAttachmentDefinition
// asks for a device of a resource that none of the pod's claims holds
// free.
var ErrNoDevice = errors.New("no device of the resource")

// delegatedDevice is a device of resource rn that a prepared fastpath.dev
// claim of the pod holds in mode delegate and no earlier attachment of the
// pod took; it is marked used. Devices are taken in the order of the
// pod's claims and their requests.
func (p *Plugin) delegatedDevice(pod Pod, rn string, used map[string]bool) (*claims.Delegated, error) {
	var held int
	for _, c := range p.opts.Store.PodClaims(pod.UID) {
		if c.Driver != claims.DriverFastpath || !c.Prepared {
			continue
		}
		for _, d := range c.Devices {
			if d.Mode != v1alpha1.ModeDelegate || d.ResourceName != rn {
				continue
			}
			held++
			key := string(c.UID) + "/" + d.SlotName()
			if used[key] {
				continue
			}
			used[key] = true
			out := &claims.Delegated{Claim: c.UID, Request: d.Request, Device: d.Device, ResourceName: rn,
				PCIAddress: d.PCIAddress, PFPCIAddress: d.PFPCIAddress}
			if d.Host != nil {
				out.Netdev = d.Host.Name
			}
			return out, nil
		}
	}
	if held > 0 {
		return nil, fmt.Errorf("%w %s left: the pod's claims hold %d in mode delegate, and earlier networks of the pod took them all", ErrNoDevice, rn, held)
	}
	return nil, fmt.Errorf("%w %s: none of the pod's claims holds one in mode delegate (a ResourceClaim of driver %s whose config sets mode delegate, for a device with attribute k8s.cni.cncf.io/resourceName %s or config resourceName %s)",
		ErrNoDevice, rn, devices.DriverName, rn, rn)
}

// rules are what the node holds a network's configuration to.
func (o *NPWGOptions) rules() npwg.ConfigRules {
	return npwg.ConfigRules{ConfDir: npwg.ConfDir{Path: o.ConfDir, Namespaces: o.ConfNamespaces}, Plugins: o.Plugins, Policy: o.Policy}
}

// dropNPWG forgets the pod's NPWG record when none of its networks may be
// added: a failed attach leaves nothing (§7.2).
func (p *Plugin) dropNPWG(uid types.UID) {
	key := npwgKey(uid)
	defer p.opts.Store.Lock(key)()
	c, ok := p.opts.Store.Get(key)
	if !ok || slices.ContainsFunc(c.Networks, func(n claims.Network) bool { return n.Added }) {
		return
	}
	_ = p.opts.Store.Delete(key)
}

// attachmentOf is the attachment a network of the pod's NPWG record was
// made for, as much of it as the network-status needs.
func attachmentOf(n claims.Network) npwg.Attachment {
	var a npwg.Attachment
	a.Namespace, a.Name, _ = strings.Cut(n.Request, "/")
	a.InterfaceRequest = n.IfName
	if n.DefaultRoute {
		a.GatewayRequest = npwgGateways(n.Gateways)
	}
	return a
}

// NetworkStatus is the pod's network-status, in the order the networks
// were attached (§6.2): the cluster default network's entry when the
// runtime says the pod's IPs; then the interfaces of the pod's DRA claims,
// each named after its claim (namespace/name): the fastpath devices moved
// or made in the pod, and the CNI claims' networks; then every added
// network of its NPWG record, in the annotation's order. Results are those
// libcni cached. Nil when the pod has none of these.
func (p *Plugin) NetworkStatus(ctx context.Context, pod Pod) ([]nadv1.NetworkStatus, error) {
	o := p.opts.NPWG
	if o == nil {
		return nil, nil
	}
	cls := p.opts.Store.PodClaims(pod.UID)
	networkOrder(cls)
	var out []nadv1.NetworkStatus
	var errs []error
	for _, c := range cls {
		switch c.Driver {
		case claims.DriverFastpath:
			out = append(out, deviceStatuses(c)...)
		case claims.DriverCNI, claims.DriverNPWG:
			for _, n := range c.Networks {
				if !n.Added {
					continue
				}
				var att npwg.Attachment
				att.Namespace, att.Name, att.InterfaceRequest = c.Namespace, c.Name, n.IfName
				if c.Driver == claims.DriverNPWG {
					att = attachmentOf(n)
				}
				var result cnitypes.Result
				// The result libcni cached at ADD: no look into the pod.
				res, ok, err := p.opts.CNI.Cached(ctx, runtimeConf(c, n))
				switch {
				case err != nil:
					errs = append(errs, fmt.Errorf("%s: %w", networkOf(c, n), err))
				case ok && res.Current != nil:
					result = res.Current
				}
				st, err := npwg.AttachmentStatus(&att, result, delegatedInfo(n.Delegated))
				if err != nil {
					errs = append(errs, err)
				}
				out = append(out, st)
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.Join(errs...)
	}
	if def, ok := p.defaultNetworkStatus(pod); ok {
		out = append([]nadv1.NetworkStatus{def}, out...)
	}
	return out, errors.Join(errs...)
}

// defaultNetworkStatus is the cluster default network's entry (§5.2): the
// pod's default interface as the node sees it (its addresses, MAC and
// MTU), the addresses those the runtime's NRI (containerd 2) gives when it
// does (set by the runtime's CNI before the hook). §5.2 makes the entry
// required: when neither says an address (the link unreadable, or without
// one), it is written without "ips" (§5.3.3: optional). With no default
// network's name (--npwg-default-network empty), none: another writer of
// the annotation (Multus) writes it.
func (p *Plugin) defaultNetworkStatus(pod Pod) (nadv1.NetworkStatus, bool) {
	o := p.opts.NPWG
	if o.DefaultNetwork == "" {
		return nadv1.NetworkStatus{}, false
	}
	var link dataplane.PodLink
	if pod.NetNS != "" && o.InspectLink != nil {
		// Unreadable, the entry has what the runtime said.
		link, _ = o.InspectLink(pod.NetNS, o.DefaultInterface)
	}
	var ips []corev1.PodIP
	for _, ip := range pod.IPs {
		ips = append(ips, corev1.PodIP{IP: ip})
	}
	if len(ips) == 0 {
		for _, a := range link.Addresses {
			ips = append(ips, corev1.PodIP{IP: a.String()})
		}
	}
	st := npwg.DefaultNetworkStatus(o.DefaultNetwork, o.DefaultInterface, ips)
	st.Mac, st.Mtu = link.MAC, link.MTU
	return st, true
}

// podAddrs are the addresses a claim gave the interface, without their
// prefixes.
func podAddrs(p *claims.PodInterface) []netip.Addr {
	var out []netip.Addr
	for _, a := range p.Addresses {
		if pfx, err := netip.ParsePrefix(a); err == nil {
			out = append(out, pfx.Addr())
		}
	}
	return out
}

// deviceStatuses are the network-status entries of a fastpath claim's
// devices in the pod: each interface with its addresses, MAC and MTU as
// the claim set them (the device's own where it set none), and the
// device-info of a PCI device.
func deviceStatuses(c claims.Claim) []nadv1.NetworkStatus {
	var out []nadv1.NetworkStatus
	for _, d := range c.Devices {
		if d.Attached == nil || d.Pod == nil {
			continue
		}
		st := nadv1.NetworkStatus{Name: c.Namespace + "/" + c.Name, Interface: d.Pod.Name, Mac: d.Pod.MAC, Mtu: d.Pod.MTU,
			DeviceInfo: status.DeviceInfoOf(d)}
		if h := d.Host; h != nil && d.Shared == nil {
			st.Mac, st.Mtu = cmp.Or(st.Mac, h.MAC), cmp.Or(st.Mtu, h.MTU)
		}
		for _, a := range podAddrs(d.Pod) {
			st.IPs = append(st.IPs, a.String())
		}
		out = append(out, st)
	}
	return out
}

// reportNPWG writes the pod's network-status, in the background: the
// hook does not wait for the API server (the runtime bounds its hooks'
// time). A failure is logged: the networks are in place, and the pod
// runs.
func (p *Plugin) reportNPWG(ctx context.Context, pod Pod) {
	if p.opts.NPWG == nil || p.opts.NPWG.Status == nil || pod.NetNS == "" {
		return
	}
	logger := klog.FromContext(ctx).WithValues("pod", pod.String())
	p.reports.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusTimeout)
		defer cancel()
		// Read from the results libcni cached, out of the hook too.
		entries, err := p.NetworkStatus(ctx, pod)
		if err != nil {
			logger.Error(err, "Reading the results of the pod's networks for its network-status")
		}
		if len(entries) == 0 {
			return // the pod went meanwhile
		}
		if err := p.opts.NPWG.Status.PatchNetworkStatus(ctx, pod.Namespace, pod.Name, pod.UID, entries); err != nil {
			logger.Error(err, "Writing the pod's network-status annotation")
		}
	})
}

// delegatedInfo is the device-info of a network's delegated device, nil
// for none or one the spec has no type for.
func delegatedInfo(d *claims.Delegated) *nadv1.DeviceInfo {
	if d == nil {
		return nil
	}
	return status.DeviceInfoOf(claims.Device{Request: d.Request, PCIAddress: d.PCIAddress, PFPCIAddress: d.PFPCIAddress})
}

// defaultRouteNPWG gives the pod its default route through the network
// whose element asked for it ("default-route", §4.1.2.1.9): through the
// gateways it names, else those of the network's CNI result. When several
// ask, the last one's wins, as they are added in order.
func (p *Plugin) defaultRouteNPWG(ctx context.Context, pod Pod) error {
	if !strings.Contains(pod.Networks, "default-route") && !strings.Contains(pod.PodNetworks, "isDefaultGW") {
		return nil // no element asks for it: no need to read the record
	}
	rec, ok := p.opts.Store.Get(npwgKey(pod.UID))
	if p.opts.NPWG == nil || !ok {
		return nil
	}
	for _, n := range rec.Networks {
		if !n.DefaultRoute || !n.Added {
			continue
		}
		gws := npwgGateways(n.Gateways)
		if len(gws) == 0 {
			res, ok, err := p.opts.CNI.Cached(ctx, runtimeConf(rec, n))
			if err != nil {
				return fmt.Errorf("%s, default-route (annotation %s): %w", networkOf(rec, n), nadv1.NetworkAttachmentAnnot, err)
			}
			if ok && res.Current != nil {
				for _, ip := range res.Current.IPs {
					if ip.Gateway != nil {
						gws = append(gws, ip.Gateway)
					}
				}
			}
		}
		if len(gws) == 0 {
			return fmt.Errorf("%s, default-route (annotation %s): the element names no gateway, and the network's CNI result has none", networkOf(rec, n), nadv1.NetworkAttachmentAnnot)
		}
		fault.Point("npwg.route")
		if err := p.opts.NPWG.SetDefaultRoute(pod.NetNS, n.IfName, gws); err != nil {
			return fmt.Errorf("%s, default-route %v (annotation %s): %w", networkOf(rec, n), gws, nadv1.NetworkAttachmentAnnot, err)
		}
		klog.FromContext(ctx).V(2).Info("Default route", "pod", pod.String(), "interface", n.IfName, "gateways", gws)
	}
	return nil
}

// statusTimeout bounds a write of a pod's network-status.
const statusTimeout = time.Minute

// npwgGateways parses the gateways a record keeps; a non-nil slice, as
// the element had "default-route".
func npwgGateways(gws []string) []net.IP {
	out := []net.IP{}
	for _, gw := range gws {
		if ip := net.ParseIP(gw); ip != nil {
			out = append(out, ip)
		}
	}
	return out
}

// networkOrder puts the pod's NPWG record after its claims: the networks
// of DRA claims first, then those the annotation selects (DESIGN:
// claims, NADs, PodNetworks).
func networkOrder(cls []claims.Claim) {
	slices.SortStableFunc(cls, func(a, b claims.Claim) int {
		return boolCmp(a.Driver == claims.DriverNPWG, b.Driver == claims.DriverNPWG)
	})
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
