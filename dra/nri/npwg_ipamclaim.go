package nri

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/sharedl2"
)

// IPAMClaims (NPWG §8): an element's "ipam-claim-reference" names an
// IPAMClaim of the pod's namespace, and the attachment's addresses are
// the IPAMClaim's, for as long as it lives:
//
//   - status.ips set: they are given to the network's plugins as the
//     "ips" capability (a plugin of the network must declare it);
//   - else, when the NetworkAttachmentDefinition names a node pool
//     (npwg.IPPoolAnnotation): the pool's lowest free address, leased to
//     the IPAMClaim in the claim store before it is used and written to
//     status.ips before the network is added;
//   - else the network's IPAM allocates, and the result's addresses are
//     written to status.ips after ADD.
//
// A record of the claim store (claims.DriverIPAMClaim, keyed by the
// IPAMClaim's UID) says which pod of the node holds the IPAMClaim, and
// keeps its pool address. A pod holds it from its sandbox's creation to
// its teardown; a second pod naming it meanwhile, on this node or
// another (status.ownerPod names a pod that still runs), is refused. The
// pool address is released only when the IPAMClaim is deleted (or
// replaced by one of another UID) and no pod holds it: checked after
// each teardown, at start-up and every CheckInterval. Never when a pod
// goes.
//
// Every status the node writes names the node in the condition
// npwg.IPAMClaimNodeCondition (True), and the admission policies let a
// node's fastpathd write only an IPAMClaim whose old status names no node
// holding it, or its own. A pod of another node takes it once this node
// let it go: the same checks, once no pod of the node holds it, write the
// condition False (fastpathd controller does so for a node or a pod that
// is gone).

