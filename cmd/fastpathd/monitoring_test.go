package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/dra/storewatch"
)

// TestMonitoringUsesRealMetrics: every metric the chart's alert rules,
// their tests and its Grafana dashboard read is one the daemon registers,
// as run registers them (the core ones, the state gauges, the claim
// store's, the CNI bound's and the driver's), and is documented; so a
// rename in the code cannot leave an alert that never fires.
func TestMonitoringUsesRealMetrics(t *testing.T) {
	m := metrics.New()
	dir := t.TempDir()
	store, err := claims.Open(filepath.Join(dir, "checkpoint.json"), claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	writer := status.NewWriter(client)
	registerGauges(m, store, writer)
	storewatch.New(storewatch.Options{Store: store, NodeName: "node-a", Metrics: m})
	registerCNIGauges(m, dataplane.NewCNILimit(1))
	if _, err := dra.New(dra.Options{NodeName: "node-a", Client: client, PluginDir: filepath.Join(dir, "plugin"), StateDir: filepath.Join(dir, "state"),
		CDIDir: filepath.Join(dir, "cdi"), BPFDir: filepath.Join(dir, "bpf"), Store: store, Status: writer, BootID: "boot", Metrics: m}); err != nil {
		t.Fatal(err)
	}
	registered := m.Names()
	reference, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	metricName := regexp.MustCompile(`\bfastpath_[a-z0-9_]+`)
	files := 0
	for _, f := range []string{"alerts.yaml", "alerts_test.yaml", "dashboard.json"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "fastpath", "files", f))
		if err != nil {
			t.Fatal(err)
		}
		files++
		used := metricName.FindAllString(string(data), -1)
		if len(used) == 0 {
			t.Errorf("%s reads no fastpath metric", f)
		}
		for _, name := range used {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if trimmed, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(registered, trimmed) {
					base = trimmed
				}
			}
			if !slices.Contains(registered, base) {
				t.Errorf("%s reads %s, which the daemon does not register", f, name)
				continue
			}
			if !strings.Contains(string(reference), "`"+strings.TrimPrefix(base, "fastpath_")) {
				t.Errorf("%s reads %s, which docs/reference.md's metrics do not list", f, base)
			}
		}
	}
	if files != 3 || len(registered) < 30 {
		t.Fatalf("read %d files; the daemon registers %d metrics: %v", files, len(registered), registered)
	}
}
