//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// Churn under faults: cycles of pods with claims of every kind started and
// deleted while fastpathd, the kubelet and containerd are killed and
// started again at random moments.

// churnCycles is how many cycles TestChurn runs: $FASTPATH_CHURN_CYCLES,
// or a short run for make e2e.
func churnCycles(t *testing.T) int { return envCycles(t, "FASTPATH_CHURN_CYCLES", 1) }

// churnSeed is $FASTPATH_CHURN_SEED, to replay a run, or a new one.
func churnSeed(t *testing.T) uint64 { return envSeed(t, "FASTPATH_CHURN_SEED") }

// envCycles is the number of cycles the environment variable name asks
// for, or def.
func envCycles(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a number of cycles", name, v)
	}
	return n
}

// envSeed is the seed the environment variable name holds, to replay a
// run, or a new one.
func envSeed(t *testing.T, name string) uint64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return uint64(time.Now().UnixNano())
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// What the chaos kills.
const (
	killDaemon     = "fastpathd"
	killKubelet    = testbed.Kubelet
	killContainerd = testbed.Containerd
)

// podWant is a pod and the interface it must have, configured.
type podWant struct {
	pod    *corev1.Pod
	ifName string
	// addr is the address its interface has, or the subnet of one (CNI).
	addr string
	mtu  int
	xdp  bool
}

// churnPods are the 8 pods of a cycle: 3 with a netdev claim, 2 with an
// afxdp claim, 3 with a CNI (macvlan) claim.
func churnPods(cycle int, netdev, afxdp, cni *resourceapi.ResourceClaimTemplate) []podWant {
	var out []podWant
	for i := range 8 {
		name := fmt.Sprintf("e2e-churn-%d-%d", cycle, i)
		switch {
		case i < 3:
			out = append(out, podWant{pod: templatePod(name, "ifaces", netdev), ifName: "net1", addr: "10.82.0.2/24", mtu: 1400})
		case i < 5:
			out = append(out, podWant{pod: templatePod(name, "ifaces", afxdp), ifName: "xsk0", addr: "10.82.1.2/24", mtu: 1500, xdp: true})
		default:
			out = append(out, podWant{pod: templatePod(name, "ifaces", cni), ifName: "net2", addr: "10.82.2.", mtu: 1500})
		}
	}
	return out
}

