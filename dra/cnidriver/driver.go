package cnidriver

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dataplane/hostdir"
	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/claimspec"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/sharedl2"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/dra/watch"
)

// DriverName is the CNI DRA driver's name.
const DriverName = claims.DriverCNI

// Options configure the CNI driver.
type Options struct {
	NodeName               string
	Client                 kubernetes.Interface
	PluginDir, RegistryDir string
	// Store holds the prepared claims (of both drivers); Status writes
	// their status.
	Store  *claims.Store
	Status *status.Writer
	// Runtime runs DEL for networks whose sandbox stopped without it
	// (nri.Plugin); nil for none.
	Runtime kubelet.Runtime
	// Devices is how many interchangeable devices the node publishes: how
	// many CNI networks its pods can have at once.
	Devices int
	// SharedDevice publishes one device for many allocations instead, of
	// capacity "networks" = Devices, each allocation taking one
	// (DRAConsumableCapacity: Kubernetes 1.36 or newer, or the feature
	// gate).
	SharedDevice bool
	// Attributes are attributes of every device (unqualified names are
	// cni.dra.networking.x-k8s.io/...), for arguments to refer to.
	Attributes map[string]string
	Policy     cnipolicy.Options
	// Metrics records Prepare and Unprepare; nil for none.
	Metrics *metrics.Metrics
	// PodUID: see Options.PodUID.
	PodUID types.UID
	// Approved reads the approved configs claims name with configName.
	Approved cnipolicy.ApprovedConfigs
	// Metadata: see dra.Options.Metadata.
	Metadata *kubelet.Metadata
	// Prefetch: see dra.Options.Prefetch.
	Prefetch *kubelet.Prefetch
	// HostAddresses reads the addresses of a host netdev, the parent
	// (master) of a network's sub-interface, at Prepare. Default:
	// dataplane.LinkAddresses.
	HostAddresses func(netdev string) ([]netip.Addr, error)
	// PoolGateways are the gateways of the node's IP pools (--ip-pools),
	// which no network's static address may be; nil for none.
	PoolGateways func() sharedl2.Gateways
	// StoreFault: see dra.Options.StoreFault.
	StoreFault func() error
}

// Driver serves the CNI DRA driver API (cni.dra.networking.x-k8s.io): a
// claim carries a CNI config, checked and resolved at Prepare; the NRI
// plugin runs it when the pod's sandbox starts and undoes it when it
// stops.
type Driver struct {
	opts   Options
	helper *kubeletplugin.Helper
	attrs  map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	errs   kubelet.Errors
	slices *kubelet.Publisher
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New returns a driver not serving yet.
func New(opts Options) (*Driver, error) {
	if err := hostdir.Make(opts.PluginDir, 0o750); err != nil {
		return nil, fmt.Errorf("create %s: %w", opts.PluginDir, err)
	}
	if opts.Devices < 1 {
		return nil, fmt.Errorf("the CNI driver needs at least one device, not %d", opts.Devices)
	}
	if opts.Store == nil {
		return nil, fmt.Errorf("the CNI driver needs a claim store")
	}
	if opts.Status == nil {
		opts.Status = status.NewWriter(opts.Client)
	}
	if opts.HostAddresses == nil {
		opts.HostAddresses = dataplane.LinkAddresses
	}
	if opts.StoreFault == nil {
		opts.StoreFault = func() error { return nil }
	}
	d := &Driver{opts: opts, attrs: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}, errs: kubelet.Errors{Metrics: opts.Metrics}}
	d.slices = kubelet.NewPublisher(opts.Client, DriverName, opts.NodeName, func(ctx context.Context, err error) {
		if err != nil {
			d.errs.PublishFailed(ctx, err, "Publishing the node's CNI devices")
		}
	})
	for k, v := range opts.Attributes {
		name := k
		if !strings.Contains(k, "/") {
			name = DriverName + "/" + k
		}
		d.attrs[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{StringValue: new(v)}
	}
	opts.Metrics.Serving(claims.DriverCNI)
	return d, nil
}

// attributes are the attributes every CNI device is published with.
func (d *Driver) attributes(_, _ string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	return d.attrs
}

// SharedDevice is the name of the one CNI device of a node that
// publishes it shared (Options.SharedDevice); CapacityNetworks its
// capacity in networks.
const (
	SharedDevice                               = "cni"
	CapacityNetworks resourceapi.QualifiedName = "networks"
)

// Resources are the node's CNI devices: interchangeable, one per network;
// or one shared by every network, each taking one of its capacity.
func (d *Driver) Resources() resourceslice.DriverResources {
	var devs []resourceapi.Device
	if d.opts.SharedDevice {
		one := resource.MustParse("1")
		devs = append(devs, resourceapi.Device{Name: SharedDevice, Attributes: d.attrs, AllowMultipleAllocations: new(true),
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{CapacityNetworks: {
				Value:         *resource.NewQuantity(int64(d.opts.Devices), resource.DecimalSI),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: &one, ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &one, Max: &one}}}}})
	}
	for i := range d.opts.Devices {
		if d.opts.SharedDevice {
			break
		}
		devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("cni-%d", i), Attributes: d.attrs})
	}
	pool := resourceslice.Pool{}
	for start := 0; start < len(devs); start += kubelet.MaxDevicesPerSlice {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: devs[start:min(start+kubelet.MaxDevicesPerSlice, len(devs))]})
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{d.opts.NodeName: pool}}
}

