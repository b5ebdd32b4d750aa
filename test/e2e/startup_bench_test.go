//go:build e2e && benche2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// startupPods is how many pods of each kind start one after another;
// burstPods (cniburst_bench_test.go) how many start at once.
const startupPods = 20

// TestPodStartup measures, on the real node, how long pods take from
// creation to Ready without a claim, with a fastpath netdev claim, with
// a claim of a driver that does nothing (the DRA floor,
// startup_floor_test.go) and with that claim and the kernel's move of a
// veth into the pod (the move floor, startup_move_test.go), and where the
// time goes: the pods of the four kinds take turns, one at a time, and
// then burstPods of each kind start at once. Each step is timed as it happened
// (the test's watches, the kubelet's, containerd's and fastpathd's logs),
// never by polling. It prints tables; `make bench-e2e` runs it.
// $FASTPATH_STARTUP_ARGS are more fastpathd arguments, for a comparison
// (--attach-overlap=false: the attach inside RunPodSandbox). With
// $FASTPATH_STARTUP_PROFILE set to a file, fastpathd is run with
// --profiling, and a CPU profile of its first 8 s of each burst is kept
// there, the kind of pods appended (.plain, .claim, .floor, .move), with its
// allocations profiles before and after the burst (.claim.allocs-before,
// .claim.allocs: go tool pprof -base).
func TestPodStartup(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()

	first := 100
	var more []int
	for i := 1; i < burstPods; i++ {
		more = append(more, first+i)
	}
	args := strings.Fields(os.Getenv("FASTPATH_STARTUP_ARGS"))
	profile := os.Getenv("FASTPATH_STARTUP_PROFILE")
	if profile != "" {
		args = append(args, "--profiling", "true")
	}
	if len(args) > 0 {
		fmt.Printf("fastpathd with %s ($FASTPATH_STARTUP_ARGS)\n", strings.Join(args, " "))
	}
	dataplaneSetupArgs(t, ctx, startupPort, args, append([]int{first}, more...)...)
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "startup"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: netdevClaim("", &v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{
			Name: "net1", MTU: 9000, Addresses: []string{"10.95.0.2/24"}}}).Spec},
	}
	tmpl.Spec.Spec.Devices.Requests[0].Exactly.Selectors = nil
	if _, err := bed.Client().ResourceV1().ResourceClaimTemplates("default").Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceClaimTemplates("default").Delete(context.Background(), tmpl.Name, metav1.DeleteOptions{})
	})
	t.Cleanup(func() { deleteAll(t, context.Background()) })
	floor := startFloorDriver(t, ctx, 2*burstPods)
	mover := startMoveFloor(t, ctx, startupPods+burstPods)
	moveFailed := func() {
		for _, f := range mover.failed() {
			t.Errorf("the move floor's move failed: %s", f)
		}
	}
	mk := func(name string, kind podKind) *corev1.Pod {
		switch kind {
		case fastpathPod:
			return claimPod(name, "sleep", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &tmpl.Name})
		case floorPod, movePod:
			pod := testbed.WorkloadPod("default", name, "sleep")
			pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "floor", ResourceClaimTemplateName: &floor.Name}}
			pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "floor"}}
			return pod
		}
		return testbed.WorkloadPod("default", name, "sleep")
	}

	// One at a time, the kinds taking turns: a drift of the machine
	// meanwhile weighs on all alike.
	wctx, stop := context.WithCancel(ctx)
	tl := watchTimeline(t, wctx)
	hooksBefore := scrapeMetrics(t, ctx, startupPort)
	kinds := []podKind{plainPod, fastpathPod, floorPod, movePod}
	for i := range len(kinds) * startupPods {
		kind := kinds[i%len(kinds)]
		name := fmt.Sprintf("startup-%s-%d", kindName(kind), i/len(kinds))
		tl.creating(name, kind)
		if _, err := bed.RunPod(ctx, mk(name, kind)); err != nil {
			t.Fatal(err)
		}
	}
	// The pods go while the daemon that prepared their claims still runs:
	// the kubelet needs it to unprepare them.
	moveFailed()
	deleteAll(t, ctx)
	tl.readLogs(t, lastDaemon.keptLog(t))
	stop()
	tl.printBreakdown(fmt.Sprintf("Pod start-up on the test bed, %d pods of each kind taking turns, one at a time:", startupPods))
	printHooks(hooksBefore, scrapeMetrics(t, ctx, startupPort))
	for _, kind := range kinds {
		total := tl.durations(startupParts[0], kind)
		fmt.Printf("%d pods %s one at a time, creation to Ready: p50 %s, p90 %s, p99 %s\n", startupPods, kindWhat[kind], pct(total, 50), pct(total, 90), pct(total, 99))
	}
	fmt.Println()

	// burstPods at once, without claims, then with fastpath's, then with
	// the floor driver's, then with the move floor's.
	for _, kind := range kinds {
		wctx, stop := context.WithCancel(ctx)
		tl := watchTimeline(t, wctx)
		hooksBefore := scrapeMetrics(t, ctx, startupPort)
		cpuBefore, err := takeCPU()
		if err != nil {
			t.Fatal(err)
		}
		allocs := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/allocs", startupPort)
		if profile != "" {
			if err := saveURL(ctx, allocs, profile+"."+kindName(kind)+".allocs-before"); err != nil {
				t.Errorf("allocations profile: %v", err)
			}
		}
		began := time.Now()
		var profiled sync.WaitGroup
		if profile != "" {
			profiled.Go(func() {
				url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=8", startupPort)
				if err := saveURL(ctx, url, profile+"."+kindName(kind)); err != nil {
					t.Errorf("CPU profile: %v", err)
				}
			})
		}
		startBurst(t, ctx, tl, kind, mk)
		wall := time.Since(began)
		cpuAfter, err := takeCPU()
		if err != nil {
			t.Fatal(err)
		}
		profiled.Wait()
		moveFailed()
		if profile != "" {
			if err := saveURL(ctx, allocs, profile+"."+kindName(kind)+".allocs"); err != nil {
				t.Errorf("allocations profile: %v", err)
			}
		}
		deleteAll(t, ctx)
		tl.readLogs(t, lastDaemon.keptLog(t))
		stop()
		what := kindWhat[kind]
		tl.printBreakdown(fmt.Sprintf("%d pods %s created at once:", burstPods, what))
		printHooks(hooksBefore, scrapeMetrics(t, ctx, startupPort))
		printCPU(cpuBefore, cpuAfter, burstPods, wall)
		total := tl.durations(startupParts[0], kind)
		fmt.Printf("%d pods %s at once, creation to Ready: p50 %s, p90 %s, p99 %s\n\n", burstPods, what, pct(total, 50), pct(total, 90), pct(total, 99))
	}
}

