package dra

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/dataplane/hostdir"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/attach"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// PCIBinder binds PCI functions to vfio-pci and back (dataplane.PCIBinder).
type PCIBinder interface {
	Driver(addr string) (string, error)
	BindVFIO(ctx context.Context, addr string, group int) error
	Restore(ctx context.Context, addr, driver string) error
	GroupNode(group int) string
	ContainerNode() string
	GroupDevices(group int) ([]string, error)
}

var _ PCIBinder = dataplane.PCIBinder{}

// VFCounter reads how many VFs a PCI function has enabled now, 0 for one
// without SR-IOV (dataplane.PCIBinder).
type VFCounter interface {
	NumVFs(addr string) (int, error)
}

var _ VFCounter = dataplane.PCIBinder{}

// RDMAInfo reads what a pod is given of an RDMA device, and the node's
// RDMA namespace mode (dataplane).
type RDMAInfo interface {
	NetnsMode() (string, error)
	Device(name string, umad bool) (dataplane.RDMADevice, error)
}

// nodeRDMA is RDMAInfo of this node.
type nodeRDMA struct{ dataplane.RDMAFiles }

func (nodeRDMA) NetnsMode() (string, error) { return dataplane.RDMANetnsMode() }

// Options configure the driver.
type Options struct {
	NodeName string
	Client   kubernetes.Interface
	// PluginDir holds the DRA gRPC socket; RegistryDir is where the kubelet
	// looks for plugins to register.
	PluginDir, RegistryDir string
	// StateDir holds per-claim files; CDIDir the CDI specs.
	StateDir, CDIDir string
	// Store holds the prepared claims; Status writes their status.
	Store  *claims.Store
	Status *status.Writer
	// Runtime releases claims the runtime's hooks did not; nil for none.
	Runtime kubelet.Runtime
	// PF makes VF settings through PFs. Default: netlink.
	PF dataplane.PF
	// PCI binds functions to vfio-pci. Default: sysfs and /dev of this node.
	PCI PCIBinder
	// RDMA reads RDMA devices' character devices and the RDMA namespace
	// mode. Default: sysfs, /dev and netlink of this node.
	RDMA RDMAInfo
	// VFs reads, at Prepare, how many VFs a PF claimed whole has now.
	// Default: PCI, where it reads them (dataplane.PCIBinder does), else
	// this node's sysfs.
	VFs VFCounter
	// AllowPFWithVFs lets a claim take a PF that has VFs whole, in mode
	// netdev, afxdp or delegate (--allow-pf-with-vfs): its pod may then set
	// every VF's MAC, VLAN and trust through it. Off, such claims are
	// refused. A PF with VFs is never bound to vfio-pci.
	AllowPFWithVFs bool
	// PFCounters publishes each PF with VFs and its VFs as partitionable
	// devices (--pf-counters, PublishOptions): the scheduler never gives
	// the PF and one of its VFs at once.
	PFCounters bool
	// NUMANodeLists publishes resource.kubernetes.io/numaNode as a list
	// (--numa-node-list, PublishOptions).
	NUMANodeLists map[int64][]int64
	// InterfaceSysctls are the interface sysctls claims may set beyond
	// v1alpha1.DefaultSysctls (--interface-sysctls).
	InterfaceSysctls []string
	// Binding publishes the devices its selector admits with binding
	// conditions, and reports them ready or failed once allocated
	// (--binding-conditions); needs Client.
	Binding BindingOptions
	// MemifDir is where memif endpoint sockets must live (--memif-dir).
	MemifDir string
	// Channels sets combined channels for afxdp claims. Default: ethtool.
	Channels dataplane.Channels
	// BPFDir is where XDP programs are pinned, one directory per claim and
	// request; a bpffs is mounted there if it is not on one. Default
	// /sys/fs/bpf/fastpath.
	BPFDir string
	// BootID is this boot of the node. Default: the kernel's.
	BootID string
	// Metrics records Prepare and Unprepare; nil for none.
	Metrics *metrics.Metrics
	// PodUID, the daemon's pod's, lets a newer daemon of the node register
	// with the kubelet beside this one during a rolling update.
	PodUID types.UID
	// Health tunes device health; HealthChecks look at prepared devices in
	// their pods (nil: not at all); Events records health transitions on
	// the node and the pods (nil: none).
	Health       HealthOptions
	HealthChecks HealthChecks
	Events       record.EventRecorder
	// IPPools are the node's address pools, from which claims with ipam
	// get their addresses (--ip-pools); nil for none.
	IPPools IPPools
	// DeviceInfoDir is where the device-info of devices claimed in mode
	// delegate is written for the NetworkAttachmentDefinitions' CNI
	// plugins (dp/RESOURCE-PCI-device.json, as the SR-IOV device plugin
	// writes it); "" when the networks pods select are off (no --npwg):
	// such claims are refused.
	DeviceInfoDir string
	// PodNetworks reads the PodNetworks (and PodNetworkAttachments) claims'
	// configs name (--podnetworks); nil: such claims are refused.
	PodNetworks attach.PodNetworkGetter
	// Metadata writes the device metadata of prepared claims
	// (--device-metadata); nil: none.
	Metadata *kubelet.Metadata
	// Prefetch reads the node's pods' claims ahead for the kubelet
	// plugin helper's reads at Prepare (--claim-prefetch); nil: the
	// helper reads them itself.
	Prefetch *kubelet.Prefetch
	// HostAddresses reads the addresses of a host netdev, the parent of
	// a claim's sub-interface, at Prepare. Default:
	// dataplane.LinkAddresses.
	HostAddresses func(netdev string) ([]netip.Addr, error)
	// StoreFault says why the claim store cannot be written now, nil
	// while it can (storewatch.Watcher.Err, which also writes the store
	// again once it has room): Prepare refuses claims that would write it
	// meanwhile, before doing anything. Nil: none are refused.
	StoreFault func() error
	// SliceFeatures are what the API server keeps of a ResourceSlice
	// (kubelet.ProbeSliceFeatures); the zero value means all of them.
	SliceFeatures *kubelet.SliceFeatures
}

