package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/claimspec"
)

var testPools = IPPools{
	"fast": {Name: "fast", Subnet: "10.56.0.0/29", Gateway: "10.56.0.1", Exclude: []string{"10.56.0.3"},
		Routes: []v1alpha1.Route{{Destination: "10.57.0.0/16"}}},
	"v6": {Name: "v6", Subnet: "fd00:56::/64", RangeStart: "fd00:56::10", RangeEnd: "fd00:56::11"},
}

// sharedInventory is the fixture's with its PF ens1f0 shared.
func sharedInventory(t *testing.T) map[string]devices.Device {
	inv := inventoryMap(testInventory(t))
	pf := inv[pfDevice]
	pf.Share = &devices.Share{Interfaces: 8}
	pf.Netdev.MTU = 9000
	inv[pfDevice] = pf
	return inv
}

// sharedClaim is a claim of the shared device with the config body, of a
// class that allows its claims every VLAN.
func sharedClaim(name string, body string) *resourceapi.ResourceClaim {
	c := testClaim(name, []alloc{{Request: "fast", Device: pfDevice}}, fromClass(config(`"sharedParent": {"vlanIDs": ["1-4094"]}`)), fromClaim(config(body)))
	c.Status.Allocation.Devices.Results[0].ShareID = new(types.UID("share-" + name))
	return c
}

func planSharedClaim(t *testing.T, claim *resourceapi.ResourceClaim) (*claims.Claim, error) {
	t.Helper()
	return plan(claim, sharedInventory(t), testNode, planPaths{claimDir: "/state/claims/" + string(claim.UID), cdiSpec: "/cdi/spec.json", pools: testPools})
}

