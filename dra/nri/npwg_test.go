package nri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	cni100 "github.com/containernetworking/cni/pkg/types/100"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// fakeNADs serves NetworkAttachmentDefinitions from a map.
type fakeNADs map[string]*nadv1.NetworkAttachmentDefinition

func (f fakeNADs) GetNAD(_ context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error) {
	if nad, ok := f[namespace+"/"+name]; ok {
		return nad, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "k8s.cni.cncf.io", Resource: "network-attachment-definitions"}, name)
}

func nad(namespace, name, config string) *nadv1.NetworkAttachmentDefinition {
	return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: config}}
}

// fakePatcher records the network-status written.
type fakePatcher struct {
	mu      sync.Mutex
	entries [][]nadv1.NetworkStatus
}

func (f *fakePatcher) PatchNetworkStatus(_ context.Context, _, _ string, _ types.UID, entries []nadv1.NetworkStatus) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, entries)
	return nil
}

// npwgCNI plays libcni for NPWG attachments: what is added is kept by
// interface, ADD of an interface in fail fails.
type npwgCNI struct {
	fakeCNI
	mu    sync.Mutex
	added map[string]dataplane.CNINetwork // by ifName
	order []string
	dels  []string // ifName@sandbox
	fail  string
	// ignoreIPs: the plugin gives its own address, not the one the ips
	// capability asks for.
	ignoreIPs bool
}

func (f *npwgCNI) Add(_ context.Context, n dataplane.CNINetwork) (dataplane.CNIResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.order = append(f.order, "ADD "+n.IfName)
	// As a plugin does, ADD may leave something behind when it fails.
	f.added[n.IfName] = n
	if n.IfName == f.fail {
		return dataplane.CNIResult{}, errors.New("macvlan: failed to create macvlan: no master")
	}
	return f.result(n), nil
}

func (f *npwgCNI) result(n dataplane.CNINetwork) dataplane.CNIResult {
	zero := 0
	_, ipn, _ := net.ParseCIDR("10.1.0.0/24")
	ipn.IP = net.IPv4(10, 1, 0, byte(len(n.IfName)+len(f.added)))
	// As a plugin with the ips capability does: the address asked for.
	var ips []string
	switch v := n.CapabilityArgs["ips"].(type) {
	case []string:
		ips = v
	case []any:
		for _, s := range v {
			ips = append(ips, fmt.Sprint(s))
		}
	}
	if len(ips) > 0 && !f.ignoreIPs {
		if ip, asked, err := net.ParseCIDR(ips[0]); err == nil {
			asked.IP = ip
			ipn = asked
		}
	}
	res := &cni100.Result{CNIVersion: "1.1.0", Interfaces: []*cni100.Interface{{Name: n.IfName, Mac: "02:00:00:00:00:01", Sandbox: n.NetNS}},
		IPs: []*cni100.IPConfig{{Interface: &zero, Address: *ipn, Gateway: net.IPv4(10, 1, 0, 1)}}}
	raw, _ := json.Marshal(res)
	return dataplane.CNIResult{Raw: raw, Current: res}
}

func (f *npwgCNI) Added(_ context.Context, n dataplane.CNINetwork) (dataplane.CNIResult, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.added[n.IfName]; !ok || n.IfName == f.fail {
		return dataplane.CNIResult{}, false, nil
	}
	return f.result(n), true, nil
}

// Cached is the result ADD gave, as libcni caches it.
func (f *npwgCNI) Cached(ctx context.Context, n dataplane.CNINetwork) (dataplane.CNIResult, bool, error) {
	return f.Added(ctx, n)
}

func (f *npwgCNI) Del(_ context.Context, n dataplane.CNINetwork) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.order = append(f.order, "DEL "+n.IfName)
	f.dels = append(f.dels, n.IfName+"@"+n.ContainerID)
	delete(f.added, n.IfName)
	return nil
}

