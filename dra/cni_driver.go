package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	cni100 "github.com/containernetworking/cni/pkg/types/100"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane"
)

// CNIOptions configure the CNI driver.
type CNIOptions struct {
	NodeName               string
	Client                 kubernetes.Interface
	PluginDir, RegistryDir string
	// StateDir holds the driver's checkpoint and libcni's result cache.
	StateDir string
	// Devices is how many interchangeable devices the node publishes: how
	// many CNI networks its pods can have at once.
	Devices int
	// Attributes are attributes of every device (unqualified names are
	// cni.dra.networking.x-k8s.io/...), for arguments to refer to.
	Attributes map[string]string
	Policy     CNIPolicy
	// CNI runs the plugins.
	CNI *dataplane.CNI
}

// CNIDriver serves the CNI DRA driver API (cni.dra.networking.x-k8s.io): a
// claim carries a CNI config, checked and resolved at Prepare, run with
// libcni when the pod's sandbox starts and undone when it stops.
type CNIDriver struct {
	opts   CNIOptions
	helper *kubeletplugin.Helper
	status *statusWriter
	attrs  map[resourceapi.QualifiedName]resourceapi.DeviceAttribute

	mu sync.Mutex // guards the checkpoint file
}

var (
	_ kubeletplugin.DRAPlugin = (*CNIDriver)(nil)
	_ dataplane.PodNetworks   = (*CNIDriver)(nil)
)

// cniCheckpoint is what the CNI driver prepared and added.
type cniCheckpoint struct {
	Version int                     `json:"version"`
	Claims  map[types.UID]*cniClaim `json:"claims"`
}

type cniClaim struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	UID       types.UID    `json:"uid"`
	PodUID    types.UID    `json:"podUID"`
	PodName   string       `json:"podName"`
	Networks  []cniNetwork `json:"networks"`
}

type cniNetwork struct {
	Request  string          `json:"request"`
	Pool     string          `json:"pool"`
	Device   string          `json:"device"`
	IfName   string          `json:"ifName"`
	Conflist json.RawMessage `json:"conflist"`
	// Added: ADD may have run and DEL has not succeeded since; recorded
	// before ADD runs. SandboxID and NetNS are what DEL needs.
	Added     bool   `json:"added,omitempty"`
	SandboxID string `json:"sandboxID,omitempty"`
	NetNS     string `json:"netns,omitempty"`
}

// NewCNIDriver checks the state on disk and returns a driver not serving yet.
func NewCNIDriver(opts CNIOptions) (*CNIDriver, error) {
	for _, dir := range []string{opts.PluginDir, opts.StateDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	if opts.Devices < 1 {
		return nil, fmt.Errorf("the CNI driver needs at least one device, not %d", opts.Devices)
	}
	d := &CNIDriver{opts: opts, status: newStatusWriter(context.Background(), opts.Client), attrs: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
	for k, v := range opts.Attributes {
		name := k
		if !strings.Contains(k, "/") {
			name = CNIDriverName + "/" + k
		}
		d.attrs[resourceapi.QualifiedName(name)] = resourceapi.DeviceAttribute{StringValue: new(v)}
	}
	if _, err := d.load(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *CNIDriver) checkpointPath() string {
	return filepath.Join(d.opts.StateDir, "cni-checkpoint.json")
}

func (d *CNIDriver) load() (*cniCheckpoint, error) {
	cp := &cniCheckpoint{Version: CheckpointVersion, Claims: map[types.UID]*cniClaim{}}
	data, err := os.ReadFile(d.checkpointPath())
	if errors.Is(err, os.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the CNI checkpoint: %w", err)
	}
	if err := json.Unmarshal(data, cp); err != nil {
		return nil, fmt.Errorf("CNI checkpoint %s: %w", d.checkpointPath(), err)
	}
	if cp.Version != CheckpointVersion {
		return nil, fmt.Errorf("CNI checkpoint %s: version %d, this fastpathd reads %d", d.checkpointPath(), cp.Version, CheckpointVersion)
	}
	if cp.Claims == nil {
		cp.Claims = map[types.UID]*cniClaim{}
	}
	return cp, nil
}

func (d *CNIDriver) save(cp *cniCheckpoint) error {
	data, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(d.checkpointPath(), data, 0o600)
}

// Resources are the node's CNI devices: interchangeable, one per network.
func (d *CNIDriver) Resources() resourceslice.DriverResources {
	var devs []resourceapi.Device
	for i := range d.opts.Devices {
		devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("cni-%d", i), Attributes: d.attrs})
	}
	pool := resourceslice.Pool{}
	for start := 0; start < len(devs); start += MaxDevicesPerSlice {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: devs[start:min(start+MaxDevicesPerSlice, len(devs))]})
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{d.opts.NodeName: pool}}
}

