package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
)

// Condition and reasons of a device in a claim's status (KEP-4817).
const (
	ConditionReady   = "Ready"
	ReasonReady      = "NetworkInterfaceReady"
	ReasonNotReady   = "NetworkInterfaceNotReady"
	statusFieldOwner = devices.DriverName
)

var _ dataplane.Reporter = (*Driver)(nil)

// statusWriter writes the status of a claim's devices in the background,
// retried until it lands: the NRI hook never waits for the API server. The
// latest status of each device wins.
//
// It reads the claim and updates its status rather than applying it
// server-side: a server-side apply of a claim's status re-encodes the opaque
// parameters recorded in status.allocation (sorting their keys), and the API
// server then refuses the change to that immutable field.
type statusWriter struct {
	client kubernetes.Interface
	base   context.Context

	mu     sync.Mutex
	claims map[string]*claimStatus // by claim UID
}

type claimStatus struct {
	namespace, name string
	devices         map[string]resourceapi.AllocatedDeviceStatus // by pool/device
	generation      int
	writing         bool
}

func newStatusWriter(base context.Context, client kubernetes.Interface) *statusWriter {
	return &statusWriter{client: client, base: base, claims: map[string]*claimStatus{}}
}

// Attached reports a device as attached: Ready, with its interface.
func (d *Driver) Attached(ctx context.Context, dev dataplane.PodNetdev, netns string, res dataplane.Attached) {
	data := map[string]any{
		"interfaces": []map[string]any{{"name": res.Name, "mac": res.MAC, "mtu": res.MTU, "sandbox": netns}},
	}
	var ips []map[string]any
	for _, a := range res.Addresses {
		ips = append(ips, map[string]any{"address": a, "interface": 0})
	}
	if len(ips) > 0 {
		data["ips"] = ips
	}
	if info := d.deviceInfoOf(dev); info != nil {
		data["device-info"] = info
	}
	if x := dev.Netdev.XDP; x != nil {
		xdp := map[string]any{"attachMode": res.XDPMode, "pinPath": x.Dir, "mapPath": filepath.Join(xdpContainerDir(dev.Request), bpf.PinXSKMap)}
		if cfg := d.xdpConfigOf(dev); cfg != nil {
			xdp["program"], xdp["queues"] = cfg.Program, cfg.Queues
			if cfg.Program != bpf.XSKRedirect {
				delete(xdp, "mapPath")
			}
		}
		data["xdp"] = xdp
	}
	st := resourceapi.AllocatedDeviceStatus{
		Driver: devices.DriverName, Pool: dev.Pool, Device: dev.Device,
		Conditions:  []metav1.Condition{condition(metav1.ConditionTrue, ReasonReady, fmt.Sprintf("host interface %s attached as %s", dev.Netdev.HostName, res.Name))},
		Data:        rawJSON(data),
		NetworkData: &resourceapi.NetworkDeviceData{InterfaceName: res.Name, IPs: res.Addresses, HardwareAddress: res.MAC},
	}
	d.status.set(ctx, dev, st)
}

// Failed reports a device as not ready, with the error as message.
func (d *Driver) Failed(ctx context.Context, dev dataplane.PodNetdev, err error) {
	st := resourceapi.AllocatedDeviceStatus{
		Driver: devices.DriverName, Pool: dev.Pool, Device: dev.Device,
		Conditions: []metav1.Condition{condition(metav1.ConditionFalse, ReasonNotReady, err.Error())},
	}
	d.status.set(ctx, dev, st)
}

func condition(status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	const maxMessage = 32 * 1024
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	return metav1.Condition{Type: ConditionReady, Status: status, Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}
}

func rawJSON(v any) *runtime.RawExtension {
	data, _ := json.Marshal(v)
	return &runtime.RawExtension{Raw: data}
}

// deviceInfoOf is the NPWG device-info of a prepared device.
func (d *Driver) deviceInfoOf(dev dataplane.PodNetdev) *DeviceInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := loadCheckpoint(d.checkpointPath())
	if err != nil {
		return nil
	}
	st, ok := cp.Claims[types.UID(dev.ClaimUID)]
	if !ok {
		return nil
	}
	for _, p := range st.Devices {
		if p.Request == dev.Request {
			return deviceInfo(p)
		}
	}
	return nil
}

// xdpConfigOf is the XDP config of a prepared device.
func (d *Driver) xdpConfigOf(dev dataplane.PodNetdev) *XDPConfig {
	d.mu.Lock()
	defer d.mu.Unlock()
	cp, err := loadCheckpoint(d.checkpointPath())
	if err != nil {
		return nil
	}
	if st, ok := cp.Claims[types.UID(dev.ClaimUID)]; ok {
		for _, p := range st.Devices {
			if p.Request == dev.Request {
				return p.Config.XDP
			}
		}
	}
	return nil
}

