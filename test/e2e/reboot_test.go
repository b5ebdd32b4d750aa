//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// earlierBoot is the boot ID the tests give the checkpoint's records: the
// daemon sees them as written before a reboot.
const earlierBoot = "00000000-0000-4000-8000-00000000e2e0"

// TestFaultReboot: a reboot as the daemon sees it. A pod runs with an
// afxdp claim; while the daemon is away, what a reboot takes goes (the
// claim's CDI spec from the tmpfs, its pins from the bpffs) and the
// checkpoint's records become those of an earlier boot; the CDI spec of
// the claim's device metadata goes with the tmpfs too. The daemon, back,
// prepares the claim again: its CDI spec and pins are back and its record
// is of this boot, and so is the metadata's spec, which the kubelet, not
// preparing again a claim it knows prepared, names when it creates the
// pod's container again (its workload killed); a new pod with a claim of
// the same kind runs; once both pods are gone the devices are as they
// were and nothing is left.
func TestFaultReboot(t *testing.T) {
	ctx := testContext(t)
	n := faultSetup(t, ctx, faultOptions{port: 26197, links: 2, up: true})
	tmpl := claimTemplate(t, ctx, "e2e-reboot", "xsk", "afxdp.fastpath.dev", `device.attributes["fastpath.dev"].kind == "netdev"`,
		&v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "xsk0", Addresses: []string{"10.83.0.2/24"}},
			XDP: &v1alpha1.XDPConfig{AttachMode: v1alpha1.AttachNative, Queues: 1}})
	first := templatePod("e2e-reboot-0", "ifaces", tmpl)
	createPod(t, ctx, first)
	waitRunningWith(t, ctx, first, "xsk0")
	recs := checkpointRecords(t, n.d)
	if len(recs) != 1 || len(recs[0].Devices) != 1 || recs[0].Devices[0].XDP == nil {
		t.Fatalf("checkpoint records while the pod runs: %+v, want one afxdp claim", recs)
	}
	spec, pins := recs[0].CDISpec, recs[0].Devices[0].XDP.PinDir
	metaSpec := filepath.Join(filepath.Dir(spec), "fastpath.dev_metadata_"+string(recs[0].UID)+"_xsk.json")
	if !exists(metaSpec) {
		t.Fatalf("no CDI spec of the claim's device metadata at %s", metaSpec)
	}

	n.d.away(t, ctx)
	for _, f := range []string{spec, metaSpec} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(pins); err != nil {
		t.Fatal(err)
	}
	setBootID(t, n.d, earlierBoot)
	n.d.back(t, ctx)

	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return exists(spec) && exists(filepath.Join(pins, bpf.PinProgram)) && exists(filepath.Join(pins, bpf.PinXSKMap)), nil
	})
	if err != nil {
		t.Errorf("after the reboot the claim's CDI spec (%v) and pins (%v) are not back", exists(spec), exists(filepath.Join(pins, bpf.PinProgram)))
	}
	boot, err := claims.BootID()
	if err != nil {
		t.Fatal(err)
	}
	if recs := checkpointRecords(t, n.d); len(recs) != 1 || recs[0].BootID != boot || !recs[0].Prepared {
		t.Errorf("checkpoint records after the reboot: %+v, want the claim prepared in boot %s", recs, boot)
	}
	if !exists(metaSpec) {
		t.Errorf("after the reboot the CDI spec of the claim's device metadata is not back at %s", metaSpec)
	}
	// The pod's container made again: the runtime resolves every CDI
	// device the kubelet remembers for it.
	uid := podUID(t, ctx, first)
	pid := workloadPID(uid)
	if pid == 0 {
		t.Fatalf("pod %s has no workload process", first.Name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := bed.Client().CoreV1().Pods(first.Namespace).Get(ctx, first.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount > 0 && cs.State.Running != nil && workloadPID(uid) != 0, nil
	})
	if err != nil {
		ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, _ := waitEvent(ectx, first.Name, "CDI")
		cancel()
		t.Fatalf("the pod's container was not made again after the reboot: %v (event: %s)", err, msg)
	}

	second := templatePod("e2e-reboot-1", "ifaces", tmpl)
	createPod(t, ctx, second)
	waitRunningWith(t, ctx, second, "xsk0")
	for _, p := range []string{first.Name, second.Name} {
		if err := bed.DeletePod(ctx, "default", p); err != nil {
			t.Fatal(err)
		}
	}
	n.assertRestored(t, ctx)
	n.assertClean(t, ctx)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// checkpointRecords are the claims in the daemon's checkpoint.
func checkpointRecords(t *testing.T, d *daemon) []claims.Claim {
	t.Helper()
	cls, _, err := claims.Read(d.checkpoint())
	if err != nil {
		t.Fatalf("checkpoint %s: %v", d.checkpoint(), err)
	}
	var out []claims.Claim
	for _, c := range cls {
		out = append(out, *c)
	}
	return out
}

// setBootID rewrites the boot ID of every record of the daemon's
// checkpoint, as the file stands: the daemon must be down. Its journal is
// folded into it first (version 2).
func setBootID(t *testing.T, d *daemon, boot string) {
	t.Helper()
	if err := claims.Convert(d.checkpoint(), claims.Legacy{}, 2); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(d.checkpoint())
	if err != nil {
		t.Fatal(err)
	}
	var cp map[string]any
	if err := json.Unmarshal(data, &cp); err != nil {
		t.Fatal(err)
	}
	recs, ok := cp["claims"].(map[string]any)
	if !ok || len(recs) == 0 {
		t.Fatalf("checkpoint %s holds no claims: %s", d.checkpoint(), data)
	}
	// The records change: their checksums would not match. A checkpoint
	// without them is read as an earlier release's.
	delete(cp, "checksums")
	for key, r := range recs {
		rec, ok := r.(map[string]any)
		if !ok {
			t.Fatalf("checkpoint %s: record %s is %T", d.checkpoint(), key, r)
		}
		if rec["driver"] == claims.DriverFastpath {
			rec["bootID"] = boot
		}
	}
	out, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := claims.WriteFileAtomic(d.checkpoint(), out, 0o600); err != nil {
		t.Fatal(fmt.Errorf("rewrite the checkpoint: %w", err))
	}
}

// TestFaultNodeReboot: the whole node reboots (testbed.RebootNode) while
// two pods run, one with a netdev claim and one with an afxdp claim: every
// process of the node dies, containerd's state, the pods' network
// namespaces (and the stand-in veths with them), the CDI specs and the
// bpffs go; the kubelet's state stays, and with it the claims it
// prepared, which it does not prepare again. The stand-ins come back as
// VFs do, the checkpoint is of an earlier boot. The daemon prepares both
// claims again, the kubelet gives both pods new sandboxes, and they run
// with their devices configured and their claims Ready; once they are gone
// the devices are as they were and nothing is left.
func TestFaultNodeReboot(t *testing.T) {
	ctx := testContext(t)
	n := faultSetup(t, ctx, faultOptions{port: 26199, links: 2})
	netdev := netdevTemplate(t, ctx, "e2e-nreboot-net", "net1", "10.83.1.2/24")
	afxdp := claimTemplate(t, ctx, "e2e-nreboot-xsk", "xsk", "afxdp.fastpath.dev", `device.attributes["fastpath.dev"].kind == "netdev"`,
		&v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "xsk0", Addresses: []string{"10.83.2.2/24"}},
			XDP: &v1alpha1.XDPConfig{AttachMode: v1alpha1.AttachNative, Queues: 1}})
	pods := []podWant{
		{pod: templatePod("e2e-nreboot-net", "ifaces", netdev), ifName: "net1", addr: "10.83.1.2/24", mtu: 1400},
		{pod: templatePod("e2e-nreboot-xsk", "ifaces", afxdp), ifName: "xsk0", addr: "10.83.2.2/24", mtu: 1500, xdp: true},
	}
	for _, p := range pods {
		createPod(t, ctx, p.pod)
		waitRunningWith(t, ctx, p.pod, p.ifName)
	}
	recs := checkpointRecords(t, n.d)
	if len(recs) != 2 {
		t.Fatalf("checkpoint records while the pods run: %+v, want two", recs)
	}

	before := n.d.restarts(t, ctx)
	err := bed.RebootNode(ctx, func() error {
		for _, l := range n.links {
			// The kernel frees a network namespace, and the veth in it, a
			// moment after its last user is gone: its peer in the host
			// goes with it.
			peer := strings.TrimSuffix(l.Name, "a") + "b"
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				_, err1 := netlink.LinkByName(l.Name)
				_, err2 := netlink.LinkByName(peer)
				return err1 != nil && err2 != nil, nil
			})
			if err != nil {
				return fmt.Errorf("%s outlived its pod's network namespace", l.Name)
			}
			if err := recreateVeth(l); err != nil {
				return err
			}
		}
		setBootID(t, n.d, earlierBoot)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if exists(r.CDISpec) {
			t.Fatalf("the reboot left the CDI spec %s", r.CDISpec)
		}
	}
	n.d.waitRestarted(t, ctx, before)
	for _, p := range pods {
		checkPodDevice(t, ctx, p)
	}
	for _, r := range recs {
		if !exists(r.CDISpec) {
			t.Errorf("the CDI spec %s is not back", r.CDISpec)
		}
		for _, d := range r.Devices {
			if d.XDP != nil && !exists(filepath.Join(d.XDP.PinDir, bpf.PinProgram)) {
				t.Errorf("the pins in %s are not back", d.XDP.PinDir)
			}
		}
	}
	for _, p := range pods {
		if err := bed.DeletePod(ctx, "default", p.pod.Name); err != nil {
			t.Fatal(err)
		}
	}
	n.assertRestored(t, ctx)
	n.assertClean(t, ctx)
}

// recreateVeth makes the stand-in again as it was, with its peer: a VF
// back after a reboot, with its name and MAC.
func recreateVeth(l linkState) error {
	mac, err := net.ParseMAC(l.MAC)
	if err != nil {
		return err
	}
	peer := strings.TrimSuffix(l.Name, "a") + "b"
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: l.Name, MTU: l.MTU, HardwareAddr: mac}, PeerName: peer}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s again: %w", l.Name, err)
	}
	if l.Up {
		link, err := netlink.LinkByName(l.Name)
		if err == nil {
			err = netlink.LinkSetUp(link)
		}
		if err != nil {
			return fmt.Errorf("set %s up: %w", l.Name, err)
		}
	}
	return nil
}
