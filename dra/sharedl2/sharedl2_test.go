package sharedl2

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

func sub(parent, kind string, vlan int, addrs ...string) claims.Device {
	return claims.Device{Request: "r-" + parent, Device: "d-" + parent, Shared: &claims.SharedInterface{Parent: parent, Kind: kind, VLANID: vlan},
		Pod: &claims.PodInterface{Name: "net1", Addresses: addrs}}
}

// Of: a sub-interface's addresses on its parent (and VLAN), a pool's
// marked given rather than static; a CNI network's and an NPWG
// attachment's on their master, with the field in their own configs; a
// device moved whole or a network on no master holds none.
func TestOf(t *testing.T) {
	fp := &claims.Claim{Driver: claims.DriverFastpath, Namespace: "ns", Name: "fp", Devices: []claims.Device{
		sub("ens1f0", "macvlan", 0, "10.9.0.5/24", "10.56.0.2/29"), sub("ens1f0", "vlan", 42, "fd00::5/64"),
		{Request: "whole", Pod: &claims.PodInterface{Name: "net3", Addresses: []string{"10.9.0.6/24"}}}}}
	fp.Devices[0].IPAM = &claims.IPAMLease{Pool: "fast", Address: "10.56.0.2/29"}
	list := `{"plugins": [{"type": "macvlan", "master": "ens1f0", "ipam": {"type": "static", "addresses": [{"address": "10.9.0.7/24"}]}}]}`
	cni := &claims.Claim{Driver: claims.DriverCNI, Namespace: "ns", Name: "cni", Networks: []claims.Network{
		{Request: "a", Device: "cni-0", Conflist: []byte(list)},
		{Request: "b", Device: "cni-1", Conflist: []byte(`{"plugins": [{"type": "bridge", "ipam": {"type": "static", "addresses": [{"address": "10.9.0.8/24"}]}}]}`)}}}
	pod := &claims.Claim{Driver: claims.DriverNPWG, Namespace: "ns", Name: "web", Networks: []claims.Network{
		{Request: "ns/net", Device: "net2", Conflist: []byte(list), CapabilityArgs: map[string]any{"ips": []any{"10.9.0.9/24"}}}}}
	var got []string
	for _, c := range []*claims.Claim{fp, cni, pod} {
		for _, h := range Of(c) {
			got = append(got, fmt.Sprintf("%s %s %s %s %v", h.L2, h.Addr, h.Request, h.Field, h.Static))
		}
	}
	want := []string{
		"parent ens1f0 10.9.0.5 r-ens1f0 interface.addresses[0] true",
		"parent ens1f0 10.56.0.2 r-ens1f0 ipam.pool false",
		"parent ens1f0, VLAN 42 fd00::5 r-ens1f0 interface.addresses[0] true",
		"parent ens1f0 10.9.0.7 a plugins[0].config.ipam.addresses[0].address true",
		"parent ens1f0 10.9.0.7 ns/net plugins[0].ipam.addresses[0].address true",
		"parent ens1f0 10.9.0.9 ns/net ips[0] true",
	}
	if !slices.Equal(got, want) {
		t.Errorf("holdings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Taken: a static address of a record's that another record holds on the
// same L2, or that the record gives twice on one L2; an address a pool
// gave the record is its own.
func TestTaken(t *testing.T) {
	other := &claims.Claim{Driver: claims.DriverFastpath, UID: "o", Namespace: "ns", Name: "other", Devices: []claims.Device{sub("ens1f0", "macvlan", 0, "10.9.0.5/24")}}
	mine := &claims.Claim{Driver: claims.DriverFastpath, UID: "m", Namespace: "ns", Name: "mine", Devices: []claims.Device{sub("ens1f0", "ipvlan", 0, "10.9.0.5/32")}}
	m, theirs, ok := Taken(Of(mine), Of(other))
	if !ok || theirs.Claim != other || m.Field != "interface.addresses[0]" {
		t.Fatalf("Taken = %+v, %+v, %v", m, theirs, ok)
	}
	if got := TakenDetail(m, theirs, "ns"); !strings.HasPrefix(got, "10.9.0.5 is already the address of claim ns/other on parent ens1f0") {
		t.Errorf("detail %q", got)
	}
	if got := TakenDetail(m, theirs, "tenant-b"); !strings.Contains(got, "a claim of another namespace") || strings.Contains(got, "ns/other") {
		t.Errorf("detail for another namespace %q", got)
	}
	twice := &claims.Claim{Driver: claims.DriverFastpath, UID: "t", Namespace: "ns", Name: "twice", Devices: []claims.Device{
		sub("ens1f0", "macvlan", 0, "10.9.0.6/24"), sub("ens1f0", "macvlan", 0, "10.9.0.6/24")}}
	twice.Devices[1].Request = "second"
	if m, theirs, ok := Taken(Of(twice), nil); !ok || !strings.Contains(TakenDetail(m, theirs, "ns"), `this claim's request "r-ens1f0"`) {
		t.Errorf("an address given twice by one claim: %+v, %v", m, ok)
	}
	// One interface writing its address twice (a range of one address,
	// the ips asking for it) holds it once.
	again := &claims.Claim{Driver: claims.DriverCNI, UID: "n", Namespace: "ns", Name: "again", Networks: []claims.Network{{Request: "a", Device: "cni-0",
		Conflist: []byte(`{"plugins": [{"type": "macvlan", "master": "ens1f0", "args": {"cni": {"ips": ["10.9.0.8"]}}, ` +
			`"ipam": {"type": "host-local", "ranges": [[{"subnet": "10.9.0.0/24", "rangeStart": "10.9.0.8", "rangeEnd": "10.9.0.8"}]]}}]}`)}}}
	if hs := Of(again); len(hs) != 2 {
		t.Errorf("holdings %+v, want the address twice", hs)
	} else if m, _, ok := Taken(hs, nil); ok {
		t.Errorf("one interface's address taken from itself: %+v", m)
	}
	given := &claims.Claim{Driver: claims.DriverFastpath, UID: "g", Namespace: "ns", Name: "given", Devices: []claims.Device{sub("ens1f0", "macvlan", 0, "10.9.0.7/24", "10.9.0.7/24")}}
	given.Devices[0].IPAM = &claims.IPAMLease{Address: "10.9.0.7/24"}
	if _, _, ok := Taken(Of(given), nil); ok {
		t.Error("an address given by a pool taken from its own claim")
	}
	if got := HolderName(&claims.Claim{Driver: claims.DriverIPAMClaim, Namespace: "b", Name: "x"}, "a"); got != "an IPAMClaim of another namespace" {
		t.Errorf("HolderName = %q", got)
	}
}