// IPAMClaimClient reads and writes IPAMClaims, and reads the pods that
// hold them.
type IPAMClaimClient interface {
	GetIPAMClaim(ctx context.Context, namespace, name string) (*npwg.IPAMClaim, error)
	// UpdateIPAMClaimStatus writes the claim's status, at the claim's
	// resourceVersion: a conflict is an error apierrors.IsConflict says.
	UpdateIPAMClaimStatus(ctx context.Context, claim *npwg.IPAMClaim) error
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// IPAMClaimOptions turn on IPAMClaims for the NPWG networks (fastpathd run
// --npwg-ipamclaims). Without them an element's "ipam-claim-reference" is
// left to the network's plugins, which may read it from the pod.
type IPAMClaimOptions struct {
	Client IPAMClaimClient
	// Node is this node's name, which the IPAMClaims it writes name.
	Node string
	// Pools are the node's IP pools (--ip-pools) by name; SetPools
	// replaces them while the plugin runs.
	Pools   map[string]v1alpha1.IPPool
	poolsMu sync.Mutex
	// CheckInterval is how often the IPAMClaims the node's records keep
	// are looked at again (RunIPAMClaims); default a minute.
	CheckInterval time.Duration

	// checks asks RunIPAMClaims for a check now (after a teardown).
	checks chan struct{}
}

// NewIPAMClaimOptions returns the options of node with what
// RunIPAMClaims needs.
func NewIPAMClaimOptions(client IPAMClaimClient, node string, pools map[string]v1alpha1.IPPool, interval time.Duration) *IPAMClaimOptions {
	return &IPAMClaimOptions{Client: client, Node: node, Pools: pools, CheckInterval: interval, checks: make(chan struct{}, 1)}
}

// SetPools replaces the node's IP pools (its FastpathNodeConfig changed
// them); attachments made since keep their addresses.
func (o *IPAMClaimOptions) SetPools(pools map[string]v1alpha1.IPPool) {
	o.poolsMu.Lock()
	defer o.poolsMu.Unlock()
	o.Pools = pools
}

// ErrIPAMClaimHeld is the error of an attachment naming an IPAMClaim that
// another pod holds.
var ErrIPAMClaimHeld = errors.New("the IPAMClaim is held by another pod")

// updateAttempts bounds the tries of a status write that conflicts with
// another writer's.
const updateAttempts = 3

// ipamClaimKey is the key of an IPAMClaim's record.
func ipamClaimKey(uid types.UID) claims.Key {
	return claims.Key{Driver: claims.DriverIPAMClaim, UID: uid}
}

// ipamClaimAddresses gives the attachment n of pod the addresses of the
// IPAMClaim its element names, as the "ips" capability, and records that
// the pod holds it (see above). n is not changed on error.
func (p *Plugin) ipamClaimAddresses(ctx context.Context, pod Pod, a *npwg.Attachment, nad *nadv1.NetworkAttachmentDefinition,
	list *libcni.NetworkConfigList, n *claims.Network) error {
	o := p.ipamClaims()
	if a.IPAMClaimReference == "" || o == nil {
		return nil
	}
	if err := npwg.NeedsIPsCapability(a, list); err != nil {
		return err
	}
	pool, err := o.pool(a, nad)
	if err != nil {
		return err
	}
	var ips []string
	for attempt := 1; ; attempt++ {
		ips, err = p.holdIPAMClaim(ctx, pod, a, list, pool)
		if err == nil || !apierrors.IsConflict(err) || attempt == updateAttempts {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%s %q: %w", npwg.IPAMClaimFieldPath, a.IPAMClaimReference, err)
	}
	n.IPAMClaim = a.IPAMClaimReference
	if len(ips) > 0 {
		if n.CapabilityArgs == nil {
			n.CapabilityArgs = map[string]any{}
		}
		n.CapabilityArgs[npwg.CapabilityIPs] = ips
	}
	return nil
}

func (p *Plugin) ipamClaims() *IPAMClaimOptions {
	if p.opts.NPWG == nil {
		return nil
	}
	return p.opts.NPWG.IPAMClaims
}

// pool is the node pool the network's NetworkAttachmentDefinition names,
// nil for none.
func (o *IPAMClaimOptions) pool(a *npwg.Attachment, nad *nadv1.NetworkAttachmentDefinition) (*v1alpha1.IPPool, error) {
	name := nad.Annotations[npwg.IPPoolAnnotation]
	if name == "" {
		return nil, nil
	}
	o.poolsMu.Lock()
	pool, ok := o.Pools[name]
	o.poolsMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("NetworkAttachmentDefinition %s names IP pool %q (annotation %s), which this node does not have (--ip-pools): "+
			"name one of the node's pools, or remove the annotation to let the network's IPAM allocate", a.Network(), name, npwg.IPPoolAnnotation)
	}
	return &pool, nil
}

// holdIPAMClaim reads the IPAMClaim, checks that it is for the attachment
// and that no other pod holds it, records that the pod holds it (with the
// pool address it keeps, allocated if it has none), then writes the pod
// as its owner and the pool address as its status.ips. It returns the
// addresses the attachment gets; none when the network's IPAM is to
// allocate them.
func (p *Plugin) holdIPAMClaim(ctx context.Context, pod Pod, a *npwg.Attachment, list *libcni.NetworkConfigList, pool *v1alpha1.IPPool) ([]string, error) {
	o := p.ipamClaims()
	claim, err := o.Client.GetIPAMClaim(ctx, pod.Namespace, a.IPAMClaimReference)
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("IPAMClaim %s/%s not found: it must exist in the pod's namespace before the pod starts", pod.Namespace, a.IPAMClaimReference)
	case err != nil:
		return nil, fmt.Errorf("read IPAMClaim %s/%s: %w", pod.Namespace, a.IPAMClaimReference, err)
	}
	if err := npwg.CheckIPAMClaim(claim, a, list); err != nil {
		return nil, err
	}
	name := claim.Namespace + "/" + claim.Name
	if owner := claim.Status.OwnerPod; owner != nil && owner.Name != "" && owner.Name != pod.Name {
		alive, err := p.podAlive(ctx, claim.Namespace, owner.Name, "")
		if err != nil {
			return nil, fmt.Errorf("IPAMClaim %s: its owner, pod %s: %w", name, owner.Name, err)
		}
		if alive {
			return nil, fmt.Errorf("%w: IPAMClaim %s is held by pod %s/%s (status.ownerPod), which still runs: one pod at a time may hold it",
				ErrIPAMClaimHeld, name, claim.Namespace, owner.Name)
		}
	}
	if node := npwg.HeldOn(claim); node != "" && node != o.Node {
		return nil, fmt.Errorf("%w: IPAMClaim %s is held on node %s (status condition %s): a node takes it once that node's fastpathd let it go, "+
			"when its pod's networks are gone (or fastpathd controller, when the pod or the node is gone); the sandbox is tried again",
			ErrIPAMClaimHeld, name, node, npwg.IPAMClaimNodeCondition)
	}

	key := ipamClaimKey(claim.UID)
	unlock, err := p.opts.Store.LockContext(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("IPAMClaim %s: %w", name, err)
	}
	rec, ok := p.opts.Store.Get(key)
	if ok && rec.Prepared && rec.Pod.UID != pod.UID {
		alive, err := p.holderAlive(ctx, rec)
		if err != nil {
			unlock()
			return nil, fmt.Errorf("IPAMClaim %s: its holder on this node, pod %s/%s: %w", name, rec.Namespace, rec.Pod.Name, err)
		}
		if alive {
			unlock()
			return nil, fmt.Errorf("%w: IPAMClaim %s is held by pod %s/%s on this node: one pod at a time may hold it", ErrIPAMClaimHeld, name, rec.Namespace, rec.Pod.Name)
		}
	}
	if !ok {
		rec = claims.Claim{Driver: claims.DriverIPAMClaim, UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name}
	}
	rec.Pod, rec.Prepared = claims.Pod{UID: pod.UID, Name: pod.Name}, true
	claimed, _ := npwg.ClaimedIPs(claim)
	// Recorded before the address is used: killed after, the record is
	// found again; killed before, nothing is held.
	if pool != nil {
		err = p.opts.Store.AdmitWith(rec, func(c *claims.Claim, others []*claims.Claim) error {
			// Held: the records' addresses, and those a CNI claim or a
			// pod's network writes for a shared parent.
			held := claims.HeldAddresses(others)
			for a := range sharedl2.Held(sharedl2.All(others)) {
				held[a] = true
			}
			return lease(c, a.Network(), pool, claimed, held)
		})
	} else {
		err = p.opts.Store.Put(rec)
	}
	unlock()
	if err != nil {
		return nil, fmt.Errorf("IPAMClaim %s: %w", name, err)
	}
	ips := prefixStrings(claimed)
	if len(ips) == 0 && pool != nil {
		rec, _ = p.opts.Store.Get(key)
		ips = leased(rec, pool)
	}
	if st, changed := npwg.WithOwner(claim, pod.Name, o.Node, ips); changed {
		claim.Status = st
		if err := o.updateStatus(ctx, claim); err != nil {
			return nil, fmt.Errorf("write the status of IPAMClaim %s: %w", name, err)
		}
	}
	return ips, nil
}

