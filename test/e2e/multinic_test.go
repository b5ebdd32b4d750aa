//go:build e2e

package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fastpath-dra/fastpath/dataplane"
)

// The multi-NIC pod's configs, per request, in fastpath's form and in
// dranet's: nic0 and nic1 on one subnet, each address routed out of its
// own interface by a rule and a table, ARP answered and announced by each
// for its own address only; nic0 with BIG TCP sizes and GRO on; nic2's
// table alone holds 10.99.0.0/16. (A VRF: the bed's kernel has none;
// TestSRIOVAttachVRF makes one in the VM.)
var multiNICConfigs = map[string][2]string{
	"nic0": {`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "interface": {"name": "nic0", "addresses": ["10.80.0.2/24"],
		"routes": [{"destination": "10.80.0.0/24", "source": "10.80.0.2", "scope": "link", "table": 100}],
		"rules": [{"priority": 100, "from": "10.80.0.2/32", "table": 100}], "sysctls": {"ipv4.arp_ignore": "1", "ipv4.arp_announce": "2"},
		"ethtool": {"features": {"generic-receive-offload": true}}, "gsoMaxSize": 131072, "groMaxSize": 131072}}`,
		`{"interface": {"name": "nic0", "addresses": ["10.80.0.2/24"], "arpIgnore": 1, "arpAnnounce": 2, "gsoMaxSize": 131072, "groMaxSize": 131072},
		"routes": [{"destination": "10.80.0.0/24", "source": "10.80.0.2", "scope": 253, "table": 100}],
		"rules": [{"priority": 100, "source": "10.80.0.2", "table": 100}], "ethtool": {"features": {"generic-receive-offload": true}}}`},
	"nic1": {`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "interface": {"name": "nic1", "addresses": ["10.80.0.3/24"],
		"routes": [{"destination": "10.80.0.0/24", "source": "10.80.0.3", "scope": "link", "table": 101}],
		"rules": [{"priority": 101, "from": "10.80.0.3/32", "table": 101}], "sysctls": {"ipv4.arp_ignore": "1", "ipv4.arp_announce": "2"}}}`,
		`{"interface": {"name": "nic1", "addresses": ["10.80.0.3/24"], "arpIgnore": 1, "arpAnnounce": 2},
		"routes": [{"destination": "10.80.0.0/24", "source": "10.80.0.3", "scope": 253, "table": 101}], "rules": [{"priority": 101, "source": "10.80.0.3", "table": 101}]}`},
	"nic2": {`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "interface": {"name": "nic2", "addresses": ["10.81.0.2/24"],
		"routes": [{"destination": "10.81.0.0/24", "source": "10.81.0.2", "scope": "link", "table": 300}, {"destination": "10.99.0.0/16", "gateway": "10.81.0.1", "table": 300}],
		"rules": [{"priority": 102, "from": "10.81.0.2/32", "table": 300}]}}`,
		`{"interface": {"name": "nic2", "addresses": ["10.81.0.2/24"]},
		"routes": [{"destination": "10.81.0.0/24", "source": "10.81.0.2", "scope": 253, "table": 300}, {"destination": "10.99.0.0/16", "gateway": "10.81.0.1", "table": 300}],
		"rules": [{"priority": 102, "source": "10.81.0.2", "table": 300}]}`},
}

// vf0's config in fastpath's form, and in dra-driver-sriov's in the pod
// of dranet's.
func init() {
	multiNICConfigs["vf0"] = [2]string{`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "interface": {"name": "vf0"}}`,
		`{"apiVersion": "sriovnetwork.k8snetworkplumbingwg.io/v1alpha1", "kind": "VfConfig", "ifName": "vf0", "driver": "default"}`}
}

// multiNICVeths are the requests' stand-ins.
var multiNICVeths = map[string]string{"nic0": "fpv97a", "nic1": "fpv98a", "nic2": "fpv99a", "vf0": "fpv89a"}

