package chart

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestMonitoring: metrics.alerts renders the rules as a PrometheusRule
// where the cluster serves monitoring.coreos.com/v1 (its spec the rule
// file's groups), else a ConfigMap holding the file; metrics.dashboard a
// ConfigMap with the dashboard's JSON and Grafana's sidecar label; by
// default neither.
func TestMonitoring(t *testing.T) {
	docs := func(args ...string) []map[string]any {
		t.Helper()
		out, err := helmTemplate(t, args...)
		if err != nil {
			t.Fatalf("helm template %v: %v", args, err)
		}
		var objs []map[string]any
		for doc := range strings.SplitSeq(out, "\n---\n") {
			var o map[string]any
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatal(err)
			}
			if o != nil {
				objs = append(objs, o)
			}
		}
		return objs
	}
	named := func(objs []map[string]any, kind, name string) map[string]any {
		for _, o := range objs {
			meta, _ := o["metadata"].(map[string]any)
			if o["kind"] == kind && meta["name"] == name {
				return o
			}
		}
		return nil
	}
	rules := func(groups any) int {
		gs, _ := groups.([]any)
		if len(gs) != 1 {
			t.Fatalf("rule groups %v, want one", groups)
		}
		rs, _ := gs[0].(map[string]any)["rules"].([]any)
		return len(rs)
	}

	def := docs()
	if named(def, "ConfigMap", "fastpathd-alerts") != nil || named(def, "ConfigMap", "fastpathd-dashboard") != nil || named(def, "PrometheusRule", "fastpathd") != nil {
		t.Error("the defaults render alerts or a dashboard")
	}

	all := chartFile(t, "ci/all-values.yaml")
	withCRD := docs("--values", all, "--api-versions", "monitoring.coreos.com/v1/PrometheusRule")
	pr := named(withCRD, "PrometheusRule", "fastpathd")
	if pr == nil {
		t.Fatal("no PrometheusRule where the cluster serves it")
	}
	if labels := pr["metadata"].(map[string]any)["labels"].(map[string]any); labels["release"] != "prometheus" {
		t.Errorf("PrometheusRule labels %v lack metrics.alerts.labels", labels)
	}
	spec, _ := pr["spec"].(map[string]any)
	n := rules(spec["groups"])
	if n < 10 || named(withCRD, "ConfigMap", "fastpathd-alerts") != nil {
		t.Errorf("PrometheusRule of %d rules, and a ConfigMap of them too: %v", n, named(withCRD, "ConfigMap", "fastpathd-alerts") != nil)
	}

	without := docs("--values", all)
	cm := named(without, "ConfigMap", "fastpathd-alerts")
	if cm == nil || named(without, "PrometheusRule", "fastpathd") != nil {
		t.Fatal("without the PrometheusRule API: no ConfigMap of the rules, or a PrometheusRule")
	}
	var file map[string]any
	if err := yaml.Unmarshal([]byte(cm["data"].(map[string]any)["fastpath-alerts.yaml"].(string)), &file); err != nil {
		t.Fatal(err)
	}
	if got := rules(file["groups"]); got != n {
		t.Errorf("the ConfigMap's rule file has %d rules, the PrometheusRule %d", got, n)
	}

	dash := named(without, "ConfigMap", "fastpathd-dashboard")
	if dash == nil {
		t.Fatal("no dashboard ConfigMap")
	}
	if labels := dash["metadata"].(map[string]any)["labels"].(map[string]any); labels["grafana_dashboard"] != "1" || labels["team"] != "network" {
		t.Errorf("dashboard labels %v", labels)
	}
	var d struct {
		UID    string
		Panels []struct {
			Type    string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(dash["data"].(map[string]any)["fastpath.json"].(string)), &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	exprs := 0
	for _, p := range d.Panels {
		exprs += len(p.Targets)
	}
	if d.UID != "fastpath" || exprs < 20 {
		t.Errorf("dashboard %q with %d queries", d.UID, exprs)
	}
}
