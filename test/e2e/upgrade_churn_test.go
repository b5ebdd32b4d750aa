//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// Rolling upgrades of the chart under churn and kills: while the release
// is upgraded to another image, pods with claims start and stop and the
// old or the new daemon is killed at a random moment of the hand-over.

// The daemon a hand-over's kill aims at.
const (
	killOld = "old"
	killNew = "new"
)

// The iavf VFs of the fixture E810 a vfio claim gets, by device name.
var e810VFs = map[string]string{"pci-0000-3b-01-0": "0000:3b:01.0", "pci-0000-3b-01-1": "0000:3b:01.1"}

// upgradeSet is the pods of a cycle: they start during one hand-over and
// go during the next.
type upgradeSet struct {
	ifaces []podWant   // netdev, CNI and NPWG pods: the interface each must have
	vfio   *corev1.Pod // the pod with a vfio claim
	all    []*corev1.Pod
}

// TestUpgradeChurn runs cycles of rolling upgrades of the chart, each to
// the other of two tags of the image (-a, -b), so that the new daemon's pod
// starts beside the old one (maxSurge 1) and takes over. During each
// hand-over the pods of the cycle start (2 with a netdev claim, 2 with a
// CNI claim, 1 with a vfio claim on the fixture E810, 1 selecting an NPWG
// network) and those of the previous cycle, prepared by an earlier daemon,
// go; and the old or the new daemon's process is killed (SIGKILL; the
// kubelet starts it again) at a random moment. After every hand-over: no
// pod is stuck, every running pod has its devices configured and its
// claims Ready, the devices of the pods that went are back as they were,
// the checkpoint holds the running pods' claims, no more; at the end, with
// every pod gone, nothing of any claim is left on the node.
//
// $FASTPATH_UPGRADE_CYCLES is the number of cycles (1 unless set: make upgrade-churn runs 10);
// $FASTPATH_UPGRADE_SEED replays a run's choices of victims and moments.
func TestUpgradeChurn(t *testing.T) {
	cycles, seed := envCycles(t, "FASTPATH_UPGRADE_CYCLES", 1), envSeed(t, "FASTPATH_UPGRADE_SEED")
	t.Logf("upgrade churn: %d cycles, seed %d (FASTPATH_UPGRADE_SEED=%d replays the same kills)", cycles, seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	ctx, cancel := context.WithTimeout(klog.NewContext(t.Context(), klog.Background()), 3*time.Minute+time.Duration(cycles)*4*time.Minute)
	defer cancel()

	const port = 26244
	root, devRoot, kernel := fixtureE810(t, ctx)
	n := faultSetup(t, ctx, faultOptions{port: port, links: 4, up: true, cni: true, cniPlugins: []string{"static"},
		sysfsRoot: root, filter: `device.attributes["fastpath.dev"].kind == "sriov-vf"`, devices: 4,
		// Discovery from a fixture has no link events: a stand-in made
		// again is found by the next rediscovery.
		args: []string{"--dev-root", devRoot, "--npwg", "--rediscover-interval", "2s"}})
	netdev := claimTemplate(t, ctx, "e2e-upch-netdev", "nic", "netdev.fastpath.dev", `device.attributes["fastpath.dev"].kind == "netdev"`,
		&v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "net1", MTU: 1400, Addresses: []string{"10.83.0.2/24"}}})
	cni := createTemplate(t, ctx, "e2e-upch-cni", cniClaimSpec(map[string]v1alpha1.CNIConfig{"net": macvlanConfig("net2", subnet("10.83.2.0/24"))}))
	vfio := claimTemplate(t, ctx, "e2e-upch-vfio", "dpdk", "vfio.fastpath.dev", `device.attributes["fastpath.dev"].driver == "iavf"`, nil)
	createServed(t, ctx, nads, fmt.Sprintf(`apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: e2e-upch-net
spec:
  config: '{"cniVersion": "1.0.0", "name": "e2e-upch-net", "plugins": [{"type": "macvlan", "master": "%s%dm", "mode": "bridge", "ipam": {"type": "static"}, "capabilities": {"ips": true}}]}'
`, faultPrefix, port))

	img, _ := fastpathdImage(t)
	base := strings.TrimPrefix(img, testbed.FastpathdRepository+":")
	tags := [2]string{base + "-a", base + "-b"}
	for _, tag := range tags {
		if err := bed.TagImage(ctx, img, testbed.FastpathdRepository+":"+tag); err != nil {
			t.Fatal(err)
		}
	}

	kills := map[string]int{}
	lost := 0
	var ipam []string
	var prev *upgradeSet
	pods := 0
	start := time.Now()
	for cycle := range cycles {
		set := upgradePods(cycle, netdev, cni, vfio)
		pods += len(set.all)
		target := []string{killOld, killNew}[rng.IntN(2)]
		delay := time.Duration(rng.Int64N(int64(6 * time.Second)))
		tag := tags[cycle%2]
		t.Logf("cycle %d: upgrade to %s, killing the %s daemon %s into the hand-over", cycle, tag, target, delay.Round(time.Millisecond))
		newPod := handOver(t, ctx, n.d, tag, target, delay, kills, func() {
			for _, p := range set.all {
				if _, err := bed.Client().CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Errorf("create pod %s: %v", p.Name, err)
				}
			}
			if prev != nil {
				for _, p := range prev.all {
					if err := bed.Client().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
						t.Errorf("delete pod %s: %v", p.Name, err)
					}
				}
			}
		})
		for _, p := range set.all {
			t.Cleanup(func() { _ = bed.DeletePod(context.Background(), p.Namespace, p.Name) })
		}
		if newPod == nil {
			t.Fatalf("cycle %d: the upgrade to %s did not complete (seed %d)", cycle, tag, seed)
		}
		if prev != nil {
			for _, p := range prev.all {
				if err := podGone(ctx, p, 3*time.Minute); err != nil {
					t.Errorf("cycle %d: pod %s is stuck: %v", cycle, p.Name, err)
				}
			}
		}
		for _, p := range set.ifaces {
			checkPodDevice(t, ctx, p)
			if p.ifName == "net2" {
				ipam = append(ipam, ipamDir(t, ctx, p.pod.Name, cni.Name, "net"))
			}
		}
		checkVFIOPod(t, ctx, kernel, set.vfio)
		// With the pods of this cycle running: 2 stand-ins in pods, the
		// others back as they were, one VF on vfio-pci, and 6 records in
		// the checkpoint (2 netdev, 2 CNI and 1 vfio claims, 1 pod's NPWG
		// networks).
		lost += n.assertInPods(t, ctx, 2)
		assertVFsBound(t, ctx, kernel, 1)
		assertCheckpointClaims(t, ctx, n.d, 6)
		if t.Failed() {
			t.Fatalf("cycle %d: the node is not as it should be after the hand-over (seed %d)", cycle, seed)
		}
		prev = &set
		t.Logf("upgrade churn: cycle %d done after %s: %d pods, kills %v, stand-ins lost with their pod's namespace %d",
			cycle, time.Since(start).Round(time.Second), pods, kills, lost)
	}

	for _, p := range prev.all {
		if err := bed.DeletePod(ctx, p.Namespace, p.Name); err != nil {
			t.Errorf("delete pod %s: %v", p.Name, err)
		}
	}
	for _, p := range prev.all {
		if err := podGone(ctx, p, 3*time.Minute); err != nil {
			t.Errorf("pod %s is stuck: %v", p.Name, err)
		}
	}
	lost += n.assertRestoredOrLost(t, ctx)
	assertVFsBound(t, ctx, kernel, 0)
	n.assertClean(t, ctx, ipam...)
	if t.Failed() {
		t.Fatalf("the node is not clean after every pod went (seed %d)", seed)
	}
	t.Logf("upgrade churn: %d cycles (rolling upgrades) in %s, seed %d: %d pods with netdev, CNI, vfio and NPWG claims; "+
		"old daemon killed %d times (%d times more it had stopped before its kill), new daemon %d times; "+
		"0 claims lost, 0 pods stuck, 0 devices leaked or misconfigured; %d veth stand-ins died with their pod's namespace torn down while no daemon served (made again)",
		cycles, time.Since(start).Round(time.Second), seed, pods, kills[killOld], kills[killOld+" stopped"], kills[killNew], lost)
}

