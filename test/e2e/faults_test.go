//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/netnstest"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// The helpers of the tests that kill fastpathd, containerd and the kubelet
// on the real node and check what the node is left with.

// faultPrefix starts the links of these tests: the bed's own prefix, so
// that the bed removes any a failed run leaves behind.
const faultPrefix = "fptf"

// faultNode is a daemon under test and the veths it publishes, standing in
// for VF netdevs.
type faultNode struct {
	d *daemon
	// links are the stand-ins as they were before any pod had them.
	links  []linkState
	bpfDir string
	// gate holds CNI ADDs of the cnigate plugin; nil without --cni.
	gate *cniGate
	// devices is how many devices the daemon publishes: the stand-ins and
	// those faultOptions.filter admits.
	devices int
}

// faultOptions say what faultSetup starts.
type faultOptions struct {
	port int
	// point is a fault point armed once: the daemon's process is killed
	// with SIGKILL the first time it gets there, and not again after the
	// kubelet restarts it.
	point string
	// links is how many veths to publish; up sets them up in the host.
	links int
	up    bool
	// cni runs the CNI driver with the bed's reference plugins and the
	// cnigate plugin on its allowlist.
	cni bool
	// cniPlugins are more plugins on the allowlist, with cni.
	cniPlugins []string
	// sysfsRoot is a fixture's sysfs root the daemon discovers from
	// (--sysfs-root): the stand-ins are linked into its class/net, as
	// virtual netdevs of the host.
	sysfsRoot string
	// filter admits more devices, beside the stand-ins; devices is how
	// many it admits.
	filter  string
	devices int
	// before changes the daemon before it starts.
	before func(*daemon)
	args   []string
}

// faultSetup creates the stand-ins and runs fastpathd as the chart's
// DaemonSet pod, publishing exactly them.
func faultSetup(t *testing.T, ctx context.Context, o faultOptions) *faultNode {
	t.Helper()
	n := &faultNode{bpfDir: filepath.Join(t.TempDir(), "bpf")}
	prefix := fmt.Sprintf("%s%d", faultPrefix, o.port)
	for i := range o.links {
		l := netnstest.Veth(t, fmt.Sprintf("%s%da", prefix, i), fmt.Sprintf("%s%db", prefix, i))
		if o.up {
			if err := netlink.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
		}
		st, err := hostLink(l.Attrs().Name)
		if err != nil {
			t.Fatal(err)
		}
		n.links = append(n.links, st)
		if o.sysfsRoot != "" {
			// The host's sysfs entry, as the daemon's container sees it.
			if err := os.Symlink(filepath.Join("/sys/devices/virtual/net", st.Name), filepath.Join(o.sysfsRoot, "sys", "class", "net", st.Name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() { deleteSlices(t) })
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	t.Cleanup(func() { _ = unix.Unmount(n.bpfDir, unix.MNT_DETACH) })
	filter := fmt.Sprintf(`device.attributes["fastpath.dev"].kind == "netdev" && device.attributes["fastpath.dev"].ifName.startsWith(%q) && device.attributes["fastpath.dev"].ifName.endsWith("a")`, prefix)
	if o.filter != "" {
		filter = "(" + filter + ") || (" + o.filter + ")"
	}
	args := append([]string{"--bpf-dir", n.bpfDir, "--filter", filter}, o.args...)
	if o.sysfsRoot != "" {
		args = append(args, "--sysfs-root", o.sysfsRoot)
	}
	if o.cni {
		n.gate = newCNIGate(t)
		// The host link the CNI devices name: the macvlan master.
		master := netnstest.Veth(t, prefix+"m", prefix+"n")
		args = append(args, "--cni", "--cni-plugin-dir", bed.PluginDir(cniDriver),
			"--cni-bin-dir", bed.Config().CNIBinDir()+","+n.gate.binDir,
			"--cni-plugins", strings.Join(append([]string{"macvlan", "host-local", "cnigate"}, o.cniPlugins...), ","), "--cni-interface", master.Attrs().Name, "--cni-devices", "16")
		if err := netlink.LinkSetUp(master); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = bed.Client().ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{},
				metav1.ListOptions{FieldSelector: "spec.driver=" + cniDriver})
		})
	}
	n.d = newDaemon(t, o.port, args...)
	if o.point != "" {
		n.d.arm(o.point)
	}
	if o.before != nil {
		o.before(n.d)
	}
	n.d.start(t, ctx)
	t.Cleanup(func() { n.d.stop(t) })
	if o.cni {
		applyDeviceClasses(t, ctx, "cni-deviceclass.yaml")
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := nodeSlices(ctx)
		return err == nil && countDevices(s) == o.links+o.devices, nil
	})
	if err != nil {
		t.Fatalf("the %d veths (and %d other devices) were never published", o.links, o.devices)
	}
	n.devices = o.links + o.devices
	return n
}

