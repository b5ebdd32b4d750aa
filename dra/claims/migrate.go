package claims

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/types"
)

// Legacy names the files of the release before this format (version 1):
// the fastpath.dev driver's checkpoint was the store's own path, the CNI
// driver kept its own file.
type Legacy struct {
	// CNI is the CNI driver's version 1 checkpoint, "" for none.
	CNI string
}

// migrate merges the CNI driver's version 1 file into the store, writes the
// store (also when the store's own file was of version 1), and removes the
// CNI file. A crash at any point repeats the migration at the next start:
// merging the same records again changes nothing.
func (s *Store) migrate(legacy Legacy, version int) error {
	var cni []byte
	if legacy.CNI != "" {
		var err error
		cni, err = readFile(legacy.CNI)
		switch {
		case errors.Is(err, os.ErrNotExist):
			cni = nil
		case err != nil:
			return fmt.Errorf("read the CNI driver's checkpoint %s: %w", legacy.CNI, err)
		}
	}
	ownOld := version != 0 && version < versionWhole
	if cni == nil && !ownOld {
		return nil
	}
	if cni != nil {
		claims, err := migrateCNI(cni)
		if err != nil {
			return fmt.Errorf("the CNI driver's checkpoint %s: %w", legacy.CNI, err)
		}
		for k, c := range claims {
			s.claims[k] = c
			s.indexPod(k, c)
		}
	}
	if err := s.writeWhole(s.claims); err != nil {
		return err
	}
	if cni != nil {
		if err := os.Remove(legacy.CNI); err != nil {
			return fmt.Errorf("remove the migrated CNI checkpoint: %w", err)
		}
	}
	return nil
}

func fileVersion(data []byte) int {
	var head struct {
		Version int `json:"version"`
	}
	_ = json.Unmarshal(data, &head)
	return head.Version
}

// The version 1 formats, as that release wrote them, and the boot ID of
// a record (BootID), which Convert writes down for this build to read
// back: that release's decoder ignores the fields it does not know.
type (
	v1Checkpoint struct {
		Version int                 `json:"version"`
		Claims  map[string]*v1Claim `json:"claims"`
	}
	v1Claim struct {
		Namespace string     `json:"namespace"`
		Name      string     `json:"name"`
		UID       types.UID  `json:"uid"`
		PodUID    types.UID  `json:"podUID"`
		PodName   string     `json:"podName"`
		Devices   []v1Device `json:"devices"`
		Files     []string   `json:"files"`
		BootID    string     `json:"bootID,omitempty"`
	}
	v1Device struct {
		Request        string       `json:"request"`
		Pool           string       `json:"pool"`
		Device         string       `json:"device"`
		Kind           string       `json:"kind"`
		Config         v1Config     `json:"config"`
		PCIAddress     string       `json:"pciAddress"`
		PFPCIAddress   string       `json:"pfPciAddress"`
		HostIfName     string       `json:"hostIfName"`
		HostMTU        int          `json:"hostMTU"`
		HostMAC        string       `json:"hostMAC"`
		HostAlias      string       `json:"hostAlias"`
		MemifSocket    string       `json:"memifSocket"`
		MemifRole      string       `json:"memifRole"`
		MemifMode      string       `json:"memifMode"`
		MemifDir       string       `json:"memifDir"`
		MemifLink      string       `json:"memifLink"`
		PFName         string       `json:"pfName"`
		VFID           int          `json:"vfID"`
		VFSet          *VFSettings  `json:"vfSet"`
		VFBefore       *VFState     `json:"vfBefore"`
		IOMMUGroup     *int         `json:"iommuGroup"`
		DriverBefore   string       `json:"driverBefore"`
		DeviceNodes    []DeviceNode `json:"deviceNodes"`
		XDPDir         string       `json:"xdpDir"`
		ChannelsBefore int          `json:"channelsBefore"`
		CDIDeviceID    string       `json:"cdiDeviceID"`
		DeviceInfoFile string       `json:"deviceInfoFile"`
	}
	v1Config struct {
		Mode      string       `json:"mode"`
		Interface *v1Interface `json:"interface"`
		XDP       *v1XDP       `json:"xdp"`
		Memif     *v1MemifIDs  `json:"memif"`
	}
	v1Interface struct {
		Name      string   `json:"name"`
		MTU       int      `json:"mtu"`
		MAC       string   `json:"mac"`
		Addresses []string `json:"addresses"`
		Routes    []Route  `json:"routes"`
	}
	v1XDP struct {
		Program           string `json:"program"`
		AttachMode        string `json:"attachMode"`
		FallbackToGeneric bool   `json:"fallbackToGeneric"`
		Queues            int    `json:"queues"`
		ZeroCopy          string `json:"zeroCopy"`
	}
	v1MemifIDs struct {
		UID *int64 `json:"uid"`
		GID *int64 `json:"gid"`
	}
	v1CNICheckpoint struct {
		Version int                    `json:"version"`
		Claims  map[string]*v1CNIClaim `json:"claims"`
	}
	v1CNIClaim struct {
		Namespace string    `json:"namespace"`
		Name      string    `json:"name"`
		UID       types.UID `json:"uid"`
		PodUID    types.UID `json:"podUID"`
		PodName   string    `json:"podName"`
		Networks  []Network `json:"networks"`
		BootID    string    `json:"bootID,omitempty"`
	}
)

