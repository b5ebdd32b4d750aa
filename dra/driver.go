package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
)

// Options configure the driver.
type Options struct {
	NodeName string
	Client   kubernetes.Interface
	// PluginDir holds the DRA gRPC socket; RegistryDir is where the kubelet
	// looks for plugins to register.
	PluginDir, RegistryDir string
	// StateDir holds the checkpoint and per-claim files; CDIDir the CDI specs.
	StateDir, CDIDir string
	// PF makes VF settings through PFs. Default: netlink.
	PF dataplane.PF
	// PCI binds functions to vfio-pci. Default: sysfs and /dev of this node.
	PCI dataplane.PCIBinder
	// MemifDir is where memif endpoint sockets must live (--memif-dir).
	MemifDir string
	// Channels sets combined channels for afxdp claims. Default: ethtool.
	Channels dataplane.Channels
	// BPFDir is where XDP programs are pinned, one directory per claim and
	// request; a bpffs is mounted there if it is not on one. Default
	// /sys/fs/bpf/fastpath.
	BPFDir string
}

// Driver is fastpath's DRA kubelet plugin for driver fastpath.dev.
type Driver struct {
	opts   Options
	helper *kubeletplugin.Helper
	status *statusWriter

	mu        sync.Mutex // guards inventory and the checkpoint file
	inventory map[string]devices.Device
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New checks the state on disk and returns a driver that is not serving yet.
func New(opts Options) (*Driver, error) {
	for _, dir := range []string{opts.PluginDir, opts.StateDir, opts.CDIDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
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
	if opts.PCI.SysfsRoot == "" {
		opts.PCI.SysfsRoot = "/"
	}
	if opts.PCI.DevRoot == "" {
		opts.PCI.DevRoot = "/"
	}
	d := &Driver{opts: opts, inventory: map[string]devices.Device{}, status: newStatusWriter(context.Background(), opts.Client)}
	if _, err := loadCheckpoint(d.checkpointPath()); err != nil {
		return nil, err
	}
	return d, nil
}

// Start registers the plugin with the kubelet and serves the DRA API until
// ctx ends or Stop is called.
func (d *Driver) Start(ctx context.Context) error {
	d.status.base = ctx
	h, err := startPlugin(ctx, d, devices.DriverName, d.opts.Client, d.opts.NodeName, d.opts.PluginDir, d.opts.RegistryDir)
	d.helper = h
	return err
}

// startPlugin starts the kubelet plugin helper for one driver.
func startPlugin(ctx context.Context, p kubeletplugin.DRAPlugin, driver string, client kubernetes.Interface, node, pluginDir, registryDir string) (*kubeletplugin.Helper, error) {
	h, err := kubeletplugin.Start(ctx, p,
		kubeletplugin.DriverName(driver),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(node),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
		kubeletplugin.RegistrarDirectoryPath(registryDir),
	)
	if err != nil {
		return nil, fmt.Errorf("start the kubelet plugin of %s: %w", driver, err)
	}
	return h, nil
}

// registrationStatus is the kubelet's answer to a helper's registration.
func registrationStatus(h *kubeletplugin.Helper, driver string) error {
	if h == nil {
		return fmt.Errorf("%s: not started", driver)
	}
	st := h.RegistrationStatus()
	switch {
	case st == nil:
		return fmt.Errorf("%s: the kubelet has not answered the registration yet", driver)
	case !st.PluginRegistered:
		return fmt.Errorf("%s: the kubelet refused the registration: %s", driver, st.Error)
	}
	return nil
}

// Stop stops serving.
func (d *Driver) Stop() {
	if d.helper != nil {
		d.helper.Stop()
	}
}

// Publish makes inv the devices Prepare works with and publishes them as
// ResourceSlices; the publisher rewrites only slices whose content changed.
func (d *Driver) Publish(ctx context.Context, inv devices.Inventory) error {
	d.UseInventory(inv)
	if d.helper == nil {
		return errors.New("publish: the kubelet plugin is not started")
	}
	return d.helper.PublishResources(ctx, Resources(d.opts.NodeName, inv))
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

// RegistrationStatus is the kubelet's answer to the registration, nil before.
func (d *Driver) RegistrationStatus() error { return registrationStatus(d.helper, devices.DriverName) }

func (d *Driver) checkpointPath() string { return filepath.Join(d.opts.StateDir, "checkpoint.json") }
func (d *Driver) claimDir(uid types.UID) string {
	return filepath.Join(d.opts.StateDir, "claims", string(uid))
}

// PrepareResourceClaims prepares each claim on its own: one bad claim does
// not fail the others.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := loadCheckpoint(d.checkpointPath())
	if err != nil {
		return nil, err
	}
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		out[claim.UID] = d.prepareClaim(ctx, cp, claim)
	}
	return out, nil
}

func (d *Driver) prepareClaim(ctx context.Context, cp *Checkpoint, claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim))
	if st, ok := cp.Claims[claim.UID]; ok {
		logger.V(2).Info("Claim already prepared")
		return st.result()
	}
	st, err := plan(claim, cp, d.inventory, d.opts.NodeName, d.claimDir(claim.UID), cdiSpecPath(d.opts.CDIDir, claim.UID))
	if err != nil {
		logger.Info("Rejected claim", "err", err)
		return kubeletplugin.PrepareResult{Err: err}
	}
	// The VFs' settings as they are, saved with the plan before any change.
	for i := range st.Devices {
		dev := &st.Devices[i]
		if dev.VFSet == nil {
			continue
		}
		before, err := d.opts.PF.VFState(dev.PFName, dev.VFID)
		if err != nil {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s, request %q, device %s: read VF %d of PF %s: %w",
				klog.KObj(claim), dev.Request, dev.Device, dev.VFID, dev.PFName, err)}
		}
		dev.VFBefore = &before
	}
	// The drivers of the functions going to vfio-pci, and the device nodes
	// the containers get.
	for i := range st.Devices {
		dev := &st.Devices[i]
		if dev.IOMMUGroup == nil {
			continue
		}
		drv, err := d.opts.PCI.Driver(dev.PCIAddress)
		if err != nil {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s, request %q, device %s: %w", klog.KObj(claim), dev.Request, dev.Device, err)}
		}
		dev.DriverBefore = drv
		dev.DeviceNodes = []DeviceNode{
			{Path: "/dev/vfio/vfio", HostPath: d.opts.PCI.ContainerNode()},
			{Path: fmt.Sprintf("/dev/vfio/%d", *dev.IOMMUGroup), HostPath: d.opts.PCI.GroupNode(*dev.IOMMUGroup)},
		}
	}
	for i := range st.Devices {
		dev := &st.Devices[i]
		if dev.Config.Mode == ModeAFXDP {
			dev.XDPDir = filepath.Join(d.opts.BPFDir, string(claim.UID)+"-"+strings.ReplaceAll(dev.Request, "/", "_"))
			st.Files = append(st.Files, dev.XDPDir)
			// The queues the pod serves, as combined channels where the
			// device has them; the count before is kept to restore.
			cur, most, err := d.opts.Channels.Combined(dev.HostIfName)
			switch {
			case err != nil:
				logger.V(2).Info("Leaving channels as they are", "interface", dev.HostIfName, "reason", err.Error())
			case most > 0 && cur != dev.Config.XDP.Queues:
				dev.ChannelsBefore = cur
			}
		}
		if dev.MemifDir == "" {
			continue
		}
		if why := checkMemif(ctx, d.opts.MemifDir, dev); why != "" {
			err := &ClaimError{Claim: klog.KObj(claim).String(), Request: dev.Request, Device: dev.Device, Reason: why}
			logger.Info("Rejected claim", "err", err)
			return kubeletplugin.PrepareResult{Err: err}
		}
		if dev.MemifLink != "" {
			st.Files = append(st.Files, dev.MemifLink)
		}
	}
	// Record first, then act: a crash in between leaves a checkpoint entry
	// whose files Unprepare removes.
	cp.Claims[claim.UID] = st
	if err := cp.save(d.checkpointPath()); err != nil {
		delete(cp.Claims, claim.UID)
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s: write checkpoint: %w", klog.KObj(claim), err)}
	}
	if err := d.act(ctx, st); err != nil {
		undoErr := st.removeFiles()
		delete(cp.Claims, claim.UID)
		if saveErr := cp.save(d.checkpointPath()); saveErr != nil {
			undoErr = errors.Join(undoErr, saveErr)
		}
		err = fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
		if undoErr != nil {
			err = fmt.Errorf("%w (and undoing it: %w)", err, undoErr)
		}
		return kubeletplugin.PrepareResult{Err: err}
	}
	logger.Info("Prepared claim", "pod", st.PodName, "devices", len(st.Devices))
	d.reportPrepared(ctx, st)
	return st.result()
}

