package claims

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func typesUID(s string) types.UID { return types.UID(s) }

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// testdata/v1 holds the checkpoints the previous release wrote (its own
// code wrote them): the fastpath.dev driver's, with a VF netdev with VF
// settings, a vfio-pci function, an afxdp netdev and two memif endpoints,
// and the CNI driver's, with an added and an idle network.
func TestMigrateV1(t *testing.T) {
	dir := t.TempDir()
	path, cniPath := filepath.Join(dir, "checkpoint.json"), filepath.Join(dir, "cni", "cni-checkpoint.json")
	copyFile(t, "testdata/v1/checkpoint.json", path)
	copyFile(t, "testdata/v1/cni/cni-checkpoint.json", cniPath)
	s, err := Open(path, Legacy{CNI: cniPath})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cniPath); !os.IsNotExist(err) {
		t.Errorf("the CNI driver's file is still there: %v", err)
	}
	all := s.Claims()
	var keys []string
	for _, c := range all {
		keys = append(keys, c.Key().String())
		if !c.Prepared {
			t.Errorf("%s: not prepared", c.Key())
		}
	}
	want := []string{"cni.dra.networking.x-k8s.io/uid-cni", "fastpath.dev/uid-dpdk", "fastpath.dev/uid-net",
		"cni.dra.networking.x-k8s.io/uid-cni-idle", "fastpath.dev/uid-memif", "fastpath.dev/uid-xsk"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("claims %v, want %v", keys, want)
	}
	net, _ := s.Get(Key{DriverFastpath, "uid-net"})
	d := net.Devices[0]
	if d.Mode != "netdev" || d.Host.Name != "ens1f0v0" || d.Host.MTU != 1500 || d.Pod.Name != "net1" || d.Pod.MTU != 9000 ||
		d.Pod.Routes[0].Gateway != "10.10.1.1" || d.VF.PFName != "ens1f0" || *d.VF.Set.VLAN != 100 || *d.VF.Set.QoS != 2 ||
		d.VF.Set.MAC != "02:00:00:00:00:01" || d.VF.Before.LinkState != "auto" || d.CDIDevice != "fastpath.dev/net=uid-net-net1" ||
		net.Pod.UID != "pod-uid-a" || net.CDISpec != "/var/run/cdi/fastpath.dev-claim-uid-net.json" || net.Dir != "/var/lib/fastpath/claims/uid-net" {
		t.Errorf("netdev claim migrated as %+v, device %+v", net, d)
	}
	dpdk, _ := s.Get(Key{DriverFastpath, "uid-dpdk"})
	if v := dpdk.Devices[0].VFIO; v == nil || v.IOMMUGroup != 41 || v.DriverBefore != "iavf" || len(v.DeviceNodes) != 2 || dpdk.Devices[0].Pod != nil {
		t.Errorf("vfio claim migrated as %+v", dpdk.Devices[0])
	}
	xsk, _ := s.Get(Key{DriverFastpath, "uid-xsk"})
	if x := xsk.Devices[0].XDP; x == nil || x.PinDir != "/sys/fs/bpf/fastpath/uid-xsk-xsk" || x.ChannelsBefore != 4 || x.Queues != 2 || !x.Fallback ||
		xsk.Devices[0].Host.Alias != "old-alias" || xsk.Devices[0].Pod.Name != "xsk0" {
		t.Errorf("afxdp claim migrated as %+v", xsk.Devices[0])
	}
	memif, _ := s.Get(Key{DriverFastpath, "uid-memif"})
	if m := memif.Devices[0].Memif; m == nil || m.Role != "slave" || m.Socket != "/run/memif/fw0.sock" || m.UID != 1000 || m.GID != 1000 {
		t.Errorf("memif slave migrated as %+v", memif.Devices[0].Memif)
	}
	if m := memif.Devices[1].Memif; m == nil || m.Role != "master" || m.Link != "/run/memif/vpp1.sock" || m.Dir == "" {
		t.Errorf("memif master migrated as %+v", memif.Devices[1].Memif)
	}
	cni, _ := s.Get(Key{DriverCNI, "uid-cni"})
	if n := cni.Networks[0]; !n.Added || n.SandboxID != "0123456789abcdef" || n.NetNS != "/var/run/netns/cni-1234" || !strings.Contains(string(n.Conflist), "macvlan") {
		t.Errorf("CNI network migrated as %+v", n)
	}
	// The new file is of this version and holds the same.
	data, _ := os.ReadFile(path)
	if fileVersion(data) != Version {
		t.Errorf("checkpoint written in version %d", fileVersion(data))
	}
	if again := open(t, path).Claims(); !reflect.DeepEqual(again, all) {
		t.Error("the migrated checkpoint does not reload the same")
	}
}

// A crash after the new checkpoint was written but before the CNI file was
// removed repeats the migration: nothing is lost or doubled.
func TestMigrateInterrupted(t *testing.T) {
	dir := t.TempDir()
	path, cniPath := filepath.Join(dir, "checkpoint.json"), filepath.Join(dir, "cni-checkpoint.json")
	copyFile(t, "testdata/v1/checkpoint.json", path)
	copyFile(t, "testdata/v1/cni/cni-checkpoint.json", cniPath)
	first, err := Open(path, Legacy{CNI: cniPath})
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, "testdata/v1/cni/cni-checkpoint.json", cniPath)
	second, err := Open(path, Legacy{CNI: cniPath})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first.Claims(), second.Claims()) {
		t.Error("migrating twice changed the claims")
	}
}

func TestMigrateRefusesCorruptCNIFile(t *testing.T) {
	dir := t.TempDir()
	cniPath := filepath.Join(dir, "cni-checkpoint.json")
	if err := os.WriteFile(cniPath, []byte(`{"version": 1, "claims": {"x": null}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(filepath.Join(dir, "checkpoint.json"), Legacy{CNI: cniPath})
	if err == nil || !strings.Contains(err.Error(), cniPath) {
		t.Fatalf("Open = %v, want an error naming %s", err, cniPath)
	}
	if _, err := os.Stat(cniPath); err != nil {
		t.Error("the refused CNI file was removed")
	}
}
