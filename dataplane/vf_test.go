package dataplane

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// recordingPF records the calls made on it and fails the one named in
// failOn.
type recordingPF struct {
	calls  []string
	failOn string
	state  VFState
}

func (r *recordingPF) record(call string) error {
	r.calls = append(r.calls, call)
	if r.failOn != "" && strings.HasPrefix(call, r.failOn) {
		return errors.New("operation not supported")
	}
	return nil
}

func (r *recordingPF) VFState(pf string, vf int) (VFState, error) { return r.state, nil }
func (r *recordingPF) SetVLAN(pf string, vf, vlan, qos int, proto string) error {
	return r.record(fmt.Sprintf("vlan %s/%d %d %d %s", pf, vf, vlan, qos, proto))
}
func (r *recordingPF) SetMAC(pf string, vf int, mac net.HardwareAddr) error {
	return r.record(fmt.Sprintf("mac %s/%d %s", pf, vf, mac))
}
func (r *recordingPF) SetRate(pf string, vf, lo, hi int) error {
	return r.record(fmt.Sprintf("rate %s/%d %d %d", pf, vf, lo, hi))
}
func (r *recordingPF) SetSpoofChk(pf string, vf int, on bool) error {
	return r.record(fmt.Sprintf("spoofchk %s/%d %v", pf, vf, on))
}
func (r *recordingPF) SetTrust(pf string, vf int, on bool) error {
	return r.record(fmt.Sprintf("trust %s/%d %v", pf, vf, on))
}
func (r *recordingPF) SetLinkState(pf string, vf int, state string) error {
	return r.record(fmt.Sprintf("linkstate %s/%d %s", pf, vf, state))
}

var (
	factory = VFState{VLAN: 0, QoS: 0, VLANProto: "802.1q", MAC: "00:00:00:00:00:00", SpoofChk: true, Trust: false, LinkState: "auto"}
	full    = VFSettings{VLAN: new(100), QoS: new(3), VLANProto: "802.1ad", MAC: "02:00:00:00:00:07", SpoofChk: new(true),
		Trust: new(true), MinTxRate: new(100), MaxTxRate: new(10000), LinkState: "enable"}
)

// The success paths of an 802.1ad VLAN, a minimum TX rate and a VF link
// state are tested here only: the real VFs of the SR-IOV VM (igb) refuse
// them, which TestSRIOVRefusedVFSetting shows.
func TestApplyVFOrder(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pf := &recordingPF{}
	if err := ApplyVF(ctx, pf, "ens1f0", 3, full, factory); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"vlan ens1f0/3 100 3 802.1ad",
		"mac ens1f0/3 02:00:00:00:00:07",
		"rate ens1f0/3 100 10000",
		"spoofchk ens1f0/3 true",
		"trust ens1f0/3 true",
		"linkstate ens1f0/3 enable",
	}
	if strings.Join(pf.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(pf.calls, "\n"), strings.Join(want, "\n"))
	}

	pf.calls = nil
	if err := RestoreVF(ctx, pf, "ens1f0", 3, full, factory); err != nil {
		t.Fatal(err)
	}
	want = []string{
		"linkstate ens1f0/3 auto",
		"trust ens1f0/3 false",
		"spoofchk ens1f0/3 true",
		"rate ens1f0/3 0 0",
		"mac ens1f0/3 00:00:00:00:00:00",
		"vlan ens1f0/3 0 0 802.1q",
	}
	if strings.Join(pf.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("restore calls:\n%s\nwant:\n%s", strings.Join(pf.calls, "\n"), strings.Join(want, "\n"))
	}
}

func TestApplyVFOnlyWhatIsAsked(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pf := &recordingPF{}
	was := factory
	was.VLAN, was.QoS = 5, 1
	// QoS alone keeps the VLAN the VF has.
	if err := ApplyVF(ctx, pf, "p", 0, VFSettings{QoS: new(4)}, was); err != nil {
		t.Fatal(err)
	}
	if strings.Join(pf.calls, ";") != "vlan p/0 5 4 802.1q" {
		t.Errorf("calls = %q", pf.calls)
	}
}

func TestApplyVFRollsBack(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pf := &recordingPF{failOn: "spoofchk ens1f0/3 true"}
	err := ApplyVF(ctx, pf, "ens1f0", 3, full, factory)
	if err == nil || !strings.Contains(err.Error(), "set spoofchk of VF 3 on PF ens1f0") {
		t.Fatalf("error = %v, want the failing step named", err)
	}
	want := []string{
		"vlan ens1f0/3 100 3 802.1ad",
		"mac ens1f0/3 02:00:00:00:00:07",
		"rate ens1f0/3 100 10000",
		"spoofchk ens1f0/3 true", // fails
		"rate ens1f0/3 0 0",
		"mac ens1f0/3 00:00:00:00:00:00",
		"vlan ens1f0/3 0 0 802.1q",
	}
	if strings.Join(pf.calls, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(pf.calls, "\n"), strings.Join(want, "\n"))
	}
}

func TestRestoreVFGoesOnPastFailures(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	// The PF still reports the VF trusted: the restore did fail.
	pf := &recordingPF{failOn: "trust", state: VFState{Trust: true}}
	err := RestoreVF(ctx, pf, "ens1f0", 3, full, factory)
	if err == nil || !strings.Contains(err.Error(), "restore trust") {
		t.Fatalf("error = %v", err)
	}
	if len(pf.calls) != 6 {
		t.Errorf("restore made %d calls, want all 6 despite the failure: %q", len(pf.calls), pf.calls)
	}
}

// TestRestoreVFRefusedAsItWas: a PF that refuses a setting it has as it
// was (igb and a VF link state) does not fail the restore; the others are
// restored all the same.
func TestRestoreVFRefusedAsItWas(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pf := &recordingPF{failOn: "linkstate", state: VFState{VLAN: 100, LinkState: "auto"}}
	if err := RestoreVF(ctx, pf, "ens1f0", 3, full, factory); err != nil {
		t.Fatalf("restore failed on a setting the PF has as it was: %v", err)
	}
	if len(pf.calls) != 6 {
		t.Errorf("restore made %d calls, want all 6: %q", len(pf.calls), pf.calls)
	}
	pf.state.LinkState = "enable"
	if err := RestoreVF(ctx, pf, "ens1f0", 3, full, factory); err == nil || !strings.Contains(err.Error(), "restore link state") {
		t.Errorf("error = %v, want the link state the PF did not restore named", err)
	}
}
