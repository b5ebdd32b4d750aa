//go:build sriov

package dra_test

// A network's device from the pod's claim, on a real SR-IOV VF in the test
// VM (make e2e-sriov): the VF claimed in mode delegate gets its device-info
// where the SR-IOV device plugin writes it and PCIDEVICE_<resource> in the
// CDI spec; the pod's network, a NetworkAttachmentDefinition with the
// resource name and the reference host-device plugin, takes the VF by the
// PCI address fastpath gives it as deviceID, into the pod with the
// element's address; the pod's stop gives it back to the host.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/test/netnstest"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// oneNAD serves one NetworkAttachmentDefinition.
type oneNAD struct {
	nad *nadv1.NetworkAttachmentDefinition
}

func (o oneNAD) GetNAD(_ context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error) {
	if namespace != o.nad.Namespace || name != o.nad.Name {
		return nil, fmt.Errorf("no NetworkAttachmentDefinition %s/%s", namespace, name)
	}
	return o.nad, nil
}

// referencePlugins is the directory of the reference CNI plugins the
// project's dependencies build ($FASTPATH_CNI_BIN, or test/deps.sh's).
func referencePlugins(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FASTPATH_CNI_BIN")
	if dir == "" {
		out, err := exec.Command("bash", "../test/deps.sh", "env").Output()
		if err != nil {
			t.Fatalf("test/deps.sh env: %v", err)
		}
		for s := bufio.NewScanner(bytes.NewReader(out)); s.Scan(); {
			if v, ok := strings.CutPrefix(s.Text(), "FASTPATH_CNI_BIN="); ok {
				dir = v
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "host-device")); err != nil {
		t.Fatalf("the reference CNI plugins are not built (test/deps.sh testbed builds them): %v", err)
	}
	return dir
}

func TestSRIOVDelegatedToHostDevice(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vf := pf.VFsReady(t, 4)[2]
	const resource = "intel.com/intel_sriov_netdevice"
	claim := testClaim("deleg", []alloc{{Request: "vf", Device: devices.PCIDeviceName(vf.Address)}},
		fromClaim(config(`"mode": "delegate", "resourceName": "`+resource+`"`)))
	d, k, ctx := startSRIOVDriver(t, dra.NewFakeObject(claim))
	devinfo := t.TempDir()
	d.DriverOptions().DeviceInfoDir = devinfo

	if e := prepare(t, ctx, k, claim); e != "" {
		t.Fatalf("prepare: %s", e)
	}
	infoPath := npwg.DeviceInfoPath(devinfo, resource, vf.Address)
	var info nadv1.DeviceInfo
	if data, err := os.ReadFile(infoPath); err != nil || json.Unmarshal(data, &info) != nil || info.Type != "pci" || info.Pci.PciAddress != vf.Address {
		t.Errorf("device-info %s: %+v (%v), want the VF's PCI address", infoPath, info, err)
	}
	rec, _ := d.Store().Get(claims.Key{Driver: claims.DriverFastpath, UID: claim.UID})
	spec, err := cdi.ReadSpec(rec.CDISpec, 0)
	if err != nil {
		t.Fatal(err)
	}
	if env := spec.Devices[0].ContainerEdits.Env; !strings.Contains(strings.Join(env, " "), npwg.ResourceEnv(resource)+"="+vf.Address) {
		t.Errorf("CDI env %v lacks %s=%s", env, npwg.ResourceEnv(resource), vf.Address)
	}

	nad := &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sriov-net", Annotations: map[string]string{npwg.ResourceNameAnnot: resource}},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion": "1.0.0", "name": "sriov-net", "plugins": [` +
			`{"type": "host-device", "ipam": {"type": "static"}, "capabilities": {"ips": true}}]}`}}
	plugin := nri.New(nri.Options{Store: d.Store(), Status: d.Opts().Status, CNI: dataplane.NewCNI([]string{referencePlugins(t)}, t.TempDir(), nil),
		NPWG: &nri.NPWGOptions{NADs: oneNAD{nad}, ConfDir: t.TempDir(), Plugins: []string{"host-device", "static"}, DefaultInterface: "eth0"}})
	podNS := netnstest.New(t, fmt.Sprintf("fpsr-%d", os.Getpid()))
	pod := nri.Pod{UID: "pod-uid-deleg", Namespace: "default", Name: "pod-deleg", SandboxID: "sandbox-deleg", NetNS: podNS,
		Networks: `[{"name": "sriov-net", "interface": "sriov0", "ips": ["10.56.217.10/24"]}]`}
	if err := plugin.AttachPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	ns, err := netns.GetFromPath(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	link, err := h.LinkByName("sriov0")
	if err != nil {
		t.Fatalf("no sriov0 in the pod: %v", err)
	}
	if got := sriovtest.Netdev(vf.Address); got != "" {
		t.Errorf("VF %s still has netdev %s in the host", vf.Address, got)
	}
	addrs, _ := h.AddrList(link, netlink.FAMILY_V4)
	if len(addrs) != 1 || addrs[0].IPNet.String() != "10.56.217.10/24" {
		t.Errorf("sriov0 has %v, want 10.56.217.10/24", addrs)
	}

	if err := plugin.DetachPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	sriovtest.WaitFor(t, 10*time.Second, "VF "+vf.Address+" back in the host as "+vf.Netdev, func() bool {
		return sriovtest.Netdev(vf.Address) == vf.Netdev
	})
	unprepare(t, ctx, k, claim)
	if _, err := os.Stat(infoPath); !os.IsNotExist(err) {
		t.Errorf("device-info %s left after Unprepare: %v", infoPath, err)
	}
	assertNothingLeft(t, d)
}