// upgradePods are the pods of a cycle.
func upgradePods(cycle int, netdev, cni, vfio *resourceapi.ResourceClaimTemplate) upgradeSet {
	var s upgradeSet
	for i := range 2 {
		s.ifaces = append(s.ifaces, podWant{pod: templatePod(fmt.Sprintf("e2e-upch-%d-nic%d", cycle, i), "ifaces", netdev),
			ifName: "net1", addr: "10.83.0.2/24", mtu: 1400})
		s.ifaces = append(s.ifaces, podWant{pod: templatePod(fmt.Sprintf("e2e-upch-%d-cni%d", cycle, i), "ifaces", cni),
			ifName: "net2", addr: "10.83.2.", mtu: 1500})
	}
	npwgPod := testbed.WorkloadPod("default", fmt.Sprintf("e2e-upch-%d-npwg", cycle), "ifaces")
	addr := fmt.Sprintf("10.83.3.%d/24", 10+cycle%200)
	npwgPod.Annotations = map[string]string{nadv1.NetworkAttachmentAnnot: fmt.Sprintf(`[{"name": "e2e-upch-net", "interface": "data1", "ips": [%q]}]`, addr)}
	s.ifaces = append(s.ifaces, podWant{pod: npwgPod, ifName: "data1", addr: addr, mtu: 1500})
	s.vfio = templatePod(fmt.Sprintf("e2e-upch-%d-vfio", cycle), "env", vfio)
	for _, p := range s.ifaces {
		s.all = append(s.all, p.pod)
	}
	s.all = append(s.all, s.vfio)
	return s
}

