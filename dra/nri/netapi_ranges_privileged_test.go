//go:build privileged

package nri

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/vishvananda/netlink"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dataplane"
	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/netapi"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// apiNetworks are networks of the CRI Network API, as the registry gives
// them to the plugin.
type apiNetworks map[string]*netapi.NetworkConfig

func (n apiNetworks) Conflist(name string) ([]byte, bool) {
	cfg, ok := n[name]
	if !ok {
		return nil, false
	}
	data, err := netapi.Conflist(cfg)
	return data, err == nil
}

func (n apiNetworks) IPRanges(name string) []string {
	var out []string
	for _, r := range n[name].GetIpRanges() {
		out = append(out, r.GetCidr())
	}
	return out
}

// The IP ranges of a network set through the CRI Network API reach the
// reference host-local plugin: as runtimeConfig through a macvlan that
// declares the ipRanges capability, and as host-local's ranges where the
// configuration names no subnet.
func TestPodNetworkIPRanges(t *testing.T) {
	bin := cniBinDir(t)
	if _, err := os.Stat(filepath.Join(bin, "host-local")); err != nil {
		t.Fatalf("the reference host-local plugin is not built: %v", err)
	}
	_, ctx := ktesting.NewTestContext(t)
	master := newSharedParent(t).Attrs().Name
	nsPath := newNetNS(t)
	ipamDir := t.TempDir()
	network := func(name, cidr string, caps ...string) *netapi.NetworkConfig {
		return &netapi.NetworkConfig{Metadata: &netapi.NetworkMetadata{Name: name}, IpRanges: []*netapi.IPRange{{Cidr: cidr}},
			Cniv1Config: &netapi.CNIv1Config{CniVersion: "1.0.0", Plugins: []*netapi.CNIv1PluginConfig{{Type: "macvlan", Capabilities: caps,
				Parameters: map[string]string{"master": master, "mode": "bridge", "ipam": fmt.Sprintf(`{"type": "host-local", "dataDir": %q}`, ipamDir)}}}}}
	}
	nets := apiNetworks{"ranged": network("ranged", "10.78.0.0/24", npwg.CapabilityIPRanges), "injected": network("injected", "10.79.0.0/24")}
	store, err := claims.Open(filepath.Join(t.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	writer := status.NewWriter(fake.NewClientset())
	writer.Start(ctx)
	cni := dataplane.NewCNI([]string{bin}, filepath.Join(t.TempDir(), "cache"), nil)
	p := New(Options{Socket: filepath.Join(t.TempDir(), "nri.sock"), Store: store, Status: writer, CNI: cni, DelBackoff: time.Millisecond,
		NPWG: &NPWGOptions{NADs: fakeNADs{}, ConfDir: t.TempDir(), Plugins: []string{"macvlan", "host-local"},
			Policy: npwg.Policy{HostDevices: []string{master}, HostPaths: []string{ipamDir}}, DefaultInterface: "eth0"},
		PodNetworks: &PodNetworkOptions{Networks: nets, Status: &fakePodNetworkStatus{},
			Objects: fakePodNetworks{networks: map[string]*pnv1.PodNetwork{"ranged": podNetwork("ranged", true), "injected": podNetwork("injected", true)}}}})
	h := &hooks{p: p}
	sb := &api.PodSandbox{Uid: fmt.Sprintf("ranges-%d", os.Getpid()), Id: "sandbox-1", Name: "web", Namespace: "default", Ips: []string{"10.244.0.5"},
		Annotations: map[string]string{pnv1.AnnotationNetworks: `[{"podNetworkName": "ranged", "interfaceName": "net1"}, {"podNetworkName": "injected", "interfaceName": "net2"}]`},
		Linux:       &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: nsPath}}}}
	if err := h.RunPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	for name, subnet := range map[string]string{"net1": "10.78.0.0/24", "net2": "10.79.0.0/24"} {
		l := podLink(t, nsPath, name)
		if l == nil {
			t.Fatalf("the pod has no %s", name)
		}
		addrs, err := podHandle(t, nsPath).AddrList(l, netlink.FAMILY_V4)
		if err != nil || len(addrs) != 1 {
			t.Fatalf("%s has addresses %v (%v), want one of %s", name, addrs, err, subnet)
		}
		if a, _ := netip.AddrFromSlice(addrs[0].IP.To4()); !netip.MustParsePrefix(subnet).Contains(a) {
			t.Errorf("%s has address %s, want one of %s", name, addrs[0].IPNet, subnet)
		}
	}
	if err := h.StopPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if l := podLink(t, nsPath, "net1"); l != nil {
		t.Error("net1 is left in the pod after the stop")
	}
}
