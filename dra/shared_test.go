package dra

import (
	"errors"
	"fmt"
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

func sharedClaim(name string, body string) *resourceapi.ResourceClaim {
	c := testClaim(name, []alloc{{Request: "fast", Device: pfDevice}}, fromClaim(config(body)))
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
	if err := s.AdmitWith(*c, testPools.assign); err != nil {
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
			errs <- s.AdmitWith(c, pools.assign)
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
	if err := s.AdmitWith(*c, testPools.assign); err != nil {
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
	// An address of no pool is not the pools' concern.
	for _, name := range []string{"outside-1", "outside-2"} {
		if _, err := admitConfig(t, s, name, `"interface": {"addresses": ["10.99.0.1/24"]}`); err != nil {
			t.Errorf("%s: %v", name, err)
		}
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