// migrateFastpath reads the fastpath.dev driver's version 1 checkpoint.
// Every claim in it was prepared: that release recorded a claim before its
// side effects and removed it when they failed.
func migrateFastpath(data []byte) (map[Key]*Claim, error) {
	var old v1Checkpoint
	if err := json.Unmarshal(data, &old); err != nil {
		return nil, fmt.Errorf("corrupt: %w", err)
	}
	out := map[Key]*Claim{}
	for k, oc := range old.Claims {
		if oc == nil {
			return nil, fmt.Errorf("claim %q: no record (null)", k)
		}
		c, err := migrateFastpathClaim(oc)
		if err != nil {
			return nil, fmt.Errorf("claim %q: %w", k, err)
		}
		out[c.Key()] = c
	}
	return out, nil
}

// migrateFastpathClaim is one record of that checkpoint.
func migrateFastpathClaim(oc *v1Claim) (*Claim, error) {
	c := &Claim{Driver: DriverFastpath, UID: oc.UID, Namespace: oc.Namespace, Name: oc.Name,
		Pod: Pod{UID: oc.PodUID, Name: oc.PodName}, Prepared: true, BootID: oc.BootID}
	// That release wrote the CDI spec and the claim's directory first.
	if len(oc.Files) > 1 {
		c.CDISpec, c.Dir = oc.Files[0], oc.Files[1]
	}
	for _, od := range oc.Devices {
		c.Devices = append(c.Devices, od.migrate())
	}
	if err := c.check(c.Key().String()); err != nil {
		return nil, err
	}
	var err error
	c.encoded, err = encode(c)
	return c, err
}

func (od v1Device) migrate() Device {
	d := Device{Request: od.Request, Pool: od.Pool, Device: od.Device, Kind: od.Kind, Mode: od.Config.Mode,
		PCIAddress: od.PCIAddress, PFPCIAddress: od.PFPCIAddress, CDIDevice: od.CDIDeviceID, DeviceInfoFile: od.DeviceInfoFile}
	if od.HostIfName != "" {
		d.Host = &HostNetdev{Name: od.HostIfName, MTU: od.HostMTU, MAC: od.HostMAC, Alias: od.HostAlias}
	}
	if i := od.Config.Interface; i != nil && (d.Mode == "netdev" || d.Mode == "afxdp") {
		d.Pod = &PodInterface{Name: i.Name, MTU: i.MTU, MAC: i.MAC, Addresses: i.Addresses, Routes: i.Routes}
	}
	if od.VFSet != nil {
		d.VF = &VF{PFName: od.PFName, ID: od.VFID, Set: *od.VFSet, Before: od.VFBefore}
	}
	if od.IOMMUGroup != nil {
		d.VFIO = &VFIO{IOMMUGroup: *od.IOMMUGroup, DriverBefore: od.DriverBefore, DeviceNodes: od.DeviceNodes}
	}
	if x := od.Config.XDP; x != nil && od.XDPDir != "" {
		d.XDP = &XDP{Program: x.Program, AttachMode: x.AttachMode, Fallback: x.FallbackToGeneric, Queues: x.Queues,
			ZeroCopy: x.ZeroCopy, PinDir: od.XDPDir, ChannelsBefore: od.ChannelsBefore}
	}
	if od.MemifDir != "" {
		m := &Memif{Role: od.MemifRole, Mode: od.MemifMode, Socket: od.MemifSocket, Dir: od.MemifDir, Link: od.MemifLink}
		if od.Config.Memif != nil {
			if od.Config.Memif.UID != nil {
				m.UID = *od.Config.Memif.UID
			}
			if od.Config.Memif.GID != nil {
				m.GID = *od.Config.Memif.GID
			}
		}
		d.Memif = m
	}
	return d
}

// migrateCNI reads the CNI driver's version 1 checkpoint.
func migrateCNI(data []byte) (map[Key]*Claim, error) {
	var old v1CNICheckpoint
	if err := json.Unmarshal(data, &old); err != nil {
		return nil, fmt.Errorf("corrupt: %w", err)
	}
	if old.Version != 1 {
		return nil, fmt.Errorf("version %d; this fastpathd migrates version 1", old.Version)
	}
	out := map[Key]*Claim{}
	for k, oc := range old.Claims {
		if oc == nil {
			return nil, fmt.Errorf("claim %q: no record (null)", k)
		}
		c := &Claim{Driver: DriverCNI, UID: oc.UID, Namespace: oc.Namespace, Name: oc.Name,
			Pod: Pod{UID: oc.PodUID, Name: oc.PodName}, Networks: oc.Networks, Prepared: true, BootID: oc.BootID}
		if err := c.check(c.Key().String()); err != nil {
			return nil, fmt.Errorf("claim %q: %w", k, err)
		}
		var err error
		if c.encoded, err = encode(c); err != nil {
			return nil, fmt.Errorf("claim %q: %w", k, err)
		}
		out[c.Key()] = c
	}
	return out, nil
}