// TestChurn runs cycles of 8 pods with claims (netdev, afxdp, CNI): each
// cycle creates them, waits until all run with their devices configured
// and their claims Ready, deletes them and waits until all are gone, while
// fastpathd (SIGKILL of its process), the kubelet and containerd (killed
// through the bed and started again) are each killed once at a random
// moment. After every cycle no device is leaked or misconfigured: the
// stand-ins are back in the host as they were (or, in a pod that outlived
// a containerd restart, dead with both ends: see assertRestoredOrLost),
// and no checkpoint entry, CDI spec, pin, libcni cache entry or address
// reservation is left.
func TestChurn(t *testing.T) {
	cycles, seed := churnCycles(t), churnSeed(t)
	t.Logf("churn: %d cycles, seed %d (FASTPATH_CHURN_SEED=%d replays the same kills)", cycles, seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	ctx, cancel := context.WithTimeout(klog.NewContext(t.Context(), klog.Background()), 2*time.Minute+time.Duration(cycles)*4*time.Minute)
	defer cancel()
	n := faultSetup(t, ctx, faultOptions{port: 26198, links: 5, up: true, cni: true})
	netdev := claimTemplate(t, ctx, "e2e-churn-netdev", "nic", "netdev.fastpath.dev", `device.attributes["fastpath.dev"].kind == "netdev"`,
		&v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "net1", MTU: 1400, Addresses: []string{"10.82.0.2/24"}}})
	afxdp := claimTemplate(t, ctx, "e2e-churn-xsk", "xsk", "afxdp.fastpath.dev", `device.attributes["fastpath.dev"].kind == "netdev"`,
		&v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "xsk0", Addresses: []string{"10.82.1.2/24"}},
			XDP: &v1alpha1.XDPConfig{AttachMode: v1alpha1.AttachNative, Queues: 1}})
	cni := createTemplate(t, ctx, "e2e-churn-cni", cniClaimSpec(map[string]v1alpha1.CNIConfig{"net": macvlanConfig("net2", subnet("10.82.2.0/24"))}))

	kills := map[string]int{}
	lost := 0
	start := time.Now()
	for cycle := range cycles {
		pods := churnPods(cycle, netdev, afxdp, cni)
		order := []string{killDaemon, killKubelet, killContainerd}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		// Two kills while the pods start, one while they go.
		c := &chaos{t: t, d: n.d, rng: rng, kills: kills}
		stopReviving := n.revive(t, ctx)
		c.run(ctx, order[:2], func() {
			for _, p := range pods {
				createPod(t, ctx, p.pod)
			}
		})
		// host-local's directories, one per CNI claim (fastpathd names a
		// network after its claim and request).
		var ipam []string
		for _, p := range pods {
			checkPodDevice(t, ctx, p)
			if p.ifName == "net2" {
				ipam = append(ipam, ipamDir(t, ctx, p.pod.Name, cni.Name, "net"))
			}
		}
		lost += stopReviving()
		if t.Failed() {
			t.Fatalf("cycle %d: pods did not run as they should (seed %d)", cycle, seed)
		}
		c.run(ctx, order[2:], func() {
			for _, p := range pods {
				if err := bed.Client().CoreV1().Pods("default").Delete(ctx, p.pod.Name, metav1.DeleteOptions{}); err != nil {
					t.Errorf("delete pod %s: %v", p.pod.Name, err)
				}
			}
		})
		for _, p := range pods {
			if err := podGone(ctx, p.pod, 3*time.Minute); err != nil {
				t.Errorf("cycle %d: pod %s is stuck: %v", cycle, p.pod.Name, err)
			}
		}
		lost += n.assertRestoredOrLost(t, ctx)
		n.assertClean(t, ctx, ipam...)
		if t.Failed() {
			t.Fatalf("cycle %d left the node unclean (seed %d)", cycle, seed)
		}
		t.Logf("churn: cycle %d done after %s: kills %v, stand-ins lost with their pod after a containerd restart %d",
			cycle, time.Since(start).Round(time.Second), kills, lost)
	}
	t.Logf("churn: %d cycles of 8 pods in %s, seed %d: fastpathd killed %d times, kubelet %d, containerd %d; "+
		"0 pods stuck, 0 devices leaked or misconfigured; %d veth stand-ins died with their pod's namespace after a containerd restart (made again)",
		cycles, time.Since(start).Round(time.Second), seed, kills[killDaemon], kills[killKubelet], kills[killContainerd], lost)
}

// revive plays the kernel's part for the stand-ins while pods start. A VF
// in a pod's network namespace goes back to the host when the namespace
// goes (a sandbox torn down when containerd died while making it), and the
// kubelet's next try of the sandbox gets it; a veth dies with both its
// ends. Until stop, revive makes such a pair again, as the VF would be
// back, and stop says how many it made.
func (n *faultNode) revive(t *testing.T, ctx context.Context) (stop func() int) {
	ctx, cancel := context.WithCancel(ctx)
	made := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
			for _, want := range n.links {
				if _, err := netlink.LinkByName(strings.TrimSuffix(want.Name, "a") + "b"); err == nil {
					continue // the pair lives: its peer never leaves the host
				}
				if _, err := netlink.LinkByName(want.Name); err == nil {
					continue
				}
				if err := recreateVeth(want); err != nil {
					t.Errorf("the stand-in %s died with a pod's namespace: %v", want.Name, err)
					return true, nil
				}
				made++
			}
			return false, nil
		})
	}()
	return func() int {
		cancel()
		<-done
		return made
	}
}

// chaos kills components at random moments while a test acts.
type chaos struct {
	t     *testing.T
	d     *daemon
	rng   *rand.Rand
	mu    sync.Mutex
	kills map[string]int
}