// Driver is fastpath's DRA kubelet plugin for driver fastpath.dev.
type Driver struct {
	adminState
	opts   Options
	helper *kubeletplugin.Helper

	mu sync.Mutex // guards inventory, published, publishedKinds, released and pools
	// pools are the node's IP pools: opts.IPPools, then what SetIPPools
	// gives.
	pools     IPPools
	inventory map[string]devices.Device
	published *devices.Inventory
	// publishedKinds counts the devices last published, by kind.
	publishedKinds map[string]int
	// released are the devices of claims just unprepared that discovery
	// has not seen back yet, by name.
	released map[string]releasedDevice
	health   *health
	// binder reports binding conditions; nil without Options.Binding.
	binder *binder
	errs   kubelet.Errors
	slices *kubelet.Publisher
	// adoptTaints: the first Publish reads the taints of the slices as
	// they are.
	adoptTaints sync.Once
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New returns a driver that is not serving yet.
func New(opts Options) (*Driver, error) {
	for _, dir := range []string{opts.PluginDir, opts.StateDir, opts.CDIDir} {
		if err := hostdir.Make(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	// The temporary files of CDI specs whose write was killed: the
	// runtime ignores them, nothing else would remove them.
	if err := claims.RemoveTemps(opts.CDIDir, cdiVendor+"-claim-"); err != nil {
		return nil, fmt.Errorf("CDI directory: %w", err)
	}
	if err := claims.RemoveTemps(filepath.Join(opts.CDIDir, cdiStage), cdiVendor+"-claim-"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("CDI directory: %w", err)
	}
	if opts.Store == nil {
		return nil, errors.New("the driver needs a claim store")
	}
	if opts.Status == nil {
		opts.Status = status.NewWriter(opts.Client)
	}
	if opts.PF == nil {
		opts.PF = dataplane.NetlinkPF{}
	}
	if opts.Channels == nil {
		opts.Channels = dataplane.EthtoolChannels{}
	}
	if opts.BPFDir == "" {
		opts.BPFDir = "/sys/fs/bpf/fastpath"
	}
	if opts.PCI == nil {
		opts.PCI = dataplane.PCIBinder{SysfsRoot: "/", DevRoot: "/"}
	}
	if opts.RDMA == nil {
		opts.RDMA = nodeRDMA{dataplane.RDMAFiles{SysfsRoot: "/", DevRoot: "/"}}
	}
	if opts.VFs == nil {
		opts.VFs = dataplane.PCIBinder{SysfsRoot: "/"}
		if vfs, ok := opts.PCI.(VFCounter); ok {
			opts.VFs = vfs
		}
	}
	if opts.HostAddresses == nil {
		opts.HostAddresses = dataplane.LinkAddresses
	}
	if opts.StoreFault == nil {
		opts.StoreFault = func() error { return nil }
	}
	if opts.BootID == "" {
		id, err := claims.BootID()
		if err != nil {
			return nil, err
		}
		opts.BootID = id
	}
	d := &Driver{opts: opts, pools: opts.IPPools, inventory: map[string]devices.Device{}, released: map[string]releasedDevice{}, errs: kubelet.Errors{Metrics: opts.Metrics}}
	d.slices = kubelet.NewPublisher(opts.Client, devices.DriverName, opts.NodeName, d.publishResult)
	if opts.SliceFeatures != nil {
		d.slices.SetFeatures(*opts.SliceFeatures)
	}
	d.health = newHealth(opts.Health, opts.NodeName, opts.Store, opts.HealthChecks, opts.Events)
	d.health.changed = d.republish
	if opts.Binding.Selector != nil {
		if opts.Client == nil {
			return nil, errors.New("binding conditions need the API server (a client)")
		}
		d.binder = newBinder(d, opts.Binding)
	}
	opts.Metrics.Serving(claims.DriverFastpath)
	opts.Metrics.GaugeByLabel("unhealthy_devices", "Devices reported unhealthy (tainted), by reason.", "reason", d.health.unhealthyByReason)
	opts.Metrics.GaugeByLabel("degraded_devices", "Devices tainted degraded (effect None: a problem ended less than --health-degraded-hold ago), by reason.", "reason", d.health.degradedByReason)
	return d, nil
}

// Start registers the plugin with the kubelet and serves the DRA API until
// ctx ends or Stop is called.
func (d *Driver) Start(ctx context.Context) error {
	// The kubelet's calls for different pods run at once (a burst of pods
	// waits for no other's Prepare): each claim has its own lock, the
	// store admits atomically, and Reconcile excludes them by the lock
	// the helper would take (prepareLock).
	h, err := kubelet.Start(ctx, d, devices.DriverName, d.opts.Prefetch.Client(d.opts.Client), d.opts.NodeName, d.opts.PluginDir, d.opts.RegistryDir, d.opts.PodUID, true, d.opts.Metadata,
		kubeletplugin.Serialize(false))
	d.helper = h
	if err == nil {
		go d.slices.Run(ctx)
		go d.health.run(ctx)
		if d.binder != nil {
			go d.binder.run(ctx)
		}
		go d.runAdminViews(ctx)
	}
	return err
}

// Stop stops serving.
func (d *Driver) Stop() {
	if d.helper != nil {
		d.helper.Stop()
	}
}

// Publish makes inv the devices Prepare works with, looks at their health,
// and publishes them as ResourceSlices, unhealthy ones tainted. The
// publisher writes in the background, and only slices whose content
// changed; the metrics and the log say how it went.
func (d *Driver) Publish(ctx context.Context, inv devices.Inventory) {
	d.adoptTaints.Do(func() { d.adoptSliceTaints(ctx) })
	d.UseInventory(inv)
	d.mu.Lock()
	d.published = &inv
	d.mu.Unlock()
	d.health.setInventory(ctx, inv)
	d.republish(ctx)
	if d.binder != nil {
		d.binder.poke() // a link came up, say
	}
}

// adoptSliceTaints gives health the taints of the node's slices as the
// daemon before this one published them (health.adopt). Without the API
// server, the devices are judged afresh.
func (d *Driver) adoptSliceTaints(ctx context.Context) {
	if d.opts.Client == nil {
		return
	}
	list, err := d.opts.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + d.opts.NodeName + ",spec.driver=" + devices.DriverName})
	if err != nil {
		klog.FromContext(ctx).Info("Reading the node's ResourceSlices for their taints; the devices are judged afresh", "err", err.Error())
		return
	}
	d.health.adopt(list.Items)
}

// republish publishes what the node has (resources), computed when the
// publisher writes rather than on the caller's path (a Prepare's or an
// Unprepare's).
func (d *Driver) republish(ctx context.Context) {
	d.mu.Lock()
	none := d.published == nil
	d.mu.Unlock()
	if none {
		return // nothing discovered yet
	}
	bg := context.WithoutCancel(ctx)
	d.slices.Publish(func() resourceslice.DriverResources {
		res, _ := d.resources(bg)
		return res
	})
}

// publishResult is told how each write of the slices went.
func (d *Driver) publishResult(ctx context.Context, err error) {
	if err != nil {
		d.errs.PublishFailed(ctx, err, "Publishing the node's devices")
		return
	}
	d.mu.Lock()
	byKind := d.publishedKinds
	d.mu.Unlock()
	d.opts.Metrics.Published(byKind, nil)
}

// UseInventory makes inv the devices Prepare validates claims against,
// without publishing it.
func (d *Driver) UseInventory(inv devices.Inventory) {
	byName := make(map[string]devices.Device, len(inv.Devices))
	for _, dev := range inv.Devices {
		byName[dev.Name] = dev
	}
	d.mu.Lock()
	d.inventory = byName
	d.mu.Unlock()
}

func (d *Driver) inventoryMap() map[string]devices.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inventory
}