// lease makes sure the record c keeps an address of pool: the claim's
// own, when one of its addresses is of the pool; else the one it keeps
// already; else the pool's lowest free one. Leases are only ever added to
// a record: they go with it.
func lease(c *claims.Claim, network string, pool *v1alpha1.IPPool, claimed []netip.Prefix, held map[netip.Addr]bool) error {
	var want netip.Addr
	for _, p := range claimed {
		if pool.Gives(p.Addr()) {
			want = p.Addr()
		}
	}
	for _, d := range c.Devices {
		if d.IPAM == nil || d.IPAM.Pool != pool.Name {
			continue
		}
		have, err := netip.ParsePrefix(d.IPAM.Address)
		if err == nil && (!want.IsValid() || have.Addr() == want) {
			return nil
		}
	}
	switch {
	case want.IsValid() && held[want]:
		return fmt.Errorf("its address %s is of pool %s, where another claim holds it", want, pool.Name)
	case !want.IsValid():
		var ok bool
		if want, ok = pool.Free(held); !ok {
			return fmt.Errorf("pool %s has no free address: every one is held by a claim or an IPAMClaim; one is free again when its claim is unprepared or its IPAMClaim deleted", pool.Name)
		}
	}
	c.Devices = append(c.Devices, claims.Device{Request: network, Pool: pool.Name, Device: want.String(), Kind: "ipamclaim",
		IPAM: &claims.IPAMLease{Pool: pool.Name, Address: netip.PrefixFrom(want, pool.Prefix().Bits()).String()}})
	return nil
}