func (f *npwgCNI) addedNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k := range f.added {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

const (
	macvlanConf = `{"cniVersion":"1.0.0","name":"%s","plugins":[{"type":"macvlan","master":"eth9","capabilities":{"ips":true},"ipam":{"type":"static"}}]}`
	npwgPodUID  = "pod-npwg"
)

type npwgRig struct {
	// routes are the default routes set: interface and gateways.
	routes  []string
	plugin  *Plugin
	cni     *npwgCNI
	patcher *fakePatcher
	store   *claims.Store
	writer  *status.Writer
	ctx     context.Context
}

func newNPWGRig(t *testing.T, cls ...claims.Claim) *npwgRig {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	store, err := claims.Open(filepath.Join(t.TempDir(), "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cls {
		if err := store.Admit(c); err != nil {
			t.Fatal(err)
		}
	}
	writer := status.NewWriter(fake.NewClientset())
	writer.Start(ctx)
	r := &npwgRig{cni: &npwgCNI{added: map[string]dataplane.CNINetwork{}}, patcher: &fakePatcher{}, store: store, writer: writer, ctx: ctx}
	nads := fakeNADs{
		"default/net-a":   nad("default", "net-a", fmt.Sprintf(macvlanConf, "net-a")),
		"default/net-b":   nad("default", "net-b", fmt.Sprintf(macvlanConf, "net-b")),
		"shared/net-c":    nad("shared", "net-c", fmt.Sprintf(macvlanConf, "net-c")),
		"secret/net-d":    nad("secret", "net-d", fmt.Sprintf(macvlanConf, "net-d")),
		"default/bridged": nad("default", "bridged", `{"cniVersion":"1.0.0","name":"bridged","type":"bridge","ipam":{"type":"dhcp"}}`),
		"default/plain":   nad("default", "plain", `{"cniVersion":"1.0.0","name":"plain","type":"macvlan","master":"eth9"}`),
		"default/uplink":  nad("default", "uplink", `{"cniVersion":"1.0.0","name":"uplink","type":"macvlan","master":"eth0","ipam":{"type":"static","dataDir":"/etc"}}`),
		"default/tuned": nad("default", "tuned", `{"cniVersion":"1.0.0","name":"tuned","plugins":[{"type":"macvlan","master":"eth9","ipam":{"type":"static"}},`+
			`{"type":"tuning","sysctl":{"net.ipv4.conf.IFNAME.rp_filter":"0"}}]}`),
	}
	r.plugin = New(Options{Store: store, Status: writer, CNI: r.cni, DelBackoff: time.Millisecond, NPWG: &NPWGOptions{
		NADs: nads, ConfDir: t.TempDir(), Policy: npwg.Policy{AllowedNamespaces: []string{"shared"}, HostDevices: []string{"eth9", "eth7"}},
		Plugins: []string{"macvlan", "static", "tuning"}, Status: r.patcher, DefaultNetwork: "default/cluster-network", DefaultInterface: "eth0",
		SetDefaultRoute: func(netns, ifName string, gws []net.IP) error {
			r.routes = append(r.routes, fmt.Sprintf("%s %s via %v", netns, ifName, gws))
			return nil
		},
		InspectLink: func(netns, ifName string) (dataplane.PodLink, error) {
			if netns != "/var/run/netns/web" || ifName != "eth0" {
				return dataplane.PodLink{}, fmt.Errorf("no %s in %s", ifName, netns)
			}
			return dataplane.PodLink{MAC: "0a:58:0a:f4:00:05", MTU: 1450,
				Addresses: []netip.Addr{netip.MustParseAddr("10.244.0.5"), netip.MustParseAddr("fd00::5")}}, nil
		}}})
	return r
}

func npwgPod(networks string) Pod {
	return Pod{UID: npwgPodUID, Namespace: "default", Name: "web", SandboxID: "sandbox-1", NetNS: "/var/run/netns/web",
		Networks: networks, IPs: []string{"10.244.0.5", "fd00::5"}}
}

// TestNPWGAttachDetach: the networks the annotation selects are recorded
// as one record of the pod and added after the pod's CNI claims, in the
// annotation's order, with names the claims do not have and the runtime
// config the elements ask for; the network-status has the default network
// first; a stop deletes them and the record.
func TestNPWGAttachDetach(t *testing.T) {
	claim := claims.Claim{Driver: claims.DriverCNI, UID: "uid-net", Namespace: "default", Name: "net", Prepared: true,
		Pod: claims.Pod{UID: npwgPodUID, Name: "web"},
		Networks: []claims.Network{{Request: "a", Pool: "node", Device: "cni-0", IfName: "net1",
			Conflist: []byte(`{"cniVersion":"1.1.0","name":"default-net-a","plugins":[{"type":"macvlan"}]}`)}}}
	r := newNPWGRig(t, claim)
	pod := npwgPod(`[{"name":"net-b","ips":["10.1.0.9/24"],"default-route":["10.1.0.1"]},{"name":"net-c","namespace":"shared"},{"name":"net-a","interface":"data0"}]`)
	if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if want := []string{"ADD net1", "ADD net2", "ADD net3", "ADD data0"}; !slices.Equal(r.cni.order, want) {
		t.Errorf("CNI calls %v, want %v (the claim's network first, then the annotation's in order)", r.cni.order, want)
	}
	rec, ok := r.store.Get(npwgKey(npwgPodUID))
	if !ok {
		t.Fatal("no NPWG record")
	}
	var got []string
	for _, n := range rec.Networks {
		if !n.Added || n.SandboxID != pod.SandboxID || n.NetNS != pod.NetNS {
			t.Errorf("network %s: not recorded as added to the sandbox: %+v", n.Request, n)
		}
		got = append(got, n.Request+"@"+n.IfName)
	}
	if want := []string{"default/net-b@net2", "shared/net-c@net3", "default/net-a@data0"}; !slices.Equal(got, want) {
		t.Errorf("record %v, want %v", got, want)
	}
	if ips := r.cni.added["net2"].CapabilityArgs["ips"]; fmt.Sprint(ips) != "[10.1.0.9/24]" {
		t.Errorf("runtimeConfig ips of net2 = %v, want [10.1.0.9/24]", ips)
	}
	if want := []string{"/var/run/netns/web net2 via [10.1.0.1]"}; !slices.Equal(r.routes, want) {
		t.Errorf("default routes set %v, want %v (net-b's default-route)", r.routes, want)
	}
	// The CNI claim's status write may still be going; none is left
	// pending for the NPWG record, which has no ResourceClaim.
	if err := wait.PollUntilContextTimeout(r.ctx, time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return r.writer.Pending() == 0, nil
	}); err != nil {
		t.Errorf("%d claim status writes pending: an NPWG record has no ResourceClaim", r.writer.Pending())
	}
	r.plugin.reports.Wait()
	if len(r.patcher.entries) != 1 {
		t.Fatalf("network-status written %d times, want 1", len(r.patcher.entries))
	}
	sts := r.patcher.entries[0]
	var names []string
	for _, st := range sts {
		names = append(names, st.Name+"@"+st.Interface)
	}
	// The CNI claim's network too, named after the claim, before the
	// selected networks: in the order they were added.
	if want := []string{"default/cluster-network@eth0", "default/net@net1", "default/net-b@net2", "shared/net-c@net3", "default/net-a@data0"}; !slices.Equal(names, want) {
		t.Errorf("network-status %v, want %v", names, want)
	}
	if !sts[0].Default || !slices.Equal(sts[0].IPs, []string{"10.244.0.5", "fd00::5"}) || sts[0].Mac != "0a:58:0a:f4:00:05" || sts[0].Mtu != 1450 {
		t.Errorf("default network's entry %+v: want default, the pod's IPs, eth0's MAC and MTU", sts[0])
	}
	// Without the runtime's IPs, eth0's addresses.
	noIPs := pod
	noIPs.IPs = nil
	if def, ok := r.plugin.defaultNetworkStatus(noIPs); !ok || !slices.Equal(def.IPs, []string{"10.244.0.5", "fd00::5"}) || def.Mac == "" {
		t.Errorf("default network's entry without the runtime's IPs: %+v, %v", def, ok)
	}
	// No address known at all (the link unreadable): the entry still,
	// §5.2 makes it required, without ips.
	noIPs.NetNS = "/var/run/netns/gone"
	if def, ok := r.plugin.defaultNetworkStatus(noIPs); !ok || !def.Default || def.Name != "default/cluster-network" || def.Interface != "eth0" || len(def.IPs) != 0 {
		t.Errorf("the default network's entry with no address known: %+v, %v; want it, default, on eth0, without ips", def, ok)
	}
	if len(sts[1].IPs) != 1 || sts[1].Mac == "" {
		t.Errorf("the CNI claim's entry %+v: want the result's IP and MAC", sts[1])
	}
	if !slices.Equal(sts[2].Gateway, []string{"10.1.0.1"}) || len(sts[2].IPs) != 1 {
		t.Errorf("net-b's entry %+v: want its gateway and the result's IP", sts[2])
	}

	// Again (Synchronize, CreateContainer): nothing runs twice.
	if err := r.plugin.EnsurePod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if n := len(r.cni.order); n != 4 {
		t.Errorf("a repeated attach ran CNI again: %v", r.cni.order)
	}

	r.cni.order = nil
	if err := r.plugin.DetachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if want := []string{"DEL data0", "DEL net3", "DEL net2", "DEL net1"}; !slices.Equal(r.cni.order, want) {
		t.Errorf("CNI calls %v, want %v (the reverse of the ADDs)", r.cni.order, want)
	}
	if names := r.cni.addedNames(); len(names) != 0 {
		t.Errorf("still added after the stop: %v", names)
	}
	if _, ok := r.store.Get(npwgKey(npwgPodUID)); ok {
		t.Error("the NPWG record outlived the stop")
	}
	if c, _ := r.store.Get(claim.Key()); c.Networks[0].Added {
		t.Error("the claim's network is still recorded as added")
	}
}

// TestNPWGFailureLeavesNothing: the first failure fails the pod, runs no
// later attachment, and leaves nothing of the earlier ones (§7.2).
func TestNPWGFailureLeavesNothing(t *testing.T) {
	r := newNPWGRig(t)
	r.cni.fail = "net2"
	pod := npwgPod("net-a,net-b,shared/net-c")
	err := r.plugin.AttachPod(r.ctx, pod)
	if err == nil {
		t.Fatal("the pod started with a network that failed")
	}
	for _, want := range []string{"pod default/web", "network default/net-b", "interface net2", "no master"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if want := []string{"ADD net1", "ADD net2", "DEL net2", "DEL net1"}; !slices.Equal(r.cni.order, want) {
		t.Errorf("CNI calls %v, want %v", r.cni.order, want)
	}
	if names := r.cni.addedNames(); len(names) != 0 {
		t.Errorf("left added: %v", names)
	}
	if _, ok := r.store.Get(npwgKey(npwgPodUID)); ok {
		t.Error("a failed attach left its record")
	}
	r.plugin.reports.Wait()
	if len(r.patcher.entries) != 0 {
		t.Errorf("network-status written for a pod that failed: %v", r.patcher.entries)
	}
}

// TestNPWGRefused: what the annotation asks for that cannot be done fails
// the sandbox before any plugin runs, naming the pod, the annotation and
// the element, and records nothing.
func TestNPWGRefused(t *testing.T) {
	claim := claims.Claim{Driver: claims.DriverFastpath, UID: "uid-vf", Namespace: "default", Name: "vf", Prepared: true,
		Pod:     claims.Pod{UID: npwgPodUID, Name: "web"},
		Devices: []claims.Device{{Request: "nic", Pool: "node", Device: "pci-0", Pod: &claims.PodInterface{Name: "fast0"}}}}
	for _, tc := range []struct {
		name, networks string
		want           []string
	}{
		{"malformed", `[{"name":"net-a"},{"name":"Net_B"}]`, []string{"pod default/web", nadv1.NetworkAttachmentAnnot, "[1].name"}},
		{"interface of a claim", "net-a@fast0", []string{"pod default/web", "fast0"}},
		{"interface of the default network", "net-a@eth0", []string{"eth0"}},
		{"no such network", "net-a,missing", []string{"element 1 (network default/missing, interface net2)", "not found"}},
		{"namespace not allowed", "secret/net-d", []string{"element 0", "network not allowed", "--npwg-allowed-namespaces"}},
		{"plugin not allowed", "bridged", []string{"element 0 (network default/bridged", `"bridge" "dhcp"`, "--cni-plugins"}},
		{"host objects not allowed", "net-a,uplink", []string{"element 1 (network default/uplink", `master "eth0" is not one of the host devices the operator allows (eth9, eth7)`,
			`ipam.dataDir "/etc" is not under a host directory the operator allows (none)`, "--npwg-host-devices"}},
		{"capability missing", `[{"name":"net-a"},{"name":"plain","mac":"02:00:00:00:00:09"}]`, []string{"element 1 (network default/plain", `capability "mac"`}},
		// The element's cni-args go into tuning's args.cni, which tuning
		// reads over its own sysctls.
		{"a sysctl of the node in cni-args", `[{"name":"tuned","cni-args":{"sysctl":{"kernel.core_pattern":"|/tmp/x"}}}]`,
			[]string{"element 0 (network default/tuned", `plugins[1] (tuning): args.cni.sysctl[kernel.core_pattern] "kernel.core_pattern" changes the node`,
				`the element's cni-args "sysctl"`, "--npwg-host-options"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newNPWGRig(t, claim)
			err := r.plugin.AttachPod(r.ctx, npwgPod(tc.networks))
			if err == nil {
				t.Fatal("the pod started")
			}
			t.Log(err)
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if len(r.cni.order) != 0 {
				t.Errorf("CNI ran: %v", r.cni.order)
			}
			if _, ok := r.store.Get(npwgKey(npwgPodUID)); ok {
				t.Error("recorded")
			}
		})
	}
}

// TestNPWGOff: without --npwg, or for a pod of the host's network, the
// annotation is not fastpath's (Multus may serve it).
func TestNPWGOff(t *testing.T) {
	r := newNPWGRig(t)
	hostNet := npwgPod("net-a")
	hostNet.NetNS = ""
	if err := r.plugin.AttachPod(r.ctx, hostNet); err != nil {
		t.Fatal(err)
	}
	r.plugin.reports.Wait()
	r.plugin.opts.NPWG = nil
	if err := r.plugin.AttachPod(r.ctx, npwgPod("net-a")); err != nil {
		t.Fatal(err)
	}
	if err := r.plugin.EnsurePod(r.ctx, npwgPod("net-a")); err != nil {
		t.Fatal(err)
	}
	if len(r.cni.order) != 0 || len(r.store.Claims()) != 0 {
		t.Errorf("acted: CNI %v, records %v", r.cni.order, r.store.Claims())
	}
}

// TestNPWGEnsurePod: a pod whose RunPodSandbox fastpath missed gets its
// networks before its first container.
func TestNPWGEnsurePod(t *testing.T) {
	r := newNPWGRig(t)
	h := &hooks{p: r.plugin}
	sb := &api.PodSandbox{Uid: npwgPodUID, Id: "sandbox-1", Name: "web", Namespace: "default",
		Annotations: map[string]string{nadv1.NetworkAttachmentAnnot: "net-a"}, Ips: []string{"10.244.0.5"},
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: "/var/run/netns/web"}}}}
	if _, _, err := h.CreateContainer(r.ctx, sb, &api.Container{}); err != nil {
		t.Fatal(err)
	}
	if names := r.cni.addedNames(); !slices.Equal(names, []string{"net1"}) {
		t.Errorf("added %v, want [net1]", names)
	}
	if err := h.StopPodSandbox(r.ctx, sb); err != nil {
		t.Fatal(err)
	}
	if names := r.cni.addedNames(); len(names) != 0 || len(r.store.Claims()) != 0 {
		t.Errorf("after the stop: added %v, records %d", names, len(r.store.Claims()))
	}
}

