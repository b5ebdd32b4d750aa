package dra

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices/memif"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/status"
)

func prepare(t *testing.T, ctx context.Context, k *fakeKubelet, claim *resourceapi.ResourceClaim) string {
	t.Helper()
	resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{
		{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Claims[string(claim.UID)].Error
}

func unprepare(t *testing.T, ctx context.Context, k *fakeKubelet, claim *resourceapi.ResourceClaim) {
	t.Helper()
	resp, err := k.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{
		{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	if e := resp.Claims[string(claim.UID)].Error; e != "" {
		t.Fatalf("unprepare: %s", e)
	}
}

// A daemon killed after a claim's prepared record, before its status
// write, does not leave the claim without the status of the devices ready
// at Prepare (here a VF bound to vfio-pci): the kubelet's retried Prepare,
// answered from the store, writes it; and when Prepare had returned (the
// kubelet does not prepare the claim again), the restarted daemon's
// Reconcile does.
func TestPreparedStatusWrittenAgain(t *testing.T) {
	for name, again := range map[string]func(t *testing.T, ctx context.Context, d *testDriver, k *fakeKubelet, claim *resourceapi.ResourceClaim){
		"the kubelet's retried Prepare": func(t *testing.T, ctx context.Context, _ *testDriver, k *fakeKubelet, claim *resourceapi.ResourceClaim) {
			if e := prepare(t, ctx, k, claim); e != "" {
				t.Fatalf("prepare again: %s", e)
			}
		},
		"Reconcile at restart": func(t *testing.T, ctx context.Context, d *testDriver, _ *fakeKubelet, _ *resourceapi.ResourceClaim) {
			if err := d.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			claim := testClaim("dpdk", []alloc{{Request: "dpdk", Device: vfNetdev}}, fromClaim(config(`"mode": "vfio"`)))
			d, k, ctx := startTestDriver(t, &fakeObject{claim})
			if e := prepare(t, ctx, k, claim); e != "" {
				t.Fatalf("prepare: %s", e)
			}
			deviceStatus(t, ctx, d, claim, vfNetdev)
			d.opts.Status.Wait()
			// The status as a daemon killed before writing it left it.
			c, err := d.client.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c.Status.Devices = nil
			if _, err := d.client.ResourceV1().ResourceClaims(claim.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			again(t, ctx, d, k, claim)
			if st := deviceStatus(t, ctx, d, claim, vfNetdev); len(st.Conditions) == 0 || st.Conditions[0].Status != metav1.ConditionTrue {
				t.Errorf("status after %s: %+v", name, st)
			}
			unprepare(t, ctx, k, claim)
		})
	}
}

// deviceStatus waits for the claim's status of device and returns it.
func deviceStatus(t *testing.T, ctx context.Context, d *testDriver, claim *resourceapi.ResourceClaim, device string) resourceapi.AllocatedDeviceStatus {
	t.Helper()
	var got resourceapi.AllocatedDeviceStatus
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := d.client.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, st := range c.Status.Devices {
			if st.Device == device {
				got = st
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no status for device %s: %v", device, err)
	}
	return got
}

// TestKubeletVFIO: a VF on iavf goes to vfio-pci at Prepare, after its VF
// settings were made, with the checkpoint remembering iavf and the CDI spec
// giving the containers the group's device nodes; Unprepare gives it back
// to iavf and undoes the settings, twice harmlessly. When vfio-pci does not
// take the VF, it is given back at once and nothing is left.
func TestKubeletVFIO(t *testing.T) {
	const addr, group = "0000:3b:01.0", 41
	claim := testClaim("dpdk", []alloc{{Request: "dpdk", Device: vfNetdev}}, fromClaim(config(`"mode": "vfio", "vf": {"vlan": 30}`)))
	pf := &fakePF{}
	d, k, ctx := startTestDriverPF(t, pf, &fakeObject{claim})

	if e := prepare(t, ctx, k, claim); e != "" {
		t.Fatalf("prepare: %s", e)
	}
	if got := d.kernel.Driver(addr); got != dataplane.VFIODriver {
		t.Fatalf("driver after Prepare = %q, want vfio-pci", got)
	}
	if got := strings.Join(pf.calls, " "); got != "vlan ens1f0/0=30" {
		t.Errorf("PF calls = %q", got)
	}
	rec, _ := onDisk(t, d).Get(claims.Key{Driver: claims.DriverFastpath, UID: claim.UID})
	if v := rec.Devices[0].VFIO; v == nil || v.DriverBefore != "iavf" || v.IOMMUGroup != group {
		t.Errorf("checkpoint device = %+v, want the driver before (iavf) and group %d", rec.Devices[0], group)
	}
	spec, err := cdi.ReadSpec(cdiSpecPath(d.opts.CDIDir, claim.UID), 0)
	if err != nil {
		t.Fatal(err)
	}
	dev := spec.GetDevice("uid-dpdk-dpdk")
	if dev == nil {
		t.Fatal("no CDI device uid-dpdk-dpdk")
	}
	var nodes []string
	for _, n := range dev.ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.Path+"="+n.HostPath)
	}
	wantNodes := []string{"/dev/vfio/vfio=" + d.opts.PCI.ContainerNode(), "/dev/vfio/41=" + d.opts.PCI.GroupNode(group)}
	if !slices.Equal(nodes, wantNodes) {
		t.Errorf("device nodes = %q, want %q", nodes, wantNodes)
	}
	if env := strings.Join(dev.ContainerEdits.Env, " "); !strings.Contains(env, "PCIDEVICE_FASTPATH_DEV_DPDK="+addr) {
		t.Errorf("env = %s", env)
	}
	st := deviceStatus(t, ctx, d, claim, vfNetdev)
	var data struct {
		DeviceInfo nadv1.DeviceInfo `json:"device-info"`
		IOMMUGroup int              `json:"iommuGroup"`
		Driver     string           `json:"driver"`
	}
	if len(st.Conditions) != 1 || st.Conditions[0].Status != metav1.ConditionTrue || st.Conditions[0].Reason != status.ReasonReady {
		t.Errorf("conditions = %+v", st.Conditions)
	}
	if err := json.Unmarshal(st.Data.Raw, &data); err != nil || data.IOMMUGroup != group || data.Driver != "vfio-pci" ||
		data.DeviceInfo.Type != "pci" || data.DeviceInfo.Pci.PciAddress != addr {
		t.Errorf("status data = %s (%v)", st.Data.Raw, err)
	}
	if st.NetworkData != nil {
		t.Errorf("networkData = %+v for a device with no kernel interface", st.NetworkData)
	}

	pf.calls = nil
	unprepare(t, ctx, k, claim)
	unprepare(t, ctx, k, claim)
	if got := d.kernel.Driver(addr); got != "iavf" {
		t.Errorf("driver after Unprepare = %q, want iavf back", got)
	}
	if got := strings.Join(pf.calls, " "); got != "vlan ens1f0/0=0" {
		t.Errorf("PF calls at Unprepare = %q", got)
	}
	assertNothingLeft(t, d)

	// vfio-pci refuses the VF: back to iavf, settings undone, nothing left.
	d.kernel.Refuse(dataplane.VFIODriver)
	binder := d.Driver.opts.PCI.(dataplane.PCIBinder)
	binder.Timeout = 200 * time.Millisecond
	d.Driver.opts.PCI = binder
	pf.calls = nil
	msg := prepare(t, ctx, k, claim)
	for _, want := range []string{"claim default/dpdk", `request "dpdk"`, "device " + vfNetdev, "not vfio-pci"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	if got := d.kernel.Driver(addr); got != "iavf" {
		t.Errorf("driver after the failed Prepare = %q, want iavf", got)
	}
	if got := strings.Join(pf.calls, " "); got != "vlan ens1f0/0=30 vlan ens1f0/0=0" {
		t.Errorf("PF calls on failure = %q", got)
	}
	assertNothingLeft(t, d)
}

// memifInventory points the test inventory's memif endpoints into dir: the
// pod connects to fw0.sock (served by a listener) and serves vpp1.sock.
func memifInventory(t *testing.T, d *testDriver, socket string) {
	t.Helper()
	inv := testInventory(t)
	for i := range inv.Devices {
		switch inv.Devices[i].Name {
		case memifSlave:
			inv.Devices[i].Memif.SocketPath = socket
		case memifMaster:
			inv.Devices[i].Memif.SocketPath = filepath.Join(d.opts.MemifDir, "vpp1.sock")
		}
	}
	d.UseInventory(inv)
}

func listenMemif(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = memif.Answer(c, memif.Hello{Name: "vswitch"}, 5*time.Second)
			}()
		}
	}()
}

// TestKubeletMemif: the pod's side of a served endpoint is a directory of
// its own (0750, owned as asked) with the endpoint's socket mounted in; the
// side it serves is a directory whose socket the vswitch finds through a
// link in the memif directory. Unprepare removes both.
func TestKubeletMemif(t *testing.T) {
	claim := testClaim("cnf", []alloc{{Request: "fw", Device: memifSlave}, {Request: "vpp", Device: memifMaster}},
		fromClaimFor("fw", config(`"memif": {"uid": 1000, "gid": 2000}`)))
	d, k, ctx := startTestDriver(t, &fakeObject{claim})
	socket := filepath.Join(d.opts.MemifDir, "fw0.sock")
	listenMemif(t, socket)
	memifInventory(t, d, socket)

	if e := prepare(t, ctx, k, claim); e != "" {
		t.Fatalf("prepare: %s", e)
	}
	fwDir := filepath.Join(filepath.Join(d.opts.StateDir, "claims", string(claim.UID)), "memif", "fw")
	fi, err := os.Stat(fwDir)
	if err != nil {
		t.Fatal(err)
	}
	if sys := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o750 || sys.Uid != 1000 || sys.Gid != 2000 {
		t.Errorf("%s: mode %v owner %d:%d, want 0750 1000:2000", fwDir, fi.Mode().Perm(), sys.Uid, sys.Gid)
	}
	spec, err := cdi.ReadSpec(cdiSpecPath(d.opts.CDIDir, claim.UID), 0)
	if err != nil {
		t.Fatal(err)
	}
	fw := spec.GetDevice("uid-cnf-fw")
	var mounts []string
	for _, m := range fw.ContainerEdits.Mounts {
		mounts = append(mounts, m.HostPath+"="+m.ContainerPath)
	}
	wantMounts := []string{fwDir + "=/run/fastpath/memif/fw", socket + "=/run/fastpath/memif/fw/memif.sock",
		filepath.Join(filepath.Join(d.opts.StateDir, "claims", string(claim.UID)), "fw-device.json") + "=" + status.DeviceInfoDir + "/fw-device.json"}
	if !slices.Equal(mounts, wantMounts) {
		t.Errorf("fw mounts:\n%q\nwant:\n%q", mounts, wantMounts)
	}
	if env := strings.Join(fw.ContainerEdits.Env, " "); !strings.Contains(env, "MEMIF_SOCKET_FW=/run/fastpath/memif/fw/memif.sock") {
		t.Errorf("fw env = %s", env)
	}
	var info nadv1.DeviceInfo
	data, _ := os.ReadFile(filepath.Join(filepath.Join(d.opts.StateDir, "claims", string(claim.UID)), "fw-device.json"))
	if err := json.Unmarshal(data, &info); err != nil || info.Type != "memif" || info.Memif.Role != "slave" ||
		info.Memif.Path != "/run/fastpath/memif/fw/memif.sock" || info.Memif.Mode != "ethernet" {
		t.Errorf("fw device-info = %s (%v)", data, err)
	}

	vppSocket := filepath.Join(filepath.Join(d.opts.StateDir, "claims", string(claim.UID)), "memif", "vpp", "memif.sock")
	link := filepath.Join(d.opts.MemifDir, "vpp1.sock")
	if target, err := os.Readlink(link); err != nil || target != vppSocket {
		t.Errorf("link %s -> %q (%v), want -> %s", link, target, err, vppSocket)
	}
	if n := len(spec.GetDevice("uid-cnf-vpp").ContainerEdits.Mounts); n != 2 {
		t.Errorf("vpp has %d mounts, want its directory and device-info", n)
	}
	st := deviceStatus(t, ctx, d, claim, memifMaster)
	var sdata map[string]any
	if err := json.Unmarshal(st.Data.Raw, &sdata); err != nil || sdata["hostSocketPath"] != vppSocket || sdata["role"] != "master" {
		t.Errorf("vpp status data = %s (%v)", st.Data.Raw, err)
	}

	unprepare(t, ctx, k, claim)
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("link %s left behind: %v", link, err)
	}
	if _, err := os.Stat(socket); err != nil {
		t.Errorf("the endpoint's own socket is gone: %v", err)
	}
	assertNothingLeft(t, d)
}

