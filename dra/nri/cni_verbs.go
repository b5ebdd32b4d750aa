package nri

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// The CNI verbs besides ADD and DEL: STATUS before each ADD, CHECK of the
// added networks (opt-in, periodic), GC of stale attachments at start.

// add runs STATUS, then ADD: a plugin that says it cannot add networks
// now (CNI 1.1; older cniVersions have no STATUS) is not asked to.
func (p *Plugin) add(ctx context.Context, conf dataplane.CNINetwork) (dataplane.CNIResult, error) {
	if err := p.opts.CNI.Status(ctx, conf); err != nil {
		return dataplane.CNIResult{}, fmt.Errorf("STATUS: the plugins cannot add networks now: %w", err)
	}
	return p.opts.CNI.Add(ctx, conf)
}

// redacted is err without the values the network's config read from
// ConfigMaps: what a claim's status and the pod's events may show.
func redacted(n claims.Network, err error) error {
	if err == nil || len(n.Redact) == 0 {
		return err
	}
	return &redactedError{msg: cnipolicy.Redacted(err.Error(), n.Redact), err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// CheckNetworks runs CHECK for every added network of the prepared claims
// every interval until ctx ends, and reports each network's outcome in its
// claim's status: the condition Healthy beside Ready (status.NetworkChecked).
// Only changes are written.
func (p *Plugin) CheckNetworks(ctx context.Context, interval time.Duration) {
	if p.opts.CNI == nil || interval <= 0 {
		return
	}
	reported := map[checkKey]string{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.CheckOnce(ctx, reported)
	}
}

// checkKey is a network as added to one sandbox.
type checkKey struct {
	claim   claims.Key
	request string
	sandbox string
}

// CheckOnce runs CHECK for every added network once. reported holds the
// outcome last reported for each (nil: report every outcome); networks no
// longer added are dropped from it.
func (p *Plugin) CheckOnce(ctx context.Context, reported map[checkKey]string) {
	seen := map[checkKey]bool{}
	pods := map[types.UID]bool{}
	for _, c := range p.opts.Store.View() {
		if c.Driver != claims.DriverCNI || pods[c.Pod.UID] {
			continue
		}
		pods[c.Pod.UID] = true
		p.checkPod(ctx, c.Pod.UID, reported, seen)
	}
	for k := range reported {
		if !seen[k] {
			delete(reported, k)
		}
	}
}

func (p *Plugin) checkPod(ctx context.Context, uid types.UID, reported map[checkKey]string, seen map[checkKey]bool) {
	logger := klog.FromContext(ctx)
	unlock, err := p.lockPod(ctx, uid)
	if err != nil {
		logger.Error(err, "CHECK of a pod's CNI networks", "podUID", uid)
		return
	}
	defer unlock()
	for _, c := range p.opts.Store.PodClaims(uid) {
		for _, n := range c.Networks {
			if !n.Added {
				continue
			}
			conf := runtimeConf(c, n)
			res, ok, err := p.opts.CNI.Cached(ctx, conf)
			if err != nil || !ok {
				continue // ADD did not complete: the runtime's hooks see to it
			}
			key := checkKey{c.Key(), n.Request, n.SandboxID}
			seen[key] = true
			checkErr := redacted(n, p.opts.CNI.Check(ctx, conf))
			supported := !dataplane.CheckNotSupported(checkErr)
			outcome := "passed"
			switch {
			case !supported:
				outcome, checkErr = "unsupported", nil
			case checkErr != nil:
				outcome = "failed: " + checkErr.Error()
				logger.Info("CNI CHECK failed", "claim", c.String(), "request", n.Request, "ifName", n.IfName, "err", checkErr.Error())
			}
			if reported != nil && reported[key] == outcome {
				continue
			}
			if reported != nil {
				reported[key] = outcome
			}
			p.setStatus(ctx, c, status.NetworkChecked(n, res.Raw, res.Current, supported, checkErr))
		}
	}
}

// CollectGarbage deletes the attachments libcni cached for sandboxes that
// no longer run and that no claim records (a claim forgotten while its DEL
// had not run, a checkpoint lost), then lets plugins of CNI 1.1 collect
// theirs (GC with the attachments still valid). It runs at the first
// Synchronize only: before fastpathd registers with the kubelet, so no
// claim is prepared meanwhile; networks of recorded claims are collected
// under their pod's lock.
func (p *Plugin) CollectGarbage(ctx context.Context, pods []*api.PodSandbox) {
	select {
	case <-p.conn.synced:
		return
	default:
	}
	if p.opts.CNI == nil {
		return
	}
	logger := klog.FromContext(ctx)
	// The cache first, then the records: an attachment in the cache had
	// its record before ADD ran.
	cached, err := p.opts.CNI.Attachments()
	if err != nil {
		logger.Error(err, "Reading the CNI cache for stale attachments")
		return
	}
	running := map[string]bool{}
	for _, pod := range pods {
		running[pod.GetId()] = true
	}
	byNetwork := map[string][]dataplane.CNIAttachment{}
	var order []string
	for _, a := range cached {
		if _, ok := byNetwork[a.Network]; !ok {
			order = append(order, a.Network)
		}
		byNetwork[a.Network] = append(byNetwork[a.Network], a)
	}
	owners := map[string]claims.Claim{}
	for _, c := range p.opts.Store.Claims() {
		for _, n := range c.Networks {
			owners[networkName(n.Conflist)] = c
		}
	}
	for _, name := range order {
		atts := byNetwork[name]
		owner, owned := owners[name]
		if owned {
			unlock, err := p.lockPod(ctx, owner.Pod.UID)
			if err != nil {
				logger.Error(err, "Collecting the stale attachments of a CNI network", "network", name)
				continue
			}
			if c, ok := p.opts.Store.Get(owner.Key()); ok {
				owner = c
			}
			p.collectNetwork(ctx, name, atts, &owner, running)
			unlock()
			continue
		}
		p.collectNetwork(ctx, name, atts, nil, running)
	}
}

// collectNetwork deletes the stale attachments of one network.
func (p *Plugin) collectNetwork(ctx context.Context, name string, atts []dataplane.CNIAttachment, owner *claims.Claim, running map[string]bool) {
	logger := klog.FromContext(ctx).WithValues("network", name)
	recorded := map[[2]string]bool{}
	conflist := atts[0].Conflist
	var net claims.Network
	if owner != nil {
		for _, n := range owner.Networks {
			if networkName(n.Conflist) != name {
				continue
			}
			conflist, net = n.Conflist, n
			if n.Added {
				recorded[[2]string{n.SandboxID, n.IfName}] = true
			}
		}
	}
	var valid, stale []dataplane.CNIAttachment
	for _, a := range atts {
		switch {
		case recorded[[2]string{a.ContainerID, a.IfName}]:
			valid = append(valid, a)
		case running[a.ContainerID]:
			// Not fastpath's to take away from a running pod.
			logger.Info("A running sandbox has a CNI attachment no claim records; leaving it", "sandbox", a.ContainerID, "ifName", a.IfName)
			valid = append(valid, a)
		default:
			stale = append(stale, a)
		}
	}
	if len(stale) == 0 {
		return
	}
	if err := redacted(net, p.opts.CNI.GC(ctx, conflist, valid)); err != nil {
		logger.Error(err, "Deleting stale CNI attachments", "stale", len(stale))
		return
	}
	for _, a := range stale {
		logger.Info("Deleted a stale CNI attachment: its sandbox is gone", "sandbox", a.ContainerID, "ifName", a.IfName)
	}
}

// networkName is the name in a conflist.
func networkName(conflist []byte) string {
	var list struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(conflist, &list)
	return list.Name
}
