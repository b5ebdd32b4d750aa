package dra

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/attach"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/claimspec"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// prepareClaim prepares one claim: a claim already prepared is answered
// from the store; any other is refused, before anything is done, while
// the store cannot be written (Options.StoreFault); otherwise it is
// planned, the devices' state before is read, the record admitted to the
// store (which refuses devices and interface names other claims hold),
// and the steps done, each recorded.
func (d *Driver) prepareClaim(ctx context.Context, claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	start := time.Now()
	if d.opts.Metadata != nil {
		ctx = context.WithValue(ctx, metadataFollowsKey{}, true)
	}
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim))
	if claim.Status.Allocation != nil {
		admin, err := adminClaim(claim)
		switch {
		case err != nil:
			logger.Info("Rejected claim", "err", err)
			return kubeletplugin.PrepareResult{Err: err}
		case admin:
			return d.prepareAdmin(ctx, claim)
		}
	}
	key := claims.Key{Driver: claims.DriverFastpath, UID: claim.UID}
	unlock, err := d.opts.Store.LockContext(ctx, key)
	if err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s: %w", klog.KObj(claim), err)}
	}
	defer unlock()
	c, ok := d.opts.Store.Get(key)
	notWritable := d.opts.StoreFault()
	switch {
	case ok && c.Prepared && c.BootID == d.opts.BootID && exists(c.CDISpec):
		logger.V(2).Info("Claim already prepared")
		// A daemon killed after the final record did not write the
		// status of the devices ready at Prepare: the kubelet's retry
		// does (a status already there is not written again).
		d.reportPrepared(ctx, &c)
		return kubelet.Result(&c, d.opts.Metadata, d.metadataAttributes(&c))
	case notWritable != nil:
		// Every other case writes the store: refused before anything
		// is done, rather than failed half-way.
		err := fmt.Errorf("claim %s: nothing done: %w", klog.KObj(claim), notWritable)
		logger.Info("Refused claim", "err", err)
		return kubeletplugin.PrepareResult{Err: err}
	case ok && c.Prepared:
		// Prepared in another boot, or its CDI spec is gone: do every
		// step again.
		logger.Info("Preparing again", "preparedInBoot", c.BootID, "cdiSpec", exists(c.CDISpec))
		if c.BootID != d.opts.BootID {
			// This boot may number the RDMA devices' files otherwise.
			if err := d.observeRDMAAgain(claim, &c); err != nil {
				return kubeletplugin.PrepareResult{Err: err}
			}
		}
		c.Prepared, c.Steps, c.BootID = false, nil, d.opts.BootID
	case !ok:
		planned, err := plan(claim, d.inventoryMap(), d.opts.NodeName, planPaths{
			claimDir: d.claimDir(claim), cdiSpec: cdiSpecPath(d.opts.CDIDir, claim.UID), bpfDir: d.opts.BPFDir, pools: d.ipPools(),
			deviceInfoDir: d.opts.DeviceInfoDir, sysctls: d.sysctls()})
		// The PFs' VFs stay as observe reads them until the claim is
		// admitted (pflock.go).
		unlockPFs := func() {}
		if err == nil {
			var unlock func()
			if unlock, err = d.lockPFs(ctx, planned); err == nil {
				unlockPFs = unlock
			}
		}
		if err == nil {
			err = d.observe(ctx, claim, planned)
		}
		var parents []netip.Addr
		if err == nil {
			parents, err = d.checkHost(planned)
		}
		var durable func() error
		if err == nil {
			// The plan and the start of every step are one record; the
			// store checks the addresses against every other record's,
			// and gives pools' addresses, in the same write. The PFs are
			// let go once the store holds it, before its sync: the
			// node's configuration sees the claim from then on, and
			// other claims of the PFs' VFs are admitted while it syncs.
			planned.BootID = d.opts.BootID
			for _, s := range d.steps(planned) {
				planned.SetStep(s.name, claims.StepStarted)
			}
			durable, err = d.opts.Store.AdmitPendingWith(*planned, d.ipPools().admitter(planned, parents))
		}
		unlockPFs()
		if err == nil {
			err = durable()
		}
		if err != nil {
			err = bounds.Err(err)
			logger.Info("Rejected claim", "err", err)
			return kubeletplugin.PrepareResult{Err: err}
		}
		fault.Point("prepare.recorded")
		c = *planned
	default:
		logger.Info("Finishing an interrupted Prepare", "steps", len(c.Steps))
	}
	if err := (stepRunner{d.opts.Store}).run(ctx, &c, d.steps(&c)); err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s: %w", klog.KObj(claim), err)}
	}
	d.health.prepared(c.Devices)
	d.health.notify()
	logger.Info("Prepared claim", "pod", c.Pod.Name, "devices", len(c.Devices), "duration", time.Since(start))
	d.reportPrepared(ctx, &c)
	return kubelet.Result(&c, d.opts.Metadata, d.metadataAttributes(&c))
}

