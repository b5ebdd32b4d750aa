package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// fakeKubelet plays the kubelet's side of plugin registration and of the
// DRA v1 gRPC API against a driver started with the kubeletplugin helper.
type fakeKubelet struct {
	dra drapb.DRAPluginClient
}

func startFakeKubelet(t *testing.T, ctx context.Context, registryDir string) *fakeKubelet {
	t.Helper()
	// The helper creates its registration socket as it starts: named by
	// the driver, and with rolling updates by the daemon's pod too.
	regSock := filepath.Join(registryDir, devices.DriverName+"-reg.sock")
	var rc *grpc.ClientConn
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		socks, err := filepath.Glob(filepath.Join(registryDir, devices.DriverName+"-*reg.sock"))
		if err != nil || len(socks) != 1 {
			return false, err
		}
		regSock = socks[0]
		return true, nil
	}); err != nil {
		t.Fatalf("no registration socket %s: %v", regSock, err)
	}
	rc, err := grpc.NewClient("unix://"+regSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Close() })
	reg := registerapi.NewRegistrationClient(rc)
	info, err := reg.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != devices.DriverName {
		t.Fatalf("GetInfo = %+v, want a DRA plugin named %s", info, devices.DriverName)
	}
	if !containsString(info.SupportedVersions, drapb.DRAPluginService) {
		t.Errorf("supported versions %v lack %s", info.SupportedVersions, drapb.DRAPluginService)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	dc, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dc.Close() })
	return &fakeKubelet{dra: drapb.NewDRAPluginClient(dc)}
}

