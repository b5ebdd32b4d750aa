package dra

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// fakeRDMA is a node's RDMA subsystem in a mode, whose devices have the
// files given (or none, with umad).
type fakeRDMA struct {
	mode string
	link string
}

func (f fakeRDMA) NetnsMode() (string, error) { return f.mode, nil }

func (f fakeRDMA) Device(name string, umad bool) (dataplane.RDMADevice, error) {
	if umad {
		return dataplane.RDMADevice{}, errors.New("RDMA device " + name + " has no management datagram device (umad)")
	}
	return dataplane.RDMADevice{Link: f.link, Files: []dataplane.CharDevice{
		{Path: "/dev/infiniband/uverbs2", HostPath: "/dev/infiniband/uverbs2"},
		{Path: "/dev/infiniband/rdma_cm", HostPath: "/dev/infiniband/rdma_cm"},
	}}, nil
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
			d.UseInventory(inv)
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
			spec, err := cdi.ReadSpec(cdiSpecPath(d.opts.CDIDir, claim.UID), 0)
			if err != nil {
				t.Fatal(err)
			}
			dev := spec.GetDevice(cdiDeviceName(claim.UID, "nic"))
			var nodes []string
			for _, n := range dev.ContainerEdits.DeviceNodes {
				nodes = append(nodes, n.Path+" "+n.Permissions)
			}
			if want := []string{"/dev/infiniband/uverbs2 rw", "/dev/infiniband/rdma_cm rw"}; !slices.Equal(nodes, want) {
				t.Errorf("CDI device nodes %v, want %v", nodes, want)
			}
			if !slices.Contains(dev.ContainerEdits.Env, "FASTPATH_RDMA_DEVICE_NIC="+r.Device) {
				t.Errorf("CDI env %v names no RDMA device", dev.ContainerEdits.Env)
			}
			unprepare(t, ctx, k, claim)
			assertNothingLeft(t, d)
		})
	}
}