// leased are the addresses of pool the record keeps.
func leased(rec claims.Claim, pool *v1alpha1.IPPool) []string {
	var out []string
	for _, d := range rec.Devices {
		if d.IPAM != nil && d.IPAM.Pool == pool.Name {
			out = append(out, d.IPAM.Address)
		}
	}
	return out
}

func prefixStrings(ps []netip.Prefix) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// holderAlive says whether the pod a record says holds its IPAMClaim
// still does: it has networks recorded on this node, or it still exists
// and has not finished.
func (p *Plugin) holderAlive(ctx context.Context, rec claims.Claim) (bool, error) {
	if _, ok := p.opts.Store.Get(npwgKey(rec.Pod.UID)); ok {
		return true, nil
	}
	return p.podAlive(ctx, rec.Namespace, rec.Pod.Name, rec.Pod.UID)
}

// podAlive says whether the pod exists (with this UID, if given) and has
// not finished.
func (p *Plugin) podAlive(ctx context.Context, namespace, name string, uid types.UID) (bool, error) {
	pod, err := p.ipamClaims().Client.GetPod(ctx, namespace, name)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	case uid != "" && pod.UID != uid:
		return false, nil
	}
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed, nil
}

// letGoIPAMClaim records that the pod no longer holds the IPAMClaim of
// the record key, at its teardown, once none of its networks is left on
// the node (a DEL that failed keeps it), and has the IPAMClaim checked:
// deleted, its address is released.
func (p *Plugin) letGoIPAMClaim(ctx context.Context, key claims.Key, pod types.UID) error {
	o := p.ipamClaims()
	defer p.opts.Store.Lock(key)()
	rec, ok := p.opts.Store.Get(key)
	if !ok || !rec.Prepared || rec.Pod.UID != pod {
		return nil
	}
	if _, ok := p.opts.Store.Get(npwgKey(pod)); ok {
		return nil
	}
	rec.Prepared = false
	if err := p.opts.Store.Put(rec); err != nil {
		return fmt.Errorf("IPAMClaim %s: %w", rec.String(), err)
	}
	klog.FromContext(ctx).V(2).Info("The pod no longer holds the IPAMClaim", "ipamClaim", rec.String(), "pod", rec.Namespace+"/"+rec.Pod.Name)
	if o != nil {
		select {
		case o.checks <- struct{}{}:
		default:
		}
	}
	return nil
}

// reportIPAMClaims writes, in the background, the addresses the network's
// IPAM gave the pod's attachments to the IPAMClaims that have none yet
// (those fastpath gave are written before ADD). A failure is logged; the
// next attach of the pod writes them again.
func (p *Plugin) reportIPAMClaims(ctx context.Context, pod Pod) {
	o := p.ipamClaims()
	if o == nil || !strings.Contains(pod.Networks, "ipam-claim-reference") {
		return // no element names an IPAMClaim: no need to read the record
	}
	rec, ok := p.opts.Store.Get(npwgKey(pod.UID))
	if o == nil || !ok {
		return
	}
	logger := klog.FromContext(ctx).WithValues("pod", pod.String())
	for _, n := range rec.Networks {
		if n.IPAMClaim == "" || !n.Added || n.CapabilityArgs[npwg.CapabilityIPs] != nil {
			continue
		}
		res, ok, err := p.opts.CNI.Added(ctx, runtimeConf(rec, n))
		if err != nil || !ok || res.Current == nil {
			logger.Error(err, "Reading the result of an attachment for its IPAMClaim", "network", n.Request, "ipamClaim", n.IPAMClaim)
			continue
		}
		var ips []string
		for _, ip := range res.Current.IPs {
			ips = append(ips, ip.Address.String())
		}
		name := n.IPAMClaim
		p.reports.Go(func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusTimeout)
			defer cancel()
			if err := p.writeIPAMClaimIPs(ctx, pod, name, ips); err != nil {
				logger.Error(err, "Writing the addresses of an IPAMClaim", "ipamClaim", pod.Namespace+"/"+name)
			}
		})
	}
}

