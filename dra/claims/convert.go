package claims

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
)

// NewerError is a checkpoint of a version this build does not know, newer
// than its own. It is refused, and left as it is: the build that wrote it
// converts it down (Convert).
type NewerError struct {
	// Path is the checkpoint's; File the file read, when it is not the
	// checkpoint itself (its pending write).
	Path, File string
	Version    int
}

func (e *NewerError) Error() string {
	what := "checkpoint " + e.Path
	if e.File != "" && e.File != e.Path {
		what += " (its pending write " + e.File + ")"
	}
	return fmt.Sprintf("%s is version %d, newer than this fastpathd reads (versions 1 to %d); it was left as it is: "+
		"convert it with the fastpathd that wrote it, `fastpathd checkpoint migrate --to %d --state-dir %s`, with no daemon running on the node",
		what, e.Version, Version, Version, filepath.Dir(e.Path))
}

// withPath is err naming the checkpoint at path and the file read, when it
// is a NewerError.
func withPath(err error, path, file string) error {
	if newer, ok := errors.AsType[*NewerError](err); ok {
		return &NewerError{Path: path, File: file, Version: newer.Version}
	}
	return err
}

// Versions are the checkpoint versions Convert writes.
var Versions = []int{1, versionWhole, Version}

// Convert rewrites the checkpoint at path in version to, for a build that
// reads only that version: to Version migrates the previous releases'
// files (as Open does) and writes the checkpoint whole with an empty journal
// unless it is of version 3 already;
// to 2 folds the journal into the checkpoint, and removes it; to 1 writes
// that release's files, the CNI
// driver's claims to legacy.CNI. A claim that version cannot hold whole
// (a Prepare not finished, a shared device, a lease, an NPWG record) is
// an error naming it, and nothing is written. No daemon may run on the
// node meanwhile: a daemon's next write would be of its own version.
func Convert(path string, legacy Legacy, to int) error {
	if !slices.Contains(Versions, to) {
		return fmt.Errorf("version %d: this fastpathd writes versions %v", to, Versions)
	}
	s, err := Open(path, legacy)
	if err != nil {
		return err
	}
	switch to {
	case Version, versionWhole:
		// Under the file lock, as a daemon's write would be.
		if err := s.Share(); err != nil {
			return err
		}
		return s.rewrite(to == Version)
	}
	if legacy.CNI == "" {
		return errors.New("version 1 keeps the CNI driver's claims in a file of their own: name it")
	}
	unlock, err := s.lockFile().Lock(context.Background())
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.refresh(); err != nil {
		return err
	}
	for _, e := range s.Corrupt() {
		return fmt.Errorf("checkpoint %s not converted to version 1, which cannot hold a record held aside: %w", path, e)
	}
	own := v1Checkpoint{Version: 1, Claims: map[string]*v1Claim{}}
	cni := v1CNICheckpoint{Version: 1, Claims: map[string]*v1CNIClaim{}}
	var errs []error
	for _, c := range s.Claims() {
		var back *Claim
		switch c.Driver {
		case DriverFastpath:
			v1 := c.toV1()
			own.Claims[string(c.UID)] = v1
			back, err = migrateFastpathClaim(v1)
		case DriverCNI:
			v1 := &v1CNIClaim{Namespace: c.Namespace, Name: c.Name, UID: c.UID, PodUID: c.Pod.UID, PodName: c.Pod.Name, Networks: c.Networks, BootID: c.BootID}
			cni.Claims[string(c.UID)] = v1
			back = &Claim{Driver: DriverCNI, UID: c.UID, Namespace: c.Namespace, Name: c.Name,
				Pod: Pod{UID: c.Pod.UID, Name: c.Pod.Name}, Networks: c.Networks, Prepared: true, BootID: c.BootID}
		default:
			err = fmt.Errorf("version 1 has no records of driver %s", c.Driver)
		}
		if err == nil && !sameInV1(c, back) {
			err = errors.New("its record holds what version 1 cannot (a Prepare not finished, a shared device, a lease, a pod network or attachment state)")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("claim %s (%s, driver %s): %w", &c, c.UID, c.Driver, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checkpoint %s not converted to version 1, nothing was written: %w", path, err)
	}
	// The CNI driver's file first: a kill before the checkpoint is
	// rewritten leaves a version 2 checkpoint and a CNI file, which the
	// next Open merges again (the same records).
	if len(cni.Claims) > 0 {
		data, err := json.Marshal(cni)
		if err == nil {
			err = os.MkdirAll(filepath.Dir(legacy.CNI), 0o750)
		}
		if err == nil {
			err = WriteFileAtomic(legacy.CNI, data, 0o600)
		}
		if err != nil {
			return fmt.Errorf("write the CNI driver's checkpoint %s: %w", legacy.CNI, err)
		}
	}
	data, err := json.Marshal(own)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", path, err)
	}
	// Version 1 has no journal: its entries are in what was written.
	return removeJournal(JournalPath(path))
}

// sameInV1 reports whether back, c read back from version 1, is c: a
// version 1 record has no devices as published (that release published
// what discovery saw). Its boot ID is written beside that release's
// fields, so that the next start does not prepare every claim again.
func sameInV1(c Claim, back *Claim) bool {
	if back == nil {
		return false
	}
	b := *back
	c.unknown, c.encoded, b.encoded = nil, nil, nil
	c.Devices = slices.Clone(c.Devices)
	for i := range c.Devices {
		c.Devices[i].Published = nil
	}
	return reflect.DeepEqual(c, b)
}

// toV1 is a prepared fastpath.dev record as the previous release wrote it.
func (c *Claim) toV1() *v1Claim {
	out := &v1Claim{Namespace: c.Namespace, Name: c.Name, UID: c.UID, PodUID: c.Pod.UID, PodName: c.Pod.Name, BootID: c.BootID}
	if c.CDISpec != "" || c.Dir != "" {
		out.Files = []string{c.CDISpec, c.Dir}
	}
	for _, d := range c.Devices {
		od := v1Device{Request: d.Request, Pool: d.Pool, Device: d.Device, Kind: d.Kind, Config: v1Config{Mode: d.Mode},
			PCIAddress: d.PCIAddress, PFPCIAddress: d.PFPCIAddress, CDIDeviceID: d.CDIDevice, DeviceInfoFile: d.DeviceInfoFile}
		if h := d.Host; h != nil {
			od.HostIfName, od.HostMTU, od.HostMAC, od.HostAlias = h.Name, h.MTU, h.MAC, h.Alias
		}
		if p := d.Pod; p != nil {
			od.Config.Interface = &v1Interface{Name: p.Name, MTU: p.MTU, MAC: p.MAC, Addresses: p.Addresses, Routes: p.Routes}
		}
		if vf := d.VF; vf != nil {
			od.PFName, od.VFID, od.VFSet, od.VFBefore = vf.PFName, vf.ID, &vf.Set, vf.Before
		}
		if v := d.VFIO; v != nil {
			od.IOMMUGroup, od.DriverBefore, od.DeviceNodes = &v.IOMMUGroup, v.DriverBefore, v.DeviceNodes
		}
		if x := d.XDP; x != nil {
			od.Config.XDP = &v1XDP{Program: x.Program, AttachMode: x.AttachMode, FallbackToGeneric: x.Fallback, Queues: x.Queues, ZeroCopy: x.ZeroCopy}
			od.XDPDir, od.ChannelsBefore = x.PinDir, x.ChannelsBefore
		}
		if m := d.Memif; m != nil {
			od.MemifRole, od.MemifMode, od.MemifSocket, od.MemifDir, od.MemifLink = m.Role, m.Mode, m.Socket, m.Dir, m.Link
			od.Config.Memif = &v1MemifIDs{UID: &m.UID, GID: &m.GID}
		}
		out.Devices = append(out.Devices, od)
	}
	return out
}
