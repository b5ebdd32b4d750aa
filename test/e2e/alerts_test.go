//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// TestAlertsOnRealMetrics feeds the chart's alert rules
// (deploy/helm/fastpath/files/alerts.yaml) the daemon's own /metrics,
// scraped on the bed while conditions come and go: the claim store's
// filesystem (a 4 MiB tmpfs) filled, a claim's Prepare refused meanwhile,
// the store freed and the pod started, its netdev gone from the node, the
// pod deleted. Each scrape stands for a stretch of minutes of the series
// (longer than the rules' `for`), and promtool evaluates the rules over
// them: each condition's alert fires while it holds and clears after.
func TestAlertsOnRealMetrics(t *testing.T) {
	ctx := testContext(t)
	promtool := bed.Config().Promtool()
	if promtool == "" {
		t.Fatal("no promtool in the cache: test/deps.sh testbed unpacks it")
	}
	const port, veth = 26298, 170
	var stateDir string
	dataplaneSetupWith(t, ctx, port, healthArgs, func(d *daemon) {
		stateDir = d.stateDir
		if err := unix.Mount("tmpfs", stateDir, "tmpfs", 0, "size=4m,mode=0755"); err != nil {
			t.Fatalf("a tmpfs for the claim store: %v", err)
		}
		// After the daemon's stop (cleanups run last first).
		t.Cleanup(func() { _ = unix.Unmount(stateDir, unix.MNT_DETACH) })
	}, veth)

	var scrapes []scrape
	take := func(phase string, minutes int) {
		t.Helper()
		scrapes = append(scrapes, scrape{phase: phase, minutes: minutes, text: scrapeMetrics(t, ctx, port)})
	}
	waitMetric := func(what string, ok func(m string) bool) {
		t.Helper()
		var m string
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			m = scrapeMetricsCtx(ctx, port)
			return ok(m), nil
		}); err != nil {
			t.Fatalf("%s: never in the daemon's metrics:\n%s", what, grepFastpath(m))
		}
	}
	take("healthy", 3)

	// The store's filesystem full: its free space under what its writes
	// need.
	filler := filepath.Join(stateDir, "filler")
	var st unix.Statfs_t
	if err := unix.Statfs(stateDir, &st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filler, make([]byte, int(st.Bavail)*int(st.Bsize)-64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	waitMetric("fastpath_store_fault 1", func(m string) bool { return gaugeValue(m, "fastpath_store_fault") == 1 })
	take("store full", 3)

	claim := netdevClaim("e2e-alerts", &v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "net1"}})
	claim.Spec.Devices.Requests[0].Exactly.Selectors = nil
	if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
	})
	pod := claimPod("e2e-alerts", "sleep", &corev1.PodResourceClaim{Name: "fast", ResourceClaimName: &claim.Name})
	if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	waitMetric("a refused Prepare", func(m string) bool {
		return gaugeValue(m, `fastpath_prepare_total{driver="fastpath.dev",result="error"}`) >= 1
	})
	take("store full, Prepare refused", 3)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitMetric("fastpath_store_fault 0", func(m string) bool { return gaugeValue(m, "fastpath_store_fault") == 0 })
	if _, err := bed.WaitPod(ctx, "default", pod.Name, 3*time.Minute, testbed.PodReady); err != nil {
		t.Fatal(err)
	}
	take("store freed, pod running", 12)

	// The pod's netdev gone from the node: its veth's peer deleted.
	if err := exec.CommandContext(ctx, "ip", "link", "del", fmt.Sprintf("%s%db", vethPrefix, veth)).Run(); err != nil {
		t.Fatal(err)
	}
	waitMetric(`fastpath_unhealthy_devices{reason="NetdevMissing"} 1`, func(m string) bool {
		return strings.Contains(m, `fastpath_unhealthy_devices{reason="NetdevMissing"} 1`)
	})
	take("netdev gone", 7)

	if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
		t.Fatal(err)
	}
	waitMetric("no unhealthy device", func(m string) bool {
		return !strings.Contains(m, `fastpath_unhealthy_devices{reason="NetdevMissing"} 1`)
	})
	take("pod deleted", 12)

	labels := fmt.Sprintf(`node="%s",instance="127.0.0.1:%d"`, bed.Config().NodeName, port)
	alert := func(name, extra string) string {
		return fmt.Sprintf(`ALERTS{alertname=%q,alertstate="firing",%s%s}`, name, labels, extra)
	}
	// The minute each phase ends at (scrapes: 3, 6, 9, 21, 28, 40).
	checks := []alertCheck{
		{"FastpathStoreNotWritable", 8, alert("FastpathStoreNotWritable", `,severity="critical"`)},
		{"FastpathStoreNotWritable", 20, ""},
		{"FastpathPrepareFailing", 8, alert("FastpathPrepareFailing", `,severity="warning",driver="fastpath.dev"`)},
		{"FastpathPrepareFailing", 20, ""},
		{"FastpathDevicesUnhealthy", 22, ""},
		{"FastpathDevicesUnhealthy", 27, alert("FastpathDevicesUnhealthy", `,severity="warning",reason="NetdevMissing"`)},
		{"FastpathDevicesUnhealthy", 39, ""},
	}
	dir := t.TempDir()
	rules, err := os.ReadFile(filepath.Join(bed.Config().Chart(), "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	test, err := promtoolTest(scrapes, labels, checks)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "test.yaml"), test, 0o644); err != nil {
		t.Fatal(err)
	}
	// Kept beside the bed's logs: the series as scraped, and what was
	// asked of them.
	_ = os.WriteFile(filepath.Join(bed.Config().LogDir(), "alerts-test.yaml"), test, 0o644)
	cmd := exec.CommandContext(ctx, promtool, "test", "rules", "test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules over the daemon's metrics (%s): %v\n%s", filepath.Join(bed.Config().LogDir(), "alerts-test.yaml"), err, out)
	}
	for _, s := range scrapes {
		t.Logf("%-28s %2d min: store_fault %v, unhealthy %v", s.phase, s.minutes, gaugeValue(s.text, "fastpath_store_fault"),
			strings.Contains(s.text, `fastpath_unhealthy_devices{reason="NetdevMissing"} 1`))
	}
}