// SetIPPools replaces the node's IP pools (its FastpathNodeConfig changed
// them): claims prepared from now on take their addresses from them;
// those prepared keep theirs.
func (d *Driver) SetIPPools(p IPPools) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pools = p
}

func (d *Driver) ipPools() IPPools {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pools
}

// RegistrationStatus is the kubelet's answer to the registration, nil before.
func (d *Driver) RegistrationStatus() error {
	return kubelet.RegistrationStatus(d.helper, devices.DriverName)
}

// PrepareResourceClaims prepares each claim on its own: one bad claim does
// not fail the others. The kubelet plugin helper runs one call of the
// driver at a time (across the two daemons of a rolling update too), so a
// slow vfio bind delays the claims after it; each claim also has its own
// lock, which the runtime's hooks take.
func (d *Driver) PrepareResourceClaims(ctx context.Context, cls []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	unlock, err := d.prepareLock().RLock(ctx)
	if err != nil {
		return nil, fmt.Errorf("waiting for another daemon's reconciliation: %w", err)
	}
	defer unlock()
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
		if res.Err == nil {
			d.opts.Status.Seen(claim)
		}
		d.opts.Metrics.Prepare(claims.DriverFastpath, res.Err, time.Since(start))
		out[claim.UID] = res
	}
	return out, nil
}