// Start registers the plugin with the kubelet and publishes the devices.
func (d *CNIDriver) Start(ctx context.Context) error {
	d.status.base = ctx
	h, err := startPlugin(ctx, d, CNIDriverName, d.opts.Client, d.opts.NodeName, d.opts.PluginDir, d.opts.RegistryDir)
	if err != nil {
		return err
	}
	d.helper = h
	return h.PublishResources(ctx, d.Resources())
}

// Stop stops serving.
func (d *CNIDriver) Stop() {
	if d.helper != nil {
		d.helper.Stop()
	}
}

// RegistrationStatus is the kubelet's answer to the registration.
func (d *CNIDriver) RegistrationStatus() error { return registrationStatus(d.helper, CNIDriverName) }

// HandleError is called for errors in the background.
func (d *CNIDriver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

// PrepareResourceClaims checks and resolves each claim's CNI configs.
func (d *CNIDriver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := d.load()
	if err != nil {
		return nil, err
	}
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim))
		st, ok := cp.Claims[claim.UID]
		if !ok {
			if st, err = d.plan(ctx, claim, cp); err != nil {
				logger.Info("Rejected CNI claim", "err", err)
				out[claim.UID] = kubeletplugin.PrepareResult{Err: err}
				continue
			}
			cp.Claims[claim.UID] = st
			if err := d.save(cp); err != nil {
				delete(cp.Claims, claim.UID)
				out[claim.UID] = kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s: write the CNI checkpoint: %w", klog.KObj(claim), err)}
				continue
			}
			logger.Info("Prepared CNI claim", "pod", st.PodName, "networks", len(st.Networks))
		}
		var res kubeletplugin.PrepareResult
		for _, n := range st.Networks {
			res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{n.Request}, PoolName: n.Pool, DeviceName: n.Device})
		}
		out[claim.UID] = res
	}
	return out, nil
}

// plan validates a claim as the design asks and resolves its configs.
func (d *CNIDriver) plan(ctx context.Context, claim *resourceapi.ResourceClaim, cp *cniCheckpoint) (*cniClaim, error) {
	name := klog.KObj(claim).String()
	fail := func(request, device, reason string, errs field.ErrorList) error {
		return &ClaimError{Claim: name, Request: request, Device: device, Reason: reason, Errs: errs}
	}
	if claim.Status.Allocation == nil {
		return nil, fail("", "", "not allocated", nil)
	}
	if len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].Resource != "pods" || claim.Status.ReservedFor[0].APIGroup != "" {
		return nil, fail("", "", fmt.Sprintf("reserved for %d consumers; a CNI claim configures interfaces of exactly one pod: use a ResourceClaimTemplate, or one claim per pod",
			len(claim.Status.ReservedFor)), nil)
	}
	pod := claim.Status.ReservedFor[0]
	st := &cniClaim{Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID, PodUID: pod.UID, PodName: pod.Name}
	taken := map[string]string{}
	for _, other := range cp.Claims {
		if other.PodUID == pod.UID {
			for _, n := range other.Networks {
				taken[n.IfName] = fmt.Sprintf("claim %s/%s request %q", other.Namespace, other.Name, n.Request)
			}
		}
	}
	c := cniContext{ctx: ctx, client: d.opts.Client, namespace: claim.Namespace, attributes: d.attrs,
		slice: map[string]string{"spec.nodeName": d.opts.NodeName, "spec.pool.name": d.opts.NodeName, "spec.driver": CNIDriverName}}
	for _, res := range claim.Status.Allocation.Devices.Results {
		if res.Driver != CNIDriverName {
			continue
		}
		if why := exactlyOne(claim, res.Request); why != "" {
			return nil, fail(res.Request, "", why, nil)
		}
		if res.Pool != d.opts.NodeName {
			return nil, fail(res.Request, res.Device, fmt.Sprintf("allocated from pool %q, but this node's pool is %q", res.Pool, d.opts.NodeName), nil)
		}
		var configs []int
		for i, cfg := range claim.Status.Allocation.Devices.Config {
			if cfg.Opaque != nil && cfg.Opaque.Driver == CNIDriverName && appliesTo(cfg.Requests, res.Request) {
				configs = append(configs, i)
			}
		}
		if len(configs) != 1 {
			return nil, fail(res.Request, res.Device, fmt.Sprintf("has %d CNI configs; every request of class %s needs exactly one, for driver %s", len(configs), CNIClassName, CNIDriverName), nil)
		}
		i := configs[0]
		src := claim.Status.Allocation.Devices.Config[i]
		var cfg CNIConfig
		if errs := decodeStrict(src.Opaque.Parameters.Raw, &cfg, field.NewPath("config").Index(i).Key(string(src.Source)).Child("parameters"), CNIAPIVersion, CNIKind); len(errs) > 0 {
			return nil, fail(res.Request, res.Device, "", errs)
		}
		netName := strings.ReplaceAll(claim.Namespace+"-"+claim.Name+"-"+res.Request, "/", "_")
		conflist, errs := buildConflist(cfg, netName, d.opts.Policy, c)
		if len(errs) > 0 {
			return nil, fail(res.Request, res.Device, "", errs)
		}
		if where, dup := taken[cfg.IfName]; dup {
			return nil, fail(res.Request, res.Device, "", field.ErrorList{field.Duplicate(field.NewPath("ifName"), fmt.Sprintf("%s (already used by %s)", cfg.IfName, where))})
		}
		taken[cfg.IfName] = fmt.Sprintf("request %q", res.Request)
		st.Networks = append(st.Networks, cniNetwork{Request: res.Request, Pool: res.Pool, Device: res.Device, IfName: cfg.IfName, Conflist: conflist})
	}
	if len(st.Networks) == 0 {
		return nil, fail("", "", "no device of driver "+CNIDriverName+" is allocated", nil)
	}
	return st, nil
}