// scrape is the daemon's /metrics at one moment, standing for minutes
// minutes of the series.
type scrape struct {
	phase   string
	minutes int
	text    string
}

// alertCheck says that at minute at the alert is firing with exactly the
// labels of want (an ALERTS series), or, with want "", not firing.
type alertCheck struct {
	alert string
	at    int
	want  string
}

// promtoolTest is a promtool unit test of the rules over the scrapes: each
// fastpath_ series of any scrape, with labels added, one value a minute
// ("_" where a scrape lacks it), and a query of ALERTS for each check.
func promtoolTest(scrapes []scrape, labels string, checks []alertCheck) ([]byte, error) {
	var order []string
	values := map[string][]string{}
	total := 0
	for _, s := range scrapes {
		total += s.minutes
	}
	at := 0
	for _, s := range scrapes {
		for line := range strings.Lines(s.text) {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "fastpath_") {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			if i < 0 {
				continue
			}
			series, value := line[:i], line[i+1:]
			if _, err := strconv.ParseFloat(value, 64); err != nil {
				return nil, fmt.Errorf("metric line %q: %w", line, err)
			}
			if open := strings.IndexByte(series, '{'); open >= 0 {
				series = series[:open+1] + labels + "," + series[open+1:]
			} else {
				series += "{" + labels + "}"
			}
			if values[series] == nil {
				order = append(order, series)
				values[series] = slices.Repeat([]string{"_"}, total)
			}
			for m := range s.minutes {
				values[series][at+m] = value
			}
		}
		at += s.minutes
	}
	type sample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
	type exprTest struct {
		Expr       string   `json:"expr"`
		EvalTime   string   `json:"eval_time"`
		ExpSamples []sample `json:"exp_samples"`
	}
	type series struct {
		Series string `json:"series"`
		Values string `json:"values"`
	}
	type unitTest struct {
		Interval    string     `json:"interval"`
		InputSeries []series   `json:"input_series"`
		Exprs       []exprTest `json:"promql_expr_test"`
	}
	ut := unitTest{Interval: "1m"}
	for _, s := range order {
		ut.InputSeries = append(ut.InputSeries, series{Series: s, Values: strings.Join(values[s], " ")})
	}
	for _, c := range checks {
		e := exprTest{Expr: fmt.Sprintf(`ALERTS{alertname=%q,alertstate="firing"}`, c.alert), EvalTime: fmt.Sprintf("%dm", c.at), ExpSamples: []sample{}}
		if c.want != "" {
			e.ExpSamples = append(e.ExpSamples, sample{Labels: c.want, Value: 1})
		}
		ut.Exprs = append(ut.Exprs, e)
	}
	return yaml.Marshal(map[string]any{"rule_files": []string{"alerts.yaml"}, "evaluation_interval": "1m", "tests": []unitTest{ut}})
}

// grepFastpath is the fastpath_ lines of a scrape.
func grepFastpath(m string) string {
	var b strings.Builder
	for line := range strings.Lines(m) {
		if strings.HasPrefix(line, "fastpath_") {
			b.WriteString(line)
		}
	}
	return b.String()
}
