package devices

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/devices/filter"
	"github.com/fastpath-dra/fastpath/devices/memif"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

func discover(t testing.TB, opts Options) Inventory {
	t.Helper()
	d, err := New(withCEL(opts))
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	inv, err := d.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func fixture(name string) string { return filepath.Join("testdata", "sysfs", name) }

// TestFixturesAreCurrent fails when the committed trees differ from what
// the fixture definitions write: run `go generate ./devices` after a change.
func TestFixturesAreCurrent(t *testing.T) {
	for name, tree := range sysfsfixture.Named() {
		dir := t.TempDir()
		if err := tree.Write(dir); err != nil {
			t.Fatal(err)
		}
		if diff := diffTrees(dir, fixture(name)); diff != "" {
			t.Errorf("testdata/sysfs/%s is stale (go generate ./devices): %s", name, diff)
		}
	}
}

func diffTrees(a, b string) string {
	list := func(root string) map[string]string {
		out := map[string]string{}
		_ = filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
			if err != nil {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			switch {
			case info.Mode()&os.ModeSymlink != 0:
				dest, _ := os.Readlink(p)
				out[rel] = "-> " + dest
			case info.Mode().IsRegular():
				data, _ := os.ReadFile(p)
				out[rel] = string(data)
			}
			return nil
		})
		return out
	}
	la, lb := list(a), list(b)
	for k, v := range la {
		if lb[k] != v {
			return "differs at " + k
		}
	}
	for k := range lb {
		if _, ok := la[k]; !ok {
			return "extra " + k
		}
	}
	return ""
}

func TestGolden(t *testing.T) {
	tests := []struct {
		golden, fixture, filter string
	}{
		{"e810", "e810", ""},
		{"x710", "x710", ""},
		{"cx5", "cx5", ""},
		{"plain", "plain", ""},
		{"plain-all", "plain", "true"},
		{"broken", "broken", ""},
		{"e810-vfs-only", "e810", `device.attributes["fastpath.dev"].kind == "sriov-vf"`},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			inv := discover(t, Options{SysfsRoot: fixture(tt.fixture), Filter: tt.filter})
			// Vendor and device names come from the host's pci.ids, whose
			// version is not the fixture's business.
			for _, d := range inv.Devices {
				if d.PCI != nil {
					d.PCI.VendorName, d.PCI.DeviceName = "", ""
				}
			}
			got, err := json.MarshalIndent(inv, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			// Warnings name paths below the fixture; keep them relative.
			got = bytes.ReplaceAll(got, []byte(fixture(tt.fixture)), []byte("$ROOT"))
			path := filepath.Join("testdata", "golden", tt.golden+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./devices -update)", err)
			}
			if string(bytes.TrimSpace(want)) != string(got) {
				t.Errorf("inventory differs from %s (go test ./devices -run TestGolden -update, then review the diff):\n%s", path, got)
			}
		})
	}
}

func TestE810Model(t *testing.T) {
	inv := discover(t, Options{SysfsRoot: fixture("e810")})
	byName := map[string]Device{}
	for _, d := range inv.Devices {
		byName[d.Name] = d
	}
	if len(inv.Devices) != 6 {
		t.Fatalf("got %d devices, want 2 PFs and 4 VFs: %+v", len(inv.Devices), inv.Devices)
	}
	vf := byName["pci-0000-3b-01-1"]
	if vf.Kind != KindSRIOVVF || vf.VF == nil || vf.VF.ID != 1 || vf.VF.PFPCIAddress != "0000:3b:00.0" || vf.VF.PFName != "ens1f0" {
		t.Errorf("VF 1 = %+v / %+v", vf, vf.VF)
	}
	if vf.PCI.Vendor != "8086" || vf.PCI.Device != "1889" || vf.PCI.Driver != "iavf" || vf.PCI.PCIeRoot != "pci0000:3a" {
		t.Errorf("VF 1 PCI = %+v", vf.PCI)
	}
	if vf.Netdev == nil || vf.Netdev.Name != "ens1f0v1" || vf.Netdev.MTU != 1500 || vf.Netdev.SpeedMbps != 100000 {
		t.Errorf("VF 1 netdev = %+v", vf.Netdev)
	}
	if !strings.Contains(vf.PCI.VendorName, "Intel") {
		t.Errorf("vendor name = %q, want Intel's from pci.ids", vf.PCI.VendorName)
	}
	if vf.Netdev.XDP.Supported != nil {
		t.Errorf("XDP below a fixture root must be unknown, got %v", *vf.Netdev.XDP.Supported)
	}
	vfio := byName["pci-0000-3b-01-2"]
	if vfio.PCI.Driver != "vfio-pci" || vfio.Netdev != nil || !vfio.PCI.VFIOCapable() {
		t.Errorf("vfio-bound VF = %+v, %+v", vfio.PCI, vfio.Netdev)
	}
	pf1 := byName["pci-0000-3b-00-1"]
	if pf1.PF == nil || pf1.PF.NumVFs != 0 || pf1.PF.TotalVFs != 128 || pf1.Kind != KindNIC {
		t.Errorf("PF with sriov_numvfs 0 = %+v", pf1.PF)
	}
	if pf1.Netdev.SpeedMbps != 0 || pf1.Netdev.OperState != "down" {
		t.Errorf("down PF netdev = %+v", pf1.Netdev)
	}
}