// arm sets the daemon's environment so that it is killed at point once.
func (d *daemon) arm(point string) {
	if !slices.Contains(fault.Points, point) {
		panic(fmt.Sprintf("no fault point %q", point))
	}
	env := slices.Clone(bed.Config().ChartValues()["extraEnv"].([]map[string]any))
	env = append(env, map[string]any{"name": fault.Env, "value": point}, map[string]any{"name": fault.OnceEnv, "value": d.onceFile()})
	d.values["extraEnv"] = env
}

// onceFile is the file the faultinject build creates when it kills the
// daemon at its armed point: beside the state directory, which must hold
// only fastpathd's own files.
func (d *daemon) onceFile() string { return d.stateDir + ".fault-once" }

// restarts is how often the kubelet restarted the daemon's container.
func (d *daemon) restarts(t *testing.T, ctx context.Context) int32 {
	t.Helper()
	p, err := bed.Client().CoreV1().Pods(d.pod.Namespace).Get(ctx, d.pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return restartCount(p)
}

func restartCount(p *corev1.Pod) int32 {
	var n int32
	for _, cs := range p.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

// waitKilledAt waits until the daemon was killed at its armed point and
// the kubelet has restarted it (the same pod, restarted more than before
// times), Ready again, and checks that the killed process said where it
// died.
func (d *daemon) waitKilledAt(t *testing.T, ctx context.Context, point string, before int32) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(d.onceFile())
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the daemon never reached fault point %s", point)
	}
	if at, err := os.ReadFile(d.onceFile()); err != nil || string(at) != point {
		t.Errorf("the daemon was killed at %q (%v), want %s", at, err, point)
	}
	d.waitRestarted(t, ctx, before)
	logs, err := bed.Client().CoreV1().Pods(d.pod.Namespace).GetLogs(d.pod.Name, &corev1.PodLogOptions{Previous: true}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("the log of the killed daemon: %v", err)
	}
	want := "fault: killed at " + point
	switch {
	case bytes.Contains(logs, []byte(want)):
	case bytes.HasPrefix(logs, []byte("unable to retrieve container logs")):
		// The kubelet removed the killed container (and its log) as it
		// started the next: the once file says where it died.
		t.Logf("the kubelet kept no log of the killed daemon; its once file says it died at %s", point)
	default:
		t.Errorf("the killed daemon's log does not say %q; it ends:\n%s", want, tail(string(logs), 15))
	}
	d.keepPrevious(t, logs)
}

// waitRestarted waits until the daemon's container was restarted more
// than before times and the pod is Ready.
func (d *daemon) waitRestarted(t *testing.T, ctx context.Context, before int32) {
	t.Helper()
	p, err := bed.WaitPod(ctx, d.pod.Namespace, d.pod.Name, 90*time.Second, func(p *corev1.Pod) (bool, error) {
		return restartCount(p) > before && isReady(p), nil
	})
	if err != nil {
		t.Fatalf("the daemon was not restarted and Ready again: %v", err)
	}
	d.pod = p
}

// kill kills the daemon's process with SIGKILL; the kubelet restarts it
// (waitRestarted).
func (d *daemon) kill(t *testing.T) {
	t.Helper()
	pid, err := d.killProcess()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed fastpathd (pid %d) with SIGKILL", pid)
}

// killProcess kills the fastpathd process of the daemon's current pod with
// SIGKILL and returns its PID.
func (d *daemon) killProcess() (int, error) {
	pid := podProcess(string(d.pod.UID), isDaemonProcess)
	if pid == 0 {
		return 0, fmt.Errorf("no fastpathd process in the cgroup of pod %s (%s)", d.pod.Name, d.pod.UID)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill fastpathd (pid %d): %w", pid, err)
	}
	return pid, nil
}