// TestNPWGRecovery: a daemon killed between a network's record and its
// ADD finds the record at its restart: Synchronize completes a running
// pod (DEL of what ADD may have left, then ADD) and deletes the networks
// of a pod that is gone, and its record.
func TestNPWGRecovery(t *testing.T) {
	r := newNPWGRig(t)
	pod := npwgPod("net-a,net-b")
	if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	r.plugin.reports.Wait()
	// As if ADD of net2 never ran: recorded, not in libcni's cache.
	delete(r.cni.added, "net2")
	r.cni.order = nil
	restarted := New(r.plugin.opts)
	sb := &api.PodSandbox{Uid: string(pod.UID), Id: pod.SandboxID, Name: pod.Name, Namespace: pod.Namespace,
		Annotations: map[string]string{nadv1.NetworkAttachmentAnnot: pod.Networks},
		Linux:       &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: pod.NetNS}}}}
	restarted.Synchronize(r.ctx, []*api.PodSandbox{sb})
	if want := []string{"DEL net2", "ADD net2"}; !slices.Equal(r.cni.order, want) {
		t.Errorf("CNI calls %v, want %v", r.cni.order, want)
	}
	if names := r.cni.addedNames(); !slices.Equal(names, []string{"net1", "net2"}) {
		t.Errorf("added %v", names)
	}
	restarted.Synchronize(r.ctx, nil)
	if names := r.cni.addedNames(); len(names) != 0 || len(r.store.Claims()) != 0 {
		t.Errorf("after the pod is gone: added %v, records %d", names, len(r.store.Claims()))
	}
}

