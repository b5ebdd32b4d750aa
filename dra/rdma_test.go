package dra

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// fakeRDMA is a node's RDMA subsystem in a mode, whose devices have a
// verbs device (uverbs2 unless verbs says) and rdma_cm, and a management
// datagram device only when umad names it.
type fakeRDMA struct {
	mode, link, verbs, umad string
}

func (f fakeRDMA) NetnsMode() (string, error) { return f.mode, nil }

func (f fakeRDMA) Device(name string, umad bool) (dataplane.RDMADevice, error) {
	if umad && f.umad == "" {
		return dataplane.RDMADevice{}, errors.New("RDMA device " + name + " has no management datagram device (umad)")
	}
	verbs := "/dev/infiniband/" + cmp.Or(f.verbs, "uverbs2")
	dev := dataplane.RDMADevice{Link: f.link, Files: []dataplane.CharDevice{
		{Path: verbs, HostPath: verbs},
		{Path: "/dev/infiniband/rdma_cm", HostPath: "/dev/infiniband/rdma_cm"},
	}}
	if umad {
		dev.Files = append(dev.Files, dataplane.CharDevice{Path: "/dev/infiniband/" + f.umad, HostPath: "/dev/infiniband/" + f.umad})
	}
	return dev, nil
}

// rdmaInventory is the E810 fixture's, with an RDMA device on a VF
// (mlx5_2) and on the PF, shared (mlx5_0).
func rdmaInventory(t *testing.T) devices.Inventory {
	t.Helper()
	inv := testInventory(t)
	for i := range inv.Devices {
		switch inv.Devices[i].Name {
		case vfNetdev:
			inv.Devices[i].Netdev.RDMADevice = "mlx5_2"
		case pfDevice:
			inv.Devices[i].Netdev.RDMADevice = "mlx5_0"
			inv.Devices[i].Share = &devices.Share{Interfaces: 8}
		}
	}
	return inv
}

// cdiNodes are the device nodes of a claim's request in its CDI spec.
func cdiNodes(t *testing.T, d *testDriver, claim *resourceapi.ResourceClaim, request string) []string {
	t.Helper()
	spec, err := cdi.ReadSpec(cdiSpecPath(d.opts.CDIDir, claim.UID), 0)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, n := range spec.GetDevice(cdiDeviceName(claim.UID, request)).ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.Path+" "+n.Permissions)
	}
	return nodes
}

