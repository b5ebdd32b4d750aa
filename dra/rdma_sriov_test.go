//go:build sriov

package dra_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/test/netnstest"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// TestSRIOVRDMA: claims that ask for the RDMA device (config rdma) on top
// of a VF's netdev or of a shared PF, with soft-RoCE (rdma_rxe) standing
// in for a NIC's RDMA function.
//
//   - mode netdev, the node in shared mode: the kernel removes a software
//     RDMA device when its netdev leaves the host, so fastpath makes it
//     again on the interface in the pod; the claim's CDI spec, written
//     again, gives its verbs device (a new number) and rdma_cm;
//     ibv_devinfo, in a container made from the spec alone in the pod's
//     namespace, sees it. Released, it is made again on the VF's netdev
//     in the host.
//   - mode netdev, the node in exclusive mode: the device must be in the
//     pod's namespace. A kernel whose rdma_rxe keeps its devices in the
//     host's (as 6.12 does; this is probed first) cannot give it, and the
//     sandbox fails naming the device with everything back in the host;
//     a kernel that can gives it to the pod alone. A sub-interface claim
//     with rdma is refused at Prepare in this mode.
//   - a macvlan sub-interface of the PF, the node in shared mode: the pod
//     gets the PF's RDMA device's files, and ib_write_bw in the container
//     (from the CDI spec alone, in the pod's namespace, its connection
//     over the macvlan) writes 1,000 64 KiB messages with ib_write_bw on
//     the host through the device.
//
// A claim asking for rdma on a VF without an RDMA device is refused,
// naming the device and the field.
//
// On a 7.x kernel, whose rdma_rxe has a UDP socket (port 4791) per network
// namespace, ib_write_bw runs between the pod's device on its VF and the
// host's on the PF, through the NIC, in shared and in exclusive mode, and
// in exclusive mode ibv_devinfo -l in the pod lists its own device alone;
// two pods, each with a VF and its device, ping each other with rping
// and write with ib_write_bw.
// 6.12's rdma_rxe receives in the host's namespace only, so a pod's rxe
// sees no packet there, and its devices cannot be in a pod's namespace in
// exclusive mode. The macvlan case carries traffic through the device the
// claim gave, with both ends' queue pairs on it (rxe's loopback).
func TestSRIOVRDMA(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vfs := pf.VFsReady(t, 4)
	sriovtest.Modprobe(t, "rdma_rxe", "rdma_ucm")
	for _, tool := range []string{"rdma", "ibv_devinfo", "ib_write_bw", "nsenter", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s (Debian's iproute2, ibverbs-utils, perftest, util-linux; test/deps.sh testbed installs them on the host the VM mounts): %v", tool, err)
		}
	}
	setRDMAMode(t, "shared")

	t.Run("netdev/shared", func(t *testing.T) {
		vf := vfs[1]
		t.Cleanup(func() { pf.ResetVF(t, vf) })
		rxe := sriovtest.Prefix + "rv"
		addRXE(t, rxe, vf.Netdev)
		inv := discoverSRIOV(t)
		wantRDMAAttributes(t, inv, devices.PCIDeviceName(vf.Address), rxe, "shared")

		claim := testClaim("rdma-netdev", []alloc{{Request: "nic", Device: devices.PCIDeviceName(vf.Address)}},
			fromClaim(config(`"interface": {"name": "net1", "addresses": ["10.78.1.2/24"]}, "rdma": {}`)))
		client := fake.NewClientset(claim)
		dir := stateDir(t)
		d := startSRIOVDaemon(t, dir, 1, client, inv)
		if e := prepare(t, d.ctx, d.kubelet, claim); e != "" {
			t.Fatalf("prepare: %s", e)
		}
		dev := cdiDevice(t, dir, claim, "nic")
		wantNodes(t, dev, uverbsOf(t, rxe), "/dev/infiniband/rdma_cm")
		if !slices.Contains(dev.ContainerEdits.Env, "FASTPATH_RDMA_DEVICE_NIC="+rxe) {
			t.Errorf("the CDI spec's environment %v does not name RDMA device %s", dev.ContainerEdits.Env, rxe)
		}

		podNS := netnstest.New(t, sriovtest.Prefix+"-rdma-netdev")
		pod := nri.Pod{UID: claim.Status.ReservedFor[0].UID, Namespace: claim.Namespace, Name: claim.Status.ReservedFor[0].Name, SandboxID: "sb-rdma", NetNS: podNS}
		if err := d.plugin.AttachPod(d.ctx, pod); err != nil {
			t.Fatalf("RunPodSandbox: %v", err)
		}
		if !rdmaIn(t, podNS, rxe) || rdmaParent(rxe) != "net1" {
			t.Fatalf("after RunPodSandbox RDMA device %s is not on net1 in the pod (seen from the pod: %v, on %q)", rxe, rdmaIn(t, podNS, rxe), rdmaParent(rxe))
		}
		// Made again, the device has a verbs device of its own number:
		// the spec says so before any container is created.
		dev = cdiDevice(t, dir, claim, "nic")
		wantNodes(t, dev, uverbsOf(t, rxe), "/dev/infiniband/rdma_cm")
		out, err := inContainer(t.Context(), podNS, dev, "ls /dev/infiniband; ibv_devinfo -d "+rxe)
		if err != nil {
			t.Fatalf("ibv_devinfo in the container: %v\n%s", err, out)
		}
		if !strings.Contains(out, "hca_id:\t"+rxe) || !strings.Contains(out, filepath.Base(uverbsOf(t, rxe))) {
			t.Fatalf("ibv_devinfo in the container does not show %s:\n%s", rxe, out)
		}
		t.Logf("in the container, from its CDI spec only:\n%s", firstLinesOf(out, 12))
		wantRDMAStatus(t, client, claim, rxe, "shared")
		if sriovtest.KernelAtLeast(t, 7, 0) {
			// RoCE from the pod's device on its VF to the host's on the
			// PF, through the NIC: a kernel whose rxe has a socket per
			// network namespace (rxe_ns.c).
			rxp := sriovtest.Prefix + "rp"
			addRXE(t, rxp, pf.Name)
			addAddress(t, pf.Name, "10.78.1.1/24")
			rdmaWrites(t, podNS, dev, rxe, "10.78.1.2", rxp, "10.78.1.1")
		}

		if err := d.plugin.DetachPod(d.ctx, pod); err != nil {
			t.Fatalf("StopPodSandbox: %v", err)
		}
		unprepare(t, d.ctx, d.kubelet, claim)
		sriovtest.WaitFor(t, 10*time.Second, "RDMA device "+rxe+" again on "+vf.Netdev+" in the host", func() bool {
			return rdmaParent(rxe) == vf.Netdev && sriovtest.Netdev(vf.Address) == vf.Netdev
		})
	})

	t.Run("netdev/exclusive", func(t *testing.T) {
		vf := vfs[1]
		t.Cleanup(func() { pf.ResetVF(t, vf) })
		rxe := sriovtest.Prefix + "rx"
		addRXE(t, rxe, vf.Netdev)
		rxp := sriovtest.Prefix + "rp"
		addRXE(t, rxp, pf.Name)
		// The mode changes only while the host is the one network
		// namespace: this cleanup runs after the namespaces' own.
		t.Cleanup(func() { setRDMAMode(t, "shared") })
		setRDMAMode(t, "exclusive")
		follows := rxeFollowsNetns(t)
		t.Logf("this kernel's rdma_rxe gives a device in the namespace it is asked from: %v", follows)

		inv := discoverSRIOV(t)
		wantRDMAAttributes(t, inv, devices.PCIDeviceName(vf.Address), rxe, "exclusive")
		pfDev := devices.PCIDeviceName(pf.Address)
		shareDevice(t, &inv, pfDev)
		claim := testClaim("rdma-excl", []alloc{{Request: "nic", Device: devices.PCIDeviceName(vf.Address)}},
			fromClaim(config(`"interface": {"name": "net1", "addresses": ["10.78.3.2/24"]}, "rdma": {}`)))
		sub := testClaim("rdma-excl-sub", []alloc{{Request: "sub", Device: pfDev}},
			fromClaim(config(`"mode": "macvlan", "interface": {"name": "net1"}, "rdma": {}`)))
		client := fake.NewClientset(claim, sub)
		dir := stateDir(t)
		d := startSRIOVDaemon(t, dir, 1, client, inv)

		e := prepare(t, d.ctx, d.kubelet, sub)
		for _, want := range []string{"rdma-excl-sub", pfDev, "rdma", "exclusive network namespace mode", rxp} {
			if !strings.Contains(e, want) {
				t.Errorf("Prepare of a macvlan claim with rdma in exclusive mode: error %q does not say %q", e, want)
			}
		}

		if e := prepare(t, d.ctx, d.kubelet, claim); e != "" {
			t.Fatalf("prepare: %s", e)
		}
		podNS := netnstest.New(t, sriovtest.Prefix+"-rdma-excl")
		pod := nri.Pod{UID: claim.Status.ReservedFor[0].UID, Namespace: claim.Namespace, Name: claim.Status.ReservedFor[0].Name, SandboxID: "sb-rdma-excl", NetNS: podNS}
		err := d.plugin.AttachPod(d.ctx, pod)
		switch {
		case follows && err != nil:
			t.Fatalf("RunPodSandbox: %v", err)
		case follows:
			if !rdmaIn(t, podNS, rxe) {
				t.Fatalf("RDMA device %s is not in the pod's namespace", rxe)
			}
			if rdmaInHost(t, rxe) {
				t.Errorf("RDMA device %s is seen from the host's namespace too", rxe)
			}
			// The pod sees its own device only, and writes through it
			// to the host's on the PF.
			dev := cdiDevice(t, dir, claim, "nic")
			out, err := inContainer(t.Context(), podNS, dev, "ibv_devinfo -l")
			if err != nil || !strings.Contains(out, rxe) || strings.Contains(out, rxp) || !strings.Contains(out, "1 HCA found") {
				t.Errorf("ibv_devinfo -l in the pod (%v): want %s alone, not the host's %s:\n%s", err, rxe, rxp, out)
			} else {
				t.Logf("ibv_devinfo -l in the pod:\n%s", out)
			}
			addAddress(t, pf.Name, "10.78.3.1/24")
			rdmaWrites(t, podNS, dev, rxe, "10.78.3.2", rxp, "10.78.3.1")
			if err := d.plugin.DetachPod(d.ctx, pod); err != nil {
				t.Fatalf("StopPodSandbox: %v", err)
			}
		case err == nil:
			t.Fatalf("RunPodSandbox succeeded, but this kernel's rxe cannot be in a pod's namespace: the pod has a device it cannot use")
		default:
			t.Logf("RunPodSandbox refused: %v", err)
			for _, want := range []string{rxe, "is not in the pod's network namespace", "exclusive"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q", want)
				}
			}
		}
		sriovtest.WaitFor(t, 10*time.Second, "the VF's netdev "+vf.Netdev+" and RDMA device "+rxe+" back in the host", func() bool {
			return sriovtest.Netdev(vf.Address) == vf.Netdev && rdmaInHost(t, rxe) && rdmaParent(rxe) == vf.Netdev
		})
		unprepare(t, d.ctx, d.kubelet, claim)
		if !rdmaInHost(t, rxe) || rdmaParent(rxe) != vf.Netdev {
			t.Errorf("after Unprepare RDMA device %s is not on %s in the host (on %q)", rxe, vf.Netdev, rdmaParent(rxe))
		}
	})

	t.Run("netdev/shared/two pods", func(t *testing.T) {
		if !sriovtest.KernelAtLeast(t, 7, 0) {
			t.Fatalf("kernel %s: soft-RoCE between pods' namespaces needs rxe's socket per namespace (7.x); the VM boots 7.3", sriovtest.KernelRelease(t))
		}
		type end struct {
			vf              sriovtest.VF
			rxe, addr, name string
			claim           *resourceapi.ResourceClaim
			pod             nri.Pod
			ns              string
			dev             *cdi.Device
		}
		ends := []*end{{vf: vfs[1], rxe: sriovtest.Prefix + "ra", addr: "10.78.4.2", name: "rdma-a"},
			{vf: vfs[2], rxe: sriovtest.Prefix + "rb", addr: "10.78.4.3", name: "rdma-b"}}
		var objs []runtime.Object
		for _, e := range ends {
			t.Cleanup(func() { pf.ResetVF(t, e.vf) })
			addRXE(t, e.rxe, e.vf.Netdev)
			e.claim = testClaim(e.name, []alloc{{Request: "nic", Device: devices.PCIDeviceName(e.vf.Address)}},
				fromClaim(config(fmt.Sprintf(`"interface": {"name": "net1", "addresses": ["%s/24"]}, "rdma": {}`, e.addr))))
			objs = append(objs, e.claim)
		}
		dir := stateDir(t)
		d := startSRIOVDaemon(t, dir, 1, fake.NewClientset(objs...), discoverSRIOV(t))
		for _, e := range ends {
			if msg := prepare(t, d.ctx, d.kubelet, e.claim); msg != "" {
				t.Fatalf("prepare %s: %s", e.name, msg)
			}
			e.ns = netnstest.New(t, sriovtest.Prefix+"-"+e.name)
			e.pod = nri.Pod{UID: e.claim.Status.ReservedFor[0].UID, Namespace: e.claim.Namespace, Name: e.claim.Status.ReservedFor[0].Name, SandboxID: "sb-" + e.name, NetNS: e.ns}
			if err := d.plugin.AttachPod(d.ctx, e.pod); err != nil {
				t.Fatalf("RunPodSandbox of %s: %v", e.name, err)
			}
			e.dev = cdiDevice(t, dir, e.claim, "nic")
		}
		a, b := ends[0], ends[1]

		// rdma_cm's ping: 10 round trips from pod B to pod A.
		_, out := betweenPods(t, a.ns, b.ns, a.dev, b.dev, "exec rping -s -a "+a.addr+" -C 10 -v", "exec rping -c -a "+a.addr+" -C 10 -v")
		if n := strings.Count(out, "ping data: rdma-ping-"); n != 10 {
			t.Errorf("rping in pod B: %d pings answered, want 10:\n%s", n, out)
		}
		// RDMA writes from pod B to pod A.
		server := gidScript(a.rxe, a.addr) + fmt.Sprintf(`exec ib_write_bw -d %s -x "$x" -n 1000 -s 65536`, a.rxe)
		client := gidScript(b.rxe, b.addr) + fmt.Sprintf(`exec ib_write_bw -d %s -x "$x" -n 1000 -s 65536 %s`, b.rxe, a.addr)
		serverOut, clientOut := betweenPods(t, a.ns, b.ns, a.dev, b.dev, server, client)
		for who, out := range map[string]string{"pod A": serverOut, "pod B": clientOut} {
			if n, mbps := bwResult(out); n != 1000 || mbps <= 0 {
				t.Errorf("ib_write_bw in %s: %d iterations at %.2f MB/s, want 1000 at more than 0:\n%s", who, n, mbps, out)
			}
		}
		n, mbps := bwResult(clientOut)
		t.Logf("RDMA between two pods (%s on %s, %s on %s, each a VF's netdev): 10 rping round trips, %d × 64 KiB written at %.2f MB/s", a.rxe, a.addr, b.rxe, b.addr, n, mbps)

		for _, e := range ends {
			if err := d.plugin.DetachPod(d.ctx, e.pod); err != nil {
				t.Fatalf("StopPodSandbox of %s: %v", e.name, err)
			}
			unprepare(t, d.ctx, d.kubelet, e.claim)
			sriovtest.WaitFor(t, 10*time.Second, "RDMA device "+e.rxe+" again on "+e.vf.Netdev+" in the host", func() bool {
				return rdmaParent(e.rxe) == e.vf.Netdev && sriovtest.Netdev(e.vf.Address) == e.vf.Netdev
			})
		}
	})

	t.Run("macvlan/shared/traffic", func(t *testing.T) {
		hostVF, bare := vfs[2], vfs[3]
		t.Cleanup(func() { pf.ResetVF(t, hostVF) })
		rxp := sriovtest.Prefix + "rp"
		addRXE(t, rxp, pf.Name)
		// The PF and a VF of the host on the pod's subnet; the pod's
		// address is reached through the VF (the PF cannot reach its own
		// macvlan).
		addAddress(t, pf.Name, "10.78.2.1/24")
		addAddress(t, hostVF.Netdev, "10.78.2.3/24")
		setUp(t, hostVF.Netdev)
		if out, err := exec.Command("ip", "route", "add", "10.78.2.5/32", "dev", hostVF.Netdev).CombinedOutput(); err != nil {
			t.Fatalf("route to the pod: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "route", "del", "10.78.2.5/32").Run() })

		inv := discoverSRIOV(t)
		pfDev := devices.PCIDeviceName(pf.Address)
		shareDevice(t, &inv, pfDev)
		claim := testClaim("rdma-shared", []alloc{{Request: "sub", Device: pfDev}},
			fromClaim(config(`"mode": "macvlan", "macvlan": {"mode": "bridge"}, "interface": {"name": "net1", "addresses": ["10.78.2.5/24"]}, "rdma": {}`)))
		none := testClaim("rdma-none", []alloc{{Request: "nic", Device: devices.PCIDeviceName(bare.Address)}}, fromClaim(config(`"rdma": {}`)))
		client := fake.NewClientset(claim, none)
		dir := stateDir(t)
		d := startSRIOVDaemon(t, dir, 1, client, inv)

		e := prepare(t, d.ctx, d.kubelet, none)
		for _, want := range []string{"rdma-none", devices.PCIDeviceName(bare.Address), "rdma", "has no RDMA device"} {
			if !strings.Contains(e, want) {
				t.Errorf("Prepare of rdma on a VF without an RDMA device: error %q does not say %q", e, want)
			}
		}

		if e := prepare(t, d.ctx, d.kubelet, claim); e != "" {
			t.Fatalf("prepare: %s", e)
		}
		dev := cdiDevice(t, dir, claim, "sub")
		wantNodes(t, dev, uverbsOf(t, rxp), "/dev/infiniband/rdma_cm")
		podNS := netnstest.New(t, sriovtest.Prefix+"-rdma-mv")
		pod := nri.Pod{UID: claim.Status.ReservedFor[0].UID, Namespace: claim.Namespace, Name: claim.Status.ReservedFor[0].Name, SandboxID: "sb-rdma-mv", NetNS: podNS}
		if err := d.plugin.AttachPod(d.ctx, pod); err != nil {
			t.Fatalf("RunPodSandbox: %v", err)
		}
		wantRDMAStatus(t, client, claim, rxp, "shared")

		// Both ends use the GID of the PF's address.
		gid := gidIndex(t, rxp, "10.78.2.1")
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		bw := fmt.Sprintf("ib_write_bw -d %s -x %d -n 1000 -s 65536", rxp, gid)
		var server string
		done := make(chan error, 1)
		go func() {
			out, err := inContainer(ctx, podNS, dev, bw)
			server = out
			done <- err
		}()
		var client2 []byte
		var err error
		sriovtest.WaitFor(t, 90*time.Second, "ib_write_bw on the host to reach the one in the pod", func() bool {
			client2, err = exec.CommandContext(ctx, "ib_write_bw", "-d", rxp, "-x", strconv.Itoa(gid), "-n", "1000", "-s", "65536", "10.78.2.5").CombinedOutput()
			return err == nil || !strings.Contains(string(client2), "Couldn't connect")
		})
		if err != nil {
			cancel()
			podErr := <-done
			t.Fatalf("ib_write_bw on the host: %v\n%s\nin the pod (%v):\n%s", err, client2, podErr, server)
		}
		if err := <-done; err != nil {
			t.Fatalf("ib_write_bw in the pod: %v\n%s", err, server)
		}
		for who, out := range map[string]string{"host": string(client2), "pod": server} {
			n, mbps := bwResult(out)
			if n != 1000 || mbps <= 0 {
				t.Errorf("ib_write_bw in the %s: %d iterations at %.2f MB/s, want 1000 at more than 0:\n%s", who, n, mbps, out)
			}
		}
		n, mbps := bwResult(string(client2))
		t.Logf("RDMA writes between the pod (device %s from its claim, through its CDI spec only) and the host: %d × 64 KiB at %.2f MB/s", rxp, n, mbps)

		if err := d.plugin.DetachPod(d.ctx, pod); err != nil {
			t.Fatalf("StopPodSandbox: %v", err)
		}
		unprepare(t, d.ctx, d.kubelet, claim)
		if !rdmaInHost(t, rxp) || rdmaParent(rxp) != pf.Name {
			t.Errorf("after Unprepare the shared PF's RDMA device %s is not on %s (on %q)", rxp, pf.Name, rdmaParent(rxp))
		}
	})
}

// rdmaWrites runs ib_write_bw between the pod, its device podRDMA (its
// interface's address podAddr) in a container made from dev, and the
// host, its device hostRDMA (address hostAddr): 1,000 writes of 64 KiB,
// each end's GID that of its address; both ends must report them all.
func rdmaWrites(t *testing.T, podNS string, dev *cdi.Device, podRDMA, podAddr, hostRDMA, hostAddr string) {
	t.Helper()
	// The pod's GID index, looked up in the pod: in exclusive mode the
	// host does not see its device.
	server := gidScript(podRDMA, podAddr) + fmt.Sprintf(`exec ib_write_bw -d %s -x "$x" -n 1000 -s 65536`, podRDMA)
	gid := gidIndex(t, hostRDMA, hostAddr)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var podOut string
	done := make(chan error, 1)
	go func() {
		out, err := inContainer(ctx, podNS, dev, server)
		podOut = out
		done <- err
	}()
	var hostOut []byte
	var err error
	sriovtest.WaitFor(t, 90*time.Second, "ib_write_bw on the host to reach the one in the pod", func() bool {
		hostOut, err = exec.CommandContext(ctx, "ib_write_bw", "-d", hostRDMA, "-x", strconv.Itoa(gid), "-n", "1000", "-s", "65536", podAddr).CombinedOutput()
		return err == nil || !strings.Contains(string(hostOut), "Couldn't connect")
	})
	if err != nil {
		cancel()
		podErr := <-done
		t.Fatalf("ib_write_bw on the host: %v\n%s\nin the pod (%v):\n%s", err, hostOut, podErr, podOut)
	}
	if err := <-done; err != nil {
		t.Fatalf("ib_write_bw in the pod: %v\n%s", err, podOut)
	}
	for who, out := range map[string]string{"host": string(hostOut), "pod": podOut} {
		if n, mbps := bwResult(out); n != 1000 || mbps <= 0 {
			t.Errorf("ib_write_bw in the %s: %d iterations at %.2f MB/s, want 1000 at more than 0:\n%s", who, n, mbps, out)
		}
	}
	n, mbps := bwResult(string(hostOut))
	t.Logf("RDMA writes between the pod (%s on %s) and the host (%s on %s): %d × 64 KiB at %.2f MB/s", podRDMA, podAddr, hostRDMA, hostAddr, n, mbps)
}

// gidScript is shell that sets $x to the index of the GID of addr on RDMA
// device dev, as the namespace it runs in sees the device.
func gidScript(dev, addr string) string {
	ip := net.ParseIP(addr).To16()
	groups := make([]string, 8)
	for i := range groups {
		groups[i] = fmt.Sprintf("%02x%02x", ip[2*i], ip[2*i+1])
	}
	return fmt.Sprintf(`x=; for i in $(seq 0 15); do [ "$(cat /sys/class/infiniband/%[1]s/ports/1/gids/$i 2>/dev/null)" = %[2]s ] && x=$i && break; done
[ -n "$x" ] || { echo "no GID of %[3]s on %[1]s"; exit 1; }
`, dev, strings.Join(groups, ":"), addr)
}

// betweenPods runs server in a container of pod a and then client in one
// of pod b until it connects, and returns both outputs.
func betweenPods(t *testing.T, a, b string, devA, devB *cdi.Device, server, client string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var serverOut string
	done := make(chan error, 1)
	go func() {
		out, err := inContainer(ctx, a, devA, server)
		serverOut = out
		done <- err
	}()
	var clientOut string
	var err error
	sriovtest.WaitFor(t, 90*time.Second, "the client in pod B to reach the server in pod A", func() bool {
		clientOut, err = inContainer(ctx, b, devB, client)
		return err == nil || !strings.Contains(clientOut, "Couldn't connect") && !strings.Contains(clientOut, "rdma_connect") && !strings.Contains(clientOut, "REJECTED")
	})
	if err != nil {
		cancel()
		serverErr := <-done
		t.Fatalf("%s in pod B: %v\n%s\nin pod A (%v):\n%s", client, err, clientOut, serverErr, serverOut)
	}
	if err := <-done; err != nil {
		t.Fatalf("%s in pod A: %v\n%s", server, err, serverOut)
	}
	return serverOut, clientOut
}

// setRDMAMode sets the node's RDMA network namespace mode. The kernel
// takes it only while the host's is the one network namespace; one
// deleted a moment ago may linger while the kernel cleans it up.
func setRDMAMode(t *testing.T, mode string) {
	t.Helper()
	sriovtest.WaitFor(t, 30*time.Second, "the RDMA subsystem to take netns mode "+mode+" (it does only while no other network namespace exists)", func() bool {
		return exec.Command("rdma", "system", "set", "netns", mode).Run() == nil
	})
}

// addRXE makes a soft-RoCE device on netdev, removed when the test ends.
func addRXE(t *testing.T, name, netdev string) {
	t.Helper()
	if out, err := exec.Command("rdma", "link", "add", name, "type", "rxe", "netdev", netdev).CombinedOutput(); err != nil {
		t.Fatalf("rdma link add %s type rxe netdev %s: %v: %s", name, netdev, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("rdma", "link", "delete", name).Run() })
}

func addAddress(t *testing.T, link, cidr string) {
	t.Helper()
	if out, err := exec.Command("ip", "address", "add", cidr, "dev", link).CombinedOutput(); err != nil {
		t.Fatalf("ip address add %s dev %s: %v: %s", cidr, link, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "address", "del", cidr, "dev", link).Run() })
}