// TestNPWGMissedHooks: a pod whose RunPodSandbox and CreateContainer were
// both missed (no daemon connected: the one a rolling update replaces was
// killed in its RunPodSandbox, before it recorded anything, and the new
// one did not serve yet) is in no record; the next daemon's Synchronize
// adds the networks it selects. A pod selecting none is left alone.
func TestNPWGMissedHooks(t *testing.T) {
	r := newNPWGRig(t)
	pod := npwgPod("net-a,net-b")
	sb := &api.PodSandbox{Uid: string(pod.UID), Id: pod.SandboxID, Name: pod.Name, Namespace: pod.Namespace,
		Annotations: map[string]string{nadv1.NetworkAttachmentAnnot: pod.Networks},
		Linux:       &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: pod.NetNS}}}}
	plain := &api.PodSandbox{Uid: "uid-plain", Id: "sandbox-plain", Name: "plain", Namespace: "default",
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: "/var/run/netns/plain"}}}}
	r.plugin.Synchronize(r.ctx, []*api.PodSandbox{sb, plain})
	r.plugin.reports.Wait()
	if want := []string{"ADD net1", "ADD net2"}; !slices.Equal(r.cni.order, want) {
		t.Errorf("CNI calls %v, want %v", r.cni.order, want)
	}
	if _, ok := r.store.Get(npwgKey(pod.UID)); !ok {
		t.Error("no NPWG record of the pod")
	}
	if n := len(r.store.Claims()); n != 1 {
		t.Errorf("%d records, want the pod's", n)
	}
	r.plugin.Synchronize(r.ctx, nil)
	if names := r.cni.addedNames(); len(names) != 0 || len(r.store.Claims()) != 0 {
		t.Errorf("after the pod is gone: added %v, records %d", names, len(r.store.Claims()))
	}
}