func containsString(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

type testDriver struct {
	*Driver
	opts   Options
	store  *claims.Store
	client *fake.Clientset
	kernel *sysfsfixture.Kernel
}

func startTestDriver(t *testing.T, objects ...*fakeObject) (*testDriver, *fakeKubelet, context.Context) {
	return startTestDriverPF(t, &fakePF{}, objects...)
}

func startTestDriverPF(t *testing.T, pf dataplane.PF, objects ...*fakeObject) (*testDriver, *fakeKubelet, context.Context) {
	t.Helper()
	return startTestDriverWith(t, pf, nil, objects...)
}

// startTestDriverWith is startTestDriverPF with the options tweak changes.
func startTestDriverWith(t *testing.T, pf dataplane.PF, tweak func(*Options), objects ...*fakeObject) (*testDriver, *fakeKubelet, context.Context) {
	t.Helper()
	// The E810 fixture again, with a kernel to bind its functions.
	sysfs := sysfsfixture.TempDir(t)
	if err := sysfsfixture.E810().Write(sysfs); err != nil {
		t.Fatal(err)
	}
	kernel, err := sysfsfixture.StartKernel(sysfs, sysfs, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kernel.Stop)
	d, k, ctx := startDriverWith(t, pf, dataplane.PCIBinder{SysfsRoot: sysfs, DevRoot: sysfs, Timeout: 2 * time.Second}, testInventory(t), tweak, objects...)
	d.kernel = kernel
	return d, k, ctx
}

// startDriver starts the driver on the PF, PCI binder and inventory given,
// with the claims in a fake API server, and registers it with a fake
// kubelet.
func startDriver(t *testing.T, pf dataplane.PF, pci PCIBinder, inv devices.Inventory, objects ...*fakeObject) (*testDriver, *fakeKubelet, context.Context) {
	t.Helper()
	return startDriverWith(t, pf, pci, inv, nil, objects...)
}

// startDriverWith is startDriver with the options tweak changes.
func startDriverWith(t *testing.T, pf dataplane.PF, pci PCIBinder, inv devices.Inventory, tweak func(*Options), objects ...*fakeObject) (*testDriver, *fakeKubelet, context.Context) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	dir, err := os.MkdirTemp("", "fp") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	client := fake.NewClientset()
	for _, o := range objects {
		if _, err := client.ResourceV1().ResourceClaims(o.claim.Namespace).Create(ctx, o.claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	opts := Options{
		NodeName: testNode, Client: client,
		PluginDir: filepath.Join(dir, "plugins"), RegistryDir: filepath.Join(dir, "registry"),
		StateDir: filepath.Join(dir, "state"), CDIDir: filepath.Join(dir, "cdi"), PF: pf, PCI: pci,
		MemifDir: filepath.Join(dir, "memif"),
		BPFDir:   filepath.Join(dir, "bpf"),
		Store:    testStore(t),
		Status:   status.NewWriter(client),
	}
	if tweak != nil {
		tweak(&opts)
	}
	opts.Status.Start(ctx)
	if err := os.MkdirAll(opts.RegistryDir, 0o750); err != nil {
		t.Fatal(err)
	}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	d.UseInventory(inv)
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	k := startFakeKubelet(t, ctx, opts.RegistryDir)
	if err := d.RegistrationStatus(); err != nil {
		t.Errorf("registration status: %v", err)
	}
	return &testDriver{Driver: d, opts: opts, store: opts.Store, client: client}, k, ctx
}

type fakeObject struct{ claim *resourceapi.ResourceClaim }

func TestKubeletPrepareUnprepare(t *testing.T) {
	claim := testClaim("web", []alloc{{Request: "nic", Device: vfNetdev}, {Request: "dpdk", Device: vfVFIO}},
		fromClaimFor("nic", config(`"interface": {"name": "net1", "mtu": 9000}`)),
		fromClaimFor("dpdk", config(`"mode": "vfio"`)))
	d, k, ctx := startTestDriver(t, &fakeObject{claim})
	req := []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}

	for range 2 { // twice: the second is answered from the checkpoint
		resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: req})
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Claims[string(claim.UID)]
		if r.Error != "" {
			t.Fatalf("prepare: %s", r.Error)
		}
		if len(r.Devices) != 2 || r.Devices[0].CdiDeviceIds[0] != "fastpath.dev/net=uid-web-nic" || r.Devices[1].DeviceName != vfVFIO {
			t.Fatalf("prepared devices = %+v", r.Devices)
		}
	}

	specPath := cdiSpecPath(d.opts.CDIDir, claim.UID)
	spec, err := cdi.ReadSpec(specPath, 0)
	if err != nil {
		t.Fatalf("the CDI spec does not parse as CDI: %v", err)
	}
	nic := spec.GetDevice("uid-web-nic")
	if nic == nil {
		t.Fatalf("CDI spec has no device uid-web-nic")
	}
	env := strings.Join(nic.ContainerEdits.Env, " ")
	if !strings.Contains(env, "PCIDEVICE_FASTPATH_DEV_NIC=0000:3b:01.0") || !strings.Contains(env, "FASTPATH_DEVICE_NIC="+vfNetdev) ||
		!strings.Contains(env, "FASTPATH_INTERFACE_NIC=net1") || !strings.Contains(env, "FASTPATH_DEVICE_INFO_NIC="+status.DeviceInfoDir+"/nic-device.json") {
		t.Errorf("nic env = %v", nic.ContainerEdits.Env)
	}
	if len(nic.ContainerEdits.Mounts) != 1 {
		t.Fatalf("nic mounts = %+v", nic.ContainerEdits.Mounts)
	}
	var info nadv1.DeviceInfo
	data, err := os.ReadFile(nic.ContainerEdits.Mounts[0].HostPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &info); err != nil || info.Type != "pci" || info.Version != "1.1.0" ||
		info.Pci.PciAddress != "0000:3b:01.0" || info.Pci.PfPciAddress != "0000:3b:00.0" {
		t.Errorf("device-info = %s (%v)", data, err)
	}
	if dpdk := spec.GetDevice("uid-web-dpdk"); dpdk == nil || !strings.Contains(strings.Join(dpdk.ContainerEdits.Env, " "), "PCIDEVICE_FASTPATH_DEV_DPDK=0000:3b:01.2") {
		t.Errorf("dpdk CDI device = %+v", dpdk)
	}

	for range 2 { // twice: unpreparing again is harmless
		resp, err := k.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: req})
		if err != nil {
			t.Fatal(err)
		}
		if e := resp.Claims[string(claim.UID)].Error; e != "" {
			t.Fatalf("unprepare: %s", e)
		}
	}
	assertNothingLeft(t, d)
}