// reportPrepared writes the status of the claim's devices that are ready
// once prepared (vfio, memif, delegate); the others' is the runtime
// hooks', at the pod's sandbox.
func (d *Driver) reportPrepared(ctx context.Context, c *claims.Claim) {
	for _, dev := range c.Devices {
		if st := status.PreparedReady(dev); st != nil {
			d.opts.Status.Set(ctx, status.ClaimRef{Namespace: c.Namespace, Name: c.Name, UID: c.UID}, *st)
		}
	}
}

// metadataAttributes are the attributes of the claim's devices in their
// metadata: as the node published them when the claim was planned, else
// (a memif endpoint, a shared device) as discovery sees them now.
func (d *Driver) metadataAttributes(c *claims.Claim) kubelet.Attributes {
	return func(_, device string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		for _, dev := range c.Devices {
			if dev.Device == device && dev.Published != nil {
				return publishedAttributes(dev.Published)
			}
		}
		if dev, ok := d.inventoryMap()[device]; ok {
			return dev.Attributes()
		}
		return nil
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// sysctls are the interface sysctls claims may set on this node.
func (d *Driver) sysctls() []string {
	if len(d.opts.InterfaceSysctls) == 0 {
		return nil
	}
	return append(slices.Clone(v1alpha1.DefaultSysctls), d.opts.InterfaceSysctls...)
}

func (d *Driver) claimDir(claim *resourceapi.ResourceClaim) string {
	return filepath.Join(d.opts.StateDir, "claims", string(claim.UID))
}

// observe reads, before anything changes, what Prepare changes and
// Unprepare puts back: the VFs' settings, the functions' drivers, the
// devices' channels. It checks memif endpoints too, that a VF is still on
// the node, and that no PF with VFs is handed over whole (pfWithVFs).
func (d *Driver) observe(ctx context.Context, claim *resourceapi.ResourceClaim, c *claims.Claim) error {
	for i := range c.Devices {
		dev := &c.Devices[i]
		fail := func(err error) error {
			return fmt.Errorf("claim %s, request %q, device %s: %w", klog.KObj(claim), dev.Request, dev.Device, err)
		}
		if dev.PFPCIAddress != "" && dev.PCIAddress != "" {
			// The VF may have gone with its PF's sriov_numvfs since the
			// node published it.
			if _, err := d.opts.PCI.Driver(dev.PCIAddress); err != nil {
				return fail(fmt.Errorf("VF %s of PF %s: %w", dev.PCIAddress, dev.PFPCIAddress, err))
			}
		}
		if errs, err := pfWithVFs(dev, d.opts.VFs, d.opts.AllowPFWithVFs); err != nil {
			return fail(err)
		} else if len(errs) > 0 {
			return &claimspec.ClaimError{Claim: klog.KObj(claim).String(), Request: dev.Request, Device: dev.Device, Errs: errs}
		}
		if vf := dev.VF; vf != nil {
			before, err := d.opts.PF.VFState(vf.PFName, vf.ID)
			if err != nil {
				return fail(fmt.Errorf("read VF %d of PF %s: %w", vf.ID, vf.PFName, err))
			}
			vf.Before = recordVFState(before)
		}
		if v := dev.VFIO; v != nil {
			if errs, err := groupAlone(dev, v.IOMMUGroup, d.opts.PCI); err != nil {
				return fail(err)
			} else if len(errs) > 0 {
				return &claimspec.ClaimError{Claim: klog.KObj(claim).String(), Request: dev.Request, Device: dev.Device, Errs: errs}
			}
			drv, err := d.opts.PCI.Driver(dev.PCIAddress)
			if err != nil {
				return fail(err)
			}
			v.DriverBefore = drv
			v.DeviceNodes = []claims.DeviceNode{
				{Path: "/dev/vfio/vfio", HostPath: d.opts.PCI.ContainerNode()},
				{Path: fmt.Sprintf("/dev/vfio/%d", v.IOMMUGroup), HostPath: d.opts.PCI.GroupNode(v.IOMMUGroup)},
			}
		}
		if dev.RDMA != nil {
			if why, err := d.observeRDMA(dev); err != nil {
				return fail(err)
			} else if why != "" {
				return &claimspec.ClaimError{Claim: klog.KObj(claim).String(), Request: dev.Request, Device: dev.Device, Errs: field.ErrorList{field.Forbidden(field.NewPath("rdma"), why)}}
			}
		}
		if x := dev.XDP; x != nil && dev.Host != nil {
			// The queues the pod serves, as combined channels where the
			// device has them; the count before is kept to restore.
			cur, most, err := d.opts.Channels.Combined(dev.Host.Name)
			switch {
			case err != nil:
				klog.FromContext(ctx).V(2).Info("Leaving channels as they are", "interface", dev.Host.Name, "reason", err.Error())
			case most > 0 && cur != x.Queues:
				x.ChannelsBefore = cur
			}
		}
		if o := dev.Offloads; o != nil && dev.Host != nil {
			// What the device has now of what the claim sets, to give
			// back; a feature it lacks or cannot change refuses the claim.
			before, err := dataplane.ReadOffloads(dev.Host.Name, dataplane.Offloads(o.Set))
			if err != nil {
				return &claimspec.ClaimError{Claim: klog.KObj(claim).String(), Request: dev.Request, Device: dev.Device, Errs: field.ErrorList{field.Invalid(field.NewPath("interface"), "", err.Error())}}
			}
			b := claims.OffloadSettings(before)
			o.Before = &b
		}
		if dev.PodNetwork != "" || dev.PodNetworkAttachment != "" {
			name, err := d.checkPodNetwork(ctx, claim.Namespace, dev.PodNetwork, dev.PodNetworkAttachment)
			if err != nil {
				return &claimspec.ClaimError{Claim: klog.KObj(claim).String(), Request: dev.Request, Device: dev.Device, Reason: err.Error()}
			}
			dev.PodNetwork = name
		}
		if dev.Memif != nil {
			if why := checkMemif(ctx, d.opts.MemifDir, dev.Memif); why != "" {
				return &claimspec.ClaimError{Claim: klog.KObj(claim).String(), Request: dev.Request, Device: dev.Device, Reason: why}
			}
		}
	}
	return nil
}

// observeRDMA reads the RDMA device of a device: the node's namespace
// mode, the device's link type and its character devices. A
// sub-interface of a device many pods share gets the device's character
// devices only in shared mode: in exclusive mode the device is in one
// namespace, the host's, and why says so.
func (d *Driver) observeRDMA(dev *claims.Device) (why string, _ error) {
	r := dev.RDMA
	mode, err := d.opts.RDMA.NetnsMode()
	if err != nil {
		return "", err
	}
	if mode == dataplane.RDMANetnsExclusive && dev.Shared != nil {
		return fmt.Sprintf("the node's RDMA subsystem is in exclusive network namespace mode: RDMA device %s stays in the host's namespace with %s, where no pod sees it; "+
			"claim the device in mode netdev to have it in the pod, or have the node in shared mode (rdma system set netns shared)", r.Device, dev.Shared.Parent), nil
	}
	info, err := d.opts.RDMA.Device(r.Device, r.UMAD)
	if err != nil {
		return "", err
	}
	r.Link, r.Exclusive = info.Link, mode == dataplane.RDMANetnsExclusive && dev.Shared == nil
	r.DeviceNodes = attach.DeviceNodes(info.Files)
	return "", nil
}

// observeRDMAAgain reads the RDMA devices of a claim prepared in an
// earlier boot again: the mode, and the files, which the kernel numbers
// anew at each boot.
func (d *Driver) observeRDMAAgain(claim *resourceapi.ResourceClaim, c *claims.Claim) error {
	for i := range c.Devices {
		dev := &c.Devices[i]
		if dev.RDMA == nil {
			continue
		}
		if why, err := d.observeRDMA(dev); err != nil || why != "" {
			if err == nil {
				err = errors.New(why)
			}
			return fmt.Errorf("claim %s, request %q, device %s: rdma: %w", klog.KObj(claim), dev.Request, dev.Device, err)
		}
	}
	return nil
}

// checkPodNetwork is the name of the PodNetwork a claim's config names,
// directly or through a PodNetworkAttachment of the claim's namespace,
// once the KEP's active validation passes: each exists and is Ready, the
// PodNetwork enabled and of fastpath's provider (or none). Prepare fails
// until then; the kubelet tries again.
func (d *Driver) checkPodNetwork(ctx context.Context, namespace, name, attachment string) (string, error) {
	if d.opts.PodNetworks == nil {
		return "", errors.New("config podNetwork or podNetworkAttachment: this node does not attach PodNetworks (fastpathd run --podnetworks is off)")
	}
	return attach.CheckPodNetwork(ctx, d.opts.PodNetworks, namespace, name, attachment)
}

// steps are a fastpath claim's side effects, in order: the claim's files
// (memif directories, device-info), VF settings through the PF, channels,
// XDP programs pinned, functions bound to vfio-pci, and last the CDI spec,
// so that the spec exists only when everything it names is in place.
func (d *Driver) steps(c *claims.Claim) []step {
	steps := []step{{name: "files",
		apply: func(context.Context) error { return writeFiles(c) },
		undo:  func(context.Context) error { return removeFiles(c) },
	}}
	for i := range c.Devices {
		dev := &c.Devices[i]
		vf := dev.VF
		if vf == nil || vf.Before == nil {
			continue
		}
		set, before := pfSettings(vf)
		steps = append(steps, step{name: "vf " + dev.Request, dev: dev,
			apply: func(ctx context.Context) error {
				return deviceErr(dev, dataplane.ApplyVF(ctx, d.opts.PF, vf.PFName, vf.ID, set, before))
			},
			undo: func(ctx context.Context) error {
				if nd, ok := attach.Netdev(*dev); ok && nd.MACFromPF {
					return deviceErr(dev, dataplane.RestoreVFAndNetdev(ctx, d.opts.PF, vf.PFName, vf.ID, set, before, nd.HostName, nd.HostMAC))
				}
				return deviceErr(dev, dataplane.RestoreVF(ctx, d.opts.PF, vf.PFName, vf.ID, set, before))
			},
		})
	}
	for i := range c.Devices {
		dev := &c.Devices[i]
		if dev.XDP == nil || dev.XDP.ChannelsBefore == 0 || dev.Host == nil {
			continue
		}
		x, name := dev.XDP, dev.Host.Name
		steps = append(steps, step{name: "channels " + dev.Request, dev: dev,
			apply: func(context.Context) error { return deviceErr(dev, d.opts.Channels.SetCombined(name, x.Queues)) },
			undo: func(context.Context) error {
				return deviceErr(dev, d.opts.Channels.SetCombined(name, x.ChannelsBefore))
			},
		})
	}
	for i := range c.Devices {
		dev := &c.Devices[i]
		if dev.Offloads == nil || dev.Offloads.Before == nil || dev.Host == nil {
			continue
		}
		o, name := dev.Offloads, dev.Host.Name
		steps = append(steps, step{name: "offloads " + dev.Request, dev: dev,
			apply: func(context.Context) error {
				return deviceErr(dev, dataplane.ApplyOffloads(name, dataplane.Offloads(o.Set)))
			},
			undo: func(context.Context) error {
				return deviceErr(dev, dataplane.ApplyOffloads(name, dataplane.Offloads(*o.Before)))
			},
		})
	}
	for i := range c.Devices {
		dev := &c.Devices[i]
		if dev.XDP == nil {
			continue
		}
		x := dev.XDP
		steps = append(steps, step{name: "xdp " + dev.Request, dev: dev,
			apply: func(context.Context) error { return deviceErr(dev, pinXDP(x)) },
			undo:  func(context.Context) error { return deviceErr(dev, os.RemoveAll(x.PinDir)) },
		})
	}
	for i := range c.Devices {
		dev := &c.Devices[i]
		if dev.VFIO == nil {
			continue
		}
		v := dev.VFIO
		steps = append(steps, step{name: "vfio " + dev.Request, dev: dev,
			apply: func(ctx context.Context) error {
				return deviceErr(dev, d.opts.PCI.BindVFIO(ctx, dev.PCIAddress, v.IOMMUGroup))
			},
			// Restore also when the function has its driver still: a
			// bind killed after writing driver_override left it, and it
			// would bind the function to vfio-pci at the next probe.
			undo: func(ctx context.Context) error {
				return deviceErr(dev, d.opts.PCI.Restore(ctx, dev.PCIAddress, v.DriverBefore))
			},
		})
	}
	steps = append(steps, step{name: "cdi",
		apply: func(ctx context.Context) error { return writeCDISpec(c, metadataFollows(ctx)) },
		undo: func(context.Context) error {
			if err := os.Remove(c.CDISpec); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		},
	})
	return steps
}

// metadataFollowsKey marks the context of a Prepare after which the
// kubelet plugin helper writes the claim's device metadata, its CDI spec
// with it (writeCDISpec).
type metadataFollowsKey struct{}

func metadataFollows(ctx context.Context) bool {
	follows, _ := ctx.Value(metadataFollowsKey{}).(bool)
	return follows
}

func deviceErr(dev *claims.Device, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("request %q, device %s: %w", dev.Request, dev.Device, err)
}

// The record's VF settings and state (claims.VFSettings, claims.VFState)
// are the checkpoint's format and the dataplane's (dataplane.VFSettings,
// dataplane.VFState) what ApplyVF and RestoreVF take: the same fields, in
// types of their own. pfSettings and recordVFState are the one place they
// are converted. They are Go conversions, so a field on one side only does
// not compile; TestVFConversions checks that every field is carried.

// pfSettings are a VF's record as the PF's settings: what to set, and what
// the VF had before. vf.Before must not be nil.
func pfSettings(vf *claims.VF) (dataplane.VFSettings, dataplane.VFState) {
	return dataplane.VFSettings(vf.Set), dataplane.VFState(*vf.Before)
}

// recordVFState is a VF's state, as the PF reports it, as the record keeps
// it.
func recordVFState(st dataplane.VFState) *claims.VFState {
	rec := claims.VFState(st)
	return &rec
}

// pinXDP loads the device's XDP program and pins it, with its maps, in its
// directory (again, if an earlier attempt left some), mounting a bpffs
// first if needed.
func pinXDP(x *claims.XDP) error {
	if err := bpf.MountBPFFS(filepath.Dir(x.PinDir)); err != nil {
		return err
	}
	if err := os.RemoveAll(x.PinDir); err != nil {
		return err
	}
	prog, err := bpf.Load(x.Program)
	if err != nil {
		return err
	}
	defer func() { _ = prog.Close() }()
	if err := prog.Pin(x.PinDir); err != nil {
		return errors.Join(err, os.RemoveAll(x.PinDir))
	}
	return nil
}

// writeFiles writes the memif directories and the device-info files. A
// device-info file is not synced (claims.ReplaceFileUnsynced: a reader
// never sees it partly written): a claim prepared in an earlier boot has
// every step done again before the kubelet may call (Reconcile), as its
// CDI spec is written again, so a power cut costs nothing that is not
// written again, and a Prepare waits for the disk two times fewer per
// device.
func writeFiles(c *claims.Claim) error {
	for _, dev := range c.Devices {
		if dev.Memif == nil {
			continue
		}
		if err := makeMemifDir(dev.Memif); err != nil {
			return deviceErr(&dev, fmt.Errorf("memif directory: %w", err))
		}
	}
	for _, dev := range c.Devices {
		info := status.DeviceInfoOf(dev)
		if info == nil || dev.DeviceInfoFile == "" {
			continue
		}
		data, err := status.MarshalDeviceInfo(info)
		if err != nil {
			return err
		}
		if err := claims.ReplaceFileUnsynced(dev.DeviceInfoFile, data, 0o644); err != nil {
			return deviceErr(&dev, fmt.Errorf("write device-info: %w", err))
		}
	}
	return nil
}

// removeFiles removes the claim's directory and the memif links Prepare
// made. Missing ones are fine.
func removeFiles(c *claims.Claim) error {
	var errs []error
	for _, dev := range c.Devices {
		if m := dev.Memif; m != nil && m.Link != "" {
			if err := os.Remove(m.Link); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	for _, dev := range c.Devices {
		// A delegated device's device-info is where the CNI plugins
		// look, outside the claim's directory.
		if f := dev.DeviceInfoFile; f != "" && (c.Dir == "" || !strings.HasPrefix(f, c.Dir+string(filepath.Separator))) {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if c.Dir != "" {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	return errors.Join(errs...)
}
