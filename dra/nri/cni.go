package nri

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	cnitypes100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// runtimeConf is what libcni needs to run a network of a claim.
func runtimeConf(c claims.Claim, n claims.Network) dataplane.CNINetwork {
	return dataplane.CNINetwork{Conflist: n.Conflist, ContainerID: n.SandboxID, NetNS: n.NetNS, IfName: n.IfName,
		Args: [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", c.Namespace}, {"K8S_POD_NAME", c.Pod.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", n.SandboxID}, {"K8S_POD_UID", string(c.Pod.UID)}},
		CapabilityArgs: n.CapabilityArgs}
}

// networkOf names a network of a record for people: the claim, request
// and device of a CNI claim; the pod, network and interface of a pod's
// NPWG attachment.
func networkOf(c claims.Claim, n claims.Network) string {
	if c.Driver == claims.DriverNPWG {
		return fmt.Sprintf("pod %s, network %s (interface %s)", c.String(), n.Request, n.IfName)
	}
	return fmt.Sprintf("claim %s, request %q, device %s", c.String(), n.Request, n.Device)
}

// setStatus says a network's status in its claim; an NPWG record has no
// ResourceClaim (its pod's network-status annotation says it).
func (p *Plugin) setStatus(ctx context.Context, c claims.Claim, st resourceapi.AllocatedDeviceStatus) {
	if c.Driver == claims.DriverNPWG {
		return
	}
	p.opts.Status.Set(ctx, ref(c), st)
}

// networkReady says that a network of the claim is in its pod, in the
// claim's status and its device metadata.
func (p *Plugin) networkReady(ctx context.Context, c claims.Claim, n claims.Network, res dataplane.CNIResult) {
	if c.Driver == claims.DriverNPWG {
		return
	}
	st := status.NetworkReady(n, res.Raw, res.Current)
	p.opts.Status.Set(ctx, ref(c), st)
	p.writeMetadata(ctx, c, n.Request, st)
}

// writeMetadata writes the network data of a device's status into the
// claim's device metadata. A failure is logged, not returned: the pod runs
// without it, as with the feature off.
func (p *Plugin) writeMetadata(ctx context.Context, c claims.Claim, request string, st resourceapi.AllocatedDeviceStatus) {
	if p.opts.Metadata == nil || st.NetworkData == nil {
		return
	}
	err := p.opts.Metadata.SetNetworkData(ctx, kubelet.MetadataClaim{Driver: c.Driver, Namespace: c.Namespace, Name: c.Name, UID: c.UID},
		kubelet.DeviceRef{Request: request, Pool: st.Pool, Device: st.Device}, st.NetworkData)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Writing the device metadata: the pod's containers see none of its network data")
	}
}