// isDaemonProcess says whether the process of /proc/<pid> dir is the
// daemon, not a probe (fastpathd probe) run beside it.
func isDaemonProcess(dir string) bool {
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	args := strings.Split(string(cmdline), "\x00")
	return err == nil && filepath.Base(args[0]) == "fastpathd" && len(args) > 1 && args[1] == "run"
}

// keepPrevious appends the log of a killed container to the daemon's log
// file.
func (d *daemon) keepPrevious(t *testing.T, logs []byte) {
	t.Helper()
	f, err := os.OpenFile(d.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Logf("keep the log of the killed daemon: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "--- pod %s (%s), killed container ---\n%s", d.pod.Name, d.pod.UID, logs)
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// linkState is what a host netdev must be given back with.
type linkState struct {
	Name, MAC, Alias string
	MTU              int
	Up               bool
	// Addrs are its addresses but IPv6 link-local ones, which the kernel
	// gives any link that is up.
	Addrs []string
}

func (s linkState) String() string {
	return fmt.Sprintf("%s mtu %d mac %s alias %q up %v addrs %v", s.Name, s.MTU, s.MAC, s.Alias, s.Up, s.Addrs)
}

func hostLink(name string) (linkState, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return linkState{}, fmt.Errorf("link %s: %w", name, err)
	}
	a := l.Attrs()
	st := linkState{Name: a.Name, MAC: a.HardwareAddr.String(), Alias: a.Alias, MTU: a.MTU, Up: a.Flags&net.FlagUp != 0}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return linkState{}, fmt.Errorf("addresses of %s: %w", name, err)
	}
	for _, ad := range addrs {
		if !ad.IP.IsLinkLocalUnicast() {
			st.Addrs = append(st.Addrs, ad.IPNet.String())
		}
	}
	slices.Sort(st.Addrs)
	return st, nil
}

// assertRestored waits for every stand-in to be back in the host exactly
// as it was.
func (n *faultNode) assertRestored(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, want := range n.links {
		assertLink(t, ctx, want)
	}
}

func assertLink(t *testing.T, ctx context.Context, want linkState) {
	t.Helper()
	var got linkState
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		got, lastErr = hostLink(want.Name)
		return lastErr == nil && got.String() == want.String(), nil
	})
	if err != nil {
		t.Errorf("host link %s is not back as it was:\n got %v (%v)\nwant %v", want.Name, got, lastErr, want)
	}
}

// assertRestoredOrLost is assertRestored after a containerd restart while
// pods ran: containerd 2.2 sends NRI no StopPodSandbox for the pods it ran
// before it restarted, so a stand-in in such a pod dies with the pod's
// network namespace when the pod goes (a VF comes back to the host, and
// Unprepare restores it). A stand-in is then back as it was, or gone with
// its peer (a veth stuck in another namespace keeps its peer in the host);
// those gone are made again, as they were, and published before it
// returns how many.
func (n *faultNode) assertRestoredOrLost(t *testing.T, ctx context.Context) int {
	t.Helper()
	var lost []linkState
	for _, want := range n.links {
		peer := strings.TrimSuffix(want.Name, "a") + "b"
		var got linkState
		var lastErr error
		gone := false
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			_, peerErr := netlink.LinkByName(peer)
			got, lastErr = hostLink(want.Name)
			gone = peerErr != nil && lastErr != nil
			return gone || (lastErr == nil && got.String() == want.String()), nil
		})
		switch {
		case err != nil:
			t.Errorf("host link %s is not back as it was:\n got %v (%v)\nwant %v", want.Name, got, lastErr, want)
		case gone:
			lost = append(lost, want)
		}
	}
	n.remake(t, ctx, lost)
	return len(lost)
}

