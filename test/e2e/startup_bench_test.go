//go:build e2e && benche2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
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

// startupPods is how many pods each run starts.
const startupPods = 20

// TestPodStartup measures, on the real node, how long pods take from
// creation to Ready with and without a fastpath netdev claim, the NRI hook's
// own duration, and the daemon's peak RSS with 1024 devices published. It
// prints a table; `make bench-e2e` runs it.
func TestPodStartup(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()

	plain := startPods(t, ctx, "startup-plain", func(i int) *corev1.Pod {
		return testbed.WorkloadPod("default", fmt.Sprintf("startup-plain-%d", i), "sleep")
	})

	first := 100
	var more []int
	for i := 1; i < startupPods; i++ {
		more = append(more, first+i)
	}
	dataplaneSetup(t, ctx, first, 26190, more...)
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
	claimed := startPods(t, ctx, "startup-claim", func(i int) *corev1.Pod {
		return claimPod(fmt.Sprintf("startup-claim-%d", i), "sleep", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &tmpl.Name})
	})
	hooks := hookDurations(t, lastDaemon.keptLog(t))
	if len(hooks) < startupPods {
		t.Errorf("found %d hook durations in the daemon's log, want %d", len(hooks), startupPods)
	}
	// The pods go while the daemon that prepared their claims still runs:
	// the kubelet needs it to unprepare them.
	deleteAll(t, ctx)

	fmt.Printf("\nPod start-up on the test bed (%d pods each, one at a time; creation to Ready):\n\n", startupPods)
	fmt.Printf("| pods | p50 | p90 | p99 |\n|---|---|---|---|\n")
	for _, r := range []struct {
		name string
		d    []time.Duration
	}{{"without a claim", plain}, {"with a fastpath netdev claim", claimed}, {"NRI RunPodSandbox hook (fastpath's part)", hooks}} {
		fmt.Printf("| %s | %s | %s | %s |\n", r.name, pct(r.d, 50), pct(r.d, 90), pct(r.d, 99))
	}
	fmt.Println()
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

// startPods creates startupPods pods one after another and returns, for
// each, the time from its creation to its Ready condition as observed.
func startPods(t *testing.T, ctx context.Context, prefix string, mk func(i int) *corev1.Pod) []time.Duration {
	t.Helper()
	var out []time.Duration
	for i := range startupPods {
		pod := mk(i)
		start := time.Now()
		if _, err := bed.RunPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	t.Cleanup(func() { deleteAll(t, context.Background()) })
	return out
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

var hookLine = regexp.MustCompile(`"Attached devices".*duration="([^"]+)"`)

func hookDurations(t *testing.T, log string) []time.Duration {
	t.Helper()
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	for _, m := range hookLine.FindAllStringSubmatch(string(data), -1) {
		if d, err := time.ParseDuration(m[1]); err == nil {
			out = append(out, d)
		}
	}
	return out
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
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[min(i, len(s)-1)].Round(100 * time.Microsecond).String()
}