// UnprepareResourceClaims removes what Prepare made. A claim that is not
// prepared (or already unprepared) is fine.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := loadCheckpoint(d.checkpointPath())
	if err != nil {
		return nil, err
	}
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		st, ok := cp.Claims[c.UID]
		if !ok {
			out[c.UID] = nil
			continue
		}
		if err := errors.Join(d.restoreDrivers(ctx, st.Devices), d.restoreChannels(st.Devices), d.restoreVFs(ctx, st.Devices), st.removeFiles()); err != nil {
			out[c.UID] = fmt.Errorf("claim %s: %w", c.NamespacedName, err)
			continue
		}
		delete(cp.Claims, c.UID)
		if err := cp.save(d.checkpointPath()); err != nil {
			out[c.UID] = fmt.Errorf("claim %s: write checkpoint: %w", c.NamespacedName, err)
			continue
		}
		d.status.forget(string(c.UID))
		klog.FromContext(ctx).Info("Unprepared claim", "claim", c.NamespacedName)
		out[c.UID] = nil
	}
	return out, nil
}

// act does Prepare's side effects: files, then VF settings, then drivers.
// On failure it undoes the VF settings and drivers it changed; the caller
// removes the files.
func (d *Driver) act(ctx context.Context, st *ClaimState) error {
	if err := st.writeFiles(); err != nil {
		return err
	}
	for i, dev := range st.Devices {
		if dev.VFSet == nil {
			continue
		}
		if err := dataplane.ApplyVF(ctx, d.opts.PF, dev.PFName, dev.VFID, *dev.VFSet, *dev.VFBefore); err != nil {
			err = fmt.Errorf("request %q, device %s: %w", dev.Request, dev.Device, err)
			if rErr := d.restoreVFs(ctx, st.Devices[:i]); rErr != nil {
				err = fmt.Errorf("%w (and restoring the VFs set before: %w)", err, rErr)
			}
			return err
		}
	}
	for i, dev := range st.Devices {
		if dev.ChannelsBefore == 0 {
			continue
		}
		if err := d.opts.Channels.SetCombined(dev.HostIfName, dev.Config.XDP.Queues); err != nil {
			err = fmt.Errorf("request %q, device %s: %w", dev.Request, dev.Device, err)
			if rErr := errors.Join(d.restoreChannels(st.Devices[:i]), d.restoreVFs(ctx, st.Devices)); rErr != nil {
				err = fmt.Errorf("%w (and undoing the rest: %w)", err, rErr)
			}
			return err
		}
	}
	for _, dev := range st.Devices {
		if dev.XDPDir == "" {
			continue
		}
		if err := loadXDP(dev); err != nil {
			err = fmt.Errorf("request %q, device %s: %w", dev.Request, dev.Device, err)
			if rErr := errors.Join(d.restoreChannels(st.Devices), d.restoreVFs(ctx, st.Devices)); rErr != nil {
				err = fmt.Errorf("%w (and undoing the rest: %w)", err, rErr)
			}
			return err
		}
	}
	for i, dev := range st.Devices {
		if dev.IOMMUGroup == nil {
			continue
		}
		if err := d.opts.PCI.BindVFIO(ctx, dev.PCIAddress, *dev.IOMMUGroup); err != nil {
			err = fmt.Errorf("request %q, device %s: %w", dev.Request, dev.Device, err)
			if rErr := errors.Join(d.restoreDrivers(ctx, st.Devices[:i]), d.restoreChannels(st.Devices), d.restoreVFs(ctx, st.Devices)); rErr != nil {
				err = fmt.Errorf("%w (and undoing the rest: %w)", err, rErr)
			}
			return err
		}
	}
	return nil
}

