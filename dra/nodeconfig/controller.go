// Package nodeconfig applies, on one node, the FastpathNodeConfig that
// selects it: the devices published and shared, their resource names, the
// IP pools and memif endpoints, and the PFs' VFs; and it says in the
// object's status what the node applied. With no object selecting the
// node, the daemon's flags apply; with two, neither object does, and the
// node keeps what it had.
package nodeconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	v1alpha1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	fpv1 "github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// pciAddress is a PCI function's address as sysfs names it.
var pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// Configs lists the FastpathNodeConfigs (a watch.WatchCache).
type Configs interface {
	List(ctx context.Context) ([]*v1alpha1.FastpathNodeConfig, error)
}

// Discovery changes what the node publishes (devices.Discoverer).
type Discovery interface {
	Select(devices.Selection) error
	// Rediscover looks at the devices again: their VFs or drivers
	// changed.
	Rediscover()
}

// VFs reads and changes PFs' VFs through sysfs (dataplane.PCIBinder).
type VFs interface {
	NumVFs(addr string) (int, error)
	TotalVFs(addr string) (int, error)
	SetNumVFs(ctx context.Context, addr string, n int) error
	VFAddresses(addr string) ([]string, error)
	Driver(addr string) (string, error)
	// BindVF binds a VF to driver.
	BindVF(ctx context.Context, addr, driver string) error
}

// Links reads and sets a PF netdev's MTU and state (dataplane.PFLinks).
type Links interface {
	Link(name string) (mtu int, up bool, err error)
	SetMTU(name string, mtu int) error
	SetUp(name string, up bool) error
}

// StatusWriter writes the node's entry in a FastpathNodeConfig's status;
// a nil entry removes it.
type StatusWriter interface {
	WriteNodeStatus(ctx context.Context, config string, st *v1alpha1.NodeStatus) error
}

// Options configure a Controller.
type Options struct {
	NodeName string
	Configs  Configs
	// NodeLabels are the node's labels as a watch of it last saw them;
	// false until it has.
	NodeLabels func() (map[string]string, bool)
	// Base is what the daemon's flags select, and BasePools their IP
	// pools: what applies where no object selects the node, and what a
	// spec's omitted fields keep.
	Base      devices.Selection
	BasePools []fpv1.IPPool
	Discovery Discovery
	// SetPools gives the node's IP pools to whoever uses them.
	SetPools func([]fpv1.IPPool)
	VFs      VFs
	// Links sets the PFs' MTU and link state; nil: a spec that asks
	// for either is refused.
	Links Links
	// SysfsRoot holds sys/, where a PF's netdev is found.
	SysfsRoot string
	// Prepared names the claims (namespace/name) that hold a VF of the PF
	// at pfAddress now.
	Prepared func(pfAddress string) []string
	// LockPF takes the lock of the PF at pfAddress that Prepare holds
	// from reading a claim's devices to recording the claim
	// (dra.TryLockPF), if no Prepare holds it now; ok is false when one
	// does. The VFs change under it only, so that no claim is recorded
	// between the look at Prepared and the change. Nil: none.
	LockPF func(pfAddress string) (unlock func(), ok bool)
	Status StatusWriter
	// Interval is how often the node looks again while VFs wait for
	// their claims to go (default 5s).
	Interval time.Duration
}

// Controller applies the node's configuration.
type Controller struct {
	opts    Options
	changed chan struct{}
	// applied is the selection and pools in force, as JSON: a
	// reconcile that finds them the same changes nothing.
	applied string
	// written are the status entries written, by object, as JSON.
	written map[string]string
	// reconciled is closed after the first reconcile that saw the node's
	// labels and the objects.
	reconciled chan struct{}
}

// New returns a controller; Run runs it.
func New(opts Options) *Controller {
	if opts.Interval == 0 {
		opts.Interval = 5 * time.Second
	}
	base, _ := json.Marshal(effective{opts.Base, opts.BasePools})
	return &Controller{opts: opts, changed: make(chan struct{}, 1), applied: string(base), written: map[string]string{}, reconciled: make(chan struct{})}
}