// remake makes the stand-ins lost again, as they were, and waits until
// the daemon publishes them.
func (n *faultNode) remake(t *testing.T, ctx context.Context, lost []linkState) {
	t.Helper()
	if len(lost) == 0 {
		return
	}
	for _, want := range lost {
		if err := recreateVeth(want); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := nodeSlices(ctx)
		if err != nil {
			return false, nil
		}
		for _, l := range lost {
			if sliceWith(s, "netdev-"+l.Name) == "" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the %d stand-ins made again were never published", len(lost))
	}
}

// assertClean waits until nothing of any claim is left on the node: no
// checkpoint entry, CDI spec, claim directory, XDP pin, libcni cache entry
// or host-local reservation in ipamDirs.
func (n *faultNode) assertClean(t *testing.T, ctx context.Context, ipamDirs ...string) {
	t.Helper()
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		left = n.leftovers(t, ipamDirs...)
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("after every pod went, the node still holds:\n  %s", strings.Join(left, "\n  "))
	}
}

// leftovers lists what of the claims is still on the node.
func (n *faultNode) leftovers(t *testing.T, ipamDirs ...string) []string {
	t.Helper()
	var left []string
	if c := checkpointClaims(t, n.d); c > 0 {
		left = append(left, fmt.Sprintf("%d checkpoint entries", c))
	}
	specs, _ := filepath.Glob(filepath.Join(bed.CDIDir(), "fastpath.dev-*"))
	left = append(left, specs...)
	for _, dir := range []string{filepath.Join(n.d.stateDir, "claims"), filepath.Join(n.d.stateDir, "cni", "cache", "results"), n.bpfDir} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			// The kernel's own files at the root of a bpffs (maps.debug,
			// progs.debug) are not pins.
			if dir != n.bpfDir || e.IsDir() {
				left = append(left, filepath.Join(dir, e.Name()))
			}
		}
	}
	for _, dir := range ipamDirs {
		for _, a := range ipamAllocations(t, dir) {
			left = append(left, "host-local reservation "+a)
		}
	}
	return left
}