// UnprepareResourceClaims undoes what Prepare and the runtime's hooks did.
// A claim that is not prepared (or already unprepared) is fine.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, cls []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	unlock, err := d.prepareLock().RLock(ctx)
	if err != nil {
		return nil, fmt.Errorf("waiting for another daemon's reconciliation: %w", err)
	}
	defer unlock()
	out := make(map[types.UID]error, len(cls))
	for _, c := range cls {
		if err := ctx.Err(); err != nil {
			out[c.UID] = fmt.Errorf("claim %s: %w", c.NamespacedName, err)
			continue
		}
		start := time.Now()
		err := d.unprepare(ctx, claims.Key{Driver: claims.DriverFastpath, UID: c.UID})
		d.opts.Metrics.Unprepare(claims.DriverFastpath, err, time.Since(start))
		if err != nil {
			out[c.UID] = bounds.Err(fmt.Errorf("claim %s: %w", c.NamespacedName, err))
			continue
		}
		out[c.UID] = nil
	}
	return out, nil
}

func (d *Driver) unprepare(ctx context.Context, key claims.Key) error {
	if admin, err := d.unprepareAdmin(ctx, key.UID); admin {
		return err
	}
	if d.opts.Runtime != nil {
		if err := d.opts.Runtime.ReleaseClaim(ctx, key); err != nil {
			return err
		}
	}
	fault.Point("unprepare.released")
	unlock, err := d.opts.Store.LockContext(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	c, ok := d.opts.Store.Get(key)
	if !ok {
		return nil
	}
	// The runtime's hook gives a netdev back to the host before this
	// (ReleaseClaim); one still recorded in its pod now is there, or gone.
	inPod := map[string]bool{}
	for _, dev := range c.Devices {
		inPod[dev.Device] = dev.Attached != nil
	}
	gone, err := (stepRunner{d.opts.Store}).undo(ctx, &c, d.steps(&c))
	if err != nil {
		return err
	}
	fault.Point("unprepare.undone")
	back := d.releasing(ctx, &c, gone, inPod)
	if err := d.opts.Store.Delete(key); err != nil {
		return err
	}
	d.release(ctx, back)
	if len(gone) == 0 {
		d.opts.Status.Forget(key.UID)
	}
	for _, dev := range gone {
		// Said while the claim may still be read; the writer stops when
		// the claim is deleted.
		d.opts.Status.Set(ctx, status.ClaimRef{Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			status.NotReady(claims.DriverFastpath, dev.Pool, dev.Device, status.ReasonDeviceGone, fmt.Sprintf("device %s is gone from the node; released without restoring it", dev.Device)))
	}
	d.health.notify()
	klog.FromContext(ctx).Info("Unprepared claim", "claim", c.String(), "devicesGone", len(gone))
	return nil
}

// Reconcile brings the node to what the store holds, before the driver
// registers with the kubelet. A claim whose Prepare was interrupted (a
// crash, a failed undo) is undone and forgotten: the kubelet asks again if
// its pod still wants it. A claim prepared in an earlier boot has every
// step done again: its VF settings, bindings, pins and CDI spec went with
// the boot, and the kubelet, which remembers it as prepared, does not ask.
func (d *Driver) Reconcile(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	// Another daemon of the node may be preparing a claim right now (a
	// rolling update): hold the lock every Prepare and Unprepare holds
	// shared, so that a claim not prepared is one whose Prepare was
	// interrupted.
	unlock, err := d.prepareLock().Lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	if err := d.reconcileAdmin(ctx); err != nil {
		logger.Error(err, "Reconciling admin-access claims")
		errs = append(errs, err)
	}
	for _, c := range d.opts.Store.Claims() {
		if c.Driver != claims.DriverFastpath {
			continue
		}
		if c.Prepared && c.BootID == d.opts.BootID {
			// Said again: a daemon killed after Prepare returned, before
			// its status write, left the claim without it, and the
			// kubelet does not prepare a prepared claim again. The
			// writer reads the claim first and writes only a change.
			d.reportPrepared(ctx, &c)
			continue
		}
		action := "reapplied"
		if !c.Prepared {
			action = "undone"
		}
		if err := d.reconcile(ctx, c.Key()); err != nil {
			logger.Error(bounds.Err(err), "Reconciling a claim", "claim", c.String())
			errs = append(errs, fmt.Errorf("claim %s: %w", c.String(), err))
			action = "failed"
		}
		d.opts.Metrics.Reconciled(action)
	}
	return errors.Join(errs...)
}

func (d *Driver) reconcile(ctx context.Context, key claims.Key) error {
	defer d.opts.Store.Lock(key)()
	c, ok := d.opts.Store.Get(key)
	switch {
	case !ok:
		return nil
	case !c.Prepared:
		klog.FromContext(ctx).Info("Undoing an interrupted Prepare", "claim", c.String(), "steps", len(c.Steps))
		if _, err := (stepRunner{d.opts.Store}).undo(ctx, &c, d.steps(&c)); err != nil {
			return err
		}
		return d.opts.Store.Delete(key)
	}
	klog.FromContext(ctx).Info("Preparing again after a reboot", "claim", c.String(), "preparedInBoot", c.BootID)
	c.Prepared, c.Steps, c.BootID = false, nil, d.opts.BootID
	return (stepRunner{d.opts.Store}).run(ctx, &c, d.steps(&c))
}

// HandleError is called for errors in the background (publishing slices).
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	d.errs.Handle(ctx, err, msg)
}

// WatchHealthStatus streams the health of the node's prepared devices to
// the kubelet, which shows it in the pods' allocatedResourcesStatus.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return d.health.watch(ctx, reports)
}

// prepareLock is the node's lock of Prepare and Unprepare against
// Reconcile, with rolling updates (two daemons of the node serve at once;
// none without): Prepares and Unprepares hold it shared, from this daemon
// and the other, and Reconcile alone. It is the file the kubelet plugin
// helper locks to serialize its calls, which a daemon of an earlier
// release holds across each of its own Prepares: one of those excludes
// and waits for these.
func (d *Driver) prepareLock() claims.FileLock {
	if d.opts.PodUID == "" {
		return ""
	}
	return claims.FileLock(filepath.Join(d.opts.PluginDir, "serialize.lock"))
}