// TestKubeletMemifBadPaths: sockets that lead out of the memif directory,
// through a symlink or "..", and a link that would replace a file, are
// refused with the claim, request, device and path; nothing is made.
func TestKubeletMemifBadPaths(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "elsewhere.sock")
	listenMemif(t, outside)
	for name, tc := range map[string]struct {
		setup  func(t *testing.T, memifDir string) string // the slave socket path
		master bool
		want   string
	}{
		"symlink out": {setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "fw0.sock")
			if err := os.Symlink(outside, p); err != nil {
				t.Fatal(err)
			}
			return p
		}, want: "outside --memif-dir"},
		"dot-dot": {setup: func(t *testing.T, dir string) string {
			rel, err := filepath.Rel(dir, outside)
			if err != nil || !strings.HasPrefix(rel, "../") {
				t.Fatalf("%s relative to %s: %q %v", outside, dir, rel, err)
			}
			return dir + "/" + rel // not cleaned: dir/../../elsewhere
		}, want: "outside --memif-dir"},
		"not a socket": {setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "fw0.sock")
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}, want: "is not a socket"},
		"silent endpoint": {setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "fw0.sock")
			l, err := net.Listen("unixpacket", p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			return p
		}, want: "does not answer memif HELLO"},
		"link over a file": {setup: func(t *testing.T, dir string) string {
			if err := os.WriteFile(filepath.Join(dir, "vpp1.sock"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "fw0.sock")
			listenMemif(t, p)
			return p
		}, master: true, want: "already exists"},
	} {
		t.Run(name, func(t *testing.T) {
			request, device := "fw", memifSlave
			if tc.master {
				request, device = "vpp", memifMaster
			}
			claim := testClaim("bad", []alloc{{Request: request, Device: device}})
			d, k, ctx := startTestDriver(t, &fakeObject{claim})
			if err := os.MkdirAll(d.opts.MemifDir, 0o755); err != nil {
				t.Fatal(err)
			}
			memifInventory(t, d, tc.setup(t, d.opts.MemifDir))
			msg := prepare(t, ctx, k, claim)
			for _, want := range []string{"claim default/bad", `request "` + request + `"`, "device " + device, tc.want} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not name %q", msg, want)
				}
			}
			assertNothingLeft(t, d)
		})
	}
}