func TestPlanShared(t *testing.T) {
	c, err := planSharedClaim(t, sharedClaim("a", `"mode": "macvlan", "macvlan": {"mode": "vepa"}, "interface": {"name": "fast0", "mtu": 9000}, "ipam": {"pool": "fast"}`))
	if err != nil {
		t.Fatal(err)
	}
	d := c.Devices[0]
	if d.Shared == nil || *d.Shared != (claims.SharedInterface{Parent: "ens1f0", Kind: "macvlan", Mode: "vepa", ShareID: "share-a"}) {
		t.Errorf("shared = %+v", d.Shared)
	}
	if d.Host != nil || d.PCIAddress != "" || d.DeviceInfoFile != "" || d.VF != nil || d.Pod == nil || d.Pod.Name != "fast0" || d.Pod.MTU != 9000 {
		t.Errorf("device = %+v, pod %+v", d, d.Pod)
	}
	if d.IPAM == nil || d.IPAM.Pool != "fast" || d.IPAM.Address != "" {
		t.Errorf("ipam = %+v (the address comes at admission)", d.IPAM)
	}
	bwClaim := sharedClaim("bw", `"mode": "macvlan"`)
	bwClaim.Status.Allocation.Devices.Results[0].ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
		CapacityInterfaces: resource.MustParse("1"), CapacityBandwidth: resource.MustParse("100M")}
	if bw, err := planSharedClaim(t, bwClaim); err != nil || bw.Devices[0].Shared.MaxTxRate != 100_000_000 {
		t.Errorf("bandwidth share = %+v, %v", bw, err)
	}
	vClaim := sharedClaim("v", `"mode": "vlan", "vlan": {"id": 42}`)
	vClaim.Status.Allocation.Devices.Config = append(testClaim("", nil, fromClass(config(`"sharedParent": {"vlanIDs": ["40-49"]}`))).Status.Allocation.Devices.Config,
		vClaim.Status.Allocation.Devices.Config...)
	v, err := planSharedClaim(t, vClaim)
	if err != nil || *v.Devices[0].Shared != (claims.SharedInterface{Parent: "ens1f0", Kind: "vlan", VLANID: 42, VLANProto: "802.1q", ShareID: "share-v"}) {
		t.Errorf("vlan = %+v, %v", v, err)
	}

	for name, tc := range map[string]struct {
		claim *resourceapi.ResourceClaim
		want  string
	}{
		"moved whole": {sharedClaim("b", `"mode": "netdev"`),
			`claim default/b, request "fast", device pci-0000-3b-00-0: mode: Invalid value: "netdev": device pci-0000-3b-00-0 is shared with other claims and never handed over whole`},
		"not shared": {testClaim("c", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"mode": "macvlan"`))),
			`claim default/c, request "nic", device pci-0000-3b-01-0: mode: Invalid value: "macvlan": device pci-0000-3b-01-0 is not shared`},
		"MTU above the parent's": {sharedClaim("d", `"mode": "ipvlan", "interface": {"mtu": 9001}`),
			`claim default/d, request "fast", device pci-0000-3b-00-0: interface.mtu: Invalid value: 9001: must not exceed the MTU 9000`},
		"unknown pool": {sharedClaim("e", `"mode": "macvlan", "ipam": {"pool": "slow"}`),
			`claim default/e, request "fast", device pci-0000-3b-00-0: ipam.pool: Not found: "slow"`},
		"VF settings": {sharedClaim("f", `"mode": "macvlan", "vf": {"trust": true}`),
			`claim default/f, request "fast", device pci-0000-3b-00-0: vf: Forbidden`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := planSharedClaim(t, tc.claim)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
		})
	}
}

// admitShared plans and admits a claim asking pool for an address.
func admitShared(t *testing.T, s *claims.Store, name, pool string) (claims.Claim, error) {
	t.Helper()
	c, err := planSharedClaim(t, sharedClaim(name, `"mode": "macvlan", "ipam": {"pool": "`+pool+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AdmitWith(*c, testPools.admitter(c, nil)); err != nil {
		return claims.Claim{}, err
	}
	got, _ := s.Get(c.Key())
	return got, nil
}

// Addresses come lowest first, past the gateway and the exclusions, with
// the pool's routes through its gateway; a full pool refuses naming claim,
// request, device and field; an address is free again when its claim is
// forgotten, and the leases outlive the process (the store reopened).
func TestIPAM(t *testing.T) {
	s := testStore(t)
	var got []string
	for i := range 4 {
		c, err := admitShared(t, s, fmt.Sprintf("c%d", i), "fast")
		if err != nil {
			t.Fatal(err)
		}
		d := c.Devices[0]
		got = append(got, d.IPAM.Address)
		if strings.Join(d.Pod.Addresses, ",") != d.IPAM.Address || len(d.Pod.Routes) != 1 || d.Pod.Routes[0] != (claims.Route{Destination: "10.57.0.0/16", Gateway: "10.56.0.1"}) {
			t.Errorf("pod interface = %+v", d.Pod)
		}
	}
	if strings.Join(got, " ") != "10.56.0.2/29 10.56.0.4/29 10.56.0.5/29 10.56.0.6/29" {
		t.Errorf("addresses = %v", got)
	}
	_, err := admitShared(t, s, "full", "fast")
	var ce *claimspec.ClaimError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `claim default/full, request "fast", device pci-0000-3b-00-0: ipam.pool: Invalid value: "fast": the pool has no free address`) {
		t.Errorf("full pool: %v", err)
	}
	if _, ok := s.Get(claims.Key{Driver: claims.DriverFastpath, UID: "uid-full"}); ok {
		t.Error("a claim the pool refused was admitted")
	}
	if err := s.Delete(claims.Key{Driver: claims.DriverFastpath, UID: "uid-c1"}); err != nil {
		t.Fatal(err)
	}
	reopened, err := claims.Open(s.Path(), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := admitShared(t, reopened, "again", "fast")
	if err != nil || c.Devices[0].IPAM.Address != "10.56.0.4/29" {
		t.Errorf("after a release and a restart: %+v, %v", c.Devices[0].IPAM, err)
	}
	v6, err := admitShared(t, reopened, "six", "v6")
	if err != nil || v6.Devices[0].IPAM.Address != "fd00:56::10/64" {
		t.Errorf("v6: %+v, %v", v6.Devices[0].IPAM, err)
	}
}

// Claims admitted at once never get the same address.
func TestIPAMConcurrent(t *testing.T) {
	s := testStore(t)
	pools := IPPools{"p": {Name: "p", Subnet: "10.60.0.0/24"}}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Go(func() {
			c := claims.Claim{Driver: claims.DriverFastpath, UID: types.UID(fmt.Sprintf("u%d", i)), Namespace: "ns", Name: fmt.Sprintf("c%d", i),
				Pod: claims.Pod{UID: types.UID(fmt.Sprintf("p%d", i))}, Devices: []claims.Device{{Request: "r", Pool: testNode, Device: pfDevice,
					Shared: &claims.SharedInterface{Parent: "ens1f0", Kind: "macvlan", ShareID: fmt.Sprint(i)}, Pod: &claims.PodInterface{Name: "net1"},
					IPAM: &claims.IPAMLease{Pool: "p"}}}}
			errs <- s.AdmitWith(c, pools.admitter(&c, nil))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]string{}
	for _, c := range s.Claims() {
		a := c.Devices[0].IPAM.Address
		if other, dup := seen[a]; dup {
			t.Errorf("%s given to %s and %s", a, other, c.Name)
		}
		seen[a] = c.Name
	}
	if len(seen) != 64 {
		t.Errorf("%d addresses for 64 claims", len(seen))
	}
}

// admitConfig plans a claim on the shared device with the config body
// and admits it as Prepare does.
func admitConfig(t *testing.T, s *claims.Store, name, body string) (claims.Claim, error) {
	t.Helper()
	c, err := planSharedClaim(t, sharedClaim(name, `"mode": "macvlan", `+body))
	if err != nil {
		return claims.Claim{}, err
	}
	if err := s.AdmitWith(*c, testPools.admitter(c, nil)); err != nil {
		return claims.Claim{}, err
	}
	got, _ := s.Get(c.Key())
	return got, nil
}

// A static address of a pool's subnet is refused when another claim
// holds it (naming the field, the pool and the holder) or when it is the
// pool's gateway, or its subnet's network or broadcast address; else the
// claim holds it as a lease: the pool gives it to no one while the claim
// is prepared, also after a restart (the store reopened), and gives it
// again once the claim is forgotten.
func TestStaticAddressInPool(t *testing.T) {
	s := testStore(t)
	leased, err := admitShared(t, s, "leased", "fast")
	if err != nil || leaseOf(leased) != "10.56.0.2/29" {
		t.Fatalf("first lease: %+v, %v", leased, err)
	}
	for _, tc := range []struct{ claim, address, want string }{
		{"taken", "10.56.0.2/29", `claim default/taken, request "fast", device pci-0000-3b-00-0: interface.addresses[1]: Invalid value: "10.56.0.2/29": ` +
			`10.56.0.2 is of the node's IP pool fast (10.56.0.0/29) and held by claim default/leased`},
		{"gateway", "10.56.0.1/24", `claim default/gateway, request "fast", device pci-0000-3b-00-0: interface.addresses[1]: Invalid value: "10.56.0.1/24": ` +
			`10.56.0.1 is the gateway of the node's IP pool fast (10.56.0.0/29)`},
		{"network", "10.56.0.0/29", `interface.addresses[1]: Invalid value: "10.56.0.0/29": 10.56.0.0 is the network address of the node's IP pool fast`},
		{"broadcast", "10.56.0.7/29", `interface.addresses[1]: Invalid value: "10.56.0.7/29": 10.56.0.7 is the broadcast address of the node's IP pool fast`},
	} {
		t.Run(tc.claim, func(t *testing.T) {
			_, err := admitConfig(t, s, tc.claim, `"interface": {"addresses": ["10.99.0.1/24", "`+tc.address+`"]}`)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
			if _, ok := s.Get(claims.Key{Driver: claims.DriverFastpath, UID: types.UID("uid-" + tc.claim)}); ok {
				t.Error("a refused claim was admitted")
			}
		})
	}

	// Held: the next lease skips it (10.56.0.3 is excluded).
	if _, err := admitConfig(t, s, "static", `"interface": {"addresses": ["10.56.0.4/29"]}`); err != nil {
		t.Fatal(err)
	}
	if c, err := admitShared(t, s, "next", "fast"); err != nil || leaseOf(c) != "10.56.0.5/29" {
		t.Errorf("lease after the static address: %q, %v; want 10.56.0.5/29", leaseOf(c), err)
	}
	// An address of no pool is not the pools' concern (on a shared
	// parent, it is one interface's at a time:
	// TestStaticAddressOnSharedParent).
	if _, err := admitConfig(t, s, "outside", `"interface": {"addresses": ["10.99.0.1/24"]}`); err != nil {
		t.Errorf("outside: %v", err)
	}

	reopened, err := claims.Open(s.Path(), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admitConfig(t, reopened, "taken-again", `"interface": {"addresses": ["10.56.0.4/29"]}`); err == nil ||
		!strings.Contains(err.Error(), "held by claim default/static") {
		t.Errorf("the static address of a claim, after a restart: %v; want held by claim default/static", err)
	}
	if c, err := admitShared(t, reopened, "after-restart", "fast"); err != nil || leaseOf(c) != "10.56.0.6/29" {
		t.Errorf("lease after a restart: %q, %v; want 10.56.0.6/29 (10.56.0.4 still held)", leaseOf(c), err)
	}
	if err := reopened.Delete(claims.Key{Driver: claims.DriverFastpath, UID: "uid-static"}); err != nil {
		t.Fatal(err)
	}
	if c, err := admitShared(t, reopened, "freed", "fast"); err != nil || leaseOf(c) != "10.56.0.4/29" {
		t.Errorf("lease once the claim is forgotten: %q, %v; want 10.56.0.4/29", leaseOf(c), err)
	}
}

// leaseOf is the address a claim's first device leased from a pool, "" for
// none.
func leaseOf(c claims.Claim) string {
	if len(c.Devices) == 0 || c.Devices[0].IPAM == nil {
		return ""
	}
	return c.Devices[0].IPAM.Address
}

// TestPrepareSharedParent: on a shared device, Prepare refuses what takes
// the device from the other claims sharing it unless the claim's
// DeviceClass allows it (sharedParent): with the chart's shared class, a
// passthru macvlan, the RDMA device's management datagram devices, another
// mode, and a claim's own sharedParent; with an operator's class, a VLAN
// or protocol outside it. Each error names the claim, request, device,
// field and class, and a refused claim leaves nothing; what a class allows
// is prepared.
func TestPrepareSharedParent(t *testing.T) {
	var chart string
	for _, c := range deployDeviceClasses(t) {
		if c.Name == "shared.fastpath.dev" {
			chart = string(c.Spec.Config[0].Opaque.Parameters.Raw)
		}
	}
	if chart == "" {
		t.Fatal("deploy/deviceclasses.yaml has no shared.fastpath.dev")
	}
	vlans := config(`"mode": "vlan", "sharedParent": {"vlanIDs": ["100-199"]}`)
	whole := config(`"mode": "macvlan", "sharedParent": {"macvlanModes": ["passthru"], "rdmaUMAD": true}`)
	const at = `claim default/%s, request "fast", device ` + pfDevice + `: config[1][FromClaim].parameters.`
	for _, tc := range []struct {
		name, class, classConfig, claim string
		want                            string // the error after at; "" for none
	}{
		{name: "bridge", class: "shared.fastpath.dev", classConfig: chart, claim: `"macvlan": {"mode": "bridge"}, "interface": {"name": "fast0"}`},
		{name: "passthru", class: "shared.fastpath.dev", classConfig: chart, claim: `"macvlan": {"mode": "passthru"}`,
			want: `macvlan.mode: Forbidden: macvlan mode passthru is not among those DeviceClass shared.fastpath.dev allows on its shared devices (bridge, private, vepa): ` +
				`a passthru macvlan takes the device from every claim sharing it`},
		{name: "umad", class: "shared.fastpath.dev", classConfig: chart, claim: `"rdma": {"umad": true}`,
			want: `rdma.umad: Forbidden: DeviceClass shared.fastpath.dev does not allow the management datagram devices (umadN) of its shared devices' RDMA devices`},
		{name: "ipvlan", class: "shared.fastpath.dev", classConfig: chart, claim: `"mode": "ipvlan"`,
			want: `mode: Forbidden: DeviceClass shared.fastpath.dev pins mode to "macvlan"`},
		{name: "own", class: "shared.fastpath.dev", classConfig: chart, claim: `"sharedParent": {"macvlanModes": ["passthru"]}`,
			want: `sharedParent: Forbidden: only a DeviceClass's config says what its claims may do to a shared device`},
		{name: "vlan-42", class: "vlans.example.com", classConfig: vlans, claim: `"vlan": {"id": 42}`,
			want: `vlan.id: Forbidden: VLAN 42 is not among the VLAN IDs DeviceClass vlans.example.com allows on its shared devices (100-199)`},
		{name: "vlan-150", class: "vlans.example.com", classConfig: vlans, claim: `"vlan": {"id": 150}`},
		{name: "qinq", class: "vlans.example.com", classConfig: vlans, claim: `"vlan": {"id": 150, "protocol": "802.1ad"}`,
			want: `vlan.protocol: Forbidden: VLAN protocol 802.1ad is not among those DeviceClass vlans.example.com allows on its shared devices (802.1q)`},
		{name: "whole", class: "whole.example.com", classConfig: whole, claim: `"macvlan": {"mode": "passthru"}, "rdma": {"umad": true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim := testClaim(tc.name, []alloc{{Request: "fast", Device: pfDevice}}, fromClass(tc.classConfig), fromClaim(config(tc.claim)))
			claim.Spec.Devices.Requests[0].Exactly.DeviceClassName = tc.class
			claim.Status.Allocation.Devices.Results[0].ShareID = new(types.UID("share-" + tc.name))
			d, k, ctx := startTestDriverWith(t, &fakePF{}, func(o *Options) { o.RDMA = fakeRDMA{mode: "shared", umad: "umad0"} }, &fakeObject{claim})
			d.UseInventory(rdmaInventory(t))
			e := prepare(t, ctx, k, claim)
			if tc.want == "" {
				if e != "" {
					t.Fatalf("prepare: %s", e)
				}
				unprepare(t, ctx, k, claim)
			} else if want := fmt.Sprintf(at, tc.name) + tc.want; !strings.Contains(e, want) {
				t.Errorf("error %q\nwant %q", e, want)
			}
			assertNothingLeft(t, d)
		})
	}
}

// newRecord is a claim's record, as another driver or the runtime's hooks
// admit it, holding what the store refuses twice (its pod) alone.
func newRecord(driver, namespace, name string) claims.Claim {
	return claims.Claim{Driver: driver, UID: types.UID("uid-" + namespace + "-" + name), Namespace: namespace, Name: name,
		Pod: claims.Pod{UID: types.UID("pod-" + namespace + "-" + name), Name: "pod-" + name}, Prepared: true}
}

// subInterface is a record of a fastpath.dev claim whose sub-interface on
// parent has the addresses.
func subInterface(namespace, name, parent string, addresses ...string) claims.Claim {
	c := newRecord(claims.DriverFastpath, namespace, name)
	c.Devices = []claims.Device{{Request: "r", Pool: testNode, Device: "dev-" + name, Mode: "macvlan",
		Shared: &claims.SharedInterface{Parent: parent, Kind: "macvlan"}, Pod: &claims.PodInterface{Name: "net1", Addresses: addresses}}}
	return c
}

// cniNetwork is a record of driver (a CNI claim's, or a pod's NPWG one)
// with one network of the CNI configuration list conflist.
func cniNetwork(driver, namespace, name, network, conflist string, capabilityArgs map[string]any) claims.Claim {
	c := newRecord(driver, namespace, name)
	c.Networks = []claims.Network{{Request: network, Pool: testNode, Device: "cni-" + name, IfName: "net2", Conflist: json.RawMessage(conflist), CapabilityArgs: capabilityArgs}}
	return c
}

// admitBody plans a claim on the shared device with the whole config body
// and admits it as Prepare does.
func admitBody(t *testing.T, s *claims.Store, name, body string) error {
	t.Helper()
	c, err := planSharedClaim(t, sharedClaim(name, body))
	if err != nil {
		t.Fatal(err)
	}
	return s.AdmitWith(*c, testPools.admitter(c, nil))
}

// A static address of a sub-interface is refused when another record
// holds it on the same shared parent, whatever the prefix lengths, IPv4
// or IPv6: another fastpath.dev claim's sub-interface, a CNI claim's
// network made on the parent (a static IPAM's address), a pod's network
// (a host-local range of one address, the element's "ips"). The error
// names claim, request, device, the field, the parent and the holder; a
// holder of another namespace only as such. On another parent, or
// another VLAN of the parent, the address is free.
func TestStaticAddressOnSharedParent(t *testing.T) {
	s := testStore(t)
	macvlan := func(ipam string) string {
		return `{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "macvlan", "master": "ens1f0", "ipam": ` + ipam + `}]}`
	}
	for _, c := range []claims.Claim{
		subInterface("default", "other-parent", "ens2f0", "10.9.0.7/24"),
		subInterface("tenant-b", "theirs", "ens1f0", "10.9.0.13/24"),
		cniNetwork(claims.DriverCNI, "default", "cni-a", "macvlan0", macvlan(`{"type": "static", "addresses": [{"address": "10.9.0.8/24", "gateway": "10.9.0.254"}]}`), nil),
		cniNetwork(claims.DriverCNI, "default", "cni-vlan", "vlan0",
			`{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "vlan", "master": "ens1f0", "vlanId": 42, "ipam": {"type": "static", "addresses": [{"address": "10.9.0.9/24"}]}}]}`, nil),
		cniNetwork(claims.DriverNPWG, "default", "pod-p", "default/net-a",
			macvlan(`{"type": "host-local", "ranges": [[{"subnet": "10.9.0.0/24", "rangeStart": "10.9.0.10", "rangeEnd": "10.9.0.10"}]]}`),
			map[string]any{"ips": []any{"10.9.0.11/24"}}),
		cniNetwork(claims.DriverNPWG, "tenant-b", "pod-q", "tenant-b/net-b", macvlan(`{"type": "static", "addresses": [{"address": "10.9.0.12/24"}]}`), nil),
	} {
		if err := s.Admit(c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admitConfig(t, s, "a", `"interface": {"addresses": ["10.9.0.5/24", "fd00:9::5/64"]}`); err != nil {
		t.Fatal(err)
	}
	const refused = `claim default/%s, request "fast", device pci-0000-3b-00-0: interface.addresses[0]: Invalid value: "%s": `
	for _, tc := range []struct {
		name, body, want string
		not              []string
	}{
		{"b", `"mode": "macvlan", "interface": {"addresses": ["10.9.0.5/32"]}`,
			fmt.Sprintf(refused, "b", "10.9.0.5/32") + `10.9.0.5 is already the address of claim default/a on parent ens1f0: an address on a shared parent is one interface's at a time; choose another address`, nil},
		{"b6", `"mode": "ipvlan", "interface": {"addresses": ["fd00:9::5/120"]}`,
			fmt.Sprintf(refused, "b6", "fd00:9::5/120") + `fd00:9::5 is already the address of claim default/a on parent ens1f0`, nil},
		{"cni", `"mode": "macvlan", "interface": {"addresses": ["10.9.0.8/24"]}`,
			fmt.Sprintf(refused, "cni", "10.9.0.8/24") + `10.9.0.8 is already the address of claim default/cni-a on parent ens1f0`, nil},
		{"npwg-range", `"mode": "macvlan", "interface": {"addresses": ["10.9.0.10/24"]}`,
			fmt.Sprintf(refused, "npwg-range", "10.9.0.10/24") + `10.9.0.10 is already the address of pod default/pod-p, network default/net-a on parent ens1f0`, nil},
		{"npwg-ips", `"mode": "macvlan", "interface": {"addresses": ["10.9.0.11/24"]}`,
			`10.9.0.11 is already the address of pod default/pod-p, network default/net-a on parent ens1f0`, nil},
		{"other-pod", `"mode": "macvlan", "interface": {"addresses": ["10.9.0.12/24"]}`,
			`10.9.0.12 is already the address of a pod of another namespace on parent ens1f0`, []string{"tenant-b", "pod-q", "net-b"}},
		{"other-claim", `"mode": "macvlan", "interface": {"addresses": ["10.9.0.13/24"]}`,
			`10.9.0.13 is already the address of a claim of another namespace on parent ens1f0`, []string{"tenant-b", "theirs"}},
		{"same-vlan", `"mode": "vlan", "vlan": {"id": 42}, "interface": {"addresses": ["10.9.0.9/24"]}`,
			fmt.Sprintf(refused, "same-vlan", "10.9.0.9/24") + `10.9.0.9 is already the address of claim default/cni-vlan on parent ens1f0, VLAN 42`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := admitBody(t, s, tc.name, tc.body)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
			for _, leak := range tc.not {
				if err != nil && strings.Contains(err.Error(), leak) {
					t.Errorf("error %q names %q, of another namespace", err, leak)
				}
			}
			if _, ok := s.Get(claims.Key{Driver: claims.DriverFastpath, UID: types.UID("uid-" + tc.name)}); ok {
				t.Error("a refused claim was admitted")
			}
		})
	}
	// Free: on another parent (10.9.0.7 is ens2f0's), untagged beside a
	// VLAN (10.9.0.9 is VLAN 42's), on another VLAN.
	for name, body := range map[string]string{
		"other-parent": `"mode": "macvlan", "interface": {"addresses": ["10.9.0.7/24"]}`,
		"untagged":     `"mode": "macvlan", "interface": {"addresses": ["10.9.0.9/24"]}`,
		"vlan-43":      `"mode": "vlan", "vlan": {"id": 43}, "interface": {"addresses": ["10.9.0.9/24"]}`,
	} {
		if err := admitBody(t, s, name, body); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A pool gives no address a record holds statically on a shared parent,
// of any driver: a CNI claim's static address of the pool's subnet is
// skipped.
func TestPoolSkipsSharedParentAddresses(t *testing.T) {
	s := testStore(t)
	if err := s.Admit(cniNetwork(claims.DriverCNI, "default", "cni-a", "macvlan0",
		`{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "macvlan", "master": "ens1f0", "ipam": {"type": "static", "addresses": [{"address": "10.56.0.2/29"}]}}]}`, nil)); err != nil {
		t.Fatal(err)
	}
	if c, err := admitShared(t, s, "leased", "fast"); err != nil || leaseOf(c) != "10.56.0.4/29" {
		t.Errorf("lease = %q, %v; want 10.56.0.4/29 (10.56.0.2 is the CNI claim's, 10.56.0.3 excluded)", leaseOf(c), err)
	}
}

// Two daemons of the node sharing the store (a rolling update), each
// admitting claims with one static address on one parent at once: one
// claim holds it, every other is refused. The check and the record are
// one write under the store's lock, so no kill between them can give the
// address twice.
func TestStaticAddressRollingUpdate(t *testing.T) {
	path := testStore(t).Path()
	var stores []*claims.Store
	for range 2 {
		s, err := claims.Open(path, claims.Legacy{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Share(); err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			c := subInterface("default", fmt.Sprintf("c%d", i), "ens1f0", "10.9.0.5/24")
			errs <- stores[i%2].AdmitWith(c, testPools.admitter(&c, nil))
		})
	}
	wg.Wait()
	close(errs)
	admitted := 0
	for err := range errs {
		switch {
		case err == nil:
			admitted++
		case !strings.Contains(err.Error(), "10.9.0.5 is already the address of claim default/c"):
			t.Errorf("refused with %v", err)
		}
	}
	if admitted != 1 {
		t.Errorf("%d claims admitted with 10.9.0.5 on ens1f0, want 1", admitted)
	}
}

// At Prepare, a static address of a sub-interface that is an address of
// the parent itself, IPv4 or IPv6, or the gateway of a node pool, is
// refused naming claim, request, device, field and parent; the parent's
// addresses are read once per parent, and no pool gives them.
func TestSharedParentOwnAddresses(t *testing.T) {
	reads := map[string]int{}
	d := &Driver{opts: Options{HostAddresses: func(name string) ([]netip.Addr, error) {
		reads[name]++
		if name == "ens1f0" {
			return []netip.Addr{netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("fe80::1"), netip.MustParseAddr("10.56.0.4")}, nil
		}
		return nil, nil
	}}, pools: testPools}
	for _, tc := range []struct{ address, want string }{
		{"10.9.0.1/24", `claim default/c, request "r", device dev-c: interface.addresses[0]: Invalid value: "10.9.0.1/24": 10.9.0.1 is an address of the parent ens1f0 itself, the node's: choose another address`},
		{"fe80::1/64", `fe80::1 is an address of the parent ens1f0 itself`},
		// Pools' gateways, of any subnet: Prepare's plan refuses those of
		// a pool's subnet before (TestStaticAddressInPool).
		{"10.56.0.1/16", `interface.addresses[0]: Invalid value: "10.56.0.1/16": 10.56.0.1 is the gateway of the node's IP pool fast (10.56.0.0/29): choose another address`},
	} {
		c := subInterface("default", "c", "ens1f0", tc.address)
		if _, err := d.checkHost(&c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error = %v, want %q", tc.address, err, tc.want)
		}
	}
	// A static address and one of a pool on the parent: the pool gives
	// its lowest free address; then, past the exclusion, not the
	// parent's.
	c := subInterface("default", "c", "ens1f0", "10.9.0.2/24")
	c.Devices = append(c.Devices, c.Devices[0])
	c.Devices[1].Request, c.Devices[1].Device, c.Devices[1].Pod = "r2", "dev-c2", &claims.PodInterface{Name: "net2"}
	c.Devices[1].IPAM = &claims.IPAMLease{Pool: "fast"}
	s := testStore(t)
	for i, want := range []string{"10.56.0.2/29", "10.56.0.5/29"} {
		if i > 0 {
			c = subInterface("default", "next", "ens1f0")
			c.Devices[0].IPAM = &claims.IPAMLease{Pool: "fast"}
		}
		avoid, err := d.checkHost(&c)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AdmitWith(c, d.pools.admitter(&c, avoid)); err != nil {
			t.Fatal(err)
		}
		got, _ := s.Get(c.Key())
		if lease := got.Devices[len(got.Devices)-1].IPAM.Address; lease != want {
			t.Errorf("lease %d = %s, want %s (10.56.0.3 is excluded, 10.56.0.4 the parent's)", i, lease, want)
		}
	}
	if reads["ens1f0"] != 5 {
		t.Errorf("ens1f0 read %d times, want 5: once per Prepare", reads["ens1f0"])
	}
}

// Through the kubelet: a claim whose static address another claim's
// sub-interface on the shared parent has, or the parent itself has, is
// refused at Prepare naming claim, request, device, field, parent and
// holder, and leaves nothing; the claim holding it keeps it.
func TestPrepareStaticAddressOnSharedParent(t *testing.T) {
	a := sharedClaim("a", `"mode": "macvlan", "interface": {"name": "fast0", "addresses": ["10.9.0.5/24"]}`)
	b := sharedClaim("b", `"mode": "ipvlan", "interface": {"name": "fast0", "addresses": ["10.9.0.5/24"]}`)
	c := sharedClaim("c", `"mode": "macvlan", "interface": {"name": "fast0", "addresses": ["10.9.0.1/24"]}`)
	d, k, ctx := startTestDriverWith(t, &fakePF{}, func(o *Options) {
		o.HostAddresses = func(name string) ([]netip.Addr, error) {
			if name != "ens1f0" {
				return nil, fmt.Errorf("no parent %s", name)
			}
			return []netip.Addr{netip.MustParseAddr("10.9.0.1")}, nil
		}
	}, &fakeObject{a}, &fakeObject{b}, &fakeObject{c})
	inv := testInventory(t)
	for i := range inv.Devices {
		if inv.Devices[i].Name == pfDevice {
			inv.Devices[i].Share = &devices.Share{Interfaces: 8}
		}
	}
	d.UseInventory(inv)
	if e := prepare(t, ctx, k, a); e != "" {
		t.Fatal(e)
	}
	for claim, want := range map[*resourceapi.ResourceClaim]string{
		b: `claim default/b, request "fast", device pci-0000-3b-00-0: interface.addresses[0]: Invalid value: "10.9.0.5/24": 10.9.0.5 is already the address of claim default/a on parent ens1f0`,
		c: `claim default/c, request "fast", device pci-0000-3b-00-0: interface.addresses[0]: Invalid value: "10.9.0.1/24": 10.9.0.1 is an address of the parent ens1f0 itself`,
	} {
		if e := prepare(t, ctx, k, claim); !strings.Contains(e, want) {
			t.Errorf("prepare %s: %q, want %q", claim.Name, e, want)
		}
		if _, ok := d.store.Get(claims.Key{Driver: claims.DriverFastpath, UID: claim.UID}); ok {
			t.Errorf("refused claim %s recorded", claim.Name)
		}
	}
	if got, ok := d.store.Get(claims.Key{Driver: claims.DriverFastpath, UID: a.UID}); !ok || !got.Prepared {
		t.Error("the claim holding the address lost it")
	}
}