// Reconciled is closed once the node's configuration was first looked
// at: the node's first publish waits for it, so that it does not publish
// by the flags a moment before its object says otherwise.
func (c *Controller) Reconciled() <-chan struct{} { return c.reconciled }

// Changed wakes the controller: an object or the node changed.
func (c *Controller) Changed() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// Run reconciles at each change, and every Interval, until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	tick := time.NewTicker(c.opts.Interval)
	defer tick.Stop()
	for {
		c.Reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
		case <-tick.C:
		}
	}
}

// effective is what the node applies but VFs.
type effective struct {
	Selection devices.Selection `json:"selection"`
	Pools     []fpv1.IPPool     `json:"pools"`
}

// Reconcile applies what selects the node now.
func (c *Controller) Reconcile(ctx context.Context) {
	logger := klog.FromContext(ctx)
	labels, ok := c.opts.NodeLabels()
	if !ok {
		return
	}
	all, err := c.opts.Configs.List(ctx)
	if err != nil {
		logger.Error(err, "Listing the FastpathNodeConfigs")
		return
	}
	var selecting []*v1alpha1.FastpathNodeConfig
	for _, cfg := range all {
		ok, err := cfg.Spec.Selects(labels)
		if err != nil {
			// Said by the node it would select, if any: no node knows.
			logger.V(2).Info("FastpathNodeConfig with a bad nodeSelector", "config", cfg.Name, "err", err.Error())
			continue
		}
		if ok {
			selecting = append(selecting, cfg)
		}
	}
	defer func() {
		select {
		case <-c.reconciled:
		default:
			close(c.reconciled)
		}
	}()
	slices.SortFunc(selecting, func(a, b *v1alpha1.FastpathNodeConfig) int { return strings.Compare(a.Name, b.Name) })
	names := make([]string, len(selecting))
	for i, cfg := range selecting {
		names[i] = cfg.Name
	}
	// Entries of objects that no longer select the node go.
	for name := range c.written {
		if !slices.Contains(names, name) {
			c.write(ctx, name, nil)
		}
	}
	switch len(selecting) {
	case 0:
		if err := c.apply(ctx, effective{c.opts.Base, c.opts.BasePools}); err != nil {
			logger.Error(err, "Applying the daemon's flags again")
		}
	case 1:
		c.write(ctx, selecting[0].Name, c.applyConfig(ctx, selecting[0]))
	default:
		for _, cfg := range selecting {
			others := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == cfg.Name })
			c.write(ctx, cfg.Name, c.entry(cfg, metav1.ConditionFalse, v1alpha1.ReasonConflict,
				fmt.Sprintf("node %s is selected by FastpathNodeConfig %s too: it applies neither and keeps what it had", c.opts.NodeName, strings.Join(others, ", ")), nil))
		}
	}
}

// apply makes e the node's selection and pools, if it is not already.
func (c *Controller) apply(ctx context.Context, e effective) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if string(data) == c.applied {
		return nil
	}
	if err := c.opts.Discovery.Select(e.Selection); err != nil {
		return err
	}
	if c.opts.SetPools != nil {
		c.opts.SetPools(e.Pools)
	}
	c.applied = string(data)
	klog.FromContext(ctx).Info("Applied the node's configuration", "filter", e.Selection.Filter, "share", e.Selection.Share, "pools", len(e.Pools))
	return nil
}

// pfPlan is a VFs entry resolved on the node.
type pfPlan struct {
	v1alpha1.VFs
	addr string
	// netdev is the PF's netdev, "" for none.
	netdev string
}