// loadXDP loads the device's XDP program and pins it, with its maps, in
// the device's directory, mounting a bpffs first if needed. The caller
// removes the directory on failure.
func loadXDP(dev PreparedDevice) error {
	if err := bpf.MountBPFFS(filepath.Dir(dev.XDPDir)); err != nil {
		return err
	}
	prog, err := bpf.Load(dev.Config.XDP.Program)
	if err != nil {
		return err
	}
	defer func() { _ = prog.Close() }()
	return prog.Pin(dev.XDPDir)
}

// restoreChannels puts back the combined channels of devs changed for
// afxdp, all of them even if one fails.
func (d *Driver) restoreChannels(devs []PreparedDevice) error {
	var errs []error
	for _, dev := range devs {
		if dev.ChannelsBefore == 0 {
			continue
		}
		if err := d.opts.Channels.SetCombined(dev.HostIfName, dev.ChannelsBefore); err != nil {
			errs = append(errs, fmt.Errorf("request %q, device %s: %w", dev.Request, dev.Device, err))
		}
	}
	return errors.Join(errs...)
}

// restoreDrivers gives the functions of devs that went to vfio-pci back to
// their drivers, all of them even if one fails.
func (d *Driver) restoreDrivers(ctx context.Context, devs []PreparedDevice) error {
	var errs []error
	for _, dev := range devs {
		if dev.IOMMUGroup == nil || dev.DriverBefore == dataplane.VFIODriver {
			continue
		}
		if err := d.opts.PCI.Restore(ctx, dev.PCIAddress, dev.DriverBefore); err != nil {
			errs = append(errs, fmt.Errorf("request %q, device %s: %w", dev.Request, dev.Device, err))
		}
	}
	return errors.Join(errs...)
}