func TestAttributes(t *testing.T) {
	inv := discover(t, Options{SysfsRoot: fixture("e810")})
	var vf Device
	for _, d := range inv.Devices {
		if d.Name == "pci-0000-3b-01-0" {
			vf = d
		}
	}
	attrs := vf.Attributes()
	str := func(name resourceapi.QualifiedName) string {
		if a, ok := attrs[name]; ok && a.StringValue != nil {
			return *a.StringValue
		}
		return "<missing>"
	}
	num := func(name resourceapi.QualifiedName) int64 {
		if a, ok := attrs[name]; ok && a.IntValue != nil {
			return *a.IntValue
		}
		return -999
	}
	for name, want := range map[resourceapi.QualifiedName]string{
		"kind": "sriov-vf", "pciAddress": "0000:3b:01.0", "pciVendor": "8086", "pciDevice": "1889",
		"pciSubsystem": "8086:0002", "driver": "iavf", "ifName": "ens1f0v0", "pfName": "ens1f0",
		"pfPciAddress": "0000:3b:00.0", "mac": sysfsfixture.MAC(20),
		deviceattribute.StandardDeviceAttributePCIeRoot: "pci0000:3a",
		AttributePCIBusID:           "0000:3b:01.0",
		AttributeMultusDeviceID:     "0000:3b:01.0",
		AttributeMultusResourceName: "fastpath.dev/sriov-vf",
	} {
		if got := str(name); got != want {
			t.Errorf("attribute %s = %q, want %q", name, got, want)
		}
	}
	for name, want := range map[resourceapi.QualifiedName]int64{"vfID": 0, "numaNode": 0, "mtu": 1500, "iommuGroup": 41, "linkSpeedMbps": 100000,
		deviceattribute.StandardDeviceAttributeNUMANode: 0} {
		if got := num(name); got != want {
			t.Errorf("attribute %s = %d, want %d", name, got, want)
		}
	}
	if a := attrs["sriovVF"]; a.BoolValue == nil || !*a.BoolValue {
		t.Errorf("sriovVF = %+v", a)
	}
	if _, ok := attrs["xdp"]; ok {
		t.Error("xdp attribute published though unknown")
	}
	if _, ok := attrs["rdmaDevice"]; ok {
		t.Error("rdmaDevice published for a VF without an RDMA device")
	}
	// A CX5 without NUMA information and IOMMU publishes neither: no
	// NUMA node, under either name, and vfioCapable false.
	for _, d := range discover(t, Options{SysfsRoot: fixture("cx5")}).Devices {
		a := d.Attributes()
		for _, name := range []resourceapi.QualifiedName{"numaNode", deviceattribute.StandardDeviceAttributeNUMANode} {
			if _, ok := a[name]; ok {
				t.Errorf("%s: %s published for numa_node -1", d.Name, name)
			}
		}
		if v := a["vfioCapable"]; v.BoolValue == nil || *v.BoolValue {
			t.Errorf("%s: vfioCapable = %v without an IOMMU group", d.Name, v.BoolValue)
		}
	}
}