// startupPort is the metrics port of TestPodStartup's daemon.
const startupPort = 26190

// runtimeHooks are fastpathd's NRI hooks, as its metrics name them.
var runtimeHooks = []string{"run_pod_sandbox", "create_container", "start_container", "stop_pod_sandbox", "remove_pod_sandbox"}

// printHooks prints how long the runtime waited for each of fastpathd's
// NRI hooks between two scrapes of its metrics, before and after: the
// runtime calls its plugins one event at a time for all pods, so a hook's
// time holds up every pod of the node. The pods' stops (stop_pod_sandbox)
// are in it.
func printHooks(before, after string) {
	delta := func(series string) float64 {
		name := "fastpath_nri_hook_duration_seconds" + series
		return gaugeValue(after, name) - gaugeValue(before, name)
	}
	fmt.Println("fastpathd's NRI hooks meanwhile (calls; the runtime's wait in all; over 128 ms):")
	for _, h := range runtimeHooks {
		n := delta(fmt.Sprintf("_count{hook=%q}", h))
		if n == 0 {
			continue
		}
		sum := delta(fmt.Sprintf("_sum{hook=%q}", h))
		slow := n - delta(fmt.Sprintf("_bucket{hook=%q,le=\"0.128\"}", h))
		fmt.Printf("  %s: %d; %.3f s (%.1f ms a call); %d\n", h, int(n), sum, 1000*sum/n, int(slow))
	}
	fmt.Print("The kubelet plugin's reads of a claim at Prepare (--claim-prefetch):")
	for _, r := range []string{"hit", "waited", "miss"} {
		series := fmt.Sprintf("fastpath_claim_prefetch_total{result=%q}", r)
		fmt.Printf(" %s %d", r, int(gaugeValue(after, series)-gaugeValue(before, series)))
	}
	fmt.Println()
	fmt.Println()
}