// Start registers the plugin with the kubelet and publishes the devices.
func (d *Driver) Start(ctx context.Context) error {
	h, err := kubelet.Start(ctx, d, DriverName, d.opts.Prefetch.Client(d.opts.Client), d.opts.NodeName, d.opts.PluginDir, d.opts.RegistryDir, d.opts.PodUID, false, d.opts.Metadata)
	if err != nil {
		return err
	}
	d.helper = h
	d.slices.Publish(d.Resources)
	go d.slices.Run(ctx)
	return nil
}

// Stop stops serving.
func (d *Driver) Stop() {
	if d.helper != nil {
		d.helper.Stop()
	}
}

// RegistrationStatus is the kubelet's answer to the registration.
func (d *Driver) RegistrationStatus() error { return kubelet.RegistrationStatus(d.helper, DriverName) }

// HandleError is called for errors in the background.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	d.errs.Handle(ctx, err, msg)
}

// WatchHealthStatus: CNI devices have no health of their own.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// PrepareResourceClaims checks and resolves each claim's CNI configs and
// records them; nothing else happens until the pod's sandbox starts.
func (d *Driver) PrepareResourceClaims(ctx context.Context, cls []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(cls))
	for _, claim := range cls {
		if err := ctx.Err(); err != nil {
			// The kubelet gave up: the claims left are not started.
			out[claim.UID] = kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s: %w", klog.KObj(claim), err)}
			continue
		}
		start := time.Now()
		res := d.prepareClaim(ctx, claim)
		res.Err = bounds.Err(res.Err)
		d.opts.Metrics.Prepare(claims.DriverCNI, res.Err, time.Since(start))
		out[claim.UID] = res
	}
	return out, nil
}

func (d *Driver) prepareClaim(ctx context.Context, claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim))
	key := claims.Key{Driver: claims.DriverCNI, UID: claim.UID}
	unlock, err := d.opts.Store.LockContext(ctx, key)
	if err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s: %w", klog.KObj(claim), err)}
	}
	defer unlock()
	if c, ok := d.opts.Store.Get(key); ok {
		return kubelet.Result(&c, d.opts.Metadata, d.attributes)
	}
	if err := d.opts.StoreFault(); err != nil {
		err = fmt.Errorf("claim %s: nothing done: %w", klog.KObj(claim), err)
		logger.Info("Rejected CNI claim", "err", err)
		return kubeletplugin.PrepareResult{Err: err}
	}
	c, err := d.plan(ctx, claim)
	var own []sharedl2.Holding
	if err == nil {
		own, err = d.checkHost(c)
	}
	if err == nil {
		// The store checks the addresses against every other record's
		// in the same write.
		err = d.opts.Store.AdmitWith(*c, admitter(own))
	}
	if err != nil {
		err = bounds.Err(err)
		logger.Info("Rejected CNI claim", "err", err)
		return kubeletplugin.PrepareResult{Err: err}
	}
	logger.Info("Prepared CNI claim", "pod", c.Pod.Name, "networks", len(c.Networks))
	return kubelet.Result(c, d.opts.Metadata, d.attributes)
}

// plan validates a claim as the design asks and resolves its configs.
func (d *Driver) plan(ctx context.Context, claim *resourceapi.ResourceClaim) (*claims.Claim, error) {
	name := klog.KObj(claim).String()
	fail := func(request, device, reason string, errs field.ErrorList) error {
		return &claimspec.ClaimError{Claim: name, Request: request, Device: device, Reason: reason, Errs: errs}
	}
	pod, err := claimspec.Consumer(claim, fail)
	if err != nil {
		return nil, err
	}
	c := &claims.Claim{Driver: claims.DriverCNI, UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name, Pod: pod, Prepared: true}
	taken := map[string]string{}
	cc := cnipolicy.Sources{Approved: d.opts.Approved, Namespace: claim.Namespace, Attributes: d.attrs,
		Slice: map[string]string{"spec.nodeName": d.opts.NodeName, "spec.pool.name": d.opts.NodeName, "spec.driver": DriverName}}
	if d.opts.Client != nil {
		cc.ConfigMaps = watch.ConfigMaps{Client: d.opts.Client}
	}
	for _, res := range claim.Status.Allocation.Devices.Results {
		if res.Driver != DriverName {
			continue
		}
		if err := claimspec.CheckResult(claim, res, d.opts.NodeName, fail); err != nil {
			return nil, err
		}
		if why := claimspec.ExactlyOne(claim, res.Request); why != "" {
			return nil, fail(res.Request, "", why, nil)
		}
		if res.AdminAccess != nil && *res.AdminAccess {
			return nil, fail(res.Request, res.Device, "allocated with adminAccess: the CNI driver runs the claim's CNI config on its device, and gives no view of a device another pod holds", nil)
		}
		net, reason, errs := claimspec.CNINetwork(ctx, claim, res.Request, d.opts.Policy, cc)
		if reason != "" || len(errs) > 0 {
			return nil, fail(res.Request, res.Device, reason, errs)
		}
		if where, dup := taken[net.IfName]; dup {
			return nil, fail(res.Request, res.Device, "", field.ErrorList{field.Duplicate(field.NewPath("ifName"), fmt.Sprintf("%s (already used by %s)", net.IfName, where))})
		}
		taken[net.IfName] = fmt.Sprintf("request %q", res.Request)
		n := claims.Network{Request: res.Request, Pool: res.Pool, Device: res.Device, IfName: net.IfName,
			Conflist: net.Conflist, Redact: net.Redact}
		if res.ShareID != nil {
			n.ShareID = string(*res.ShareID)
		}
		c.Networks = append(c.Networks, n)
	}
	if len(c.Networks) == 0 {
		return nil, fail("", "", "no device of driver "+DriverName+" is allocated", nil)
	}
	return c, nil
}