// setUp sets a link up and waits for its carrier.
func setUp(t *testing.T, name string) {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	sriovtest.WaitFor(t, 20*time.Second, name+"'s carrier", func() bool {
		l, err := netlink.LinkByName(name)
		return err == nil && l.Attrs().OperState == netlink.OperUp
	})
}

// rdmaParent is the netdev a software RDMA device is on, as the host's
// sysfs says, "" when it is gone.
func rdmaParent(name string) string {
	b, err := os.ReadFile(filepath.Join("/sys/class/infiniband", name, "parent"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// rdmaIn says whether RDMA device name is seen from network namespace
// path.
func rdmaIn(t *testing.T, path, name string) bool {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	return rdmaSeen(t, ns, name)
}

func rdmaInHost(t *testing.T, name string) bool {
	t.Helper()
	ns, err := netns.GetFromPid(1)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	return rdmaSeen(t, ns, name)
}

func rdmaSeen(t *testing.T, ns netns.NsHandle, name string) bool {
	t.Helper()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_RDMA)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, err = h.RdmaLinkByName(name)
	return err == nil
}

// rxeFollowsNetns probes whether a device of rdma_rxe made from a network
// namespace can be in that namespace, on a veth pair of its own: made
// there, or moved there from the host's.
func rxeFollowsNetns(t *testing.T) bool {
	t.Helper()
	name := sriovtest.Prefix + "-rdma-probe"
	path := netnstest.New(t, name)
	a, b := sriovtest.Prefix+"prb0", sriovtest.Prefix+"prb1"
	if out, err := exec.Command("ip", "link", "add", a, "type", "veth", "peer", "name", b, "netns", name).CombinedOutput(); err != nil {
		t.Fatalf("veth for the probe: %v: %s", err, out)
	}
	defer func() { _ = exec.Command("ip", "link", "del", a).Run() }()
	dev := sriovtest.Prefix + "probe"
	if out, err := exec.Command("ip", "netns", "exec", name, "rdma", "link", "add", dev, "type", "rxe", "netdev", b).CombinedOutput(); err != nil {
		t.Fatalf("rdma link add in the probe's namespace: %v: %s", err, out)
	}
	follows := rdmaIn(t, path, dev)
	if !follows {
		// Made in the host's: a kernel that moves it (7.x) gives a pod
		// its device as fastpath does, by moving it in.
		_ = exec.Command("rdma", "dev", "set", dev, "netns", name).Run()
		follows = rdmaIn(t, path, dev)
		t.Logf("this kernel's rdma_rxe makes a device asked from a namespace in the host's, and moves it into the namespace: %v", follows)
	}
	for _, args := range [][]string{{"ip", "netns", "exec", name, "rdma", "link", "delete", dev}, {"rdma", "link", "delete", dev}} {
		_ = exec.Command(args[0], args[1:]...).Run()
	}
	return follows
}

// wantRDMAAttributes checks the attributes discovery publishes for the
// RDMA device of a device.
func wantRDMAAttributes(t *testing.T, inv devices.Inventory, device, rdma, mode string) {
	t.Helper()
	for _, d := range inv.Devices {
		if d.Name != device {
			continue
		}
		attrs := d.Attributes()
		if a := attrs["rdmaDevice"]; a.StringValue == nil || *a.StringValue != rdma {
			t.Errorf("device %s: rdmaDevice %v, want %s", device, a.StringValue, rdma)
		}
		if a := attrs["rdmaNetnsMode"]; a.StringValue == nil || *a.StringValue != mode {
			t.Errorf("device %s: rdmaNetnsMode %v, want %s", device, a.StringValue, mode)
		}
		return
	}
	t.Fatalf("discovery found no device %s", device)
}

// shareDevice has the inventory's device shared, as --share makes it.
func shareDevice(t *testing.T, inv *devices.Inventory, name string) {
	t.Helper()
	for i := range inv.Devices {
		if inv.Devices[i].Name == name {
			inv.Devices[i].Share = &devices.Share{Interfaces: 8}
			return
		}
	}
	t.Fatalf("discovery found no device %s", name)
}

func stateDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fp") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// cdiDevice is the CDI device of a request of a claim, as its spec in
// dir/cdi says now.
func cdiDevice(t *testing.T, dir string, claim *resourceapi.ResourceClaim, request string) *cdi.Device {
	t.Helper()
	spec, err := cdi.ReadSpec(filepath.Join(dir, "cdi", "fastpath.dev-claim-"+string(claim.UID)+".json"), 0)
	if err != nil {
		t.Fatal(err)
	}
	dev := spec.GetDevice(string(claim.UID) + "-" + request)
	if dev == nil {
		t.Fatalf("the CDI spec of claim %s has no device for request %s", claim.Name, request)
	}
	return dev
}

// wantNodes checks the device nodes of a CDI device.
func wantNodes(t *testing.T, dev *cdi.Device, want ...string) {
	t.Helper()
	var got []string
	for _, n := range dev.ContainerEdits.DeviceNodes {
		got = append(got, n.Path)
	}
	if !slices.Equal(got, want) {
		t.Errorf("CDI device nodes %v, want %v", got, want)
	}
}

// uverbsOf is the verbs device of an RDMA device, as the host's sysfs
// says.
func uverbsOf(t *testing.T, name string) string {
	t.Helper()
	entries, _ := filepath.Glob("/sys/class/infiniband_verbs/uverbs*")
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(e, "ibdev")); err == nil && strings.TrimSpace(string(b)) == name {
			return "/dev/infiniband/" + filepath.Base(e)
		}
	}
	t.Fatalf("RDMA device %s has no verbs device", name)
	return ""
}