func TestKubeletPrepareInvalidLeavesNothing(t *testing.T) {
	good := testClaim("good", []alloc{{Request: "nic", Device: vfNetdev}})
	bad := testClaim("bad", []alloc{{Request: "nic", Device: vfNetdev2}}, fromClaim(config(`"interface": {"mtu": 70000}`)))
	d, k, ctx := startTestDriver(t, &fakeObject{good}, &fakeObject{bad})
	resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{
		{Namespace: "default", Name: "bad", Uid: string(bad.UID)},
		{Namespace: "default", Name: "good", Uid: string(good.UID)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	msg := resp.Claims[string(bad.UID)].Error
	for _, want := range []string{"claim default/bad", `request "nic"`, "device " + vfNetdev2, "interface.mtu"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	if e := resp.Claims[string(good.UID)].Error; e != "" {
		t.Errorf("the good claim failed with the bad one: %s", e)
	}
	if _, err := os.Stat(cdiSpecPath(d.opts.CDIDir, bad.UID)); !os.IsNotExist(err) {
		t.Errorf("a CDI spec exists for the rejected claim: %v", err)
	}
	on := onDisk(t, d)
	if _, ok := on.Get(claims.Key{Driver: claims.DriverFastpath, UID: bad.UID}); ok || len(on.Claims()) != 1 {
		t.Errorf("checkpoint holds %d claims (bad one present: %v), want only the good one", len(on.Claims()), ok)
	}
	if _, err := os.Stat(filepath.Join(d.opts.StateDir, "claims", string(bad.UID))); !os.IsNotExist(err) {
		t.Errorf("a state directory exists for the rejected claim")
	}
}

// onDisk is the checkpoint as a restarted daemon would read it.
func onDisk(t *testing.T, d *testDriver) *claims.Store {
	t.Helper()
	s, err := claims.Open(d.store.Path(), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// assertNothingLeft checks that no claim is in the store or its file and no
// CDI spec or claim directory is on disk.
func assertNothingLeft(t *testing.T, d *testDriver) {
	t.Helper()
	if n, m := len(d.store.Claims()), len(onDisk(t, d).Claims()); n != 0 || m != 0 {
		t.Errorf("the store still holds %d claims, its file %d", n, m)
	}
	if specs, _ := os.ReadDir(d.opts.CDIDir); len(specs) != 0 {
		t.Errorf("CDI specs left: %v", specs)
	}
	if claims, _ := os.ReadDir(filepath.Join(d.opts.StateDir, "claims")); len(claims) != 0 {
		t.Errorf("claim directories left: %v", claims)
	}
}

// TestCDISpecWithoutPCI: a device with no PCI address and no device-info (a
// virtual netdev) still yields a spec CDI accepts.
func TestCDISpecWithoutPCI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spec.json")
	c := &claims.Claim{UID: "uid-v", CDISpec: path, Devices: []claims.Device{{Request: "net", Device: "netdev-veth1", Kind: string(devices.KindNetdev),
		Mode: v1alpha1.ModeNetdev, Host: &claims.HostNetdev{Name: "veth1"}, Pod: &claims.PodInterface{Name: "net1"}}}}
	if err := WriteCDISpec(c); err != nil {
		t.Fatal(err)
	}
	parsed, err := cdi.ReadSpec(path, 0)
	if err != nil {
		t.Fatalf("CDI rejects the spec: %v", err)
	}
	if d := parsed.GetDevice("uid-v-net"); d == nil || strings.Join(d.ContainerEdits.Env, " ") != "FASTPATH_DEVICE_NET=netdev-veth1 FASTPATH_INTERFACE_NET=net1" {
		t.Errorf("device = %+v", d)
	}
}

// fakePF records VF settings per PF/VF instead of making them.
type fakePF struct {
	calls  []string
	failOn string
	// gone is a VF, "<pf>/<vf>", that left the node (sriov_numvfs lowered).
	gone string
}

func (f *fakePF) rec(c string) error {
	f.calls = append(f.calls, c)
	if f.gone != "" && strings.Contains(c, " "+f.gone+"=") {
		return fmt.Errorf("%w: PF has no VF %s", dataplane.ErrDeviceGone, f.gone)
	}
	if f.failOn != "" && strings.HasPrefix(c, f.failOn) {
		return errors.New("not supported by this PF")
	}
	return nil
}
func (f *fakePF) VFState(pf string, vf int) (dataplane.VFState, error) {
	if f.gone == fmt.Sprintf("%s/%d", pf, vf) {
		return dataplane.VFState{}, fmt.Errorf("%w: PF has no VF %s", dataplane.ErrDeviceGone, f.gone)
	}
	return dataplane.VFState{VLANProto: "802.1q", MAC: "00:00:00:00:00:00", SpoofChk: true, LinkState: "auto"}, nil
}
func (f *fakePF) SetVLAN(pf string, vf, vlan, qos int, proto string) error {
	return f.rec(fmt.Sprintf("vlan %s/%d=%d", pf, vf, vlan))
}
func (f *fakePF) SetMAC(pf string, vf int, mac net.HardwareAddr) error {
	return f.rec(fmt.Sprintf("mac %s/%d=%s", pf, vf, mac))
}
func (f *fakePF) SetRate(pf string, vf, lo, hi int) error {
	return f.rec(fmt.Sprintf("rate %s/%d", pf, vf))
}
func (f *fakePF) SetSpoofChk(pf string, vf int, on bool) error {
	return f.rec(fmt.Sprintf("spoofchk %s/%d=%v", pf, vf, on))
}
func (f *fakePF) SetTrust(pf string, vf int, on bool) error {
	return f.rec(fmt.Sprintf("trust %s/%d=%v", pf, vf, on))
}
func (f *fakePF) SetLinkState(pf string, vf int, state string) error {
	return f.rec(fmt.Sprintf("linkstate %s/%d=%s", pf, vf, state))
}

// TestKubeletVFSettings: VF settings are made through the PF at Prepare,
// after the VF's state was saved, and put back at Unprepare; a PF that
// refuses one leaves the VFs as they were and nothing behind.
func TestKubeletVFSettings(t *testing.T) {
	claim := testClaim("vf", []alloc{{Request: "a", Device: vfNetdev}, {Request: "b", Device: vfNetdev2}},
		fromClaimFor("a", config(`"interface": {"name": "net1", "mac": "02:00:00:00:00:0a"}, "vf": {"vlan": 10, "spoofChk": true}`)),
		fromClaimFor("b", config(`"interface": {"name": "net2"}, "vf": {"vlan": 20, "trust": true}`)))
	pf := &fakePF{}
	d, k, ctx := startTestDriverPF(t, pf, &fakeObject{claim})
	req := []*drapb.Claim{{Namespace: "default", Name: "vf", Uid: string(claim.UID)}}
	resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: req})
	if err != nil || resp.Claims[string(claim.UID)].Error != "" {
		t.Fatalf("prepare: %v %v", err, resp)
	}
	want := "vlan ens1f0/0=10 mac ens1f0/0=02:00:00:00:00:0a spoofchk ens1f0/0=true vlan ens1f0/1=20 trust ens1f0/1=true"
	if got := strings.Join(pf.calls, " "); got != want {
		t.Errorf("prepare calls:\n%s\nwant:\n%s", got, want)
	}
	rec, ok := onDisk(t, d).Get(claims.Key{Driver: claims.DriverFastpath, UID: claim.UID})
	if !ok || rec.Devices[0].VF.Before == nil || rec.Devices[0].VF.Before.MAC != "00:00:00:00:00:00" {
		t.Fatalf("the checkpoint lacks the VF's state from before: %+v", rec)
	}
	pf.calls = nil
	uresp, err := k.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: req})
	if err != nil || uresp.Claims[string(claim.UID)].Error != "" {
		t.Fatalf("unprepare: %v %v", err, uresp)
	}
	// Undone in reverse: the second VF first.
	want = "trust ens1f0/1=false vlan ens1f0/1=0 spoofchk ens1f0/0=true mac ens1f0/0=00:00:00:00:00:00 vlan ens1f0/0=0"
	if got := strings.Join(pf.calls, " "); got != want {
		t.Errorf("unprepare calls:\n%s\nwant:\n%s", got, want)
	}
	assertNothingLeft(t, d)

	// The second VF's trust is refused: the first VF is put back too.
	pf.calls, pf.failOn = nil, "trust ens1f0/1=true"
	resp, err = k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: req})
	if err != nil {
		t.Fatal(err)
	}
	if msg := resp.Claims[string(claim.UID)].Error; !strings.Contains(msg, `request "b"`) || !strings.Contains(msg, "set trust of VF 1 on PF ens1f0") {
		t.Errorf("error = %q, want the request and the refused setting", msg)
	}
	// The failed step undoes what it made, then it is undone as a whole
	// (harmless: its settings are as they were), then the first VF.
	want = "vlan ens1f0/0=10 mac ens1f0/0=02:00:00:00:00:0a spoofchk ens1f0/0=true vlan ens1f0/1=20 trust ens1f0/1=true vlan ens1f0/1=0 " +
		"trust ens1f0/1=false vlan ens1f0/1=0 spoofchk ens1f0/0=true mac ens1f0/0=00:00:00:00:00:00 vlan ens1f0/0=0"
	if got := strings.Join(pf.calls, " "); got != want {
		t.Errorf("calls on failure:\n%s\nwant:\n%s", got, want)
	}
	assertNothingLeft(t, d)
}