func (w *statusWriter) set(ctx context.Context, dev dataplane.PodNetdev, st resourceapi.AllocatedDeviceStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.claims[dev.ClaimUID]
	if !ok {
		c = &claimStatus{namespace: dev.ClaimNamespace, name: dev.ClaimName, devices: map[string]resourceapi.AllocatedDeviceStatus{}}
		w.claims[dev.ClaimUID] = c
	}
	c.devices[dev.Pool+"/"+dev.Device] = st
	c.generation++
	if !c.writing {
		c.writing = true
		logger := klog.FromContext(ctx)
		go w.write(klog.NewContext(w.base, logger), dev.ClaimUID)
	}
}

// forget drops what is known of a claim (it was unprepared).
func (w *statusWriter) forget(uid string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.claims[uid]; ok && !c.writing {
		delete(w.claims, uid)
	}
}

// write writes the claim's device statuses until the latest one landed.
func (w *statusWriter) write(ctx context.Context, uid string) {
	logger := klog.FromContext(ctx)
	backoff := 100 * time.Millisecond
	for {
		w.mu.Lock()
		c := w.claims[uid]
		gen := c.generation
		want := make([]resourceapi.AllocatedDeviceStatus, 0, len(c.devices))
		for _, st := range c.devices {
			want = append(want, *st.DeepCopy())
		}
		w.mu.Unlock()

		err := w.update(ctx, c.namespace, c.name, types.UID(uid), want)
		w.mu.Lock()
		switch {
		case err == nil && c.generation == gen:
			c.writing = false
			w.mu.Unlock()
			return
		case err == nil:
			backoff = 100 * time.Millisecond // a newer status arrived: write it
		default:
			logger.Error(err, "Writing claim status; retrying", "claim", c.namespace+"/"+c.name, "in", backoff)
		}
		w.mu.Unlock()
		if err != nil {
			select {
			case <-ctx.Done():
				w.mu.Lock()
				c.writing = false
				w.mu.Unlock()
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
		}
	}
}

// update sets the entries of want in the claim's status.devices, leaving
// other entries (other drivers' devices) as they are.
func (w *statusWriter) update(ctx context.Context, namespace, name string, uid types.UID, want []resourceapi.AllocatedDeviceStatus) error {
	claim, err := w.client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if claim.UID != uid {
		return nil // the claim was replaced: this status is moot
	}
	for _, st := range want {
		i := slices.IndexFunc(claim.Status.Devices, func(d resourceapi.AllocatedDeviceStatus) bool {
			return d.Driver == st.Driver && d.Pool == st.Pool && d.Device == st.Device
		})
		if i < 0 {
			claim.Status.Devices = append(claim.Status.Devices, st)
			continue
		}
		// Keep the transition time while the condition does not change.
		if old := claim.Status.Devices[i].Conditions; len(old) == 1 && len(st.Conditions) == 1 && old[0].Status == st.Conditions[0].Status {
			st.Conditions[0].LastTransitionTime = old[0].LastTransitionTime
		}
		claim.Status.Devices[i] = st
	}
	_, err = w.client.ResourceV1().ResourceClaims(namespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{FieldManager: statusFieldOwner})
	return err
}

// reportPrepared reports the devices Prepare finished handing over, those
// with no kernel interface to attach when the sandbox starts (vfio-pci
// functions, memif endpoints): Ready, with their device-info and where
// they are in data. They get no networkData: there is no kernel interface.
func (d *Driver) reportPrepared(ctx context.Context, st *ClaimState) {
	for _, dev := range st.Devices {
		data := map[string]any{}
		if info := deviceInfo(dev); info != nil {
			data["device-info"] = info
		}
		var msg string
		switch {
		case dev.IOMMUGroup != nil:
			var nodes []string
			for _, n := range dev.DeviceNodes {
				nodes = append(nodes, n.Path)
			}
			data["driver"], data["iommuGroup"], data["deviceNodes"] = dataplane.VFIODriver, *dev.IOMMUGroup, nodes
			msg = fmt.Sprintf("PCI function %s bound to vfio-pci, IOMMU group %d", dev.PCIAddress, *dev.IOMMUGroup)
		case dev.MemifDir != "":
			data["role"], data["mode"], data["socketPath"], data["hostSocketPath"] = dev.MemifRole, dev.MemifMode, memifContainerSocket(dev.Request), dev.memifHostSocket()
			if dev.MemifRole == devices.MemifRoleSlave {
				msg = fmt.Sprintf("memif endpoint %s mounted at %s", dev.MemifSocket, memifContainerSocket(dev.Request))
			} else {
				msg = fmt.Sprintf("the pod creates the memif socket at %s, on the node %s", memifContainerSocket(dev.Request), dev.memifHostSocket())
			}
		default:
			continue
		}
		key := dataplane.PodNetdev{ClaimNamespace: st.Namespace, ClaimName: st.Name, ClaimUID: string(st.UID), Pool: dev.Pool, Device: dev.Device}
		d.status.set(ctx, key, resourceapi.AllocatedDeviceStatus{
			Driver: devices.DriverName, Pool: dev.Pool, Device: dev.Device,
			Conditions: []metav1.Condition{condition(metav1.ConditionTrue, ReasonReady, msg)},
			Data:       rawJSON(data),
		})
	}
}
