package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/claimspec"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// Admin access: a claim whose requests have adminAccess (in a namespace
// the cluster admin labelled resource.kubernetes.io/admin-access, which
// the API server enforces) may be allocated a device another pod holds.
// fastpath gives such a claim a read-only view of each device, never the
// device: a directory per device, mounted read-only into the containers
// at AdminViewDir/<slot>, holding view.json (where the device is, who
// holds it, its link's state and statistics), which the daemon rewrites
// every AdminViewInterval. Nothing on the device changes. The claim is
// recorded in StateDir/admin/<claim UID>/claim.json, written before the
// view and the CDI spec and removed after them.

// AdminViewDir is where the containers of an admin-access claim's pod
// find the views of its devices, one directory per slot.
const AdminViewDir = "/var/run/fastpath/admin"

// AdminViewInterval is how often the views are written again.
const AdminViewInterval = 2 * time.Second

// ReasonAdminView is the reason of the Ready condition of a device an
// admin-access claim views.
const ReasonAdminView = "AdminView"

// adminRecord is an admin-access claim as the node prepared it.
type adminRecord struct {
	Namespace string        `json:"namespace"`
	Name      string        `json:"name"`
	UID       types.UID     `json:"uid"`
	Devices   []adminDevice `json:"devices"`
}

// adminDevice is a device an admin-access claim views.
type adminDevice struct {
	Request string `json:"request"`
	Slot    string `json:"slot"`
	Pool    string `json:"pool"`
	Device  string `json:"device"`
}

// AdminView is what view.json says of a device.
type AdminView struct {
	Device string `json:"device"`
	Node   string `json:"node"`
	// Holders are the claims of this node that hold the device, and their
	// pods; none when it is free.
	Holders []AdminHolder `json:"holders"`
	// Netdev is the device's kernel interface where it is now; nil for a
	// device without one (vfio, memif).
	Netdev *AdminNetdev `json:"netdev,omitempty"`
	// Error says why the interface could not be read.
	Error   string    `json:"error,omitempty"`
	Updated time.Time `json:"updated"`
}

// AdminHolder is a claim that holds a device.
type AdminHolder struct {
	Claim string `json:"claim"`
	Pod   string `json:"pod"`
	Mode  string `json:"mode,omitempty"`
}

// AdminNetdev is a device's interface as the view shows it.
type AdminNetdev struct {
	Name string `json:"name"`
	// Namespace is "host", or the pod ("pod namespace/name") whose network
	// namespace it is in.
	Namespace string              `json:"namespace"`
	Link      dataplane.LinkStats `json:"link"`
}

// adminDirs is the directory of admin-access claims' records and views.
func (d *Driver) adminDirs() string { return filepath.Join(d.opts.StateDir, "admin") }

func (d *Driver) adminDir(uid types.UID) string { return filepath.Join(d.adminDirs(), string(uid)) }

// adminClaim says whether the claim's devices of fastpath.dev are
// allocated with adminAccess; a claim with some and not others is an
// error naming both requests.
func adminClaim(claim *resourceapi.ResourceClaim) (bool, error) {
	var admin, other string
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != devices.DriverName {
			continue
		}
		if r.AdminAccess != nil && *r.AdminAccess {
			admin = r.Request
		} else {
			other = r.Request
		}
	}
	if admin != "" && other != "" {
		return false, fmt.Errorf("claim %s: request %q has adminAccess and request %q does not: a view of devices others hold and devices of the pod's own are claimed apart", klog.KObj(claim), admin, other)
	}
	return admin != "", nil
}