// applyConfig applies the one object that selects the node and returns its
// status entry. Whatever is wrong with it is found before anything
// changes.
func (c *Controller) applyConfig(ctx context.Context, cfg *v1alpha1.FastpathNodeConfig) *v1alpha1.NodeStatus {
	spec := cfg.Spec
	errs := spec.Validate(field.NewPath("spec"))
	e := effective{c.opts.Base, c.opts.BasePools}
	if spec.Filter != nil {
		e.Selection.Filter = *spec.Filter
	}
	if spec.Share != nil {
		e.Selection.Share, e.Selection.ShareInterfaces, e.Selection.ShareBandwidthMbps = spec.Share.Filter, spec.Share.Interfaces, spec.Share.BandwidthMbps
	}
	if spec.ResourceNames != nil {
		e.Selection.ResourceNames = nil
		for i, rn := range spec.ResourceNames {
			if err := devices.ValidResourceName(rn.Name); err != nil {
				errs = append(errs, field.Invalid(field.NewPath("spec", "resourceNames").Index(i).Child("name"), rn.Name, err.Error()))
			}
			e.Selection.ResourceNames = append(e.Selection.ResourceNames, devices.ResourceName{Name: rn.Name, Filter: rn.Filter})
		}
	}
	if spec.IPPools != nil {
		e.Pools = spec.IPPools
	}
	if len(spec.MemifEndpoints) > 0 {
		e.Selection.MemifEndpoints = nil
		for _, ep := range spec.Memif().Endpoints {
			e.Selection.MemifEndpoints = append(e.Selection.MemifEndpoints, devices.MemifEndpoint{Name: ep.Name, Role: ep.Role, Mode: ep.Mode, SocketPath: ep.SocketPath})
		}
		e.Selection.MemifSource = "FastpathNodeConfig " + cfg.Name
	}
	var plans []pfPlan
	for i, v := range spec.VFs {
		p := field.NewPath("spec", "vfs").Index(i)
		addr, err := c.pfAddress(v.PF)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("pf"), v.PF.String(), err.Error()))
			continue
		}
		total, err := c.opts.VFs.TotalVFs(addr)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p.Child("pf"), v.PF.String(), err.Error()))
		case total == 0:
			errs = append(errs, field.Invalid(p.Child("pf"), v.PF.String(), fmt.Sprintf("PF %s (%s) has no SR-IOV on node %s", v.PF, addr, c.opts.NodeName)))
		case v.NumVFs > total:
			errs = append(errs, field.Invalid(p.Child("numVfs"), v.NumVFs, fmt.Sprintf("PF %s (%s) of node %s supports %d VFs (sriov_totalvfs)", v.PF, addr, c.opts.NodeName, total)))
		}
		netdev := c.pfNetdev(v.PF, addr)
		for _, f := range []struct {
			name string
			set  bool
		}{{"mtu", v.MTU != 0}, {"linkState", v.LinkState != ""}} {
			switch {
			case !f.set:
			case netdev == "":
				errs = append(errs, field.Invalid(p.Child(f.name), v.PF.String(), fmt.Sprintf("PF %s (%s) of node %s has no netdev in the host's namespace", v.PF, addr, c.opts.NodeName)))
			case c.opts.Links == nil:
				errs = append(errs, field.Invalid(p.Child(f.name), v.PF.String(), "this daemon does not set a PF's link"))
			}
		}
		plans = append(plans, pfPlan{v, addr, netdev})
	}
	if len(errs) > 0 {
		return c.entry(cfg, metav1.ConditionFalse, v1alpha1.ReasonInvalid, "nothing applied: "+bounds.Join(errs), nil)
	}
	if err := c.apply(ctx, e); err != nil {
		return c.entry(cfg, metav1.ConditionFalse, v1alpha1.ReasonInvalid, "nothing applied: "+err.Error(), nil)
	}
	var waiting, failed []string
	var vfs []v1alpha1.VFStatus
	for _, p := range plans {
		msg, changed, err := c.applyVFs(ctx, p)
		switch {
		case err != nil:
			failed = append(failed, err.Error())
		case msg != "":
			waiting = append(waiting, msg)
		}
		if changed {
			// A VF bound to vfio-pci loses its netdev, which the live
			// host's link events report; not every change is seen so.
			c.opts.Discovery.Rediscover()
		}
		n, _ := c.opts.VFs.NumVFs(p.addr)
		st := v1alpha1.VFStatus{PF: p.PF.String(), PCIAddress: p.addr, NumVFs: n}
		if p.netdev != "" && c.opts.Links != nil {
			if mtu, up, err := c.opts.Links.Link(p.netdev); err == nil {
				st.MTU, st.LinkState = mtu, map[bool]string{true: v1alpha1.LinkUp, false: v1alpha1.LinkDown}[up]
			}
		}
		vfs = append(vfs, st)
	}
	switch {
	case len(failed) > 0:
		return c.entry(cfg, metav1.ConditionFalse, v1alpha1.ReasonFailed, strings.Join(append(failed, waiting...), "; "), vfs)
	case len(waiting) > 0:
		return c.entry(cfg, metav1.ConditionFalse, v1alpha1.ReasonVFsInUse, "all but VFs applied; "+strings.Join(waiting, "; "), vfs)
	}
	return c.entry(cfg, metav1.ConditionTrue, v1alpha1.ReasonApplied, "applied", vfs)
}