// TestKubeletVFGone: a VF leaves the node while its claim is prepared (its
// PF's sriov_numvfs lowered, a hot-unplug): Unprepare succeeds, nothing of
// the claim is left, and the claim's status says the device is gone.
func TestKubeletVFGone(t *testing.T) {
	claim := testClaim("gone", []alloc{{Request: "a", Device: vfNetdev}}, fromClaimFor("a", config(`"interface": {"name": "net1"}, "vf": {"vlan": 10}`)))
	pf := &fakePF{}
	d, k, ctx := startTestDriverPF(t, pf, &fakeObject{claim})
	req := []*drapb.Claim{{Namespace: "default", Name: "gone", Uid: string(claim.UID)}}
	resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: req})
	if err != nil || resp.Claims[string(claim.UID)].Error != "" {
		t.Fatalf("prepare: %v %v", err, resp)
	}
	pf.gone = "ens1f0/0"
	uresp, err := k.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: req})
	if err != nil || uresp.Claims[string(claim.UID)].Error != "" {
		t.Fatalf("unprepare of a claim whose VF is gone: %v %v", err, uresp)
	}
	assertNothingLeft(t, d)
	var conds []metav1.Condition
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := d.client.ResourceV1().ResourceClaims("default").Get(ctx, "gone", metav1.GetOptions{})
		if err != nil || len(c.Status.Devices) == 0 {
			return false, nil
		}
		conds = c.Status.Devices[0].Conditions
		return len(conds) > 0 && conds[0].Reason == status.ReasonDeviceGone, nil
	})
	if err != nil {
		t.Errorf("the claim's status says %+v, want the device gone", conds)
	}
}

