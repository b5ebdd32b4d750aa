//go:build e2e

// The file's name puts its tests last in the package (go test runs a
// package's tests in the order of its files' names): after an API server
// restart, the control plane's caches trail it for minutes (the controller
// manager's garbage collector, the API server's service account and RBAC
// lookups), and the tests after it saw service accounts "not found" and
// roles not granted that had just been created.

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// The API server's outage, as the node lives through it.
const (
	// statusWithin is how soon after the API server is back (ready again)
	// every prepared claim's status must say where its device is now.
	statusWithin = 30 * time.Second
)

// outageFor is how long the API server is down: $FASTPATH_OUTAGE (make
// outage: 90s), or 15 s for make e2e.
func outageFor(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("FASTPATH_OUTAGE")
	if v == "" {
		return 15 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 10*time.Second {
		t.Fatalf("FASTPATH_OUTAGE=%q: want a duration of 10s or more", v)
	}
	return d
}

// TestOutageAPIServer: the API server is down for 90 s (make outage) while pods whose
// claims were prepared before start and stop. Their devices are attached
// and detached as the runtime's hooks say, fastpathd is not restarted,
// and within 30 s after the API server is back every claim's status says
// where its device is now.
//
// What a node does during such an outage, and so what this exercises,
// was found on the bed (kubelet 1.37, containerd 2.2): the kubelet keeps
// running its pods from what it knows, but it GETs a pod's ResourceClaims
// before it creates any sandbox of the pod (PrepareDynamicResources), so
// no sandbox of a pod with claims is created while the API server is
// down. Three pods, each in one of the ways a prepared pod starts or
// stops during the outage:
//
//   - starting: the kubelet had created the pod's sandbox when the API
//     server went; the runtime's RunPodSandbox waits in fastpath's hook
//     (its CNI network's ADD is held at a gate) and completes during the
//     outage. Its network is attached into the sandbox, the kubelet starts
//     its container, and the claim's Ready status (networkData, the
//     sandbox) waits in fastpathd's status writer for the API server.
//   - sandbox: its sandbox dies (the pause process is killed). The
//     kubelet stops it: StopPodSandbox detaches the device, back in the
//     host during the outage. The kubelet's new sandbox waits for the API
//     server (the GET of the claim); once it is back, RunPodSandbox
//     attaches the device into the new sandbox, whose status is new.
//   - container: its container dies. The kubelet starts a new one in the
//     same sandbox without the API server; CreateContainer checks that
//     the device is in place, and the new container sees it.
func TestOutageAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(klog.NewContext(t.Context(), klog.Background()), 10*time.Minute)
	t.Cleanup(cancel)
	n := faultSetup(t, ctx, faultOptions{port: 26250, links: 2, up: true, cni: true})
	netTmpl := netdevTemplate(t, ctx, "e2e-outage", "net1", "10.82.0.2/24")
	cniTmpl := createTemplate(t, ctx, "e2e-outage-cni", cniClaimSpec(map[string]v1alpha1.CNIConfig{"net": n.gate.config("net2", "10.82.1.0/24")}))
	sandbox := templatePod("e2e-outage-sandbox", "ifaces", netTmpl)
	container := templatePod("e2e-outage-container", "ifaces", netTmpl)
	starting := templatePod("e2e-outage-starting", "ifaces", cniTmpl)
	createPod(t, ctx, sandbox)
	createPod(t, ctx, container)
	uids := map[string]string{}
	for _, p := range []*corev1.Pod{sandbox, container} {
		waitRunningWith(t, ctx, p, "net1")
		checkPodDevice(t, ctx, podWant{pod: p, ifName: "net1", addr: "10.82.0.2/24", mtu: 1400})
		uids[p.Name] = podUID(t, ctx, p)
	}
	createPod(t, ctx, starting)
	ipam := ipamDir(t, ctx, starting.Name, cniTmpl.Name, "net")
	n.gate.waitHeld(t, ctx, n.d)
	uids[starting.Name] = podUID(t, ctx, starting)
	// The stand-in the sandbox pod holds, as it was in the host.
	held := podClaimStatus(t, ctx, sandbox).Device
	i := slices.IndexFunc(n.links, func(l linkState) bool { return "netdev-"+l.Name == held })
	if i < 0 {
		t.Fatalf("the sandbox pod holds %s, none of the stand-ins %v", held, n.links)
	}
	heldLink := n.links[i]
	oldSandbox, err := statusCurrent(ctx, sandbox, uids[sandbox.Name])
	if err != nil {
		t.Fatal(err)
	}
	oldWorkload := workloadPID(uids[container.Name])
	if oldWorkload == 0 {
		t.Fatalf("no workload process in pod %s", container.Name)
	}
	daemonPID, daemonRestarts := n.d.pid(t), n.d.restarts(t, ctx)

	if err := bed.KillComponent(ctx, testbed.APIServer); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	outage := time.NewTimer(outageFor(t))
	defer outage.Stop()
	apiUp := false
	t.Cleanup(func() {
		if !apiUp {
			if err := bed.StartComponent(context.Background(), testbed.APIServer); err != nil {
				t.Errorf("start the API server again: %v", err)
			}
		}
	})
	if _, err := bed.Client().CoreV1().Pods("default").Get(ctx, sandbox.Name, metav1.GetOptions{}); err == nil {
		t.Fatal("the API server answers after it was killed")
	}
	t.Logf("API server down at %s", down.Format(time.TimeOnly))

	// The sandbox that was starting completes: its network is attached
	// and its container starts.
	n.gate.openGate(t)
	during(t, ctx, "the starting pod's net2 in its sandbox", func() error {
		l, err := podInterface(uids[starting.Name], "net2")
		if err == nil && !slices.ContainsFunc(l.addrs, func(a string) bool { return strings.HasPrefix(a, "10.82.1.") }) {
			err = fmt.Errorf("net2 has addresses %v", l.addrs)
		}
		if err == nil && workloadPID(uids[starting.Name]) == 0 {
			err = errors.New("its container does not run")
		}
		return err
	})

	// The container dies and is started again in its sandbox, which
	// keeps its device.
	if err := syscall.Kill(oldWorkload, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	during(t, ctx, "the container pod's new container, with net1 in its sandbox", func() error {
		if pid := workloadPID(uids[container.Name]); pid == 0 || pid == oldWorkload {
			return errors.New("no new container")
		}
		_, err := podInterface(uids[container.Name], "net1")
		return err
	})

	// The sandbox dies: the kubelet stops it and the device is detached.
	pause := podProcess(uids[sandbox.Name], func(dir string) bool { return comm(dir) == "pause" })
	if pause == 0 {
		t.Fatalf("no pause process in pod %s", sandbox.Name)
	}
	if err := syscall.Kill(pause, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	during(t, ctx, "the sandbox pod's device back in the host", func() error {
		got, err := hostLink(heldLink.Name)
		if err == nil && got.String() != heldLink.String() {
			err = fmt.Errorf("it is %v, want %v", got, heldLink)
		}
		return err
	})
	t.Logf("the sandbox pod's device was back in the host %s into the outage", time.Since(down).Round(time.Second))

	// The rest of the outage: fastpathd runs on, and what the kubelet
	// does with the sandbox pod is said.
	select {
	case <-outage.C:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if pid := n.d.pid(t); pid != daemonPID {
		t.Errorf("fastpathd is process %d after the outage, %d before it", pid, daemonPID)
	}
	if _, err := podNetNS(uids[sandbox.Name]); err == nil {
		t.Logf("the kubelet started a new sandbox of pod %s during the outage", sandbox.Name)
	} else if tried := kubeletLogSince(t, down, "fetch ResourceClaim"); tried != "" {
		t.Logf("the kubelet did not start a new sandbox of pod %s during the outage; it says:\n%s", sandbox.Name, tried)
	}

	n.d.apiRestarts = append(n.d.apiRestarts, time.Now())
	if err := bed.StartComponent(ctx, testbed.APIServer); err != nil {
		t.Fatal(err)
	}
	apiUp = true
	back := time.Now()
	t.Logf("API server back and ready at %s, after %s", back.Format(time.TimeOnly), back.Sub(down).Round(time.Second))

	// The statuses written during the outage are current within
	// statusWithin.
	stale := map[string]error{}
	current := func(pods ...*corev1.Pod) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			// The test's context: a check begun before the deadline ends.
			clear(stale)
			for _, p := range pods {
				if _, err := statusCurrent(ctx, p, uids[p.Name]); err != nil {
					stale[p.Name] = err
				}
			}
			return len(stale) == 0, nil
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Until(back.Add(statusWithin)), true, current(starting, container)); err != nil {
		t.Errorf("%s after the API server was back, claims' statuses are not current: %v", statusWithin, stale)
	} else {
		t.Logf("the statuses written during the outage were current %s after the API server was back", time.Since(back).Round(100*time.Millisecond))
	}

	// The sandbox pod's new sandbox is the kubelet's to start, once it
	// can GET the pod's claim: at its next sync of the pod, up to a minute
	// later unless the pod changes, and a change has it sooner (once its
	// watch of pods is back). Its status is due within statusWithin of
	// the sandbox.
	nudge(t, ctx, sandbox)
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := podNetNS(uids[sandbox.Name])
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the kubelet never started a new sandbox of pod %s", sandbox.Name)
	}
	started := time.Now()
	t.Logf("the kubelet started the new sandbox of pod %s %s after the API server was back", sandbox.Name, started.Sub(back).Round(100*time.Millisecond))
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, statusWithin, true, current(sandbox)); err != nil {
		t.Errorf("%s after pod %s had its new sandbox, its claim's status is not current: %v", statusWithin, sandbox.Name, stale)
	} else {
		t.Logf("its claim's status was current %s after", time.Since(started).Round(100*time.Millisecond))
	}
	if now, err := statusCurrent(ctx, sandbox, uids[sandbox.Name]); err == nil && slices.Equal(now, oldSandbox) {
		t.Errorf("pod %s: its claim's status names the sandbox it had before the outage, %v", sandbox.Name, now)
	}

	// What the pods see.
	checkPodDevice(t, ctx, podWant{pod: sandbox, ifName: "net1", addr: "10.82.0.2/24", mtu: 1400})
	checkPodDevice(t, ctx, podWant{pod: container, ifName: "net1", addr: "10.82.0.2/24", mtu: 1400})
	checkPodDevice(t, ctx, podWant{pod: starting, ifName: "net2", addr: "10.82.1.", mtu: 1500})
	if p, err := bed.WaitPod(ctx, container.Namespace, container.Name, 60*time.Second, func(p *corev1.Pod) (bool, error) {
		return restartCount(p) >= 1 && isReady(p), nil
	}); err != nil {
		t.Error(err)
	} else if n := restartCount(p); n != 1 {
		t.Errorf("pod %s: its container was restarted %d times, want once", container.Name, n)
	}
	if logs, err := bed.WaitPodLog(ctx, container.Namespace, container.Name, ifacesEnd, 30*time.Second); err != nil {
		t.Error(err)
	} else if line := interfaceLine(logs, "net1"); !strings.HasSuffix(line, " 10.82.0.2/24") {
		t.Errorf("the new container's first look at net1: %q, want it with its address; it saw:\n%s", line, logs)
	}

	// fastpathd lived through it all.
	if pid := n.d.pid(t); pid != daemonPID {
		t.Errorf("fastpathd is process %d, %d before the outage", pid, daemonPID)
	}
	if got := n.d.restarts(t, ctx); got != daemonRestarts {
		t.Errorf("fastpathd's container was restarted %d times, %d before the outage", got, daemonRestarts)
	}

	for _, p := range []*corev1.Pod{starting, container, sandbox} {
		if err := bed.DeletePod(ctx, p.Namespace, p.Name); err != nil {
			t.Fatal(err)
		}
	}
	n.assertRestored(t, ctx)
	n.assertClean(t, ctx, ipam)
}

