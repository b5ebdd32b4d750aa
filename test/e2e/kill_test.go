//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// The daemon, containerd and the kubelet killed at the worst moments of a
// pod's life on the real node: each test ends with the pods Running with
// their devices (or gone), the devices back in the host as they were, and
// nothing of the claims left.

// TestFaultMissedSandbox: fastpath misses a pod's RunPodSandbox, and the
// pod's containers still get its device.
//
// The daemon is killed in the hook after recording where the device goes
// and before moving it (attach.recorded); the runtime goes on without it.
// The pod ends Running with its device configured and its claim Ready: a
// container the runtime started while fastpathd was down has it from the
// daemon's Synchronize, one started with fastpath connected from the
// start (waitRunningWith tells which; with --attach-overlap the
// container's start, not its creation, waits for the attach).
//
// Then the device is out of the pod again, as a missed hook leaves it, and
// the pod's container dies: the runtime's CreateContainer for the new one
// waits while fastpath attaches the device, and the new container's first
// look at its interfaces shows it configured. Once the pod is gone the
// device is back as it was.
func TestFaultMissedSandbox(t *testing.T) {
	ctx := testContext(t)
	n := faultSetup(t, ctx, faultOptions{port: 26190, point: "attach.recorded", links: 1, up: true})
	tmpl := netdevTemplate(t, ctx, "e2e-missed", "net1", "10.81.0.2/24")
	pod := templatePod("e2e-missed", "ifaces", tmpl)
	before := n.d.restarts(t, ctx)
	createPod(t, ctx, pod)
	n.d.waitKilledAt(t, ctx, "attach.recorded", before)
	waitRunningWith(t, ctx, pod, "net1")
	want := podWant{pod: pod, ifName: "net1", addr: "10.81.0.2/24", mtu: 1400}
	checkPodDevice(t, ctx, want)

	running, err := bed.Client().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	takeOut(t, string(running.UID), "net1", n.links[0].Name)
	workload := podProcess(string(running.UID), func(dir string) bool {
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		return err == nil && strings.TrimSpace(string(comm)) == "workload"
	})
	if workload == 0 {
		t.Fatalf("no workload process in pod %s", pod.Name)
	}
	if err := syscall.Kill(workload, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	restarted, err := bed.WaitPod(ctx, pod.Namespace, pod.Name, 60*time.Second, func(p *corev1.Pod) (bool, error) {
		return restartCount(p) == 1 && isReady(p), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if connected, err := createdConnected(restarted); err != nil || !connected {
		t.Fatalf("the runtime created the new container with fastpath connected: %v (%v)", connected, err)
	}
	logs, err := bed.WaitPodLog(ctx, pod.Namespace, pod.Name, ifacesEnd, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if line := interfaceLine(logs, "net1"); !strings.HasSuffix(line, " 10.81.0.2/24") || !strings.Contains(line, "02:00:00:fa:60:01") {
		t.Errorf("the new container's first look at net1: %q, want it with its MAC and address; it saw:\n%s", line, logs)
	}
	checkPodDevice(t, ctx, want)

	if err := bed.DeletePod(ctx, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	n.assertRestored(t, ctx)
	n.assertClean(t, ctx)
}

// takeOut moves the interface ifName of the pod with this UID back to the
// host as hostName: where a missed attach leaves a device.
func takeOut(t *testing.T, uid, ifName, hostName string) {
	t.Helper()
	pid := podProcess(uid, nil)
	if pid == 0 {
		t.Fatalf("no process of pod %s", uid)
	}
	podNS, err := netns.GetFromPath(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer podNS.Close()
	h, err := netlink.NewHandleAt(podNS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(ifName)
	if err != nil {
		t.Fatal(err)
	}
	host, err := netns.GetFromPid(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if err := h.LinkSetNsFd(l, int(host)); err != nil {
		t.Fatalf("move %s out of pod %s: %v", ifName, uid, err)
	}
	back, err := netlink.LinkByName(ifName)
	if err == nil {
		err = netlink.LinkSetName(back, hostName)
	}
	if err != nil {
		t.Fatalf("name %s %s again in the host: %v", ifName, hostName, err)
	}
}

// TestFaultKillInSandbox: the daemon is killed with SIGKILL in a pod's
// RunPodSandbox, once by a fault point right after the device moved into
// the pod (attach.moved), once from outside while the hook waits in a CNI
// plugin; the pod ends Running with its device and network configured, or
// its sandbox fails and is retried; it never runs without them. Once it
// is gone, the devices are back as they were and no address is reserved.
func TestFaultKillInSandbox(t *testing.T) {
	t.Run("fault point attach.moved", func(t *testing.T) {
		ctx := testContext(t)
		n := faultSetup(t, ctx, faultOptions{port: 26191, point: "attach.moved", links: 1})
		tmpl := netdevTemplate(t, ctx, "e2e-moved", "net1", "10.81.1.2/24")
		pod := templatePod("e2e-moved", "ifaces", tmpl)
		before := n.d.restarts(t, ctx)
		createPod(t, ctx, pod)
		n.d.waitKilledAt(t, ctx, "attach.moved", before)
		waitRunningWith(t, ctx, pod, "net1")
		checkPodDevice(t, ctx, podWant{pod: pod, ifName: "net1", addr: "10.81.1.2/24", mtu: 1400})
		if err := bed.DeletePod(ctx, pod.Namespace, pod.Name); err != nil {
			t.Fatal(err)
		}
		n.assertRestored(t, ctx)
		n.assertClean(t, ctx)
	})

	t.Run("SIGKILL while a CNI plugin holds the hook", func(t *testing.T) {
		ctx := testContext(t)
		n := faultSetup(t, ctx, faultOptions{port: 26192, links: 1, up: true, cni: true})
		fast := netdevTemplate(t, ctx, "e2e-held-fast", "net1", "10.81.2.2/24")
		cni := createTemplate(t, ctx, "e2e-held-cni", cniClaimSpec(map[string]v1alpha1.CNIConfig{"net": n.gate.config("net2", "10.81.3.0/24")}))
		pod := templatePod("e2e-held", "ifaces", fast, cni)
		createPod(t, ctx, pod)
		ipam := ipamDir(t, ctx, pod.Name, cni.Name, "net")
		plugin := n.gate.waitHeld(t, ctx, n.d)
		before := n.d.restarts(t, ctx)
		n.d.kill(t)
		waitGone(t, ctx, plugin)
		n.gate.openGate(t)
		n.d.waitRestarted(t, ctx, before)
		waitRunningWith(t, ctx, pod, "net1", "net2")
		checkPodDevice(t, ctx, podWant{pod: pod, ifName: "net1", addr: "10.81.2.2/24", mtu: 1400})
		checkPodDevice(t, ctx, podWant{pod: pod, ifName: "net2", addr: "10.81.3.", mtu: 1500})
		if got := ipamAllocations(t, ipam); len(got) != 1 {
			t.Errorf("host-local reservations while the pod runs: %v, want 1", got)
		}
		if err := bed.DeletePod(ctx, pod.Namespace, pod.Name); err != nil {
			t.Fatal(err)
		}
		n.assertRestored(t, ctx)
		n.assertClean(t, ctx, ipam)
	})
}

// waitGone waits until the process pid is gone.
func waitGone(t *testing.T, ctx context.Context, pid int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
		return errors.Is(err, os.ErrNotExist), nil
	})
	if err != nil {
		t.Fatalf("process %d outlived the daemon", pid)
	}
}

// TestFaultVFIOBind: the daemon is killed in the middle of binding a VF to
// vfio-pci, after unbinding it from iavf (vfio.unbound). The restarted
// daemon undoes the interrupted Prepare, the kubelet's retried Prepare
// binds it, and the pod gets /dev/vfio/<group>; once the pod is gone the
// VF is back on iavf, and the other VF never left it.
func TestFaultVFIOBind(t *testing.T) {
	ctx := testContext(t)
	root, devRoot, kernel := fixtureE810(t, ctx)
	// The E810's iavf VFs and their IOMMU groups.
	vfs := map[string]struct{ addr, group string }{
		"pci-0000-3b-01-0": {"0000:3b:01.0", "41"}, "pci-0000-3b-01-1": {"0000:3b:01.1", "42"},
	}
	for _, vf := range vfs {
		if got := kernel.Driver(vf.addr); got != "iavf" {
			t.Fatalf("the fixture's %s is on %q, not iavf", vf.addr, got)
		}
	}
	d := newDaemon(t, 26193, "--sysfs-root", root, "--dev-root", devRoot)
	d.arm("vfio.unbound")
	d.start(t, ctx)
	t.Cleanup(func() { d.stop(t) })

	tmpl := claimTemplate(t, ctx, "e2e-vfio-kill", "dpdk", "vfio.fastpath.dev", `device.attributes["fastpath.dev"].driver == "iavf"`, nil)
	pod := claimPod("e2e-vfio-kill", "env", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &tmpl.Name})
	before := d.restarts(t, ctx)
	createPod(t, ctx, pod)
	d.waitKilledAt(t, ctx, "vfio.unbound", before)
	// The kubelet retries the failed Prepare at its next sync of the pod,
	// a minute later unless the pod changes: a change has it now.
	nudge(t, ctx, pod)
	if _, err := bed.WaitPod(ctx, pod.Namespace, pod.Name, 2*time.Minute, func(p *corev1.Pod) (bool, error) { return isReady(p), nil }); err != nil {
		t.Fatal(err)
	}
	st := podClaimStatus(t, ctx, pod)
	vf, ok := vfs[st.Device]
	if !ok {
		t.Fatalf("allocated %s, not an iavf VF", st.Device)
	}
	logs, err := bed.WaitPodLog(ctx, pod.Namespace, pod.Name, "device node /dev/vfio/"+vf.group+" Dc", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, "PCIDEVICE_FASTPATH_DEV_DPDK="+vf.addr) {
		t.Errorf("the pod's environment lacks its VF %s:\n%s", vf.addr, logs)
	}
	if got := kernel.Driver(vf.addr); got != "vfio-pci" {
		t.Errorf("%s is on %q while the pod runs, want vfio-pci", vf.addr, got)
	}
	if err := claimsReady(ctx, pod); err != nil {
		t.Error(err)
	}
	if err := bed.DeletePod(ctx, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		specs, _ := filepath.Glob(filepath.Join(bed.CDIDir(), "fastpath.dev-*"))
		return kernel.Driver(vf.addr) == "iavf" && checkpointClaims(t, d) == 0 && len(specs) == 0, nil
	})
	if err != nil {
		t.Errorf("after the pod went, %s is on %q (want iavf), the checkpoint holds %d claims", vf.addr, kernel.Driver(vf.addr), checkpointClaims(t, d))
	}
	for name, other := range vfs {
		if got := kernel.Driver(other.addr); got != "iavf" {
			t.Errorf("%s (%s) ends on %q, want iavf", name, other.addr, got)
		}
	}
}

// TestFaultKillInStop: the daemon is killed in a pod's StopPodSandbox
// right after moving its device back to the host (detach.moved), before
// giving it its admin state back and forgetting where it was. The
// restarted daemon restores it, Unprepare completes, and the device is as
// it was before the pod.
func TestFaultKillInStop(t *testing.T) {
	ctx := testContext(t)
	n := faultSetup(t, ctx, faultOptions{port: 26194, point: "detach.moved", links: 1, up: true})
	tmpl := netdevTemplate(t, ctx, "e2e-stop", "net1", "10.81.4.2/24", "fd00:81:4::2/64")
	pod := templatePod("e2e-stop", "ifaces", tmpl)
	createPod(t, ctx, pod)
	waitRunningWith(t, ctx, pod, "net1")
	before := n.d.restarts(t, ctx)
	if err := bed.Client().CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.d.waitKilledAt(t, ctx, "detach.moved", before)
	if err := podGone(ctx, pod, 90*time.Second); err != nil {
		t.Errorf("pod %s was never deleted: %v", pod.Name, err)
	}
	n.assertRestored(t, ctx)
	n.assertClean(t, ctx)
}

// TestFaultPodGoneWhileDown: the daemon is away (its DaemonSet pod
// removed) while a pod with a claim is deleted. The stand-in veth dies
// with the pod's network namespace (a VF would come back to the host; the
// VM suite covers that): the daemon, back, says the device is gone,
// releases the claim and drops its record, and the pod goes.
func TestFaultPodGoneWhileDown(t *testing.T) {
	ctx := testContext(t)
	n := faultSetup(t, ctx, faultOptions{port: 26195, links: 1})
	tmpl := netdevTemplate(t, ctx, "e2e-gone", "net1", "10.81.5.2/24")
	pod := templatePod("e2e-gone", "ifaces", tmpl)
	createPod(t, ctx, pod)
	waitRunningWith(t, ctx, pod, "net1")

	n.d.away(t, ctx)
	if err := bed.Client().CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The sandbox's network namespace, and the veth with it, are gone.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		_, err1 := netlink.LinkByName(n.links[0].Name)
		_, err2 := netlink.LinkByName(strings.TrimSuffix(n.links[0].Name, "a") + "b")
		return err1 != nil && err2 != nil, nil
	})
	if err != nil {
		t.Fatal("the pod's sandbox was not torn down while the daemon was away")
	}
	n.d.back(t, ctx)
	if err := podGone(ctx, pod, 90*time.Second); err != nil {
		t.Errorf("pod %s was never deleted: %v", pod.Name, err)
	}
	n.assertClean(t, ctx)
	log, err := os.ReadFile(n.d.keptLog(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "gone") || !strings.Contains(string(log), n.links[0].Name) {
		t.Errorf("the daemon's log never says that %s is gone", n.links[0].Name)
	}
}

// away takes the daemon's pod off the node (its DaemonSet selects no node)
// and waits until it is gone.
func (d *daemon) away(t *testing.T, ctx context.Context) {
	t.Helper()
	d.keepLog(t)
	d.values["nodeSelector"] = map[string]any{"kubernetes.io/hostname": "nowhere"}
	if err := bed.InstallChart(ctx, d.values); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := bed.Client().CoreV1().Pods(testbed.ChartNamespace).List(ctx, metav1.ListOptions{LabelSelector: testbed.DaemonSelector})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Fatal("the daemon's pod did not go away")
	}
}

// back puts the daemon on the node again and waits until it is Ready.
func (d *daemon) back(t *testing.T, ctx context.Context) {
	t.Helper()
	delete(d.values, "nodeSelector")
	d.start(t, ctx)
}

// TestFaultContainerdRestart: containerd is killed while fastpath's
// RunPodSandbox hook waits in a CNI plugin, and started again; then the
// plugin goes on. The pod ends Running with its network configured and
// its claim Ready, its container never ran without it, and once it is
// gone nothing is left: no address reserved, no libcni cache entry. (Its
// network only: containerd 2.2 sends NRI no StopPodSandbox for the pods it
// ran before it restarted, so a netdev stand-in would die with the pod's
// network namespace, where a VF comes back and Unprepare restores it.)
func TestFaultContainerdRestart(t *testing.T) {
	ctx := testContext(t)
	n := faultSetup(t, ctx, faultOptions{port: 26196, cni: true})
	cni := createTemplate(t, ctx, "e2e-ctrd", cniClaimSpec(map[string]v1alpha1.CNIConfig{"net": n.gate.config("net2", "10.81.7.0/24")}))
	pod := templatePod("e2e-ctrd", "ifaces", cni)
	createPod(t, ctx, pod)
	ipam := ipamDir(t, ctx, pod.Name, cni.Name, "net")
	n.gate.waitHeld(t, ctx, n.d)
	if err := bed.RestartComponent(ctx, testbed.Containerd); err != nil {
		t.Fatal(err)
	}
	n.gate.openGate(t)
	waitRunningWith(t, ctx, pod, "net2")
	checkPodDevice(t, ctx, podWant{pod: pod, ifName: "net2", addr: "10.81.7.", mtu: 1500})
	if got := ipamAllocations(t, ipam); len(got) != 1 {
		t.Errorf("host-local reservations while the pod runs: %v, want 1", got)
	}
	if err := bed.DeletePod(ctx, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	n.assertClean(t, ctx, ipam)
}

// nudge changes an annotation of the pod, so that the kubelet syncs it now
// rather than at its next periodic sync.
func nudge(t *testing.T, ctx context.Context, pod *corev1.Pod) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.fastpath.dev/nudge":%q}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := bed.Client().CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("nudge pod %s: %v", pod.Name, err)
	}
}
