package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
)

// VFSettings are settings of an SR-IOV VF that are made through its PF. A
// nil or empty field is left as it is. VFSettings and VFState are the one
// form in which the driver hands VF settings to the dataplane; the claim
// record keeps its own copies of them (its checkpoint's format), converted
// in one place in package dra.
type VFSettings struct {
	VLAN      *int
	QoS       *int
	VLANProto string // 802.1q | 802.1ad
	MAC       string
	SpoofChk  *bool
	Trust     *bool
	MinTxRate *int   // Mb/s
	MaxTxRate *int   // Mb/s
	LinkState string // auto | enable | disable
}

// VFState is everything VFSettings can change, as the PF reports it: what
// Restore puts back.
type VFState struct {
	VLAN      int
	QoS       int
	VLANProto string
	MAC       string
	SpoofChk  bool
	Trust     bool
	MinTxRate int // Mb/s
	MaxTxRate int // Mb/s
	LinkState string
}

// PF is what setting a VF needs of its PF: the netlink calls, behind a
// small interface so that the order of calls can be tested without SR-IOV
// hardware.
type PF interface {
	VFState(pf string, vf int) (VFState, error)
	SetVLAN(pf string, vf, vlan, qos int, proto string) error
	SetMAC(pf string, vf int, mac net.HardwareAddr) error
	SetRate(pf string, vf, minMbps, maxMbps int) error
	SetSpoofChk(pf string, vf int, on bool) error
	SetTrust(pf string, vf int, on bool) error
	SetLinkState(pf string, vf int, state string) error
}

// vfStep is one setting, its application and its undo; restored says
// whether a state has the setting as it was.
type vfStep struct {
	name     string
	apply    func() error
	undo     func() error
	restored func(VFState) bool
}

// vfSteps lists the settings in the order drivers need them (as sriov-cni
// does): VLAN before the MAC (some PFs filter on both), the MAC before spoof
// checking is turned on (or the old MAC is what gets checked), rates, trust,
// and the link state last, so the VF comes up configured. Undo runs in
// reverse: spoof checking off before the MAC goes back.
func vfSteps(p PF, pf string, vf int, want VFSettings, was VFState) ([]vfStep, error) {
	var steps []vfStep
	if want.VLAN != nil || want.QoS != nil || want.VLANProto != "" {
		vlan, qos, proto := was.VLAN, was.QoS, was.VLANProto
		if want.VLAN != nil {
			vlan = *want.VLAN
		}
		if want.QoS != nil {
			qos = *want.QoS
		}
		if want.VLANProto != "" {
			proto = want.VLANProto
		}
		steps = append(steps, vfStep{"vlan",
			func() error { return p.SetVLAN(pf, vf, vlan, qos, proto) },
			func() error { return p.SetVLAN(pf, vf, was.VLAN, was.QoS, was.VLANProto) },
			func(st VFState) bool {
				return st.VLAN == was.VLAN && st.QoS == was.QoS && st.VLANProto == was.VLANProto
			}})
	}
	if want.MAC != "" {
		mac, err := net.ParseMAC(want.MAC)
		if err != nil {
			return nil, fmt.Errorf("mac %q: %w", want.MAC, err)
		}
		old, err := net.ParseMAC(was.MAC)
		if err != nil {
			return nil, fmt.Errorf("the VF's current MAC %q: %w", was.MAC, err)
		}
		steps = append(steps, vfStep{"mac",
			func() error { return p.SetMAC(pf, vf, mac) },
			func() error { return p.SetMAC(pf, vf, old) },
			func(st VFState) bool { return strings.EqualFold(st.MAC, was.MAC) }})
	}
	if want.MinTxRate != nil || want.MaxTxRate != nil {
		lo, hi := was.MinTxRate, was.MaxTxRate
		if want.MinTxRate != nil {
			lo = *want.MinTxRate
		}
		if want.MaxTxRate != nil {
			hi = *want.MaxTxRate
		}
		steps = append(steps, vfStep{"rate",
			func() error { return p.SetRate(pf, vf, lo, hi) },
			func() error { return p.SetRate(pf, vf, was.MinTxRate, was.MaxTxRate) },
			func(st VFState) bool { return st.MinTxRate == was.MinTxRate && st.MaxTxRate == was.MaxTxRate }})
	}
	if want.SpoofChk != nil {
		on := *want.SpoofChk
		steps = append(steps, vfStep{"spoofchk",
			func() error { return p.SetSpoofChk(pf, vf, on) },
			func() error { return p.SetSpoofChk(pf, vf, was.SpoofChk) },
			func(st VFState) bool { return st.SpoofChk == was.SpoofChk }})
	}
	if want.Trust != nil {
		on := *want.Trust
		steps = append(steps, vfStep{"trust",
			func() error { return p.SetTrust(pf, vf, on) },
			func() error { return p.SetTrust(pf, vf, was.Trust) },
			func(st VFState) bool { return st.Trust == was.Trust }})
	}
	if want.LinkState != "" {
		state := want.LinkState
		steps = append(steps, vfStep{"link state",
			func() error { return p.SetLinkState(pf, vf, state) },
			func() error { return p.SetLinkState(pf, vf, was.LinkState) },
			func(st VFState) bool { return st.LinkState == was.LinkState }})
	}
	return steps, nil
}