// claimsReady says whether every device allocated to every claim of the
// pod has a Ready condition that is true, or why not.
func claimsReady(ctx context.Context, pod *corev1.Pod) error {
	p, err := bed.Client().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	// A claim the pod names, or the one made of its template.
	var names []string
	for _, pc := range p.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			names = append(names, *pc.ResourceClaimName)
			continue
		}
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.Name == pc.Name && s.ResourceClaimName != nil {
				names = append(names, *s.ResourceClaimName)
			}
		}
	}
	if len(names) != len(p.Spec.ResourceClaims) {
		return fmt.Errorf("pod %s: %d of %d claims created", pod.Name, len(names), len(p.Spec.ResourceClaims))
	}
	for _, name := range names {
		c, err := bed.Client().ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := claimReady(c); err != nil {
			return fmt.Errorf("pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

func claimReady(c *resourceapi.ResourceClaim) error {
	if c.Status.Allocation == nil {
		return fmt.Errorf("claim %s is not allocated", c.Name)
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		i := slices.IndexFunc(c.Status.Devices, func(d resourceapi.AllocatedDeviceStatus) bool {
			return d.Driver == r.Driver && d.Pool == r.Pool && d.Device == r.Device
		})
		if i < 0 {
			return fmt.Errorf("claim %s: device %s has no status", c.Name, r.Device)
		}
		conds := c.Status.Devices[i].Conditions
		j := slices.IndexFunc(conds, func(c metav1.Condition) bool { return c.Type == "Ready" })
		if j < 0 || conds[j].Status != metav1.ConditionTrue {
			return fmt.Errorf("claim %s: device %s is not Ready: %+v", c.Name, r.Device, conds)
		}
	}
	return nil
}

// waitRunningWith waits until the pod runs and its claims are Ready, and
// checks that its container never ran without ifNames: it was not
// restarted, and if the runtime created it with fastpath connected, its
// one report (the workload's interface list) shows every one of them. A
// container the runtime created while fastpathd was down runs without
// them until fastpathd is back (README: Crashes, restarts, reboots); that
// is said, and the caller checks that they arrived. It returns the
// container's report.
func waitRunningWith(t *testing.T, ctx context.Context, pod *corev1.Pod, ifNames ...string) string {
	t.Helper()
	p, err := bed.WaitPod(ctx, pod.Namespace, pod.Name, 2*time.Minute, func(p *corev1.Pod) (bool, error) {
		return isReady(p), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	logs, err := bed.WaitPodLog(ctx, pod.Namespace, pod.Name, ifacesEnd, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := restartCount(p); n != 0 {
		t.Errorf("pod %s: its container was restarted %d times", pod.Name, n)
	}
	connected, err := startedConnected(p)
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, name := range ifNames {
		if interfaceLine(logs, name) == "" {
			missing = append(missing, name)
		}
	}
	switch {
	case connected && len(missing) > 0:
		t.Errorf("pod %s: the runtime started its container with fastpath connected, and it started without %v; it saw:\n%s", pod.Name, missing, logs)
	case !connected:
		t.Logf("pod %s: the runtime started its container while fastpathd was down; it started with %d of its %d interfaces", pod.Name, len(ifNames)-len(missing), len(ifNames))
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return claimsReady(ctx, pod) == nil, nil
	})
	if err != nil {
		t.Errorf("the claims of pod %s are not Ready: %v", pod.Name, claimsReady(ctx, pod))
	}
	return logs
}

// createdConnected says whether fastpath's NRI plugin was connected to
// the runtime when it created the pod's current container, from the
// runtime's log: the last of the plugin's connections, disconnections and
// the runtime's own starts before the creation was a connection.
func createdConnected(p *corev1.Pod) (bool, error) {
	return connectedAt(p, "created", func(line, id string) bool {
		return strings.Contains(line, `returns container id \"`+id+`\"`) || strings.Contains(line, `returns container id "`+id+`"`) ||
			strings.Contains(line, `msg="Created container `+id+`:`)
	})
}

// startedConnected says, as createdConnected, whether the plugin was
// connected when the runtime started the pod's current container: its
// StartContainer, the runtime's last call before the container's process
// runs, is where fastpath waits for an attach begun at RunPodSandbox
// (--attach-overlap). A plugin that drops during the start (killed while
// it waits) is not connected at the start's end.
func startedConnected(p *corev1.Pod) (bool, error) {
	return connectedAt(p, "started", func(line, id string) bool {
		return strings.Contains(line, `StartContainer for \"`+id+`\" returns successfully`) ||
			strings.Contains(line, `StartContainer for "`+id+`" returns successfully`) ||
			(strings.Contains(line, `msg="Started container"`) && strings.Contains(line, "containerID="+id))
	})
}

// connectedAt says whether the plugin was connected at the line of the
// runtime's log that at says is the pod's current container's.
func connectedAt(p *corev1.Pod, what string, at func(line, id string) bool) (bool, error) {
	if len(p.Status.ContainerStatuses) == 0 {
		return false, fmt.Errorf("pod %s has no container status", p.Name)
	}
	_, id, ok := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	if !ok {
		return false, fmt.Errorf("pod %s: container ID %q", p.Name, p.Status.ContainerStatuses[0].ContainerID)
	}
	data, err := os.ReadFile(bed.Config().LogFile(bed.Config().Runtime))
	if err != nil {
		return false, err
	}
	connected := false
	for line := range strings.Lines(string(data)) {
		switch {
		case at(line, id):
			return connected, nil
		case strings.Contains(line, `msg="starting containerd"`) || strings.Contains(line, `msg="Starting CRI-O`):
			// A restarted runtime has no plugin until one connects.
			connected = false
		case !strings.Contains(line, `10-fastpath`):
		case strings.Contains(line, "connected and synchronized"):
			connected = true
		case strings.Contains(line, "closed") || strings.Contains(line, "closing plugin"):
			connected = false
		}
	}
	return false, fmt.Errorf("the runtime's log never says it %s container %s of pod %s", what, id, p.Name)
}

// createPod creates the pod, deleted when the test ends.
func createPod(t *testing.T, ctx context.Context, pod *corev1.Pod) {
	t.Helper()
	if _, err := bed.Client().CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), pod.Namespace, pod.Name) })
}

// netdevTemplate is a template of one netdev claim named name in the pod,
// with the given addresses.
func netdevTemplate(t *testing.T, ctx context.Context, name, ifName string, addrs ...string) *resourceapi.ResourceClaimTemplate {
	t.Helper()
	return claimTemplate(t, ctx, name, "nic", "netdev.fastpath.dev", `device.attributes["fastpath.dev"].kind == "netdev"`,
		&v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: ifName, MTU: 1400, MAC: "02:00:00:fa:60:01", Addresses: addrs}})
}