func (p *Plugin) writeIPAMClaimIPs(ctx context.Context, pod Pod, name string, ips []string) error {
	o := p.ipamClaims()
	for attempt := 1; ; attempt++ {
		claim, err := o.Client.GetIPAMClaim(ctx, pod.Namespace, name)
		if err != nil {
			return err
		}
		st, changed := npwg.WithOwner(claim, pod.Name, o.Node, ips)
		if !changed {
			return nil
		}
		claim.Status = st
		err = o.updateStatus(ctx, claim)
		if err == nil || !apierrors.IsConflict(err) || attempt == updateAttempts {
			return err
		}
	}
}

// updateStatus writes the claim's status.
func (o *IPAMClaimOptions) updateStatus(ctx context.Context, claim *npwg.IPAMClaim) error {
	fault.Point("ipamclaim.status.before")
	if err := o.Client.UpdateIPAMClaimStatus(ctx, claim); err != nil {
		return err
	}
	fault.Point("ipamclaim.status.written")
	return nil
}

// RunIPAMClaims checks the IPAMClaims the node's records keep, at once,
// after each teardown and every CheckInterval, until ctx ends: a record
// whose pod is gone no longer holds its IPAMClaim, and the address of an
// IPAMClaim deleted and held by no pod is released.
func (p *Plugin) RunIPAMClaims(ctx context.Context) {
	o := p.ipamClaims()
	if o == nil {
		return
	}
	interval := o.CheckInterval
	if interval <= 0 {
		interval = time.Minute
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		p.CheckIPAMClaims(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-o.checks:
		}
	}
}

// CheckIPAMClaims checks every IPAMClaim record of the node once.
func (p *Plugin) CheckIPAMClaims(ctx context.Context) {
	for _, c := range p.opts.Store.View() {
		if c.Driver != claims.DriverIPAMClaim {
			continue
		}
		if err := p.checkIPAMClaim(ctx, c.Key()); err != nil {
			klog.FromContext(ctx).Error(err, "Checking an IPAMClaim", "ipamClaim", c.String())
		}
	}
}

func (p *Plugin) checkIPAMClaim(ctx context.Context, key claims.Key) error {
	logger := klog.FromContext(ctx)
	defer p.opts.Store.Lock(key)()
	rec, ok := p.opts.Store.Get(key)
	if !ok {
		return nil
	}
	if rec.Prepared {
		alive, err := p.holderAlive(ctx, rec)
		if err != nil || alive {
			return err
		}
		rec.Prepared = false
		if err := p.opts.Store.Put(rec); err != nil {
			return err
		}
		logger.V(2).Info("The pod that held the IPAMClaim is gone", "ipamClaim", rec.String(), "pod", rec.Namespace+"/"+rec.Pod.Name)
	}
	o := p.ipamClaims()
	claim, err := o.Client.GetIPAMClaim(ctx, rec.Namespace, rec.Name)
	switch {
	case err == nil && claim.UID == rec.UID && rec.Prepared:
		return nil
	case err == nil && claim.UID == rec.UID:
		// No pod of the node holds it: a pod of another node may.
		st, changed := npwg.Released(claim, o.Node, npwg.ReasonReleased)
		if !changed {
			return nil
		}
		claim.Status = st
		if err := o.updateStatus(ctx, claim); err != nil {
			return fmt.Errorf("let go of IPAMClaim %s (status condition %s): %w", rec.String(), npwg.IPAMClaimNodeCondition, err)
		}
		logger.V(2).Info("The node let go of the IPAMClaim", "ipamClaim", rec.String())
		return nil
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	var addrs []string
	for _, d := range rec.Devices {
		if d.IPAM != nil {
			addrs = append(addrs, d.IPAM.Address)
		}
	}
	if err := p.opts.Store.Delete(key); err != nil {
		return err
	}
	logger.Info("Released the addresses of a deleted IPAMClaim", "ipamClaim", rec.String(), "addresses", addrs)
	return nil
}