// ApplyVF makes the settings on VF vf of PF pf. was is the VF's state from
// before (VFState, saved by the caller first). If a step fails, the steps
// made are undone, and the error names the step.
func ApplyVF(ctx context.Context, p PF, pf string, vf int, want VFSettings, was VFState) error {
	steps, err := vfSteps(p, pf, vf, want, was)
	if err != nil {
		return err
	}
	for i, s := range steps {
		if err := s.apply(); err != nil {
			err = fmt.Errorf("set %s of VF %d on PF %s: %w", s.name, vf, pf, err)
			for j := i - 1; j >= 0; j-- {
				if uErr := steps[j].undo(); uErr != nil {
					err = fmt.Errorf("%w; undoing %s also failed: %w", err, steps[j].name, uErr)
				}
			}
			return err
		}
		fault.Point("vf.setting")
	}
	klog.FromContext(ctx).V(2).Info("Applied VF settings", "pf", pf, "vf", vf, "steps", len(steps))
	return nil
}

// RestoreVF puts back what ApplyVF changed, in reverse order. It goes on
// past a failing step, so that one stuck setting does not strand the others,
// and returns every failure. A setting the PF refuses to make but has as it
// was is no failure: a PF without it (igb has no VF link state) refused it
// at ApplyVF too, and the undo of a claim whose Prepare failed there, or of
// a step that never ran, must not fail on it.
func RestoreVF(ctx context.Context, p PF, pf string, vf int, applied VFSettings, was VFState) error {
	// A VF that is gone (its PF's sriov_numvfs lowered, or the PF gone)
	// has nothing to restore.
	if _, err := p.VFState(pf, vf); errors.Is(err, ErrDeviceGone) {
		return err
	}
	steps, err := vfSteps(p, pf, vf, applied, was)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(steps) - 1; i >= 0; i-- {
		if err := steps[i].undo(); err != nil {
			if st, stErr := p.VFState(pf, vf); stErr == nil && steps[i].restored(st) {
				klog.FromContext(ctx).V(2).Info("The PF refuses to restore a VF setting it has as it was", "pf", pf, "vf", vf, "setting", steps[i].name, "reason", err.Error())
				continue
			}
			errs = append(errs, fmt.Errorf("restore %s of VF %d on PF %s: %w", steps[i].name, vf, pf, err))
		}
	}
	if len(errs) == 0 {
		klog.FromContext(ctx).V(2).Info("Restored VF settings", "pf", pf, "vf", vf)
	}
	return errors.Join(errs...)
}