// templatePod is a pod running the workload's cmd with one claim of each
// template, named after it.
func templatePod(name, cmd string, tmpls ...*resourceapi.ResourceClaimTemplate) *corev1.Pod {
	pod := testbed.WorkloadPod("default", name, cmd)
	for _, tmpl := range tmpls {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: tmpl.Name, ResourceClaimTemplateName: &tmpl.Name})
		pod.Spec.Containers[0].Resources.Claims = append(pod.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: tmpl.Name})
	}
	return pod
}

// cniGate holds the CNI ADDs of claims whose chain ends with the cnigate
// plugin until it is opened.
type cniGate struct {
	binDir string // holds cnigate, for --cni-bin-dir
	fifo   string
	mu     sync.Mutex
	open   *os.File
}

var (
	cnigateOnce sync.Once
	cnigateDir  string
	cnigateErr  error
)

// newCNIGate builds the cnigate plugin (once per run) and makes a FIFO for
// the test, shut.
func newCNIGate(t *testing.T) *cniGate {
	t.Helper()
	cnigateOnce.Do(func() {
		cnigateDir = filepath.Join(workDir, "cni-bin")
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(cnigateDir, "cnigate"), "./test/cnigate")
		cmd.Dir = bed.Config().RepoDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			cnigateErr = fmt.Errorf("build the cnigate plugin: %w\n%s", err, out)
		}
	})
	if cnigateErr != nil {
		t.Fatal(cnigateErr)
	}
	// Beside the plugin, which the config names it by.
	g := &cniGate{binDir: cnigateDir, fifo: filepath.Join(cnigateDir, fmt.Sprintf("gate-%d", gateSeq.Add(1)))}
	if err := unix.Mkfifo(g.fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.shut()
		_ = os.Remove(g.fifo)
	})
	return g
}

var gateSeq atomic.Int32

// plugin is the chain's plugin that waits at the gate.
func (g *cniGate) plugin() v1alpha1.CNIPlugin {
	return v1alpha1.CNIPlugin{Type: "cnigate", Config: map[string]any{"gate": filepath.Base(g.fifo)}}
}

// openGate lets every ADD waiting or to come pass.
func (g *cniGate) openGate(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		return
	}
	// Read-write: it never waits for a reader.
	f, err := os.OpenFile(g.fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	g.open = f
}

// shut makes ADDs wait again.
func (g *cniGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		_ = g.open.Close()
		g.open = nil
	}
}

// waitHeld waits until an ADD waits at the gate, run by the daemon's
// current process, and returns the plugin's PID.
func (g *cniGate) waitHeld(t *testing.T, ctx context.Context, d *daemon) int {
	t.Helper()
	var pid int
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		pid = heldADD(string(d.pod.UID))
		return pid != 0, nil
	})
	if err != nil {
		t.Fatal("no CNI ADD ever waited at the gate")
	}
	return pid
}

// heldADD is the PID of a cnigate ADD in the cgroup of the pod with this
// UID, or 0.
func heldADD(podUID string) int {
	return podProcess(podUID, func(dir string) bool {
		comm, err1 := os.ReadFile(filepath.Join(dir, "comm"))
		env, err2 := os.ReadFile(filepath.Join(dir, "environ"))
		return err1 == nil && err2 == nil && strings.TrimSpace(string(comm)) == "cnigate" &&
			slices.Contains(strings.Split(string(env), "\x00"), "CNI_COMMAND=ADD")
	})
}

// podProcess is the PID of a process in the cgroup of the pod with this
// UID for which match (given its /proc directory) is true, or 0.
func podProcess(uid string, match func(dir string) bool) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		// CRI-O's conmon runs in the pod's cgroup, outside its
		// namespaces.
		if err == nil && strings.Contains(string(cg), "pod"+uid) && comm(dir) != "conmon" && (match == nil || match(dir)) {
			return pid
		}
	}
	return 0
}

// config is a CNI config of the design's macvlan example whose ADD waits
// at the gate first: until it opens, the pod has nothing of the network.
func (g *cniGate) config(ifName, cidr string) v1alpha1.CNIConfig {
	c := macvlanConfig(ifName, subnet(cidr))
	c.Plugins = append([]v1alpha1.CNIPlugin{g.plugin()}, c.Plugins...)
	return c
}

// podGone waits until the pod is deleted from the API.
func podGone(ctx context.Context, pod *corev1.Pod, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := bed.Client().CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