// addNetworks runs ADD for every network of the pod's CNI claims, each
// recorded as added before it runs. If one fails, DEL runs for it at once
// and for those added before it, the claims say why, and the error fails
// the sandbox.
func (p *Plugin) addNetworks(ctx context.Context, pod Pod, cls []claims.Claim, freshNPWG bool) error {
	if len(cls) == 0 {
		return nil
	}
	if p.opts.CNI == nil {
		return fmt.Errorf("pod %s: claim %s has CNI networks, and this fastpathd does not run the CNI driver (--cni)", pod, cls[0].String())
	}
	logger := klog.FromContext(ctx).WithValues("pod", pod.String())
	type added struct {
		key claims.Key
		i   int
	}
	var done []added
	for ci, c := range cls {
		for i := range c.Networks {
			var n *claims.Network
			fresh := freshNPWG && c.Driver == claims.DriverNPWG
			if fresh {
				// admitNPWG recorded it added to this sandbox.
				n = &c.Networks[i]
			} else {
				var err error
				if n, fresh, err = p.markAdded(ctx, c.Key(), i, pod); err != nil {
					return fmt.Errorf("claim %s: %w", c.String(), err)
				}
			}
			if !fresh {
				// Recorded for this sandbox by an earlier hook: in place
				// if its ADD completed; else ADD was interrupted, and DEL
				// cleans up what it left before ADD runs again.
				res, ok, err := p.opts.CNI.Added(ctx, runtimeConf(c, *n))
				if err != nil {
					return fmt.Errorf("%s: %w", networkOf(c, *n), err)
				}
				if ok {
					p.networkReady(ctx, c, *n, res)
					done = append(done, added{c.Key(), i})
					continue
				}
				if err := p.opts.CNI.Del(ctx, runtimeConf(c, *n)); err != nil {
					return fmt.Errorf("%s: CNI DEL before ADD again: %w", networkOf(c, *n), redacted(*n, err))
				}
			}
			start := time.Now()
			res, addErr := p.add(ctx, runtimeConf(c, *n))
			addErr = redacted(*n, addErr)
			if addErr == nil {
				// A plugin that gives another address than the one asked
				// for (an IPAMClaim's, an element's ips) fails the
				// attachment rather than hand the pod another.
				addErr = gaveRequested(*n, res.Current)
			}
			if addErr == nil {
				fault.Point("cni.add.done")
				logger.Info("CNI ADD", "claim", c.String(), "driver", c.Driver, "request", n.Request, "ifName", n.IfName, "duration", time.Since(start))
				p.networkReady(ctx, c, *n, res)
				done = append(done, added{c.Key(), i})
				continue
			}
			err := fmt.Errorf("%s: CNI ADD: %w", networkOf(c, *n), addErr)
			p.setStatus(ctx, c, status.OfNetworkShare(*n, status.NotReady(claims.DriverCNI, n.Pool, n.Device, status.ReasonNotReady, addErr.Error())))
			if delErr := p.del(ctx, c.Key(), i, 1); delErr != nil {
				err = fmt.Errorf("%w; DEL after it also failed: %w", err, delErr)
			}
			for j := len(done) - 1; j >= 0; j-- {
				prev, _ := p.opts.Store.Get(done[j].key)
				pn := prev.Networks[done[j].i]
				p.setStatus(ctx, prev, status.OfNetworkShare(pn, status.NotReady(claims.DriverCNI, pn.Pool, pn.Device, status.ReasonNotReady,
					fmt.Sprintf("undone: %s failed", networkOf(c, *n)))))
				if delErr := p.del(ctx, done[j].key, done[j].i, 1); delErr != nil {
					err = fmt.Errorf("%w; undoing %s also failed: %w", err, networkOf(prev, pn), delErr)
				}
			}
			if freshNPWG {
				// The selected networks after this one never ran.
				if uErr := p.unmarkNPWG(pod.UID, cls, ci, i); uErr != nil {
					err = fmt.Errorf("%w; %w", err, uErr)
				}
			}
			return err
		}
	}
	return nil
}

// unmarkNPWG records as not added the networks of the pod's fresh NPWG
// record (admitNPWG) that come after network i of claim cls[ci] and so
// never ran.
func (p *Plugin) unmarkNPWG(uid types.UID, cls []claims.Claim, ci, i int) error {
	key := npwgKey(uid)
	defer p.opts.Store.Lock(key)()
	rec, ok := p.opts.Store.Get(key)
	if !ok {
		return nil
	}
	from := 0
	if cls[ci].Driver == claims.DriverNPWG {
		from = i + 1
	}
	changed := false
	for j := from; j < len(rec.Networks); j++ {
		if n := &rec.Networks[j]; n.Added {
			n.Added, n.SandboxID, n.NetNS, changed = false, "", "", true
		}
	}
	if !changed {
		return nil
	}
	return p.opts.Store.Put(rec)
}

// markAdded records network i of the claim as added to the pod's sandbox,
// before ADD runs. fresh is false when an earlier hook recorded it for
// this sandbox already. A network recorded added to an earlier sandbox of
// the pod, whose teardown fastpath missed (it was down when the runtime
// stopped that sandbox), is deleted from it first: the record is the only
// memory of what ADD made there (an address, libcni's cached result).
func (p *Plugin) markAdded(ctx context.Context, key claims.Key, i int, pod Pod) (n *claims.Network, fresh bool, _ error) {
	unlock, err := p.opts.Store.LockContext(ctx, key)
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	c, ok := p.opts.Store.Get(key)
	if !ok {
		return nil, false, errors.New("no longer prepared")
	}
	n = &c.Networks[i]
	if n.Added && n.SandboxID == pod.SandboxID {
		return n, false, nil
	}
	if n.Added {
		if err := p.opts.CNI.Del(ctx, runtimeConf(c, *n)); err != nil {
			return nil, false, fmt.Errorf("%s: CNI DEL from the pod's earlier sandbox %s: %w", networkOf(c, *n), n.SandboxID, redacted(*n, err))
		}
		klog.FromContext(ctx).Info("CNI DEL from the pod's earlier sandbox", "claim", c.String(), "request", n.Request, "ifName", n.IfName, "sandbox", n.SandboxID)
	}
	n.Added, n.SandboxID, n.NetNS = true, pod.SandboxID, pod.NetNS
	if err := p.opts.Store.Put(c); err != nil {
		return nil, false, err
	}
	fault.Point("cni.add.recorded")
	return n, true, nil
}