// applyVFs gives the PF its MTU, link state, VFs and their drivers,
// unless a VF of it is prepared for a claim, or being prepared: then it
// says what it waits for. Lowering a PF's MTU or taking it down would cut
// the pods its VFs are in, so those wait as the VFs do.
func (c *Controller) applyVFs(ctx context.Context, p pfPlan) (waiting string, changed bool, err error) {
	cur, err := c.opts.VFs.NumVFs(p.addr)
	if err != nil {
		return "", false, err
	}
	var mtu int
	var up bool
	if p.netdev != "" && (p.MTU != 0 || p.LinkState != "") {
		if mtu, up, err = c.opts.Links.Link(p.netdev); err != nil {
			return "", changed, fmt.Errorf("PF %s: %w", p.PF, err)
		}
	}
	setMTU := p.MTU != 0 && mtu != p.MTU
	setLink := p.LinkState != "" && up != (p.LinkState == v1alpha1.LinkUp)
	drivers, err := c.driversToSet(p, cur)
	if err != nil {
		return "", changed, err
	}
	if cur == p.NumVFs && !setMTU && !setLink && len(drivers) == 0 {
		return "", changed, nil
	}
	if c.opts.LockPF != nil {
		unlock, ok := c.opts.LockPF(p.addr)
		if !ok {
			return fmt.Sprintf("PF %s (%s) keeps its %d VFs while a claim on it is being prepared; it gets %d once none holds one", p.PF, p.addr, cur, p.NumVFs), false, nil
		}
		defer unlock()
	}
	if holders := c.opts.Prepared(p.addr); len(holders) > 0 {
		who := "claim " + holders[0] + " holds"
		if len(holders) > 1 {
			who = "claims " + strings.Join(holders, ", ") + " hold"
		}
		return fmt.Sprintf("PF %s (%s) keeps its %d VFs while %s one; it gets %d once none does", p.PF, p.addr, cur, who, p.NumVFs), false, nil
	}
	logger := klog.FromContext(ctx).WithValues("pf", p.PF.String(), "pciAddress", p.addr)
	if setMTU {
		if err := c.opts.Links.SetMTU(p.netdev, p.MTU); err != nil {
			return "", changed, fmt.Errorf("PF %s: %w", p.PF, err)
		}
		changed = true
		logger.Info("Set the PF's MTU", "mtu", p.MTU, "before", mtu)
	}
	if setLink {
		if err := c.opts.Links.SetUp(p.netdev, p.LinkState == v1alpha1.LinkUp); err != nil {
			return "", changed, fmt.Errorf("PF %s: %w", p.PF, err)
		}
		changed = true
		logger.Info("Set the PF's link", "state", p.LinkState)
	}
	if cur != p.NumVFs {
		if err := c.opts.VFs.SetNumVFs(ctx, p.addr, p.NumVFs); err != nil {
			return "", changed, fmt.Errorf("PF %s: %w", p.PF, err)
		}
		changed = true
		logger.Info("Made the PF's VFs", "numVFs", p.NumVFs, "before", cur)
		// The new VFs are on the kernel's driver: what they must be on
		// is looked at again.
		if drivers, err = c.driversToSet(p, p.NumVFs); err != nil {
			return "", changed, err
		}
	}
	for _, d := range drivers {
		changed = true
		if err := c.opts.VFs.BindVF(ctx, d.addr, d.driver); err != nil {
			return "", changed, fmt.Errorf("PF %s: VF %d (%s): %w", p.PF, d.index, d.addr, err)
		}
	}
	if len(drivers) > 0 {
		logger.Info("Bound the PF's VFs", "driver", p.Driver, "ranges", len(p.Ranges), "vfs", len(drivers))
	}
	return "", changed, nil
}

