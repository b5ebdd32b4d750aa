//go:build sriov

package dataplane

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2/ktesting"
)

// TestSRIOVApplyAndRestoreVF: VF settings made through the real PF are
// what the kernel then reports, and RestoreVF puts back exactly what was.
// (igb takes a TX rate only while the PF's link is up: sriovtest sets it
// up.)
func TestSRIOVApplyAndRestoreVF(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pf, vf := sriovVF(t, 1)
	t.Cleanup(func() { pf.ResetVF(t, vf) })
	was := vfState(t, pf.Name, vf.ID)
	want := VFSettings{VLAN: new(100), QoS: new(2), MAC: "02:fa:57:00:01:01", SpoofChk: new(!was.SpoofChk), Trust: new(!was.Trust), MaxTxRate: new(100)}
	if err := ApplyVF(ctx, NetlinkPF{}, pf.Name, vf.ID, want, was); err != nil {
		t.Fatal(err)
	}
	got := vfState(t, pf.Name, vf.ID)
	wantState := VFState{VLAN: 100, QoS: 2, VLANProto: "802.1q", MAC: want.MAC, SpoofChk: !was.SpoofChk, Trust: !was.Trust,
		MaxTxRate: 100, LinkState: was.LinkState}
	if got != wantState {
		t.Errorf("after ApplyVF the kernel reports %+v, want %+v", got, wantState)
	}
	if err := RestoreVF(ctx, NetlinkPF{}, pf.Name, vf.ID, want, was); err != nil {
		t.Fatal(err)
	}
	if got := vfState(t, pf.Name, vf.ID); got != was {
		t.Errorf("after RestoreVF the kernel reports %+v, want %+v as before", got, was)
	}
}

// TestSRIOVRefusedVFSetting: what igb refuses (a minimum TX rate, an
// 802.1ad VLAN, a VF link state: it has no ndo for the last) fails ApplyVF
// with the setting named and the kernel's error, and the settings made
// before it are undone. The successful paths of those three settings are
// tested on the stand-in PF only (vf_test.go).
func TestSRIOVRefusedVFSetting(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pf, vf := sriovVF(t, 1)
	t.Cleanup(func() { pf.ResetVF(t, vf) })
	mac := "02:fa:57:00:01:02"
	for _, tc := range []struct {
		name  string
		set   VFSettings
		step  string
		errno unix.Errno
	}{
		{"min TX rate", VFSettings{VLAN: new(200), MAC: mac, MinTxRate: new(10), MaxTxRate: new(100)}, "rate", unix.EINVAL},
		{"802.1ad", VFSettings{VLAN: new(200), VLANProto: "802.1ad", MAC: mac}, "vlan", unix.EPROTONOSUPPORT},
		{"link state", VFSettings{VLAN: new(200), QoS: new(1), MAC: mac, MaxTxRate: new(100), SpoofChk: new(false), Trust: new(true), LinkState: "enable"},
			"link state", unix.EOPNOTSUPP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			was := vfState(t, pf.Name, vf.ID)
			err := ApplyVF(ctx, NetlinkPF{}, pf.Name, vf.ID, tc.set, was)
			if err == nil {
				t.Fatalf("igb took %+v", tc.set)
			}
			t.Log(err)
			if want := fmt.Sprintf("set %s of VF %d on PF %s", tc.step, vf.ID, pf.Name); !strings.Contains(err.Error(), want) || !errors.Is(err, tc.errno) {
				t.Errorf("error %q, want it to name %q and wrap %v", err, want, tc.errno)
			}
			if got := vfState(t, pf.Name, vf.ID); got != was {
				t.Errorf("after the refusal the kernel reports %+v, want %+v as before", got, was)
			}
		})
	}
}