// gidIndex is the index of the RoCE v2 GID of an IPv4 address on port 1
// of an RDMA device.
func gidIndex(t *testing.T, name, ip string) int {
	t.Helper()
	want := net.ParseIP(ip).To16()
	for i := range 16 {
		b, err := os.ReadFile(fmt.Sprintf("/sys/class/infiniband/%s/ports/1/gids/%d", name, i))
		if err != nil {
			break
		}
		if g := net.ParseIP(strings.TrimSpace(string(b))); g != nil && g.Equal(want) {
			return i
		}
	}
	t.Fatalf("RDMA device %s has no GID for %s", name, ip)
	return 0
}

// wantRDMAStatus waits for the claim's device status to report its RDMA
// device and the namespace mode it was given in.
func wantRDMAStatus(t *testing.T, client *fake.Clientset, claim *resourceapi.ResourceClaim, rdma, mode string) {
	t.Helper()
	var last string
	sriovtest.WaitFor(t, 10*time.Second, "the claim's status to report RDMA device "+rdma, func() bool {
		c, err := client.ResourceV1().ResourceClaims(claim.Namespace).Get(context.Background(), claim.Name, metav1.GetOptions{})
		if err != nil || len(c.Status.Devices) == 0 || c.Status.Devices[0].Data == nil {
			return false
		}
		last = string(c.Status.Devices[0].Data.Raw)
		var data struct {
			RDMA struct {
				Device      string   `json:"device"`
				NetnsMode   string   `json:"netnsMode"`
				DeviceNodes []string `json:"deviceNodes"`
			} `json:"rdma"`
		}
		return json.Unmarshal(c.Status.Devices[0].Data.Raw, &data) == nil && data.RDMA.Device == rdma && data.RDMA.NetnsMode == mode && len(data.RDMA.DeviceNodes) > 0
	})
	t.Logf("claim status data: %s", last)
}

// inContainer runs script in a container made from the CDI device alone,
// in the pod's network namespace.
func inContainer(ctx context.Context, podNS string, dev *cdi.Device, script string) (string, error) {
	out, err := sriovtest.Container{Device: dev, NetNS: podNS}.Command(ctx, script).CombinedOutput()
	return string(out), err
}

// bwResult is the iterations and average bandwidth (MB/s) of
// ib_write_bw's result line.
func bwResult(out string) (int, float64) {
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "65536" {
			continue
		}
		n, err1 := strconv.Atoi(f[1])
		avg, err2 := strconv.ParseFloat(f[3], 64)
		if err1 == nil && err2 == nil {
			return n, avg
		}
	}
	return 0, 0
}

func firstLinesOf(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