// duringWithin is how soon what the node does during the outage is done.
const duringWithin = 10 * time.Second

// during waits, for at most duringWithin, until check says what is wanted
// (returns nil), and fails the test if it never does.
func during(t *testing.T, ctx context.Context, what string, check func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, duringWithin, true, func(context.Context) (bool, error) {
		last = check()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("during the outage, %s: %v", what, last)
	}
}

// podUID is the UID of the pod the API server has.
func podUID(t *testing.T, ctx context.Context, pod *corev1.Pod) string {
	t.Helper()
	p, err := bed.Client().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(p.UID)
}

// comm is the command name of the process whose /proc directory is dir.
func comm(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// workloadPID is the PID of the workload of the pod with this UID, or 0.
func workloadPID(uid string) int {
	return podProcess(uid, func(dir string) bool { return comm(dir) == "workload" })
}

// nsID identifies a namespace: the device and inode of its nsfs file.
type nsID struct{ dev, ino uint64 }

func nsOf(path string) (nsID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nsID{}, err
	}
	return nsID{dev: st.Dev, ino: st.Ino}, nil
}

// podNetNS is the network namespace the sandbox of the pod with this UID
// runs in: its pause process's.
func podNetNS(uid string) (nsID, error) {
	pause := podProcess(uid, func(dir string) bool { return comm(dir) == "pause" })
	if pause == 0 {
		return nsID{}, fmt.Errorf("pod %s has no running sandbox", uid)
	}
	return nsOf(fmt.Sprintf("/proc/%d/ns/net", pause))
}

