package dra

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/devices"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDI names: devices are fastpath.dev/net=<claim UID>-<request>.
const (
	cdiVendor  = "fastpath.dev"
	cdiClass   = "net"
	cdiKind    = cdiVendor + "/" + cdiClass
	cdiVersion = "0.6.0"

	// DeviceInfoDir is where containers find the NPWG device-info file of
	// each request: <DeviceInfoDir>/<request>-device.json.
	DeviceInfoDir = "/var/run/k8s.cni.cncf.io/devinfo/dra"
)

// XDPDir is where containers find an afxdp device's pinned maps:
// <XDPDir>/<request>/xsks (the XSKMAP) and stats.
const XDPDir = "/run/fastpath/xdp"

func xdpContainerDir(request string) string {
	return filepath.Join(XDPDir, strings.ReplaceAll(request, "/", "_"))
}

// cdiDeviceName is the CDI device name of a request of a claim. Subrequest
// names (req/sub) become req_sub.
func cdiDeviceName(claim types.UID, request string) string {
	return string(claim) + "-" + strings.ReplaceAll(request, "/", "_")
}

// envName turns a request name into an environment variable suffix:
// upper case, '-' and '/' as '_'.
func envName(request string) string {
	return strings.ToUpper(strings.NewReplacer("-", "_", "/", "_", ".", "_").Replace(request))
}

// cdiSpecPath is the claim's CDI spec file in dir.
func cdiSpecPath(dir string, claim types.UID) string {
	return filepath.Join(dir, cdiVendor+"-claim-"+string(claim)+".json")
}

// cdiSpec builds the CDI spec of a claim: per device, env naming the device,
// its interface in the pod and its PCI address (as the SR-IOV device plugin
// does), and the device-info file.
func cdiSpec(claim types.UID, devs []PreparedDevice) (*cdispec.Spec, error) {
	spec := &cdispec.Spec{Version: cdiVersion, Kind: cdiKind}
	for _, d := range devs {
		name := cdiDeviceName(claim, d.Request)
		if err := cdiparser.ValidateDeviceName(name); err != nil {
			return nil, fmt.Errorf("CDI device name %q: %w", name, err)
		}
		// Every device gets at least its name: CDI refuses a device without
		// edits, and the container learns which device it got.
		edits := cdispec.ContainerEdits{Env: []string{"FASTPATH_DEVICE_" + envName(d.Request) + "=" + d.Device}}
		if d.Config.Interface != nil {
			edits.Env = append(edits.Env, "FASTPATH_INTERFACE_"+envName(d.Request)+"="+d.Config.Interface.Name)
		}
		if d.PCIAddress != "" {
			edits.Env = append(edits.Env, "PCIDEVICE_FASTPATH_DEV_"+envName(d.Request)+"="+d.PCIAddress)
		}
		if d.MemifDir != "" {
			dir := memifContainerDir(d.Request)
			edits.Mounts = append(edits.Mounts, &cdispec.Mount{HostPath: d.MemifDir, ContainerPath: dir, Options: []string{"rw", "bind"}})
			if d.MemifRole == devices.MemifRoleSlave {
				edits.Mounts = append(edits.Mounts, &cdispec.Mount{
					HostPath: d.MemifSocket, ContainerPath: memifContainerSocket(d.Request), Options: []string{"rw", "bind"},
				})
			}
			edits.Env = append(edits.Env, "MEMIF_SOCKET_"+envName(d.Request)+"="+memifContainerSocket(d.Request))
		}
		if d.XDPDir != "" && d.Config.XDP != nil {
			x, req := d.Config.XDP, envName(d.Request)
			dir := xdpContainerDir(d.Request)
			edits.Mounts = append(edits.Mounts, &cdispec.Mount{HostPath: d.XDPDir, ContainerPath: dir, Options: []string{"rw", "bind"}})
			if x.Program == bpf.XSKRedirect {
				edits.Env = append(edits.Env, "FASTPATH_XSKMAP_"+req+"="+filepath.Join(dir, bpf.PinXSKMap))
			}
			edits.Env = append(edits.Env,
				"FASTPATH_XDP_PROGRAM_"+req+"="+x.Program,
				"FASTPATH_XDP_STATS_"+req+"="+filepath.Join(dir, bpf.PinStats),
				fmt.Sprintf("FASTPATH_XDP_QUEUES_%s=0-%d", req, x.Queues-1),
				"FASTPATH_XDP_ZEROCOPY_"+req+"="+x.ZeroCopy)
		}
		for _, n := range d.DeviceNodes {
			edits.DeviceNodes = append(edits.DeviceNodes, &cdispec.DeviceNode{Path: n.Path, HostPath: n.HostPath, Permissions: "rw"})
		}
		if d.DeviceInfoFile != "" {
			target := filepath.Join(DeviceInfoDir, strings.ReplaceAll(d.Request, "/", "_")+"-device.json")
			edits.Mounts = append(edits.Mounts, &cdispec.Mount{
				HostPath: d.DeviceInfoFile, ContainerPath: target, Options: []string{"ro", "bind"},
			})
			edits.Env = append(edits.Env, "FASTPATH_DEVICE_INFO_"+envName(d.Request)+"="+target)
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: edits})
	}
	return spec, nil
}

func writeCDISpec(path string, spec *cdispec.Spec) error {
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o644)
}
