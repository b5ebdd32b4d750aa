package admission

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/metrics"
)

// TestGate: a pod created with a list of PodNetworks gets the gate, added
// to gates it has; every other pod and request is left alone.
func TestGate(t *testing.T) {
	m := metrics.New()
	g := &Gate{Metrics: m}
	const listing = `metadata: {name: app, annotations: {network.fastpath.dev/networks: '[{"name": "dataplane", "interfaceName": "net1"}]'}}`
	cases := []struct {
		name, pod string
		op        admissionv1.Operation
		wantGates []string // nil: no patch
		verdict   string
	}{
		{"lists networks", listing + "\nspec: {containers: [{name: c, image: i}]}", admissionv1.Create, []string{pnv1.SchedulingGate}, VerdictGated},
		{"other gates kept", listing + "\nspec: {schedulingGates: [{name: example.com/quota}]}", admissionv1.Create,
			[]string{"example.com/quota", pnv1.SchedulingGate}, VerdictGated},
		{"gated already", listing + "\nspec: {schedulingGates: [{name: " + pnv1.SchedulingGate + "}]}", admissionv1.Create, nil, VerdictAllowed},
		{"names its node", listing + "\nspec: {nodeName: node-a}", admissionv1.Create, nil, VerdictAllowed},
		{"host network", listing + "\nspec: {hostNetwork: true}", admissionv1.Create, nil, VerdictAllowed},
		{"no list", "metadata: {name: app, annotations: {k8s.v1.cni.cncf.io/networks: a}}\nspec: {}", admissionv1.Create, nil, VerdictAllowed},
		{"list does not parse", `metadata: {name: app, annotations: {network.fastpath.dev/networks: '{'}}`, admissionv1.Create, nil, VerdictAllowed},
		{"list over the bound", `metadata: {name: app, annotations: {network.fastpath.dev/networks: '[` + strings.Repeat(" ", bounds.AnnotationBytes) +
			`{"name": "dataplane", "interfaceName": "net1"}]'}}`, admissionv1.Create, nil, VerdictAllowed},
		{"the key in other letters", `metadata: {name: app, annotations: {network.fastpath.dev/Networks: '[{"name": "dataplane", "interfaceName": "net1"}]'}}`,
			admissionv1.Create, nil, VerdictAllowed},
		{"update", listing, admissionv1.Update, nil, VerdictUnjudged},
		{"does not decode", `metadata: {annotations: 7}`, admissionv1.Create, nil, VerdictError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := request(t, tc.op, "Pod", "tenant-a", tc.pod, "")
			resp, kind, verdict := g.Review(req)
			if !resp.Allowed || resp.UID != req.UID || verdict != tc.verdict {
				t.Fatalf("allowed %v, uid %q, verdict %s; want allowed, %q, %s", resp.Allowed, resp.UID, verdict, req.UID, tc.verdict)
			}
			if tc.verdict != VerdictUnjudged && kind != "Pod" {
				t.Errorf("counted as %s, want Pod", kind)
			}
			if tc.wantGates == nil {
				if resp.Patch != nil {
					t.Errorf("patch %s, want none", resp.Patch)
				}
				return
			}
			if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
				t.Fatalf("patch type %v, want JSONPatch", resp.PatchType)
			}
			patch, err := jsonpatch.DecodePatch(resp.Patch)
			if err != nil {
				t.Fatalf("patch %s: %v", resp.Patch, err)
			}
			out, err := patch.Apply(req.Object.Raw)
			if err != nil {
				t.Fatalf("patch %s does not apply: %v", resp.Patch, err)
			}
			var pod corev1.Pod
			if err := json.Unmarshal(out, &pod); err != nil {
				t.Fatal(err)
			}
			var gates []string
			for _, g := range pod.Spec.SchedulingGates {
				gates = append(gates, g.Name)
			}
			if !slices.Equal(gates, tc.wantGates) {
				t.Errorf("gates %v, want %v", gates, tc.wantGates)
			}
			var before, after map[string]any
			_ = yaml.Unmarshal([]byte(tc.pod), &before)
			_ = json.Unmarshal(out, &after)
			delete(after["spec"].(map[string]any), "schedulingGates")
			if spec, _ := before["spec"].(map[string]any); spec != nil {
				delete(spec, "schedulingGates")
			}
			if b, _ := json.Marshal(before); !strings.EqualFold(string(b), string(mustJSON(t, after))) {
				t.Errorf("the patch changed more than the gates: %s, was %s", mustJSON(t, after), b)
			}
		})
	}
	// Served, and counted.
	code, out := post(t, g, review(t, request(t, admissionv1.Create, "Pod", "tenant-a", cases[0].pod, "")))
	if code != 200 || out.Response == nil || !out.Response.Allowed || len(out.Response.Patch) == 0 {
		t.Fatalf("status %d, answer %+v: want the pod allowed with a patch", code, out)
	}
	if body := scrape(t, m); !strings.Contains(body, `fastpath_webhook_reviews_total{kind="Pod",verdict="gated"} 1`) {
		t.Errorf("the metrics lack the gated pod:\n%s", body)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
