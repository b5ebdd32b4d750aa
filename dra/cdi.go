package dra

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// CDI names: devices are fastpath.dev/net=<claim UID>-<slot>, the slot
// being the request's name, or request.index for a device of a request of
// several (claimspec.Slot).
const (
	cdiVendor  = "fastpath.dev"
	cdiClass   = "net"
	cdiKind    = cdiVendor + "/" + cdiClass
	cdiVersion = "0.6.0"
)

// cdiDeviceName is the CDI device name of a slot of a claim. Subrequest
// names (req/sub) become req_sub.
func cdiDeviceName(claim types.UID, slot string) string {
	return string(claim) + "-" + status.RequestFileName(slot)
}

// envName turns a slot into an environment variable suffix: upper case,
// '-', '.' and '/' as '_'.
func envName(slot string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", "/", "_", ".", "_").Replace(slot))
}

// cdiSpecPath is the claim's CDI spec file in dir.
func cdiSpecPath(dir string, claim types.UID) string {
	return filepath.Join(dir, cdiVendor+"-claim-"+string(claim)+".json")
}

// cdiSpec builds the CDI spec of a claim: per device, env naming the device,
// its interface in the pod and its PCI address (as the SR-IOV device plugin
// does), the device-info file, and the device's own mounts and nodes.
func cdiSpec(c *claims.Claim) (*cdispec.Spec, error) {
	spec := &cdispec.Spec{Version: cdiVersion, Kind: cdiKind}
	for _, d := range c.Devices {
		name := cdiDeviceName(c.UID, d.SlotName())
		if err := cdiparser.ValidateDeviceName(name); err != nil {
			return nil, fmt.Errorf("CDI device name %q: %w", name, err)
		}
		req := envName(d.SlotName())
		// Every device gets at least its name: CDI refuses a device without
		// edits, and the container learns which device it got.
		edits := cdispec.ContainerEdits{Env: []string{"FASTPATH_DEVICE_" + req + "=" + d.Device}}
		if d.Pod != nil {
			edits.Env = append(edits.Env, "FASTPATH_INTERFACE_"+req+"="+d.Pod.Name)
		}
		if d.PCIAddress != "" {
			edits.Env = append(edits.Env, "PCIDEVICE_FASTPATH_DEV_"+req+"="+d.PCIAddress)
		}
		if d.ResourceName != "" && d.PCIAddress != "" {
			// As the SR-IOV device plugin: every device of the resource,
			// so that each device's edits say the same.
			edits.Env = append(edits.Env, npwg.ResourceEnv(d.ResourceName)+"="+strings.Join(resourcePCI(c, d.ResourceName), ","))
		}
		if m := d.Memif; m != nil {
			edits.Mounts = append(edits.Mounts, &cdispec.Mount{HostPath: m.Dir, ContainerPath: status.MemifContainerDir(d.SlotName()), Options: []string{"rw", "bind"}})
			if m.Role == v1alpha1.MemifRoleSlave {
				edits.Mounts = append(edits.Mounts, &cdispec.Mount{
					HostPath: m.Socket, ContainerPath: status.MemifContainerSocket(d.SlotName()), Options: []string{"rw", "bind"},
				})
			}
			edits.Env = append(edits.Env, "MEMIF_SOCKET_"+req+"="+status.MemifContainerSocket(d.SlotName()))
		}
		if x := d.XDP; x != nil {
			dir := status.XDPContainerDir(d.SlotName())
			edits.Mounts = append(edits.Mounts, &cdispec.Mount{HostPath: x.PinDir, ContainerPath: dir, Options: []string{"rw", "bind"}})
			if x.Program == v1alpha1.XDPProgramXSKRedirect {
				edits.Env = append(edits.Env, "FASTPATH_XSKMAP_"+req+"="+filepath.Join(dir, bpf.PinXSKMap))
			}
			edits.Env = append(edits.Env,
				"FASTPATH_XDP_PROGRAM_"+req+"="+x.Program,
				"FASTPATH_XDP_STATS_"+req+"="+filepath.Join(dir, bpf.PinStats),
				fmt.Sprintf("FASTPATH_XDP_QUEUES_%s=0-%d", req, x.Queues-1),
				"FASTPATH_XDP_ZEROCOPY_"+req+"="+x.ZeroCopy)
		}
		if v := d.VFIO; v != nil {
			for _, n := range v.DeviceNodes {
				edits.DeviceNodes = append(edits.DeviceNodes, &cdispec.DeviceNode{Path: n.Path, HostPath: n.HostPath, Permissions: "rw"})
			}
		}
		if r := d.RDMA; r != nil {
			for _, n := range r.DeviceNodes {
				edits.DeviceNodes = append(edits.DeviceNodes, &cdispec.DeviceNode{Path: n.Path, HostPath: n.HostPath, Permissions: "rw"})
			}
			edits.Env = append(edits.Env, "FASTPATH_RDMA_DEVICE_"+req+"="+r.Device)
		}
		if d.DeviceInfoFile != "" {
			target := status.DeviceInfoPath(d.SlotName())
			edits.Mounts = append(edits.Mounts, &cdispec.Mount{HostPath: d.DeviceInfoFile, ContainerPath: target, Options: []string{"ro", "bind"}})
			edits.Env = append(edits.Env, "FASTPATH_DEVICE_INFO_"+req+"="+target)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: edits})
	}
	return spec, nil
}