// delNetworks runs DEL for the claim's added networks (with a sandbox,
// those added to it), last added first, each tried DelAttempts times; what
// succeeded is recorded, what failed is returned.
func (p *Plugin) delNetworks(ctx context.Context, key claims.Key, sandbox string) error {
	c, ok := p.opts.Store.Get(key)
	if !ok {
		return nil
	}
	if p.opts.CNI == nil {
		return fmt.Errorf("claim %s has CNI networks, and this fastpathd does not run the CNI driver (--cni)", c.String())
	}
	var errs []error
	for i := len(c.Networks) - 1; i >= 0; i-- {
		n := c.Networks[i]
		if !n.Added || otherSandbox(n.SandboxID, sandbox) {
			continue
		}
		if err := p.del(ctx, key, i, p.opts.DelAttempts); err != nil {
			errs = append(errs, fmt.Errorf("%s: CNI DEL: %w", networkOf(c, n), err))
			continue
		}
		klog.FromContext(ctx).Info("CNI DEL", "claim", c.String(), "driver", c.Driver, "request", n.Request, "ifName", n.IfName)
	}
	return errors.Join(errs...)
}

// del runs DEL for network i of the claim, up to attempts times, and
// records it as no longer added when it succeeds.
func (p *Plugin) del(ctx context.Context, key claims.Key, i, attempts int) error {
	unlock, err := p.opts.Store.LockContext(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	c, ok := p.opts.Store.Get(key)
	if !ok || !c.Networks[i].Added {
		return nil
	}
	wait := p.opts.DelBackoff
	for attempt := 1; ; attempt++ {
		conf := runtimeConf(c, c.Networks[i])
		conf.NetNS = p.netns.path(conf.NetNS)
		if err = p.opts.CNI.Del(ctx, conf); err == nil || attempt >= attempts {
			break
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
		wait *= 2
	}
	if err != nil {
		return redacted(c.Networks[i], err)
	}
	fault.Point("cni.del.done")
	n := &c.Networks[i]
	n.Added, n.SandboxID, n.NetNS = false, "", ""
	return p.opts.Store.Put(c)
}

// gaveRequested is nil when the result has the addresses the network
// asked for through the ips capability, or no address of their family at
// all (there is nothing to tell); else an error naming both.
func gaveRequested(n claims.Network, res *cnitypes100.Result) error {
	if res == nil {
		return nil
	}
	var asked []string
	switch v := n.CapabilityArgs[npwg.CapabilityIPs].(type) {
	case []string:
		asked = v
	case []any: // read back from the checkpoint
		for _, s := range v {
			if s, ok := s.(string); ok {
				asked = append(asked, s)
			}
		}
	}
	for _, a := range asked {
		want, err := netip.ParsePrefix(a)
		if err != nil {
			continue
		}
		var gave []string
		found := false
		for _, ip := range res.IPs {
			got, ok := netip.AddrFromSlice(ip.Address.IP)
			if !ok || got.Unmap().Is4() != want.Addr().Is4() {
				continue
			}
			gave = append(gave, ip.Address.String())
			found = found || got.Unmap() == want.Addr()
		}
		if len(gave) > 0 && !found {
			what := "the element's ips"
			if n.IPAMClaim != "" {
				what = "IPAMClaim " + n.IPAMClaim
			}
			return fmt.Errorf("the plugin gave the pod %v, not %s, which %s asks for: it is held elsewhere, or the plugin does not honour the ips capability", gave, want, what)
		}
	}
	return nil
}