// handOver upgrades the release of d to the image tag while act runs, and
// kills the target daemon (killOld, killNew) delay into the hand-over. It
// returns the new daemon's pod once the rollout is over: the new daemon
// alone on the node, Ready; nil if it never was.
func handOver(t *testing.T, ctx context.Context, d *daemon, tag, target string, delay time.Duration, kills map[string]int, act func()) *corev1.Pod {
	t.Helper()
	old, err := bed.DaemonPod(ctx)
	if err != nil || old == nil {
		t.Fatalf("the daemon's pod: %v", err)
	}
	d.pod = old
	d.keepLog(t)
	d.values["image"] = map[string]any{"tag": tag}
	var wg sync.WaitGroup
	wg.Go(act)
	var victim *corev1.Pod
	wg.Go(func() {
		var what string
		var err error
		victim, what, err = killInHandOver(ctx, old, target, delay)
		if err != nil {
			t.Errorf("kill the %s daemon: %v", target, err)
			return
		}
		if victim == nil {
			t.Logf("the old daemon had stopped before its kill")
			kills[target+" stopped"]++
			return
		}
		t.Logf("killed the %s", what)
		kills[target]++
	})
	if err := d.install(ctx); err != nil {
		t.Error(err)
	}
	wg.Wait()
	p, err := waitRolledOut(ctx, old.UID, testbed.FastpathdRepository+":"+tag)
	if err == nil && target == killNew && victim != nil {
		// Ready again after the restart of the killed container: the
		// pod's Ready condition is slow to see it die.
		before := restartCount(victim)
		p, err = bed.WaitPod(ctx, victim.Namespace, victim.Name, 2*time.Minute, func(p *corev1.Pod) (bool, error) {
			return restartCount(p) > before && readyPod(p), nil
		})
	}
	if err != nil {
		t.Error(err)
		return nil
	}
	d.pod = p
	return p
}

// killInHandOver kills, with SIGKILL, the fastpathd process of the old
// daemon's pod delay after it is called, or of the new daemon's pod delay
// after that process started, and returns the pod (as it was before the
// kill) and whose process it killed; no pod if the old daemon had stopped
// already.
func killInHandOver(ctx context.Context, old *corev1.Pod, target string, delay time.Duration) (*corev1.Pod, string, error) {
	victim := old
	if target == killNew {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			victim = newDaemonPod(ctx, old.UID)
			return victim != nil && daemonProcess(victim) != 0, nil
		})
		if err != nil {
			return nil, "", fmt.Errorf("the new daemon never ran: %w", err)
		}
	}
	select {
	case <-ctx.Done():
		return nil, "", ctx.Err()
	case <-time.After(delay): // a random moment, on purpose
	}
	if target == killOld && daemonProcess(victim) == 0 {
		return nil, "", nil
	}
	// The new daemon's process may be between two starts: kill the next.
	var pid int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if p, err := bed.Client().CoreV1().Pods(victim.Namespace).Get(ctx, victim.Name, metav1.GetOptions{}); err == nil {
			victim = p
		}
		var err error
		pid, err = (&daemon{pod: victim}).killProcess()
		return err == nil, nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("no fastpathd process in pod %s to kill", victim.Name)
	}
	return victim, fmt.Sprintf("%s daemon, pid %d of pod %s", target, pid, victim.Name), nil
}

// newDaemonPod is a daemon pod of the release other than old, or nil.
func newDaemonPod(ctx context.Context, old types.UID) *corev1.Pod {
	list, err := bed.Client().CoreV1().Pods(testbed.ChartNamespace).List(ctx, metav1.ListOptions{LabelSelector: testbed.DaemonSelector})
	if err != nil {
		return nil
	}
	for i, p := range list.Items {
		if p.UID != old && p.DeletionTimestamp == nil {
			return &list.Items[i]
		}
	}
	return nil
}

// daemonProcess is the PID of the fastpathd process of pod, or 0.
func daemonProcess(pod *corev1.Pod) int {
	return podProcess(string(pod.UID), isDaemonProcess)
}