// run does act and, beside it, kills each of what in turn, each after a
// random delay of up to 6 s, and waits until what it killed is back.
func (c *chaos) run(ctx context.Context, what []string, act func()) {
	delays := make([]time.Duration, len(what))
	downs := make([]time.Duration, len(what))
	for i := range what {
		delays[i] = time.Duration(c.rng.Int64N(int64(6 * time.Second)))
		downs[i] = time.Duration(c.rng.Int64N(int64(2 * time.Second)))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i, w := range what {
			select {
			case <-ctx.Done():
				return
			case <-time.After(delays[i]): // a random moment, on purpose
			}
			if err := c.kill(ctx, w, downs[i]); err != nil {
				c.t.Errorf("kill %s: %v", w, err)
				return
			}
		}
	}()
	act()
	<-done
}

// kill kills one component and waits until it serves again: fastpathd is
// restarted by the kubelet, the kubelet and containerd by the test after
// down.
func (c *chaos) kill(ctx context.Context, what string, down time.Duration) error {
	c.t.Logf("chaos: killing %s", what)
	switch what {
	case killDaemon:
		p, err := bed.DaemonPod(ctx)
		if err != nil {
			return fmt.Errorf("the daemon's pod: %w", err)
		}
		if p == nil {
			return errors.New("the daemon has no pod")
		}
		c.d.pod = p
		before := restartCount(p)
		if _, err := c.d.killProcess(); err != nil {
			return err
		}
		c.count(what)
		return c.waitDaemon(ctx, before)
	default:
		if err := bed.KillComponent(ctx, what); err != nil {
			return err
		}
		c.count(what)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(down): // down for a random while, on purpose
		}
		if err := bed.StartComponent(ctx, what); err != nil {
			return err
		}
		return c.waitDaemon(ctx, -1)
	}
}

func (c *chaos) count(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kills[what]++
}

// waitDaemon waits until the daemon's pod is Ready (after more than before
// restarts, if before is not -1).
func (c *chaos) waitDaemon(ctx context.Context, before int32) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := bed.DaemonPod(ctx)
		if err != nil || p == nil {
			return false, nil
		}
		c.d.pod = p
		return restartCount(p) > before && isReady(p), nil
	})
}

// checkPodDevice waits until the pod runs with its claim Ready and checks
// its interface in its network namespace.
func checkPodDevice(t *testing.T, ctx context.Context, p podWant) {
	t.Helper()
	running, err := bed.WaitPod(ctx, "default", p.pod.Name, 3*time.Minute, func(pod *corev1.Pod) (bool, error) {
		return isReady(pod), nil
	})
	if err != nil {
		t.Errorf("pod %s is stuck: %v", p.pod.Name, err)
		return
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return claimsReady(ctx, running) == nil, nil
	})
	if err != nil {
		t.Errorf("pod %s runs and its claim is not Ready: %v", p.pod.Name, claimsReady(ctx, running))
	}
	var got podLink
	var lastErr error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		got, lastErr = podInterface(string(running.UID), p.ifName)
		return lastErr == nil && got.up && got.mtu == p.mtu && got.xdp == p.xdp &&
			slices.ContainsFunc(got.addrs, func(a string) bool { return strings.HasPrefix(a, p.addr) }), nil
	})
	if err != nil {
		t.Errorf("pod %s: %s is %+v (%v), want up, MTU %d, address %s, XDP %v", p.pod.Name, p.ifName, got, lastErr, p.mtu, p.addr, p.xdp)
	}
}

// podLink is an interface in a pod.
type podLink struct {
	up    bool
	mtu   int
	addrs []string
	xdp   bool
}

// podInterface reads the interface name in the network namespace of the
// pod with this UID, through a process of the pod.
func podInterface(uid string, name string) (podLink, error) {
	pid := podProcess(uid, nil)
	if pid == 0 {
		return podLink{}, fmt.Errorf("no process of pod %s", uid)
	}
	ns, err := netns.GetFromPath(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return podLink{}, err
	}
	defer func() { _ = ns.Close() }()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return podLink{}, err
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		return podLink{}, fmt.Errorf("%s in pod %s: %w", name, uid, err)
	}
	out := podLink{up: l.Attrs().Flags&net.FlagUp != 0, mtu: l.Attrs().MTU, xdp: l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached}
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return podLink{}, err
	}
	for _, a := range addrs {
		out.addrs = append(out.addrs, a.IPNet.String())
	}
	return out, nil
}