// UnprepareResourceClaims runs DEL for networks still added (a DEL that
// failed when the sandbox stopped is retried here, and the kubelet retries
// Unprepare until it succeeds) and forgets the claims.
func (d *CNIDriver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := d.load()
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
		if err := d.delNetworks(ctx, cp, st); err != nil {
			out[c.UID] = fmt.Errorf("claim %s: %w", c.NamespacedName, err)
			continue
		}
		delete(cp.Claims, c.UID)
		if err := d.save(cp); err != nil {
			out[c.UID] = fmt.Errorf("claim %s: write the CNI checkpoint: %w", c.NamespacedName, err)
			continue
		}
		d.status.forget(string(c.UID))
		klog.FromContext(ctx).Info("Unprepared CNI claim", "claim", c.NamespacedName)
		out[c.UID] = nil
	}
	return out, nil
}

func (d *CNIDriver) podClaims(cp *cniCheckpoint, podUID string) []*cniClaim {
	var out []*cniClaim
	for _, st := range cp.Claims {
		if string(st.PodUID) == podUID {
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out
}

func (n cniNetwork) runtime(st *cniClaim) dataplane.CNINetwork {
	return dataplane.CNINetwork{Conflist: n.Conflist, ContainerID: n.SandboxID, NetNS: n.NetNS, IfName: n.IfName,
		Args: [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", st.Namespace}, {"K8S_POD_NAME", st.PodName},
			{"K8S_POD_INFRA_CONTAINER_ID", n.SandboxID}, {"K8S_POD_UID", string(st.PodUID)}}}
}

// AddPod runs ADD for every CNI network prepared for the pod, in claim and
// request order. If one fails, DEL runs for it at once and for those added
// before it, the claims say why, and the error fails the sandbox.
func (d *CNIDriver) AddPod(ctx context.Context, pod dataplane.PodRef, netns string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := d.load()
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("pod", pod.Namespace+"/"+pod.Name)
	claims := d.podClaims(cp, pod.UID)
	if len(claims) > 0 && netns == "" {
		return fmt.Errorf("pod %s/%s has no network namespace: its CNI claims need one (not hostNetwork)", pod.Namespace, pod.Name)
	}
	type added struct {
		st *cniClaim
		i  int
	}
	var done []added
	for _, st := range claims {
		for i := range st.Networks {
			n := &st.Networks[i]
			if n.Added && n.SandboxID == pod.SandboxID {
				continue // a retried hook: this one is in place
			}
			n.Added, n.SandboxID, n.NetNS = true, pod.SandboxID, netns
			if err := d.save(cp); err != nil {
				return fmt.Errorf("claim %s/%s: write the CNI checkpoint: %w", st.Namespace, st.Name, err)
			}
			start := time.Now()
			res, addErr := d.opts.CNI.Add(ctx, n.runtime(st))
			if addErr == nil {
				logger.Info("CNI ADD", "claim", st.Namespace+"/"+st.Name, "request", n.Request, "ifName", n.IfName, "duration", time.Since(start))
				d.reportAdded(ctx, st, *n, res)
				done = append(done, added{st, i})
				continue
			}
			err := fmt.Errorf("claim %s/%s, request %q, device %s: CNI ADD: %w", st.Namespace, st.Name, n.Request, n.Device, addErr)
			d.reportFailed(ctx, st, *n, addErr.Error())
			if delErr := d.opts.CNI.Del(ctx, n.runtime(st)); delErr != nil {
				err = fmt.Errorf("%w; DEL after it also failed: %w", err, delErr)
			} else {
				n.Added = false
			}
			for j := len(done) - 1; j >= 0; j-- {
				prev := &done[j].st.Networks[done[j].i]
				d.reportFailed(ctx, done[j].st, *prev, fmt.Sprintf("undone: request %q of claim %s/%s failed", n.Request, st.Namespace, st.Name))
				if delErr := d.opts.CNI.Del(ctx, prev.runtime(done[j].st)); delErr != nil {
					err = fmt.Errorf("%w; undoing request %q also failed: %w", err, prev.Request, delErr)
					continue
				}
				prev.Added = false
			}
			if sErr := d.save(cp); sErr != nil {
				err = errors.Join(err, sErr)
			}
			logger.Error(err, "CNI ADD failed")
			return err
		}
	}
	return nil
}

// DelPod runs DEL for the pod's added networks, retrying a few times; what
// still fails is retried at Unprepare.
func (d *CNIDriver) DelPod(ctx context.Context, pod dataplane.PodRef) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := d.load()
	if err != nil {
		return err
	}
	var errs []error
	for _, st := range d.podClaims(cp, pod.UID) {
		errs = append(errs, d.delNetworks(ctx, cp, st))
	}
	return errors.Join(errs...)
}

// delNetworks runs DEL for the claim's added networks, three tries each,
// and records what succeeded.
func (d *CNIDriver) delNetworks(ctx context.Context, cp *cniCheckpoint, st *cniClaim) error {
	var errs []error
	for i := range st.Networks {
		n := &st.Networks[i]
		if !n.Added {
			continue
		}
		var err error
		for attempt, wait := 0, 100*time.Millisecond; attempt < 3; attempt, wait = attempt+1, 2*wait {
			if err = d.opts.CNI.Del(ctx, n.runtime(st)); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				attempt = 3
			case <-time.After(wait):
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("request %q, device %s: CNI DEL: %w", n.Request, n.Device, err))
			continue
		}
		n.Added = false
		klog.FromContext(ctx).Info("CNI DEL", "claim", st.Namespace+"/"+st.Name, "request", n.Request, "ifName", n.IfName)
	}
	return errors.Join(append(errs, d.save(cp))...)
}