// prepareAdmin gives an admin-access claim the views of its devices.
func (d *Driver) prepareAdmin(ctx context.Context, claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim))
	fail := func(request, device, reason string, errs field.ErrorList) error {
		return &claimspec.ClaimError{Claim: klog.KObj(claim).String(), Request: request, Device: device, Reason: reason, Errs: errs}
	}
	rec := adminRecord{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
	inv := d.inventoryMap()
	held := d.held(ctx)
	total, index := map[string]int{}, map[string]int{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == devices.DriverName {
			total[r.Request]++
		}
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != devices.DriverName {
			continue
		}
		if err := claimspec.CheckResult(claim, r, d.opts.NodeName, fail); err != nil {
			return kubeletplugin.PrepareResult{Err: err}
		}
		_, known := inv[r.Device]
		if _, ok := held[r.Device]; !known && !ok {
			return kubeletplugin.PrepareResult{Err: fail(r.Request, r.Device, "the device is not (or no longer) on this node", nil)}
		}
		count, _ := claimspec.CountOf(claim, r.Request)
		i := index[r.Request]
		index[r.Request]++
		rec.Devices = append(rec.Devices, adminDevice{Request: r.Request, Slot: claimspec.Slot(r.Request, count, i), Pool: r.Pool, Device: r.Device})
	}
	d.adminMu.Lock()
	defer d.adminMu.Unlock()
	dir := d.adminDir(claim.UID)
	data, err := json.Marshal(rec)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		// The record first: it says what to remove, whatever is left.
		// (A directory without it, left by a kill before it, is removed
		// by Unprepare all the same.)
		err = claims.WriteFileAtomic(filepath.Join(dir, "claim.json"), data, 0o644)
	}
	if err == nil {
		fault.Point("admin.recorded")
	}
	for _, dev := range rec.Devices {
		if err != nil {
			break
		}
		slotDir := filepath.Join(dir, status.RequestFileName(dev.Slot))
		if err = os.MkdirAll(slotDir, 0o755); err == nil {
			err = d.writeAdminView(ctx, slotDir, dev.Device)
		}
	}
	if err == nil {
		err = writeAdminCDISpec(cdiSpecPath(d.opts.CDIDir, claim.UID), dir, rec)
	}
	if err == nil {
		fault.Point("admin.cdi")
	}
	if err != nil {
		err = bounds.Err(fmt.Errorf("claim %s: admin access: %w", klog.KObj(claim), err))
		logger.Info("Rejected claim", "err", err)
		return kubeletplugin.PrepareResult{Err: err}
	}
	var res kubeletplugin.PrepareResult
	ref := status.ClaimRef{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID}
	for _, dev := range rec.Devices {
		res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{dev.Request}, PoolName: dev.Pool, DeviceName: dev.Device,
			CDIDeviceIDs: []string{cdiKind + "=" + cdiDeviceName(claim.UID, dev.Slot)}})
		view := filepath.Join(AdminViewDir, status.RequestFileName(dev.Slot))
		d.opts.Status.Set(ctx, ref, resourceapi.AllocatedDeviceStatus{Driver: devices.DriverName, Pool: dev.Pool, Device: dev.Device,
			Conditions: []metav1.Condition{status.Condition(true, ReasonAdminView, fmt.Sprintf("a read-only view of device %s at %s/view.json; the device is not moved", dev.Device, view))},
			Data:       &runtime.RawExtension{Raw: fmt.Appendf(nil, `{"adminAccess":{"view":%q}}`, view+"/view.json")}})
	}
	logger.Info("Prepared admin-access claim", "devices", len(rec.Devices))
	return res
}

// writeAdminCDISpec writes the CDI spec of an admin-access claim: per
// device, its view's directory mounted read-only, and its name.
func writeAdminCDISpec(path, dir string, rec adminRecord) error {
	spec := &cdispec.Spec{Version: cdiVersion, Kind: cdiKind}
	for _, dev := range rec.Devices {
		file := status.RequestFileName(dev.Slot)
		env := envName(dev.Slot)
		spec.Devices = append(spec.Devices, cdispec.Device{Name: cdiDeviceName(rec.UID, dev.Slot), ContainerEdits: cdispec.ContainerEdits{
			Env: []string{"FASTPATH_DEVICE_" + env + "=" + dev.Device, "FASTPATH_ADMIN_VIEW_" + env + "=" + filepath.Join(AdminViewDir, file, "view.json")},
			Mounts: []*cdispec.Mount{{HostPath: filepath.Join(dir, file), ContainerPath: filepath.Join(AdminViewDir, file),
				Options: []string{"ro", "rbind", "nosuid", "nodev", "noexec"}}},
		}})
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return claims.WriteFileAtomic(path, data, 0o644)
}

// unprepareAdmin removes what prepareAdmin made for the claim, if it is
// an admin-access claim of this node (its directory is there, with or
// without the record, which a kill may have cut short): the CDI spec, the
// views, then the record. It says whether it was one.
func (d *Driver) unprepareAdmin(ctx context.Context, uid types.UID) (bool, error) {
	dir := d.adminDir(uid)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	d.adminMu.Lock()
	defer d.adminMu.Unlock()
	if err := os.Remove(cdiSpecPath(d.opts.CDIDir, uid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, fmt.Errorf("admin access: remove CDI spec: %w", err)
	}
	fault.Point("admin.unprepare.cdi")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return true, fmt.Errorf("admin access: %w", err)
	}
	for _, e := range entries {
		if e.Name() != "claim.json" {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return true, fmt.Errorf("admin access: %w", err)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return true, fmt.Errorf("admin access: %w", err)
	}
	// The last: a node without admin-access claims keeps nothing of them.
	_ = os.Remove(d.adminDirs())
	d.opts.Status.Forget(uid)
	klog.FromContext(ctx).Info("Unprepared admin-access claim", "claimUID", uid)
	return true, nil
}

// reconcileAdmin writes again the CDI spec of each admin-access claim
// prepared on the node whose spec is gone: the CDI directory is a tmpfs
// on most nodes, and after a reboot the kubelet, which remembers the claim
// as prepared, does not ask again. (The views are written every
// AdminViewInterval.)
func (d *Driver) reconcileAdmin(ctx context.Context) error {
	var errs []error
	for _, rec := range d.adminRecords() {
		path := cdiSpecPath(d.opts.CDIDir, rec.UID)
		if exists(path) {
			continue
		}
		d.adminMu.Lock()
		err := writeAdminCDISpec(path, d.adminDir(rec.UID), rec)
		d.adminMu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("admin-access claim %s/%s: %w", rec.Namespace, rec.Name, err))
			continue
		}
		klog.FromContext(ctx).Info("Wrote again the CDI spec of an admin-access claim", "claim", rec.Namespace+"/"+rec.Name)
	}
	return errors.Join(errs...)
}