// A vfio bind killed after it wrote driver_override, before the unbind,
// is undone whole: the function keeps its driver and the override is
// cleared (it would otherwise bind the function to vfio-pci at the next
// probe).
func TestVFIOUndoClearsOverride(t *testing.T) {
	const addr = "0000:3b:01.0"
	d, _, _ := startTestDriver(t)
	_, ctx := ktesting.NewTestContext(t)
	c := claims.Claim{Driver: claims.DriverFastpath, UID: "uid-dpdk", Namespace: "default", Name: "dpdk",
		Devices: []claims.Device{{Request: "dpdk", Pool: testNode, Device: vfNetdev, PCIAddress: addr, VFIO: &claims.VFIO{IOMMUGroup: 41, DriverBefore: "iavf"}}}}
	override := filepath.Join(d.opts.PCI.(dataplane.PCIBinder).SysfsRoot, "sys", "bus", "pci", "devices", addr, "driver_override")
	if err := os.WriteFile(override, []byte(dataplane.VFIODriver), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, s := range d.steps(&c) {
		if s.name == "vfio dpdk" {
			if err := s.undo(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got, _ := os.ReadFile(override); strings.TrimSpace(string(got)) != "" {
		t.Errorf("driver_override after the undo = %q, want it cleared", got)
	}
	if got := d.kernel.Driver(addr); got != "iavf" {
		t.Errorf("driver after the undo = %q, want iavf", got)
	}
}

// TestKubeletVFIOGroupShared: a VF whose IOMMU group holds another PCI
// function too (no ACS above it) is refused in mode vfio, naming the
// group and the other function; nothing is bound or recorded.
func TestKubeletVFIOGroupShared(t *testing.T) {
	const addr, other, group = "0000:3b:01.0", "0000:3b:01.1", 41
	claim := testClaim("dpdk", []alloc{{Request: "dpdk", Device: vfNetdev}}, fromClaim(config(`"mode": "vfio", "vf": {"vlan": 30}`)))
	pf := &fakePF{}
	d, k, ctx := startTestDriverPF(t, pf, &fakeObject{claim})
	// The other VF joins the group, as the kernel groups functions it
	// cannot isolate.
	groupDir := filepath.Join(d.opts.PCI.(dataplane.PCIBinder).SysfsRoot, "sys", "kernel", "iommu_groups", strconv.Itoa(group), "devices")
	if err := os.Symlink(filepath.Join("..", "..", "..", "..", "bus", "pci", "devices", other), filepath.Join(groupDir, other)); err != nil {
		t.Fatal(err)
	}
	e := prepare(t, ctx, k, claim)
	for _, want := range []string{`claim default/dpdk`, `request "dpdk"`, vfNetdev, "mode", "shares IOMMU group 41 with " + other} {
		if !strings.Contains(e, want) {
			t.Errorf("prepare: %q, want it to say %q", e, want)
		}
	}
	if got := d.kernel.Driver(addr); got != "iavf" {
		t.Errorf("driver after the refusal = %q, want iavf as before", got)
	}
	if len(pf.calls) != 0 {
		t.Errorf("VF settings made for a refused claim: %v", pf.calls)
	}
	if _, ok := onDisk(t, d).Get(claims.Key{Driver: claims.DriverFastpath, UID: claim.UID}); ok {
		t.Error("a refused claim is recorded")
	}
}