// TestRDMADevice: a netdev with an RDMA device on top publishes its name,
// found from either side the kernel links them: a hardware device's PCI
// function (the CX5's, one per function), a software one's parent file
// (rdma_rxe on the plain NIC). A filter can select on it.
func TestRDMADevice(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		want    map[string]string // device -> RDMA device
	}{
		{"cx5", map[string]string{"pci-0000-af-00-0": "mlx5_0", "pci-0000-af-01-0": "mlx5_1", "pci-0000-af-01-1": "mlx5_2"}},
		{"plain", map[string]string{"pci-0000-02-00-0": "rxe0"}},
		{"e810", map[string]string{}},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			got := map[string]string{}
			for _, d := range discover(t, Options{SysfsRoot: fixture(tc.fixture)}).Devices {
				if a := d.Attributes()["rdmaDevice"]; a.StringValue != nil {
					got[d.Name] = *a.StringValue
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("rdmaDevice attributes = %v, want %v", got, tc.want)
			}
		})
	}
	inv := discover(t, Options{SysfsRoot: fixture("cx5"), Filter: `device.attributes["fastpath.dev"].rdmaDevice == "mlx5_1"`})
	if len(inv.Devices) != 1 || inv.Devices[0].Name != "pci-0000-af-01-0" {
		t.Errorf("a filter on rdmaDevice admits %v, want only pci-0000-af-01-0", inv.Devices)
	}
}

// compileCEL compiles the operator's expressions, as fastpathd does.
func compileCEL(expr string) (Selector, error) { return filter.Compile(expr) }

// withCEL is opts with fastpathd's compiler.
func withCEL(opts Options) Options {
	opts.Compile = compileCEL
	return opts
}