// waitRolledOut waits until the release's only daemon pod is one other
// than old, running image, Ready, and returns it.
func waitRolledOut(ctx context.Context, old types.UID, image string) (*corev1.Pod, error) {
	var got []string
	var out *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := bed.Client().CoreV1().Pods(testbed.ChartNamespace).List(ctx, metav1.ListOptions{LabelSelector: testbed.DaemonSelector})
		if err != nil {
			return false, nil
		}
		got = got[:0]
		for _, p := range list.Items {
			got = append(got, fmt.Sprintf("%s (%s, ready %v, deleted %v, %d restarts)", p.Name, p.Spec.Containers[0].Image, readyPod(&p), p.DeletionTimestamp != nil, restartCount(&p)))
		}
		if len(list.Items) != 1 {
			return false, nil
		}
		p := &list.Items[0]
		out = p
		return p.UID != old && p.DeletionTimestamp == nil && readyPod(p) && p.Spec.Containers[0].Image == image, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the rollout to %s did not complete: the daemon pods are %v", image, got)
	}
	return out, nil
}

// checkVFIOPod waits until the pod runs with its claim Ready and checks it
// has its VF on vfio-pci, with the VF's group device node and address.
func checkVFIOPod(t *testing.T, ctx context.Context, kernel *sysfsfixture.Kernel, pod *corev1.Pod) {
	t.Helper()
	running, err := bed.WaitPod(ctx, pod.Namespace, pod.Name, 3*time.Minute, func(p *corev1.Pod) (bool, error) { return isReady(p), nil })
	if err != nil {
		t.Errorf("pod %s is stuck: %v", pod.Name, err)
		return
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return claimsReady(ctx, running) == nil, nil
	}); err != nil {
		t.Errorf("pod %s runs and its claim is not Ready: %v", pod.Name, claimsReady(ctx, running))
	}
	st := podClaimStatus(t, ctx, running)
	addr, ok := e810VFs[st.Device]
	if !ok {
		t.Errorf("pod %s: allocated %s, not an iavf VF", pod.Name, st.Device)
		return
	}
	logs, err := bed.WaitPodLog(ctx, pod.Namespace, pod.Name, "PCIDEVICE_FASTPATH_DEV_DPDK="+addr, 30*time.Second)
	if err != nil {
		t.Errorf("pod %s: %v", pod.Name, err)
	} else if !strings.Contains(logs, "device node /dev/vfio/") {
		t.Errorf("pod %s has no VFIO group's device node:\n%s", pod.Name, logs)
	}
	if got := kernel.Driver(addr); got != "vfio-pci" {
		t.Errorf("%s is on %q while pod %s runs, want vfio-pci", addr, got, pod.Name)
	}
}

// assertVFsBound waits until exactly bound of the E810's iavf VFs are on
// vfio-pci, the others on iavf.
func assertVFsBound(t *testing.T, ctx context.Context, kernel *sysfsfixture.Kernel, bound int) {
	t.Helper()
	drivers := map[string]string{}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		n := 0
		for _, addr := range e810VFs {
			drivers[addr] = kernel.Driver(addr)
			switch drivers[addr] {
			case "vfio-pci":
				n++
			case "iavf":
			default:
				return false, nil
			}
		}
		return n == bound, nil
	})
	if err != nil {
		t.Errorf("the VFs are on %v, want %d on vfio-pci and the others on iavf", drivers, bound)
	}
}

// assertCheckpointClaims waits until the checkpoint holds want claims.
func assertCheckpointClaims(t *testing.T, ctx context.Context, d *daemon, want int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return checkpointClaims(t, d) == want, nil
	})
	if err != nil {
		t.Errorf("the checkpoint holds %d claims, want %d", checkpointClaims(t, d), want)
	}
}

// assertInPods waits until inPods of the stand-ins are in pods (out of the
// host, their peer in it) and the others back in the host as they were,
// or dead with their peer: a veth in a pod's network namespace dies with
// it when the pod's sandbox is torn down with no daemon serving (a VF
// would come back to the host, and Unprepare restore it). Those dead are
// made again, as they were, and published; it returns how many.
func (n *faultNode) assertInPods(t *testing.T, ctx context.Context, inPods int) int {
	t.Helper()
	var state []string
	var lost []linkState
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		state, lost = state[:0], lost[:0]
		in, ok := 0, true
		for _, want := range n.links {
			got, err := hostLink(want.Name)
			_, peerErr := netlink.LinkByName(strings.TrimSuffix(want.Name, "a") + "b")
			switch {
			case err != nil && peerErr != nil:
				lost = append(lost, want)
			case err != nil:
				in++
				state = append(state, want.Name+" in a pod")
			case got.String() != want.String():
				ok = false
				state = append(state, fmt.Sprintf("%v, want %v", got, want))
			}
		}
		return ok && in == inPods, nil
	})
	if err != nil {
		t.Errorf("want %d stand-ins in pods and the others back as they were:\n  %s", inPods, strings.Join(state, "\n  "))
		return 0
	}
	n.remake(t, ctx, lost)
	return len(lost)
}