// TestPrepareRDMA: a claim with rdma records the device's RDMA device
// with the node's mode and its character devices, which its CDI spec
// gives; a sub-interface in exclusive mode, a device without one, and a
// device without the files asked for are refused naming claim, request,
// device and field.
func TestPrepareRDMA(t *testing.T) {
	for name, c := range map[string]struct {
		mode, config, device string
		wantErr              []string
		exclusive            bool
	}{
		"netdev, shared":         {mode: "shared", device: vfNetdev, config: `"interface": {"name": "net1"}, "rdma": {}`},
		"netdev, exclusive":      {mode: "exclusive", device: vfNetdev, config: `"interface": {"name": "net1"}, "rdma": {}`, exclusive: true},
		"macvlan, shared":        {mode: "shared", device: pfDevice, config: `"mode": "macvlan", "interface": {"name": "net1"}, "rdma": {}`},
		"macvlan, exclusive":     {mode: "exclusive", device: pfDevice, config: `"mode": "macvlan", "interface": {"name": "net1"}, "rdma": {}`, wantErr: []string{"rdma", "exclusive network namespace mode", "mlx5_0"}},
		"no RDMA device":         {mode: "shared", device: vfNetdev2, config: `"rdma": {}`, wantErr: []string{"rdma", "has no RDMA device"}},
		"umad the device lacks":  {mode: "shared", device: vfNetdev, config: `"rdma": {"umad": true}`, wantErr: []string{"management datagram"}},
		"vfio":                   {mode: "shared", device: vfVFIO, config: `"mode": "vfio", "rdma": {}`, wantErr: []string{"rdma", "only for modes netdev, macvlan, ipvlan, vlan"}},
		"afxdp":                  {mode: "shared", device: vfNetdev, config: `"mode": "afxdp", "rdma": {}`, wantErr: []string{"rdma", "only for modes"}},
		"upper case is no field": {mode: "shared", device: vfNetdev, config: `"RDMA": {}`, wantErr: []string{"RDMA"}},
	} {
		t.Run(name, func(t *testing.T) {
			claim := testClaim("rd", []alloc{{Request: "nic", Device: c.device}}, fromClaim(config(c.config)))
			d, k, ctx := startTestDriverWith(t, &fakePF{}, func(o *Options) { o.RDMA = fakeRDMA{mode: c.mode, link: ""} }, &fakeObject{claim})
			d.UseInventory(rdmaInventory(t))
			e := prepare(t, ctx, k, claim)
			if len(c.wantErr) > 0 {
				for _, want := range append([]string{"default/rd", `"nic"`, c.device}, c.wantErr...) {
					if !strings.Contains(e, want) {
						t.Errorf("error %q does not say %q", e, want)
					}
				}
				if _, ok := d.opts.Store.Get(claims.Key{Driver: claims.DriverFastpath, UID: claim.UID}); ok {
					t.Error("the refused claim is recorded")
				}
				return
			}
			if e != "" {
				t.Fatalf("prepare: %s", e)
			}
			rec, _ := d.opts.Store.Get(claims.Key{Driver: claims.DriverFastpath, UID: claim.UID})
			r := rec.Devices[0].RDMA
			if r == nil || r.Exclusive != c.exclusive || len(r.DeviceNodes) != 2 {
				t.Fatalf("recorded RDMA %+v, want exclusive %v with two files", r, c.exclusive)
			}
			if nodes, want := cdiNodes(t, d, claim, "nic"), []string{"/dev/infiniband/uverbs2 rw", "/dev/infiniband/rdma_cm rw"}; !slices.Equal(nodes, want) {
				t.Errorf("CDI device nodes %v, want %v", nodes, want)
			}
			spec, err := cdi.ReadSpec(cdiSpecPath(d.opts.CDIDir, claim.UID), 0)
			if err != nil {
				t.Fatal(err)
			}
			if dev := spec.GetDevice(cdiDeviceName(claim.UID, "nic")); !slices.Contains(dev.ContainerEdits.Env, "FASTPATH_RDMA_DEVICE_NIC="+r.Device) {
				t.Errorf("CDI env %v names no RDMA device", dev.ContainerEdits.Env)
			}
			unprepare(t, ctx, k, claim)
			assertNothingLeft(t, d)
		})
	}
}

// TestPrepareRDMAAnotherBoot: a claim prepared in an earlier boot is
// prepared again with its RDMA device's files as this boot numbers them.
func TestPrepareRDMAAnotherBoot(t *testing.T) {
	claim := testClaim("rd", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"interface": {"name": "net1"}, "rdma": {}`)))
	f := &fakeRDMA{mode: "shared"}
	d, k, ctx := startTestDriverWith(t, &fakePF{}, func(o *Options) { o.RDMA = f }, &fakeObject{claim})
	d.UseInventory(rdmaInventory(t))
	if e := prepare(t, ctx, k, claim); e != "" {
		t.Fatalf("prepare: %s", e)
	}
	// The node reboots: the record is of the boot before, and the kernel
	// numbers the verbs device otherwise.
	key := claims.Key{Driver: claims.DriverFastpath, UID: claim.UID}
	rec, _ := d.opts.Store.Get(key)
	rec.BootID = "the-boot-before"
	if err := d.opts.Store.Put(rec); err != nil {
		t.Fatal(err)
	}
	f.verbs = "uverbs5"
	if e := prepare(t, ctx, k, claim); e != "" {
		t.Fatalf("prepare in the next boot: %s", e)
	}
	if nodes, want := cdiNodes(t, d, claim, "nic"), []string{"/dev/infiniband/uverbs5 rw", "/dev/infiniband/rdma_cm rw"}; !slices.Equal(nodes, want) {
		t.Errorf("CDI device nodes %v, want %v", nodes, want)
	}
	if rec, _ := d.opts.Store.Get(key); rec.Devices[0].RDMA.DeviceNodes[0].Path != "/dev/infiniband/uverbs5" {
		t.Errorf("the record keeps %+v", rec.Devices[0].RDMA.DeviceNodes)
	}
	unprepare(t, ctx, k, claim)
	assertNothingLeft(t, d)
}