// vfDriver is a VF to bind to driver.
type vfDriver struct {
	index        int
	addr, driver string
}

// driversToSet are the VFs of the PF (which has n now) not on the driver
// the plan names for them; a VF whose driver is "" stays on the one it is
// on. Only when the PF has the VFs the plan asks for: new VFs are looked
// at once made.
func (c *Controller) driversToSet(p pfPlan, n int) ([]vfDriver, error) {
	if n != p.NumVFs || (p.Driver == "" && len(p.Ranges) == 0) {
		return nil, nil
	}
	addrs, err := c.opts.VFs.VFAddresses(p.addr)
	if err != nil {
		return nil, err
	}
	var out []vfDriver
	for i, vf := range addrs {
		want := p.DriverOf(i)
		if want == "" {
			continue
		}
		if drv, _ := c.opts.VFs.Driver(vf); drv != want {
			out = append(out, vfDriver{i, vf, want})
		}
	}
	return out, nil
}

// pfNetdev is the netdev of the PF at addr in the host's namespace, ""
// for none.
func (c *Controller) pfNetdev(s v1alpha1.PFSelector, addr string) string {
	if s.Name != "" {
		return s.Name
	}
	entries, err := os.ReadDir(filepath.Join(c.opts.SysfsRoot, "sys", "bus", "pci", "devices", addr, "net"))
	if err != nil || len(entries) == 0 {
		return ""
	}
	return entries[0].Name()
}

// pfAddress is the PCI address of the PF s names.
func (c *Controller) pfAddress(s v1alpha1.PFSelector) (string, error) {
	if s.PCIAddress != "" {
		if _, err := os.Stat(filepath.Join(c.opts.SysfsRoot, "sys", "bus", "pci", "devices", s.PCIAddress)); err != nil {
			return "", fmt.Errorf("no PCI function %s on node %s", s.PCIAddress, c.opts.NodeName)
		}
		return s.PCIAddress, nil
	}
	// class/net/NAME links to the netdev's directory under its device:
	// .../0000:3b:00.0/net/NAME (.../virtual/net/NAME for one without).
	target, err := os.Readlink(filepath.Join(c.opts.SysfsRoot, "sys", "class", "net", s.Name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	addr := filepath.Base(filepath.Dir(filepath.Dir(target)))
	if err != nil || !pciAddress.MatchString(addr) {
		return "", fmt.Errorf("no netdev %s with a PCI function on node %s", s.Name, c.opts.NodeName)
	}
	return addr, nil
}

// entry is the node's status entry of cfg.
func (c *Controller) entry(cfg *v1alpha1.FastpathNodeConfig, status metav1.ConditionStatus, reason, msg string, vfs []v1alpha1.VFStatus) *v1alpha1.NodeStatus {
	st := &v1alpha1.NodeStatus{Name: c.opts.NodeName, ObservedGeneration: cfg.Generation, VFs: vfs}
	// The transition time of the condition as written, if the same.
	for _, n := range cfg.Status.Nodes {
		if n.Name == c.opts.NodeName {
			st.Conditions = slices.Clone(n.Conditions)
		}
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionApplied, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: cfg.Generation})
	return st
}

// write writes the node's entry of config, if it changed.
func (c *Controller) write(ctx context.Context, config string, st *v1alpha1.NodeStatus) {
	data, _ := json.Marshal(st)
	if last, ok := c.written[config]; ok && last == string(data) {
		return
	}
	if err := c.opts.Status.WriteNodeStatus(ctx, config, st); err != nil {
		klog.FromContext(ctx).Error(err, "Writing the node's status of a FastpathNodeConfig", "config", config)
		delete(c.written, config) // tried again at the next reconcile
		return
	}
	if st == nil {
		delete(c.written, config)
		return
	}
	c.written[config] = string(data)
}
