package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
)

// CheckpointVersion is the version of the checkpoint format this build
// writes; it refuses to read a newer one rather than misread it.
const CheckpointVersion = 1

// Checkpoint is what the driver has prepared, kept on disk so that a
// restarted daemon knows what to undo.
type Checkpoint struct {
	Version int                       `json:"version"`
	Claims  map[types.UID]*ClaimState `json:"claims"`
}

// ClaimState is one prepared claim.
type ClaimState struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// PodUID is the one pod the claim is reserved for.
	PodUID  types.UID        `json:"podUID"`
	PodName string           `json:"podName"`
	Devices []PreparedDevice `json:"devices"`
	// Files are what Prepare wrote and Unprepare removes: the CDI spec and
	// the claim's state directory.
	Files []string `json:"files"`
}

// PreparedDevice is one allocated device and the plan for it.
type PreparedDevice struct {
	Request string          `json:"request"`
	Pool    string          `json:"pool"`
	Device  string          `json:"device"`
	Kind    devices.Kind    `json:"kind"`
	Config  InterfaceConfig `json:"config"`
	// What identified the device when it was prepared.
	PCIAddress   string `json:"pciAddress,omitempty"`
	PFPCIAddress string `json:"pfPciAddress,omitempty"`
	HostIfName   string `json:"hostIfName,omitempty"`
	HostMTU      int    `json:"hostMTU,omitempty"`
	HostMAC      string `json:"hostMAC,omitempty"`
	HostAlias    string `json:"hostAlias,omitempty"`
	MemifSocket  string `json:"memifSocket,omitempty"`
	MemifRole    string `json:"memifRole,omitempty"`
	MemifMode    string `json:"memifMode,omitempty"`
	// MemifDir is the device's directory on the node, mounted into the
	// containers; MemifLink the link Prepare made to the pod's socket.
	MemifDir  string `json:"memifDir,omitempty"`
	MemifLink string `json:"memifLink,omitempty"`
	// VF settings made through the PF, and the VF's state before them.
	PFName   string                `json:"pfName,omitempty"`
	VFID     int                   `json:"vfID,omitempty"`
	VFSet    *dataplane.VFSettings `json:"vfSet,omitempty"`
	VFBefore *dataplane.VFState    `json:"vfBefore,omitempty"`
	// IOMMUGroup is set for a function handed over on vfio-pci; DriverBefore
	// is the driver it had (given back on release), DeviceNodes what the
	// containers get.
	IOMMUGroup   *int         `json:"iommuGroup,omitempty"`
	DriverBefore string       `json:"driverBefore,omitempty"`
	DeviceNodes  []DeviceNode `json:"deviceNodes,omitempty"`
	// XDPDir is where Prepare pinned the device's XDP program and maps
	// (afxdp mode), on a bpffs; the attachment is pinned there too.
	XDPDir string `json:"xdpDir,omitempty"`
	// ChannelsBefore is the device's combined channel count before Prepare
	// set it to the afxdp queues (restored on release); 0 when unchanged.
	ChannelsBefore int `json:"channelsBefore,omitempty"`
	// CDIDeviceID is the fully qualified CDI device the containers get.
	CDIDeviceID    string `json:"cdiDeviceID"`
	DeviceInfoFile string `json:"deviceInfoFile,omitempty"`
}

// DeviceNode is a device node given to the containers.
type DeviceNode struct {
	Path     string `json:"path"`     // in the container
	HostPath string `json:"hostPath"` // on the node
}

func newCheckpoint() *Checkpoint {
	return &Checkpoint{Version: CheckpointVersion, Claims: map[types.UID]*ClaimState{}}
}

// loadCheckpoint reads the checkpoint at path; a missing file is an empty
// checkpoint.
func loadCheckpoint(path string) (*Checkpoint, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return newCheckpoint(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	cp := newCheckpoint()
	if err := json.Unmarshal(data, cp); err != nil {
		return nil, fmt.Errorf("checkpoint %s is corrupt: %w", path, err)
	}
	if cp.Version != CheckpointVersion {
		return nil, fmt.Errorf("checkpoint %s has version %d; this fastpathd reads version %d", path, cp.Version, CheckpointVersion)
	}
	if cp.Claims == nil {
		cp.Claims = map[types.UID]*ClaimState{}
	}
	return cp, nil
}

// save writes the checkpoint atomically: temp file, fsync, rename, fsync of
// the directory.
func (cp *Checkpoint) save(path string) error {
	data, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename to %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