// adminRecords are the admin-access claims prepared on the node.
func (d *Driver) adminRecords() []adminRecord {
	entries, err := os.ReadDir(d.adminDirs())
	if err != nil {
		return nil
	}
	var out []adminRecord
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(d.adminDirs(), e.Name(), "claim.json"))
		if err != nil {
			continue
		}
		var rec adminRecord
		if json.Unmarshal(data, &rec) == nil && rec.UID == types.UID(e.Name()) {
			out = append(out, rec)
		}
	}
	return out
}

// runAdminViews writes the views of the admin-access claims' devices every
// AdminViewInterval until ctx ends.
func (d *Driver) runAdminViews(ctx context.Context) {
	tick := time.NewTicker(AdminViewInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, rec := range d.adminRecords() {
			d.adminMu.Lock()
			dir := d.adminDir(rec.UID)
			if _, err := os.Stat(filepath.Join(dir, "claim.json")); err == nil {
				for _, dev := range rec.Devices {
					if err := d.writeAdminView(ctx, filepath.Join(dir, status.RequestFileName(dev.Slot)), dev.Device); err != nil {
						klog.FromContext(ctx).V(2).Info("Admin view not written", "claimUID", rec.UID, "device", dev.Device, "err", err.Error())
					}
				}
			}
			d.adminMu.Unlock()
		}
	}
}

// writeAdminView writes the view of device into slotDir.
func (d *Driver) writeAdminView(ctx context.Context, slotDir, device string) error {
	data, err := json.MarshalIndent(d.adminView(ctx, device), "", "  ")
	if err != nil {
		return err
	}
	return claims.WriteFileAtomic(filepath.Join(slotDir, "view.json"), data, 0o644)
}

// adminView looks at the device where it is now: in the pod of the claim
// that holds it, or on the host.
func (d *Driver) adminView(ctx context.Context, device string) AdminView {
	v := AdminView{Device: device, Node: d.opts.NodeName, Holders: []AdminHolder{}, Updated: time.Now().UTC().Truncate(time.Second)}
	var netns, ifName, where string
	for _, c := range d.opts.Store.View() {
		if c.Driver != claims.DriverFastpath {
			continue
		}
		for _, dev := range c.Devices {
			if dev.Device != device {
				continue
			}
			v.Holders = append(v.Holders, AdminHolder{Claim: c.Namespace + "/" + c.Name, Pod: c.Namespace + "/" + c.Pod.Name, Mode: dev.Mode})
			switch {
			case dev.Shared != nil:
				ifName, where = dev.Shared.Parent, "host"
			case dev.Attached != nil && dev.Pod != nil:
				netns, ifName, where = dev.Attached.NetNS, dev.Pod.Name, "pod "+c.Namespace+"/"+c.Pod.Name
			case dev.Host != nil:
				ifName, where = dev.Host.Name, "host"
			}
		}
	}
	slices.SortFunc(v.Holders, func(a, b AdminHolder) int { return strings.Compare(a.Claim, b.Claim) })
	if ifName == "" && len(v.Holders) == 0 {
		if dev, ok := d.inventoryMap()[device]; ok && dev.Netdev != nil {
			ifName, where = dev.Netdev.Name, "host"
		}
	}
	if ifName == "" {
		return v
	}
	st, err := dataplane.LinkStatsAt(netns, ifName)
	if err != nil {
		v.Error = err.Error()
		klog.FromContext(ctx).V(2).Info("Admin view: interface not read", "device", device, "err", err.Error())
		return v
	}
	v.Netdev = &AdminNetdev{Name: ifName, Namespace: where, Link: st}
	return v
}

// adminState is the driver's part for admin access.
type adminState struct {
	// adminMu orders the views' writes with Prepare and Unprepare.
	adminMu sync.Mutex
}