// TestMultiNIC: three VF stand-ins in one pod (see multiNICConfigs). Each
// source address leaves through its own interface (the ARP requests its
// probes cause, captured on each host side, come from that interface's
// address alone); nic0 does not answer ARP for nic1's address (no ARP
// flux) and does for its own; the pod reads back its rules, tables,
// sysctls, BIG TCP sizes and GRO; the host has nic0's GSO size and GRO as
// they were once the pod goes. The same claim in dranet's form (its
// fourth request in dra-driver-sriov's) gives the same pod.
func TestMultiNIC(t *testing.T) {
	ctx := testContext(t)
	dataplaneSetupArgs(t, ctx, 26296, nil, 97, 98, 99, 89)
	d := lastDaemon
	for _, peer := range []string{"fpv97b", "fpv98b", "fpv99b"} {
		setLink(t, peer, true)
	}
	host, err := netlink.LinkByName("fpv97a")
	if err != nil {
		t.Fatal(err)
	}
	before, err := dataplane.ReadOffloads("fpv97a", dataplane.Offloads{Features: map[string]bool{"rx-gro": true}, GSOMaxSize: 1})
	if err != nil {
		t.Fatal(err)
	}

	native := multiNICPod(t, ctx, "e2e-multinic", 0)
	info := waitNetinfo(t, ctx, native)
	for _, want := range []string{
		"link nic0 master= gso=131072 gro=131072 arp_ignore=1 arp_announce=2 rx-gro=true",
		"link nic1 master= gso=65536 gro=65536 arp_ignore=1 arp_announce=2",
		"link nic2 master= ",
		"link vf0 master= ",
		"rule ip rule 102: from 10.81.0.2/32 to all table 300",
		"rule ip rule 100: from 10.80.0.2/32 to all table 100",
		"rule ip rule 101: from 10.80.0.3/32 to all table 101",
		"route table=100 10.80.0.0/24 via=<nil> src=10.80.0.2 dev=nic0",
		"route table=101 10.80.0.0/24 via=<nil> src=10.80.0.3 dev=nic1",
		"route table=300 10.99.0.0/16 via=10.81.0.1 src=<nil> dev=nic2",
	} {
		if !strings.Contains(info, want) {
			t.Errorf("the pod's netinfo lacks %q:\n%s", want, info)
		}
	}
	if strings.Contains(info, "table=254 10.99.0.0/16") {
		t.Errorf("10.99.0.0/16 is in the main table, not in nic2's alone:\n%s", info)
	}

	// Each address leaves by its own interface.
	for peer, own := range map[string]string{"fpv97b": "10.80.0.2", "fpv98b": "10.80.0.3"} {
		senders := arpSenders(t, peer, 1, 3*time.Second, own)
		for ip, n := range senders {
			if ip != own {
				t.Errorf("%s saw %d ARP requests from %s: only %s leaves that way (senders %v)", peer, n, ip, own, senders)
			}
		}
		if senders[own] == 0 {
			t.Errorf("%s saw no ARP request from %s", peer, own)
		}
	}
	// No ARP flux: nic0 answers for its address, not for nic1's.
	replies := arpAsk(t, "fpv97b", "10.80.0.1", []string{"10.80.0.3", "10.80.0.2"}, "10.80.0.2")
	if replies["10.80.0.3"] != 0 || replies["10.80.0.2"] == 0 {
		t.Errorf("asked on nic0's link for 10.80.0.3 and 10.80.0.2, replies %v: want 10.80.0.2's alone", replies)
	}

	deletePodAndClaim(t, ctx, native, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: native.Name}})
	waitNoClaims(t, ctx, d)
	after, err := dataplane.ReadOffloads("fpv97a", dataplane.Offloads{Features: map[string]bool{"rx-gro": true}, GSOMaxSize: 1})
	if err != nil || after.Features["rx-gro"] != before.Features["rx-gro"] || after.GSOMaxSize != before.GSOMaxSize {
		t.Errorf("fpv97a after the pod: %+v, %v; want %+v as before", after, err, before)
	}
	if l, err := netlink.LinkByName("fpv97a"); err != nil || l.Attrs().MTU != host.Attrs().MTU || l.Attrs().MasterIndex != 0 {
		t.Errorf("fpv97a after the pod: %v", err)
	}

	// dranet's form (vf0 in dra-driver-sriov's): the same pod, but for
	// its cluster network's address.
	dranet := multiNICPod(t, ctx, "e2e-multinic-dranet", 1)
	if got := waitNetinfo(t, ctx, dranet); withoutEth0(got) != withoutEth0(info) {
		t.Errorf("the pod of the claim in dranet's and dra-driver-sriov's forms:\n%s\nthe native claim's:\n%s", got, info)
	}
	deletePodAndClaim(t, ctx, dranet, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: dranet.Name}})
	waitNoClaims(t, ctx, d)
}