// TestSRIOVAdminMACLocksVFMAC: once the PF has set a VF's MAC (as Prepare
// does for a claim's interface.mac), igb refuses any MAC the VF's own
// driver asks for unless the VF is trusted, and only an all-zero MAC
// through the PF lifts that. An attach that asks for a MAC then fails in
// the middle of its one RTM_NEWLINK, after the kernel has moved the VF
// into the pod: Attach must bring it back as it was. Told that the PF set
// the MAC, Attach has the VF take it by a reset instead, and Detach and
// RestoreVFAndNetdev give the VF its own back after the claim.
func TestSRIOVAdminMACLocksVFMAC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pf, vf := sriovVF(t, 1)
	t.Cleanup(func() { pf.ResetVF(t, vf) })
	host := linkByName(t, vf.Netdev)
	was := vfState(t, pf.Name, vf.ID)
	set := VFSettings{MAC: "02:fa:57:00:01:03"}
	if err := ApplyVF(ctx, NetlinkPF{}, pf.Name, vf.ID, set, was); err != nil {
		t.Fatal(err)
	}
	// igbvf keeps its netdev's MAC until it is reloaded.
	if l := linkByName(t, vf.Netdev); l.Attrs().HardwareAddr.String() != host.Attrs().HardwareAddr.String() {
		t.Errorf("the VF netdev's MAC changed to %s without a reload", l.Attrs().HardwareAddr)
	}
	mac, _ := net.ParseMAC("02:fa:57:00:01:04")
	if err := netlink.LinkSetHardwareAddr(host, mac); !errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Errorf("the VF set its own MAC over the PF's: %v, want EADDRNOTAVAIL", err)
	}

	podNS := sriovNetNS(t)
	a := attacher(t)
	nd := Netdev{HostName: host.Attrs().Name, HostMTU: host.Attrs().MTU, HostMAC: host.Attrs().HardwareAddr.String(), PCIAddress: vf.Address,
		Name: "net1", MTU: 4000, MAC: set.MAC}
	_, err := a.Attach(ctx, podNS, nd)
	if !errors.Is(err, unix.EADDRNOTAVAIL) {
		t.Fatalf("attach with a MAC over the PF's: %v, want EADDRNOTAVAIL", err)
	}
	t.Log(err)
	l, err := netlink.LinkByName(nd.HostName)
	if err != nil {
		t.Fatalf("the VF is not back in the host as %s after the failed attach: %v", nd.HostName, err)
	}
	if l.Attrs().MTU != nd.HostMTU || l.Attrs().HardwareAddr.String() != nd.HostMAC || l.Attrs().Alias != "" || l.Attrs().ParentDev != vf.Address {
		t.Errorf("after the failed attach: %s MTU %d MAC %s alias %q parent %s, want MTU %d MAC %s no alias, %s",
			nd.HostName, l.Attrs().MTU, l.Attrs().HardwareAddr, l.Attrs().Alias, l.Attrs().ParentDev, nd.HostMTU, nd.HostMAC, vf.Address)
	}

	// Told the PF set the MAC, Attach resets the VF rather than ask: the
	// untrusted VF goes into the pod with the PF's MAC.
	nd.MACFromPF = true
	got, err := a.Attach(ctx, podNS, nd)
	if err != nil {
		t.Fatalf("attach with the MAC the PF set: %v", err)
	}
	if got.MAC != set.MAC {
		t.Errorf("the VF is in the pod with MAC %s, want the PF's %s", got.MAC, set.MAC)
	}
	// Detach leaves the MAC; once the PF no longer sets one, the netdev
	// gets its own back.
	if err := a.Detach(ctx, podNS, nd); err != nil {
		t.Fatal(err)
	}
	if err := RestoreVFAndNetdev(ctx, NetlinkPF{}, pf.Name, vf.ID, set, was, nd.HostName, nd.HostMAC); err != nil {
		t.Fatal(err)
	}
	if l := linkByName(t, nd.HostName); l.Attrs().HardwareAddr.String() != nd.HostMAC {
		t.Errorf("after the claim: %s has MAC %s, want %s back", nd.HostName, l.Attrs().HardwareAddr, nd.HostMAC)
	}
	// And it can set its MAC itself again.
	if err := netlink.LinkSetHardwareAddr(linkByName(t, nd.HostName), mac); err != nil {
		t.Errorf("the VF cannot set its own MAC after the claim: %v", err)
	}

	// Trusted, the VF may ask for the MAC the PF set: the attach goes
	// through without a reset.
	if err := ApplyVF(ctx, NetlinkPF{}, pf.Name, vf.ID, set, was); err != nil {
		t.Fatal(err)
	}
	if err := (NetlinkPF{}).SetTrust(pf.Name, vf.ID, true); err != nil {
		t.Fatal(err)
	}
	nd.MACFromPF, nd.HostMAC = false, mac.String()
	if _, err := a.Attach(ctx, podNS, nd); err != nil {
		t.Fatalf("attach of a trusted VF: %v", err)
	}
	if err := a.Detach(ctx, podNS, nd); err != nil {
		t.Fatal(err)
	}
}