// TestNPWGEarlierSandbox: a pod's networks recorded added to an earlier
// sandbox whose stop fastpath missed (it was down) are deleted from that
// sandbox before they are added to the new one, so that nothing of the
// first ADD (an address) is left.
func TestNPWGEarlierSandbox(t *testing.T) {
	r := newNPWGRig(t)
	first := npwgPod("net-a,net-b")
	if err := r.plugin.AttachPod(r.ctx, first); err != nil {
		t.Fatal(err)
	}
	r.plugin.reports.Wait()
	r.cni.order = nil
	second := first
	second.SandboxID, second.NetNS = "sandbox-2", "/var/run/netns/web-2"
	if err := New(r.plugin.opts).AttachPod(r.ctx, second); err != nil {
		t.Fatal(err)
	}
	if want := []string{"net1@sandbox-1", "net2@sandbox-1"}; !slices.Equal(r.cni.dels, want) {
		t.Errorf("DELs %v, want %v (each network deleted from the earlier sandbox)", r.cni.dels, want)
	}
	if want := []string{"DEL net1", "ADD net1", "DEL net2", "ADD net2"}; !slices.Equal(r.cni.order, want) {
		t.Errorf("CNI calls %v, want %v", r.cni.order, want)
	}
	rec, _ := r.store.Get(npwgKey(first.UID))
	for _, n := range rec.Networks {
		if !n.Added || n.SandboxID != "sandbox-2" || n.NetNS != second.NetNS {
			t.Errorf("network %s recorded added %v to %s (%s), want the second sandbox", n.IfName, n.Added, n.SandboxID, n.NetNS)
		}
	}
}