// withoutEth0 is a netinfo report without the cluster network's lines.
func withoutEth0(info string) string {
	var keep []string
	for _, l := range strings.Split(info, "\n") {
		if !strings.Contains(l, "eth0") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// multiNICPod runs a pod of one claim of nic0, nic1, nic2 and vf0 in the form
// (0: fastpath's, 1: dranet's), which probes 10.80.0.99.
func multiNICPod(t *testing.T, ctx context.Context, name string, form int) *corev1.Pod {
	t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	for _, req := range []string{"nic0", "nic1", "nic2", "vf0"} {
		claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: req, Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: "netdev.fastpath.dev",
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.attributes["fastpath.dev"].ifName == %q`, multiNICVeths[req])}}}}})
		claim.Spec.Devices.Config = append(claim.Spec.Devices.Config, resourceapi.DeviceClaimConfiguration{Requests: []string{req},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driverName,
				Parameters: runtime.RawExtension{Raw: []byte(multiNICConfigs[req][form])}}}})
	}
	return runClaimPod(t, ctx, claim, []corev1.EnvVar{{Name: "PROBE_TARGET", Value: "10.80.0.99"}})
}

// runClaimPod creates the claim and a pod of it running workload netinfo,
// and waits until it runs.
func runClaimPod(t *testing.T, ctx context.Context, claim *resourceapi.ResourceClaim, env []corev1.EnvVar) *corev1.Pod {
	t.Helper()
	if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create claim %s: %v", claim.Name, err)
	}
	t.Cleanup(func() { deleteClaim(t, claim.Name) })
	pod := claimPod(claim.Name, "netinfo", &corev1.PodResourceClaim{Name: "net", ResourceClaimName: &claim.Name})
	pod.Spec.Containers[0].Env = env
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	if _, err := bed.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// waitNetinfo is the pod's netinfo report.
func waitNetinfo(t *testing.T, ctx context.Context, pod *corev1.Pod) string {
	t.Helper()
	logs, err := bed.WaitPodLog(ctx, pod.Namespace, pod.Name, "-- end of netinfo", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return logs[:strings.Index(logs, "-- end of netinfo")]
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// arpSocket is an AF_PACKET socket of ARP frames on the host link name,
// with a read timeout.
func arpSocket(t *testing.T, name string) (int, *netlink.LinkAttrs) {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: l.Attrs().Index}); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return fd, l.Attrs()
}

// arp is an ARP frame's operation, sender and target address.
type arp struct {
	op             uint16
	sender, target string
}

// readARP reads ARP frames until done says so or the deadline passes.
func readARP(fd int, deadline time.Time, done func(arp) bool) {
	buf := make([]byte, 1500)
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil || n < 42 {
			continue
		}
		f := buf[14:n]
		a := arp{op: binary.BigEndian.Uint16(f[6:8]), sender: net.IP(f[14:18]).String(), target: net.IP(f[24:28]).String()}
		if done(a) {
			return
		}
	}
}

// arpSenders counts the sender addresses of the ARP requests seen on the
// host link name, until own has sent enough of them or the time is up.
func arpSenders(t *testing.T, name string, op uint16, most time.Duration, own string) map[string]int {
	t.Helper()
	fd, _ := arpSocket(t, name)
	seen := map[string]int{}
	readARP(fd, time.Now().Add(most), func(a arp) bool {
		if a.op == op {
			seen[a.sender]++
		}
		return seen[own] >= 3
	})
	return seen
}

// arpAsk asks, on the host link name, from sender, who has each of
// targets, in order, and counts the replies until last's arrives (or 3 s
// pass).
func arpAsk(t *testing.T, name, sender string, targets []string, last string) map[string]int {
	t.Helper()
	fd, attrs := arpSocket(t, name)
	for _, target := range targets {
		f := make([]byte, 42)
		copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		copy(f[6:], attrs.HardwareAddr)
		binary.BigEndian.PutUint16(f[12:], unix.ETH_P_ARP)
		copy(f[14:], []byte{0, 1, 8, 0, 6, 4, 0, 1})
		copy(f[22:], attrs.HardwareAddr)
		copy(f[28:], net.ParseIP(sender).To4())
		copy(f[38:], net.ParseIP(target).To4())
		addr := &unix.SockaddrLinklayer{Ifindex: attrs.Index, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
		if err := unix.Sendto(fd, f, 0, addr); err != nil {
			t.Fatalf("ask %s for %s: %v", name, target, err)
		}
	}
	replies := map[string]int{}
	readARP(fd, time.Now().Add(3*time.Second), func(a arp) bool {
		if a.op == 2 && a.target == sender {
			replies[a.sender]++
		}
		return replies[last] > 0
	})
	return replies
}
