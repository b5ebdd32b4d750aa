package main

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/status"
)

// TestRuntimeFeatures: a runtime whose NRI lacks the default validator
// (CRI-O 1.34, containerd 1.7) turns required_plugins off, in an event on
// the node, the gauge and the node's condition; one that has it (containerd
// 2.2), or whose NRI version is unknown, turns nothing off.
func TestRuntimeFeatures(t *testing.T) {
	m := metrics.New()
	events := record.NewFakeRecorder(10)
	condition := status.NewNodeCondition(fake.NewClientset(), "node-a")
	told := runtimeFeatures("node-a", events, condition, m)
	gauge := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		for line := range strings.Lines(string(body)) {
			if strings.HasPrefix(line, `fastpath_runtime_feature{feature="required_plugins"}`) {
				return strings.TrimSpace(line)
			}
		}
		return ""
	}
	for _, c := range []struct {
		runtime nri.Runtime
		off     bool
	}{
		{nri.Runtime{Name: "cri-o", Version: "1.34.0", NRIVersion: "v0.9.1-0.20250219030224-e597e7849f24"}, true},
		{nri.Runtime{Name: "containerd", Version: "v2.2.9", NRIVersion: "v0.11.0"}, false},
		{nri.Runtime{Name: "containerd", Version: "v1.7.32", NRIVersion: "v0.8.0"}, true},
		{nri.Runtime{Name: "someruntime", Version: "1.0", NRIVersion: "unknown"}, false},
	} {
		told(context.Background(), c.runtime)
		cond := condition.Condition()
		var event string
		select {
		case event = <-events.Events:
		default:
		}
		want, wantGauge := corev1.ConditionFalse, `fastpath_runtime_feature{feature="required_plugins"} 1`
		if c.off {
			want, wantGauge = corev1.ConditionTrue, `fastpath_runtime_feature{feature="required_plugins"} 0`
		}
		if cond.Status != want || c.off && !strings.Contains(cond.Message, "required_plugins (runtime): the runtime "+c.runtime.String()+" is older than NRI v0.10.0") {
			t.Errorf("runtime %s: condition %s: %s", c.runtime, cond.Status, cond.Message)
		}
		if c.off != strings.HasPrefix(event, "Warning RuntimeFeatureOff ") {
			t.Errorf("runtime %s: event %q", c.runtime, event)
		}
		if got := gauge(); got != wantGauge {
			t.Errorf("runtime %s: gauge %q, want %q", c.runtime, got, wantGauge)
		}
	}
}