// restoreVFs puts back the VF settings of devs, all of them even if one
// fails.
func (d *Driver) restoreVFs(ctx context.Context, devs []PreparedDevice) error {
	var errs []error
	for _, dev := range devs {
		if dev.VFSet == nil || dev.VFBefore == nil {
			continue
		}
		if err := dataplane.RestoreVF(ctx, d.opts.PF, dev.PFName, dev.VFID, *dev.VFSet, *dev.VFBefore); err != nil {
			errs = append(errs, fmt.Errorf("request %q, device %s: %w", dev.Request, dev.Device, err))
		}
	}
	return errors.Join(errs...)
}

// HandleError is called for errors in the background (publishing slices).
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

// result is what the kubelet gets for a prepared claim.
func (st *ClaimState) result() kubeletplugin.PrepareResult {
	var res kubeletplugin.PrepareResult
	for _, dev := range st.Devices {
		res.Devices = append(res.Devices, kubeletplugin.Device{
			Requests: []string{dev.Request}, PoolName: dev.Pool, DeviceName: dev.Device,
			CDIDeviceIDs: []string{dev.CDIDeviceID},
		})
	}
	return res
}

// writeFiles writes the memif directories, the device-info files and the
// CDI spec.
func (st *ClaimState) writeFiles() error {
	for _, dev := range st.Devices {
		if dev.MemifDir == "" {
			continue
		}
		if err := dev.makeMemifDir(); err != nil {
			return fmt.Errorf("request %q, device %s: memif directory: %w", dev.Request, dev.Device, err)
		}
	}
	for _, dev := range st.Devices {
		info := deviceInfo(dev)
		if info == nil || dev.DeviceInfoFile == "" {
			continue
		}
		data, err := info.marshal()
		if err != nil {
			return err
		}
		if err := writeFileAtomic(dev.DeviceInfoFile, data, 0o644); err != nil {
			return fmt.Errorf("write device-info of request %s: %w", dev.Request, err)
		}
	}
	spec, err := cdiSpec(st.UID, st.Devices)
	if err != nil {
		return err
	}
	if err := writeCDISpec(st.cdiSpecFile(), spec); err != nil {
		return fmt.Errorf("write CDI spec: %w", err)
	}
	return nil
}

func (st *ClaimState) cdiSpecFile() string { return st.Files[0] }

// removeFiles removes every file and directory Prepare made. Missing ones
// are fine.
func (st *ClaimState) removeFiles() error {
	var errs []error
	for _, f := range st.Files {
		if err := os.RemoveAll(f); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// WatchHealthStatus reports device health to the kubelet; this build has no
// health model yet, so the kubelet stops asking.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