// PodsWithNetworks lists the pods with networks added.
func (d *CNIDriver) PodsWithNetworks() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := d.load()
	if err != nil {
		klog.Background().Error(err, "Reading the CNI checkpoint")
		return nil
	}
	var out []string
	for _, st := range cp.Claims {
		for _, n := range st.Networks {
			if n.Added && !slices.Contains(out, string(st.PodUID)) {
				out = append(out, string(st.PodUID))
			}
		}
	}
	sort.Strings(out)
	return out
}

// cniReadyMessage is the design's message for a configured device.
const cniReadyMessage = "CNI-DRA-Driver has configured the device."

func (d *CNIDriver) statusKey(st *cniClaim, n cniNetwork) dataplane.PodNetdev {
	return dataplane.PodNetdev{ClaimNamespace: st.Namespace, ClaimName: st.Name, ClaimUID: string(st.UID), Request: n.Request, Pool: n.Pool, Device: n.Device}
}

func (d *CNIDriver) reportAdded(ctx context.Context, st *cniClaim, n cniNetwork, res dataplane.CNIResult) {
	status := resourceapi.AllocatedDeviceStatus{
		Driver: CNIDriverName, Pool: n.Pool, Device: n.Device,
		Conditions:  []metav1.Condition{condition(metav1.ConditionTrue, ReasonReady, cniReadyMessage)},
		Data:        &runtime.RawExtension{Raw: res.Raw},
		NetworkData: networkData(res.Current, n.IfName),
	}
	d.status.set(ctx, d.statusKey(st, n), status)
}

func (d *CNIDriver) reportFailed(ctx context.Context, st *cniClaim, n cniNetwork, msg string) {
	d.status.set(ctx, d.statusKey(st, n), resourceapi.AllocatedDeviceStatus{
		Driver: CNIDriverName, Pool: n.Pool, Device: n.Device,
		Conditions: []metav1.Condition{condition(metav1.ConditionFalse, ReasonNotReady, msg)},
	})
}

// networkData is the result's interface named ifName in the sandbox, with
// its MAC and addresses.
func networkData(res *cni100.Result, ifName string) *resourceapi.NetworkDeviceData {
	idx := -1
	for i, iface := range res.Interfaces {
		if iface.Name == ifName && (idx < 0 || iface.Sandbox != "") {
			idx = i
		}
	}
	nd := &resourceapi.NetworkDeviceData{InterfaceName: ifName}
	if idx >= 0 {
		nd.HardwareAddress = res.Interfaces[idx].Mac
	}
	for _, ip := range res.IPs {
		if ip.Interface == nil || *ip.Interface == idx {
			nd.IPs = append(nd.IPs, ip.Address.String())
		}
	}
	return nd
}

// WatchHealthStatus: CNI devices have no health of their own.
func (d *CNIDriver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