// TestNPWGDefaultRouteFailure: a default route that cannot be set fails
// the pod as a failed ADD does, and leaves nothing; a default-route
// without gateways takes the network's result's.
func TestNPWGDefaultRouteFailure(t *testing.T) {
	r := newNPWGRig(t)
	r.plugin.opts.NPWG.SetDefaultRoute = func(string, string, []net.IP) error { return errors.New("network is unreachable") }
	err := r.plugin.AttachPod(r.ctx, npwgPod(`[{"name":"net-a"},{"name":"net-b","default-route":["10.1.0.1"]}]`))
	if err == nil || !strings.Contains(err.Error(), "default-route [10.1.0.1]") || !strings.Contains(err.Error(), "network is unreachable") ||
		!strings.Contains(err.Error(), "default/net-b") {
		t.Errorf("error %v: want the network, its default-route and the cause", err)
	}
	if names := r.cni.addedNames(); len(names) != 0 {
		t.Errorf("networks left added: %v", names)
	}
	if _, ok := r.store.Get(npwgKey(npwgPodUID)); ok {
		t.Error("the NPWG record outlived the failure")
	}

	var gws []net.IP
	r.plugin.opts.NPWG.SetDefaultRoute = func(_, _ string, g []net.IP) error { gws = g; return nil }
	if err := r.plugin.AttachPod(r.ctx, npwgPod(`[{"name":"net-b","default-route":[]}]`)); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(gws) != "[10.1.0.1]" {
		t.Errorf("default route via %v, want the result's gateway 10.1.0.1", gws)
	}
}