// statusCurrent says whether every device of every claim of the pod is
// Ready in the claim's status, with the pod's current sandbox as where
// its interface is, or why not; and returns the sandboxes the statuses
// name.
func statusCurrent(ctx context.Context, pod *corev1.Pod, uid string) ([]string, error) {
	if err := claimsReady(ctx, pod); err != nil {
		return nil, err
	}
	now, err := podNetNS(uid)
	if err != nil {
		return nil, err
	}
	p, err := bed.Client().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var sandboxes []string
	for _, s := range p.Status.ResourceClaimStatuses {
		c, err := bed.Client().ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		for _, d := range c.Status.Devices {
			sandbox, err := statusSandbox(d)
			if err != nil {
				return nil, fmt.Errorf("claim %s, device %s: %w", c.Name, d.Device, err)
			}
			ns, err := nsOf(sandbox)
			if err != nil {
				return nil, fmt.Errorf("claim %s, device %s: its status says sandbox %s: %w", c.Name, d.Device, sandbox, err)
			}
			if ns != now {
				return nil, fmt.Errorf("claim %s, device %s: its status says sandbox %s, not the pod's", c.Name, d.Device, sandbox)
			}
			sandboxes = append(sandboxes, sandbox)
		}
	}
	return sandboxes, nil
}

// statusSandbox is the network namespace a device's status says its
// interface is in: fastpath's data and a CNI result both list interfaces
// with their sandbox.
func statusSandbox(d resourceapi.AllocatedDeviceStatus) (string, error) {
	if d.Data == nil {
		return "", errors.New("no data in its status")
	}
	var data struct {
		Interfaces []struct {
			Sandbox string `json:"sandbox"`
		} `json:"interfaces"`
	}
	if err := json.Unmarshal(d.Data.Raw, &data); err != nil {
		return "", err
	}
	for _, i := range data.Interfaces {
		if i.Sandbox != "" {
			return i.Sandbox, nil
		}
	}
	return "", fmt.Errorf("its status names no sandbox: %s", d.Data.Raw)
}

// kubeletLogSince are the kubelet's log lines since start that hold what.
func kubeletLogSince(t *testing.T, start time.Time, what string) string {
	t.Helper()
	data, err := os.ReadFile(bed.Config().LogFile("kubelet"))
	if err != nil {
		t.Logf("the kubelet's log: %v", err)
		return ""
	}
	// klog's header: Lmmdd hh:mm:ss.uuuuuu.
	since := start.UTC().Format("0102 15:04:05")
	var out []string
	for line := range strings.Lines(string(data)) {
		if len(line) > 14 && line[1:14] >= since && strings.Contains(line, what) {
			out = append(out, line)
		}
	}
	return tail(strings.Join(out, ""), 3)
}