// TestKubeletPinnedVLAN: a DeviceClass pins its VLAN; Prepare refuses a
// claim whose config sets another, naming the claim, the request, the
// device, the field and the class, with no VF setting made and nothing
// left; a claim that sets the class's VLAN is prepared with it.
func TestKubeletPinnedVLAN(t *testing.T) {
	class := fromClass(config(`"vf": {"vlan": 100}, "pinned": ["vf.vlan", "mode"]`))
	other := testClaim("other", []alloc{{Request: "nic", Device: vfNetdev}}, class, fromClaim(config(`"vf": {"vlan": 200}`)))
	same := testClaim("same", []alloc{{Request: "nic", Device: vfNetdev2}}, class, fromClaim(config(`"vf": {"vlan": 100, "trust": true}`)))
	pf := &fakePF{}
	d, k, ctx := startTestDriverPF(t, pf, &fakeObject{other}, &fakeObject{same})
	resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: "default", Name: "other", Uid: string(other.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `claim default/other, request "nic", device ` + vfNetdev + `: config[1][FromClaim].parameters.vf.vlan: Forbidden: DeviceClass netdev.fastpath.dev pins vf.vlan to 100`
	if msg := resp.Claims[string(other.UID)].Error; !strings.Contains(msg, want) {
		t.Errorf("error = %q, want %q", msg, want)
	}
	if len(pf.calls) != 0 {
		t.Errorf("VF settings made for a refused claim: %v", pf.calls)
	}
	assertNothingLeft(t, d)

	resp, err = k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: "default", Name: "same", Uid: string(same.UID)}}})
	if err != nil || resp.Claims[string(same.UID)].Error != "" {
		t.Fatalf("prepare of a claim with the class's VLAN: %v %v", err, resp)
	}
	if got := strings.Join(pf.calls, " "); got != "vlan ens1f0/1=100 trust ens1f0/1=true" {
		t.Errorf("VF settings %q, want the class's VLAN and the claim's trust", got)
	}
}