func TestBadOptions(t *testing.T) {
	for name, opts := range map[string]Options{
		"missing root":   {SysfsRoot: "/no/such/root"},
		"root is a file": {SysfsRoot: "devices_test.go"},
		"no sys/bus/pci": {SysfsRoot: t.TempDir()},
		"invalid CEL":    {SysfsRoot: fixture("e810"), Filter: `device.attributes["fastpath.dev"].kind ==`},
		"non-bool CEL":   {SysfsRoot: fixture("e810"), Filter: `"sriov-vf"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(withCEL(opts))
			if !errors.Is(err, ErrBadOptions) {
				t.Errorf("New(%+v) = %v, want ErrBadOptions", opts, err)
			}
		})
	}
}

func TestFilterNeedsCompiler(t *testing.T) {
	for name, opts := range map[string]Options{
		"filter":        {SysfsRoot: fixture("e810"), Filter: "true"},
		"share":         {SysfsRoot: fixture("e810"), Share: "true"},
		"resource name": {SysfsRoot: fixture("e810"), ResourceNames: []ResourceName{{Name: "intel.com/sriov", Filter: "true"}}},
	} {
		if _, err := New(opts); !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "no CEL compiler") {
			t.Errorf("%s without a compiler: New = %v, want ErrBadOptions naming the missing compiler", name, err)
		}
	}
}

func TestFilterEvaluationError(t *testing.T) {
	// pfName exists only on VFs: the PFs fail evaluation and are left out
	// with a warning naming the device.
	inv := discover(t, Options{SysfsRoot: fixture("e810"), Filter: `device.attributes["fastpath.dev"].pfName == "ens1f0"`})
	if len(inv.Devices) != 4 {
		t.Errorf("got %d devices, want the 4 VFs of ens1f0", len(inv.Devices))
	}
	if len(inv.Warnings) != 2 || !strings.Contains(inv.Warnings[0], "pci-0000-3b-00-0") {
		t.Errorf("warnings = %q, want one per PF naming it", inv.Warnings)
	}
}

func TestDeviceNames(t *testing.T) {
	for in, want := range map[string]string{
		PCIDeviceName("0000:3B:02.1"): "pci-0000-3b-02-1",
		NetdevDeviceName("veth_A.1"):  "netdev-veth-a-1",
		NetdevDeviceName("__"):        "netdev-x",
		MemifDeviceName("fw0"):        "memif-fw0",
	} {
		if in != want {
			t.Errorf("got %q, want %q", in, want)
		}
		if err := validName(in); err != nil {
			t.Error(err)
		}
	}
}

func TestGenerated1024VFs(t *testing.T) {
	root := sysfsfixture.TempDir(t)
	if err := sysfsfixture.Generated(1024).Write(root); err != nil {
		t.Fatal(err)
	}
	inv := discover(t, Options{SysfsRoot: root})
	if len(inv.Devices) != 1025 || len(inv.Warnings) != 0 {
		t.Fatalf("got %d devices and warnings %q, want 1 PF and 1024 VFs", len(inv.Devices), inv.Warnings)
	}
	ids := map[int]bool{}
	for _, d := range inv.Devices {
		if d.VF != nil {
			ids[d.VF.ID] = true
		}
	}
	if len(ids) != 1024 {
		t.Errorf("got %d distinct VF IDs, want 1024", len(ids))
	}
}

func TestMemif(t *testing.T) {
	dir := t.TempDir()
	// fw0 and quiet are sockets nobody answers on, vs1 a vswitch's.
	for _, name := range []string{"fw0.sock", "Bad_Name.sock", "quiet.sock"} {
		l, err := net.Listen("unixpacket", filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	vs1, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: filepath.Join(dir, "vs1.sock"), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vs1.Close() })
	go func() {
		for {
			c, err := vs1.AcceptUnix()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = memif.Answer(c, memif.Hello{Name: "vswitch"}, 5*time.Second)
			}()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "not-a-socket"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	endpoints := []MemifEndpoint{
		{Name: "vpp1", Role: MemifRoleMaster, Mode: MemifModeIP, SocketPath: filepath.Join(dir, "vpp1.sock")},
		{Name: "fw0", Role: MemifRoleMaster, Mode: MemifModeEthernet},
	}
	inv := discover(t, Options{SysfsRoot: fixture("plain"), MemifDir: dir, MemifEndpoints: endpoints, MemifSource: "memif.yaml"})
	memifs := map[string]*Memif{}
	for _, d := range inv.Devices {
		if d.Kind == KindMemif {
			memifs[d.Name] = d.Memif
		}
	}
	if len(memifs) != 4 {
		t.Fatalf("memif devices = %v, want fw0, quiet, vpp1 and vs1", memifs)
	}
	if fw0 := memifs["memif-fw0"]; fw0.Source != "config" || fw0.Role != "master" || fw0.Mode != "ethernet" || !fw0.Healthy {
		t.Errorf("fw0 = %+v (the config wins over the socket of the same name; a master is healthy)", fw0)
	}
	if vpp1 := memifs["memif-vpp1"]; vpp1.Mode != "ip" || vpp1.SocketPath != filepath.Join(dir, "vpp1.sock") {
		t.Errorf("vpp1 = %+v", vpp1)
	}
	if vs := memifs["memif-vs1"]; vs.Role != "slave" || vs.Source != "dir" || !vs.Healthy || vs.Problem != "" {
		t.Errorf("vs1 = %+v, want a healthy slave endpoint", vs)
	}
	if q := memifs["memif-quiet"]; q.Healthy || !strings.Contains(q.Problem, "quiet.sock") {
		t.Errorf("quiet = %+v, want unhealthy with the socket in the problem", q)
	}
	if len(inv.Warnings) != 1 || !strings.Contains(inv.Warnings[0], "Bad_Name.sock") {
		t.Errorf("warnings = %q, want one naming Bad_Name.sock", inv.Warnings)
	}
	for _, d := range inv.Devices {
		if d.Name != "memif-vpp1" && d.Name != "memif-quiet" {
			continue
		}
		attrs := d.Attributes()
		if *attrs["memifRole"].StringValue != d.Memif.Role || *attrs["memifMode"].StringValue != d.Memif.Mode ||
			*attrs["kind"].StringValue != "memif" || *attrs["memifHealthy"].BoolValue != d.Memif.Healthy {
			t.Errorf("%s attributes = %v", d.Name, attrs)
		}
	}
}

// The configured endpoints' sockets must be in --memif-dir.
func TestMemifConfigOutsideDir(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ dir, socket, want string }{
		"elsewhere": {dir, "/run/vpp/a.sock", "outside --memif-dir"},
		"dot-dot":   {dir, dir + "/../a.sock", "outside --memif-dir"},
		"no dir":    {"", dir + "/a.sock", "give --memif-dir"},
	} {
		t.Run(name, func(t *testing.T) {
			const source = "/etc/fastpath/memif.yaml"
			endpoints := []MemifEndpoint{{Name: "a", Role: MemifRoleSlave, Mode: MemifModeEthernet, SocketPath: tc.socket}}
			_, err := New(Options{SysfsRoot: fixture("plain"), MemifDir: tc.dir, MemifEndpoints: endpoints, MemifSource: source})
			if !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), source) ||
				!strings.Contains(err.Error(), "endpoints[0].socketPath") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want ErrBadOptions naming %s, endpoints[0].socketPath and %q", err, source, tc.want)
			}
		})
	}
}

func TestInventoryEqual(t *testing.T) {
	a := discover(t, Options{SysfsRoot: fixture("e810")})
	b := discover(t, Options{SysfsRoot: fixture("e810")})
	if !a.Equal(b) {
		t.Fatal("two discoveries of the same tree differ")
	}
	b.Devices[2].Netdev.MTU = 9000
	if a.Equal(b) {
		t.Error("a changed MTU went unnoticed")
	}
}
