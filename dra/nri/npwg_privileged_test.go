//go:build privileged

package nri

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// cniBinDir is the directory of the reference CNI plugins the project's
// test dependencies build: $FASTPATH_CNI_BIN, or what test/deps.sh says.
func cniBinDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FASTPATH_CNI_BIN")
	if dir == "" {
		out, err := exec.Command("bash", "../../test/deps.sh", "env").Output()
		if err != nil {
			t.Fatalf("test/deps.sh env: %v", err)
		}
		for s := bufio.NewScanner(bytes.NewReader(out)); s.Scan(); {
			if v, ok := strings.CutPrefix(s.Text(), "FASTPATH_CNI_BIN="); ok {
				dir = v
			}
		}
	}
	for _, p := range []string{"macvlan", "static"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("the reference CNI plugins are not built (test/deps.sh testbed builds them): %v", err)
		}
	}
	return dir
}

// TestNPWGReferencePlugins runs the networks a pod selects with the
// reference macvlan and static plugins: a failing second network leaves
// nothing of the first, a good selection puts both interfaces in the
// pod's namespace with their addresses (one from the element's "ips"),
// and the stop takes them away.
func TestNPWGReferencePlugins(t *testing.T) {
	bin := cniBinDir(t)
	_, ctx := ktesting.NewTestContext(t)
	master := newSharedParent(t).Attrs().Name
	nsPath := newNetNS(t)
	conf := func(name, master, address string) string {
		ipam := `{"type":"static"}`
		if address != "" {
			ipam = fmt.Sprintf(`{"type":"static","addresses":[{"address":%q}]}`, address)
		}
		return fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"macvlan","master":%q,"mode":"bridge","capabilities":{"ips":true},"ipam":%s}]}`,
			name, master, ipam)
	}
	nads := fakeNADs{
		"default/net-a":  nad("default", "net-a", conf("net-a", master, "")),
		"default/net-b":  nad("default", "net-b", conf("net-b", master, "10.77.0.3/24")),
		"default/broken": nad("default", "broken", conf("broken", fmt.Sprintf("%s-%d-none", testPrefix, os.Getpid()), "10.77.0.4/24")),
	}
	store, err := claims.Open(filepath.Join(t.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	writer := status.NewWriter(fake.NewClientset())
	writer.Start(ctx)
	cni := dataplane.NewCNI([]string{bin}, filepath.Join(t.TempDir(), "cache"), nil)
	patcher := &fakePatcher{}
	p := New(Options{Socket: filepath.Join(t.TempDir(), "nri.sock"), Store: store, Status: writer, CNI: cni, DelBackoff: time.Millisecond,
		NPWG: &NPWGOptions{NADs: nads, ConfDir: t.TempDir(), Plugins: []string{"macvlan", "static"}, Status: patcher, Policy: npwg.Policy{HostDevices: []string{master, "fpn-*"}},
			DefaultNetwork: "default/cluster-network", DefaultInterface: "eth0"}})
	h := &hooks{p: p}
	uid := fmt.Sprintf("npwg-%d", os.Getpid())
	sandbox := func(id, networks string) *api.PodSandbox {
		return &api.PodSandbox{Uid: uid, Id: id, Name: "web", Namespace: "default", Ips: []string{"10.244.0.5"},
			Annotations: map[string]string{nadv1.NetworkAttachmentAnnot: networks},
			Linux:       &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: nsPath}}}}
	}
	podLinks := func() []string {
		links, err := podHandle(t, nsPath).LinkList()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range links {
			if l.Attrs().Name != "lo" {
				out = append(out, l.Attrs().Name)
			}
		}
		slices.Sort(out)
		return out
	}
	assertNothing := func(when string) {
		t.Helper()
		if links := podLinks(); len(links) != 0 {
			t.Errorf("%s: the pod has %v", when, links)
		}
		if _, ok := store.Get(npwgKey(podOf(sandbox("", "")).UID)); ok {
			t.Errorf("%s: the pod's NPWG record is left", when)
		}
		if atts, err := cni.Attachments(); err != nil || len(atts) != 0 {
			t.Errorf("%s: libcni's cache has %v (%v)", when, atts, err)
		}
	}

	// A second network that fails: nothing of the first is left (§7.2).
	err = h.RunPodSandbox(ctx, sandbox("sandbox-1", `[{"name":"net-a","ips":["10.77.0.2/24"]},{"name":"broken"}]`))
	if err == nil || !strings.Contains(err.Error(), "network default/broken (interface net2)") {
		t.Fatalf("RunPodSandbox = %v, want the broken network's failure", err)
	}
	assertNothing("after the failure")

	// Both networks, in the annotation's order.
	sb := sandbox("sandbox-2", `[{"name":"net-a","ips":["10.77.0.2/24"]},{"name":"net-b","interface":"data0"}]`)
	if err := h.RunPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if links := podLinks(); !slices.Equal(links, []string{"data0", "net1"}) {
		t.Fatalf("the pod has %v, want [data0 net1]", links)
	}
	for name, want := range map[string]string{"net1": "10.77.0.2/24", "data0": "10.77.0.3/24"} {
		l := podLink(t, nsPath, name)
		if l.Type() != "macvlan" {
			t.Errorf("%s is a %s, want a macvlan", name, l.Type())
		}
		addrs, err := podHandle(t, nsPath).AddrList(l, netlink.FAMILY_V4)
		if err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != want {
			t.Errorf("%s has addresses %v (%v), want %s", name, addrs, err, want)
		}
	}
	rec, ok := store.Get(npwgKey(podOf(sb).UID))
	if !ok || len(rec.Networks) != 2 || !rec.Networks[0].Added || !rec.Networks[1].Added || rec.Networks[0].SandboxID != "sandbox-2" {
		t.Errorf("record %+v, want both networks added to sandbox-2", rec)
	}
	p.reports.Wait()
	if len(patcher.entries) != 1 {
		t.Fatalf("network-status written %d times", len(patcher.entries))
	}
	var got []string
	for _, st := range patcher.entries[0] {
		got = append(got, fmt.Sprintf("%s@%s%v", st.Name, st.Interface, st.IPs))
	}
	if want := []string{"default/cluster-network@eth0[10.244.0.5]", "default/net-a@net1[10.77.0.2]", "default/net-b@data0[10.77.0.3]"}; !slices.Equal(got, want) {
		t.Errorf("network-status %v, want %v", got, want)
	}
	if _, err := npwg.EncodeNetworkStatus(patcher.entries[0]); err != nil {
		t.Errorf("the network-status does not encode: %v", err)
	}

	// A container: everything is in place, nothing runs again.
	if _, _, err := h.CreateContainer(ctx, sb, &api.Container{}); err != nil {
		t.Fatal(err)
	}

	// A daemon killed in data0's ADD, after its record, before the
	// plugin made the interface: the restarted daemon's Synchronize
	// deletes what that ADD left and adds it again.
	if err := podHandle(t, nsPath).LinkDel(podLink(t, nsPath, "data0")); err != nil {
		t.Fatal(err)
	}
	New(p.opts).Synchronize(ctx, []*api.PodSandbox{sb})
	if links := podLinks(); !slices.Equal(links, []string{"data0", "net1"}) {
		t.Fatalf("after the restart the pod has %v, want [data0 net1]", links)
	}
	if err := h.StopPodSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	assertNothing("after the stop")
}