// kindWhat says what pods of a kind claim, in the test's output.
var kindWhat = map[podKind]string{plainPod: "without claims", fastpathPod: "each with a claim", floorPod: "each with a floor driver's claim",
	movePod: "each with a floor driver's claim and the kernel's move"}

// kindName names a kind of pod in the pods' names.
func kindName(kind podKind) string {
	return map[podKind]string{plainPod: "plain", fastpathPod: "claim", floorPod: "floor", movePod: "move"}[kind]
}

// startBurst creates burstPods pods at once, from 8 clients, and waits
// until every one is Ready as the timeline saw it.
func startBurst(t *testing.T, ctx context.Context, tl *timeline, kind podKind, mk func(string, podKind) *corev1.Pod) {
	t.Helper()
	names := make(chan string, burstPods)
	for i := range burstPods {
		names <- fmt.Sprintf("startup-burst-%s-%02d", kindName(kind), i)
	}
	close(names)
	var wg sync.WaitGroup
	errs := make(chan error, burstPods)
	for range 8 {
		wg.Go(func() {
			for name := range names {
				tl.creating(name, kind)
				if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, mk(name, kind), metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var ready int
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		ready = len(tl.durations(startupParts[0], kind))
		return ready == burstPods, nil
	}); err != nil {
		t.Fatalf("%d of %d pods Ready: %v", ready, burstPods, err)
	}
}

// TestDaemonMemory measures the daemon pod's peak RSS with 1024 devices
// published (1023 VFs of a generated sysfs fixture and its PF), and keeps
// a heap profile of it beside the bed's logs. `make bench-e2e` runs it.
func TestDaemonMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	root := sysfsfixture.TempDir(t)
	if err := sysfsfixture.Generated(1023).Write(root); err != nil {
		t.Fatal(err)
	}
	const port = 26191
	big := startDaemon(t, ctx, port, "--sysfs-root", root, "--profiling", "true")
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := nodeSlices(ctx)
		return err == nil && countDevices(s) == 1024, nil
	}); err != nil {
		t.Fatal("the 1024 devices were never published")
	}
	peak, anon, file := memory(t, big.pid(t))
	profile := filepath.Join(bed.Config().LogDir(), "fastpathd-heap.pprof")
	if err := saveURL(ctx, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/heap", port), profile); err != nil {
		t.Errorf("heap profile: %v", err)
	}
	fmt.Printf("\nfastpathd with 1024 devices published: peak RSS %.1f MiB (VmHWM); now %.1f MiB anonymous + %.1f MiB file-backed; heap profile %s\n\n",
		float64(peak)/1024, float64(anon)/1024, float64(file)/1024, profile)
}

// saveURL writes what a GET of url answers to file.
func saveURL(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}

// deleteAll deletes the start-up pods at once and waits until they are gone.
func deleteAll(t *testing.T, ctx context.Context) {
	t.Helper()
	pods := bed.Client().CoreV1().Pods("default")
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if strings.HasPrefix(p.Name, "startup-") {
			_ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{})
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range list.Items {
			if strings.HasPrefix(p.Name, "startup-") {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("start-up pods still there after 3 minutes")
	}
}

// memory reads a process's peak RSS (VmHWM) and the anonymous and
// file-backed parts of its current RSS, in KiB.
func memory(t *testing.T, pid int) (peak, anon, file int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]*int{"VmHWM:": &peak, "RssAnon:": &anon, "RssFile:": &file}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) >= 2 && fields[f[0]] != nil {
			if *fields[f[0]], err = strconv.Atoi(f[1]); err != nil {
				t.Fatalf("/proc/%d/status: %q: %v", pid, line, err)
			}
		}
	}
	if peak == 0 {
		t.Fatalf("/proc/%d/status has no VmHWM", pid)
	}
	return peak, anon, file
}

func pct(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	return pctOf(ds, p).Round(100 * time.Microsecond).String()
}

// pctOf is the p-th percentile of ds (nearest rank), which is not empty.
func pctOf(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[min(i, len(s)-1)]
}