// resourcePCI are the PCI addresses of the claim's devices of a resource.
func resourcePCI(c *claims.Claim, resourceName string) []string {
	var out []string
	for _, d := range c.Devices {
		if d.ResourceName == resourceName && d.PCIAddress != "" {
			out = append(out, d.PCIAddress)
		}
	}
	return out
}

// WriteCDISpec writes the claim's CDI spec (again, when a retried Prepare
// or a reboot calls for it, or when the character devices of a software
// RDMA device made again in the pod changed). The runtime reads the specs
// when it creates each container. It is not synced: a power cut brings a
// new boot, whose Reconcile prepares the claim again, its spec with it.
func WriteCDISpec(c *claims.Claim) error {
	return writeCDISpec(c, false)
}

// cdiStage is the subdirectory of the CDI directory in which a claim's
// spec is written before it is moved in, when the runtime need not be
// told of it (writeCDISpec). CDI reads no subdirectory.
const cdiStage = ".fastpath-staging"

// writeCDISpec is WriteCDISpec, quietly or not. The runtime's CDI cache
// (tags.cncf.io/container-device-interface, in containerd and CRI-O)
// reads every spec of its directories again whenever a file there is
// written, renamed or removed, each time, holding the lock that every
// container creation with CDI devices takes: 30 µs a spec on an idle
// core, so the node's 200 specs of 100 claimed pods cost it 6 ms for
// each claim's spec written. It does not for a file moved in from
// elsewhere (on Linux, a new name alone). Quietly, the spec is written
// so: for a Prepare the kubelet plugin helper called with device
// metadata on, which writes the claim's metadata spec in the same
// directory once the driver returns, before it answers the kubelet, and
// so has the runtime read this one with it: one reading of the
// directory for each claim prepared, not two. A Prepare that fails
// before the helper writes is not answered with the claim's devices, and
// one done again (the kubelet's retry) ends with the helper's write.
func writeCDISpec(c *claims.Claim, quietly bool) error {
	spec, err := cdiSpec(c)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if quietly {
		err = claims.ReplaceFileUnsyncedVia(filepath.Join(filepath.Dir(c.CDISpec), cdiStage), c.CDISpec, data, 0o644)
	} else {
		err = claims.ReplaceFileUnsynced(c.CDISpec, data, 0o644)
	}
	if err != nil {
		return fmt.Errorf("write CDI spec: %w", err)
	}
	return nil
}