// checkHost is the addresses c's networks give pods on shared parents
// (sharedl2.Of): a static one that is an address of its parent itself
// (Options.HostAddresses) or the gateway of one of the node's IP pools is
// refused.
func (d *Driver) checkHost(c *claims.Claim) ([]sharedl2.Holding, error) {
	own := sharedl2.Of(c)
	if len(own) == 0 {
		return nil, nil
	}
	host := sharedl2.Host{Parents: map[string][]netip.Addr{}}
	if d.opts.PoolGateways != nil {
		host.Gateways = d.opts.PoolGateways()
	}
	for _, parent := range sharedl2.Parents(own) {
		addrs, err := d.opts.HostAddresses(parent)
		if err != nil {
			return nil, fmt.Errorf("claim %s: read the addresses of the parent %s: %w", c, parent, err)
		}
		host.Parents[parent] = addrs
	}
	if h, why, refused := host.Refused(own); refused {
		return nil, &claimspec.ClaimError{Claim: c.String(), Request: h.Request, Device: h.Device,
			Errs: field.ErrorList{field.Invalid(field.NewPath(h.Field), h.Value, why)}}
	}
	return own, nil
}

// admitter refuses, under the store's lock, a static address of own that
// another record holds on the same shared parent (sharedl2.Taken); nil
// when own holds none.
func admitter(own []sharedl2.Holding) func(c *claims.Claim, others []*claims.Claim) error {
	if len(own) == 0 {
		return nil
	}
	return func(c *claims.Claim, others []*claims.Claim) error {
		if mine, theirs, taken := sharedl2.Taken(own, sharedl2.All(others)); taken {
			return &claimspec.ClaimError{Claim: c.String(), Request: mine.Request, Device: mine.Device,
				Errs: field.ErrorList{field.Invalid(field.NewPath(mine.Field), mine.Value, sharedl2.TakenDetail(mine, theirs, c.Namespace))}}
		}
		return nil
	}
}

// UnprepareResourceClaims runs DEL for networks still added (a DEL that
// failed when the sandbox stopped is retried here, and the kubelet retries
// Unprepare until it succeeds) and forgets the claims.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, cls []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(cls))
	for _, o := range cls {
		if err := ctx.Err(); err != nil {
			out[o.UID] = fmt.Errorf("claim %s: %w", o.NamespacedName, err)
			continue
		}
		key := claims.Key{Driver: claims.DriverCNI, UID: o.UID}
		start := time.Now()
		err := d.unprepare(ctx, key)
		d.opts.Metrics.Unprepare(claims.DriverCNI, err, time.Since(start))
		if err != nil {
			out[o.UID] = bounds.Err(fmt.Errorf("claim %s: %w", o.NamespacedName, err))
			continue
		}
		out[o.UID] = nil
	}
	return out, nil
}

func (d *Driver) unprepare(ctx context.Context, key claims.Key) error {
	if d.opts.Runtime != nil {
		if err := d.opts.Runtime.ReleaseClaim(ctx, key); err != nil {
			return err
		}
	}
	unlock, err := d.opts.Store.LockContext(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	c, ok := d.opts.Store.Get(key)
	if !ok {
		return nil
	}
	for _, n := range c.Networks {
		if n.Added {
			return fmt.Errorf("request %q, device %s: the network is still added to sandbox %s, and nothing can run its DEL", n.Request, n.Device, n.SandboxID)
		}
	}
	if err := d.opts.Store.Delete(key); err != nil {
		return err
	}
	d.opts.Status.Forget(key.UID)
	klog.FromContext(ctx).Info("Unprepared CNI claim", "claim", c.String())
	return nil
}