// A NetworkAttachmentDefinition's configuration is read again when its
// resourceVersion changes, and only then.
func TestNPWGConfigKeptByVersion(t *testing.T) {
	r := newNPWGRig(t)
	nads := r.plugin.opts.NPWG.NADs.(fakeNADs)
	n := nad("default", "versioned", fmt.Sprintf(macvlanConf, "versioned"))
	n.UID, n.ResourceVersion = "nad-uid", "1"
	nads["default/versioned"] = n
	master := func() string {
		t.Helper()
		if err := r.plugin.AttachPod(r.ctx, npwgPod("versioned")); err != nil {
			t.Fatal(err)
		}
		var conf struct {
			Plugins []map[string]any `json:"plugins"`
		}
		if err := json.Unmarshal(r.cni.added["net1"].Conflist, &conf); err != nil {
			t.Fatal(err)
		}
		if err := r.plugin.DetachPod(r.ctx, npwgPod("versioned")); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(conf.Plugins[0]["master"])
	}
	if got := master(); got != "eth9" {
		t.Fatalf("master %s, want eth9", got)
	}
	n.Spec.Config = strings.Replace(n.Spec.Config, "eth9", "eth7", 1)
	if got := master(); got != "eth9" {
		t.Errorf("master %s with the resourceVersion unchanged, want the configuration read at version 1 (eth9)", got)
	}
	n.ResourceVersion = "2"
	if got := master(); got != "eth7" {
		t.Errorf("master %s at resourceVersion 2, want eth7", got)
	}
}

// A plugin that gives another address than the one the element's ips (or
// an IPAMClaim) asks for fails the attachment, and nothing is left added:
// the pod never runs with another address.
func TestNPWGAddressNotHonoured(t *testing.T) {
	r := newNPWGRig(t)
	r.cni.ignoreIPs = true
	pod := npwgPod(`[{"name": "net-b", "ips": ["10.1.0.9/24"]}]`)
	err := r.plugin.AttachPod(r.ctx, pod)
	if err == nil || !strings.Contains(err.Error(), "not 10.1.0.9/24, which the element's ips asks for") {
		t.Fatalf("AttachPod = %v, want the address not honoured", err)
	}
	if names := r.cni.addedNames(); len(names) != 0 {
		t.Errorf("networks left added: %v", names)
	}
	if _, ok := r.store.Get(npwgKey(npwgPodUID)); ok {
		t.Error("a record left")
	}
}

// CNI_ARGS carry no key of the pod's: IgnoreUnknown and the K8S_POD_*
// keys, whose values are the pod's Kubernetes names and IDs, whatever
// the element asks for. A pod's addresses, MAC and cni-args reach the
// plugins only in their configuration (args.cni, runtimeConfig), where
// they are judged with it: none as CNI_ARGS' IP, MAC or GATEWAY, which
// host-local, static and tuning also read.
func TestNPWGCNIArgs(t *testing.T) {
	r := newNPWGRig(t)
	pod := npwgPod(`[{"name":"net-a","ips":["10.1.0.9/24"],"cni-args":{"IP":"10.9.9.9","MAC":"02:00:00:00:00:01"}}]`)
	if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	n, ok := r.cni.added["net1"]
	if !ok {
		t.Fatalf("no ADD of net1: %v", r.cni.order)
	}
	want := [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web"},
		{"K8S_POD_INFRA_CONTAINER_ID", pod.SandboxID}, {"K8S_POD_UID", string(pod.UID)}}
	if !slices.Equal(n.Args, want) {
		t.Errorf("CNI_ARGS %q, want %q", n.Args, want)
	}
}
