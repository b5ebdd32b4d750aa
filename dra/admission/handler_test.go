package admission

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/validate"
)

// newHandler is the handler with the nodes' default policy: the chart's
// defaults.
func newHandler(m *metrics.Metrics) *Handler {
	return &Handler{
		Check:   validate.Check{Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}},
		NADs:    npwg.ConfigRules{Plugins: cnipolicy.DefaultPlugins},
		Metrics: m,
	}
}

// request is a review's request for the object, given as YAML.
func request(t testing.TB, op admissionv1.Operation, kind, namespace, object, old string) *admissionv1.AdmissionRequest {
	t.Helper()
	js := func(y string) []byte {
		if y == "" {
			return nil
		}
		out, err := yaml.YAMLToJSON([]byte(y))
		if err != nil {
			t.Fatalf("the test's object: %v", err)
		}
		return out
	}
	return &admissionv1.AdmissionRequest{
		UID: "4d6f7e1c", Kind: metav1.GroupVersionKind{Kind: kind}, Namespace: namespace, Operation: op,
		Object: runtime.RawExtension{Raw: js(object)}, OldObject: runtime.RawExtension{Raw: js(old)},
	}
}

const (
	lowMTU = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: nic, namespace: tenant-a, uid: 0f6c, creationTimestamp: "2026-01-01T00:00:00Z",
  managedFields: [{manager: kubectl, operation: Apply, apiVersion: resource.k8s.io/v1, fieldsType: FieldsV1, fieldsV1: {}}]}
spec:
  devices:
    requests: [{name: a, exactly: {deviceClassName: netdev.fastpath.dev, allocationMode: ExactCount, count: 1}}]
    config:
    - requests: [a]
      opaque: {driver: fastpath.dev, parameters: {apiVersion: fastpath.dev/v1alpha1, kind: InterfaceConfig, interface: {mtu: 60}}}
status: {}
`
	goodMTU       = `{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "nic", "namespace": "tenant-a"}, "spec": {"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "netdev.fastpath.dev"}}], "config": [{"requests": ["a"], "opaque": {"driver": "fastpath.dev", "parameters": {"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "interface": {"mtu": 9000}}}}]}}}`
	notOurs       = `{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "gpu", "namespace": "tenant-a"}, "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.example.com", "count": 4}}]}}}`
	cniNotAllowed = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: uplink, namespace: tenant-a}
spec:
  spec:
    devices:
      requests: [{name: net, exactly: {deviceClassName: cni.networking.x-k8s.io}}]
      config:
      - opaque:
          driver: cni.dra.networking.x-k8s.io
          parameters: {apiVersion: cni.networking.x-k8s.io/v1alpha1, kind: CNI, ifName: net1, plugins: [{type: ptp, config: {}}]}
`
	badClass = `
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: colour.example.com}
spec:
  selectors: [{cel: {expression: 'device.driver == "fastpath.dev"'}}]
  config:
  - opaque: {driver: fastpath.dev, parameters: {apiVersion: fastpath.dev/v1alpha1, kind: InterfaceConfig, interface: {mtu: 10}}}
`
	badCNIConfig = `{"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNIConfig", "metadata": {"name": "uplink"}, "spec": {"ifName": "net9", "plugins": [{"type": "host-device", "config": {"device": "eth1"}}]}}`
	masterNAD    = `
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: uplink, namespace: tenant-a}
spec:
  config: '{"cniVersion": "1.0.0", "name": "uplink", "type": "macvlan", "master": "eth0", "ipam": {"type": "static"}}'
`
	badPodNetwork   = `{"apiVersion": "network.fastpath.dev/v1alpha1", "kind": "PodNetwork", "metadata": {"name": "storage"}, "spec": {"provider": "foo"}}`
	badNodeConfig   = `{"apiVersion": "fastpath.dev/v1alpha1", "kind": "FastpathNodeConfig", "metadata": {"name": "e810"}, "spec": {"nodeSelector": {}, "vfs": [{"pf": {"name": "ens1f0", "pciAddress": "0000:3b:00.0"}, "numVfs": -1}]}}`
	badAttachment   = `{"apiVersion": "network.fastpath.dev/v1alpha1", "kind": "PodNetworkAttachment", "metadata": {"name": "none", "namespace": "app"}, "spec": {}}`
	sameNetTwice    = `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "twice", "namespace": "app", "annotations": {"k8s.v1.cni.cncf.io/networks": "[{\"name\": \"net-a\", \"interface\": \"n1\"}, {\"name\": \"net-a\", \"interface\": \"n1\"}]"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}`
	podNetworkTwice = `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "twice", "namespace": "app", "annotations": {"network.fastpath.dev/networks": "[{\"podNetworkName\": \"dataplane1\", \"interfaceName\": \"net1\"}, {\"podNetworkName\": \"dataplane1\", \"interfaceName\": \"net2\"}]"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}`
	goodPod         = `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ok", "namespace": "app", "annotations": {"k8s.v1.cni.cncf.io/networks": "net-a,net-b@n2"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}, "status": {"phase": "Pending"}}`
)

// TestReviewRefuses: each object a node would refuse is refused, and the
// message names the field as fastpathd validate does.
func TestReviewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, kind, namespace, object string
		want                          []string
	}{
		{"claim with an MTU below 68", "ResourceClaim", "tenant-a", lowMTU,
			[]string{`request "a": spec.devices.config[0].opaque.parameters.interface.mtu: Invalid value: 60: must be between 68 and 65535`}},
		{"CNI template with a plugin not allowed", "ResourceClaimTemplate", "tenant-a", cniNotAllowed,
			[]string{`request "net": spec.spec.devices.config[0].opaque.parameters.plugins[0].type: Forbidden: plugin type "ptp" is not on this node's allowlist`}},
		{"class with an MTU below 68", "DeviceClass", "", badClass,
			[]string{`spec.config[0].opaque.parameters.interface.mtu: Invalid value: 10`}},
		{"CNIConfig with a plugin not allowed", "CNIConfig", "", badCNIConfig,
			[]string{`spec.plugins[0].type: Forbidden: plugin type "host-device" is not on this node's allowlist`}},
		{"NetworkAttachmentDefinition naming the host's eth0", "NetworkAttachmentDefinition", "tenant-a", masterNAD,
			[]string{`spec.config: Forbidden: names an object of the host: plugins[0] (macvlan): master "eth0"`}},
		{"PodNetwork with a bad provider", "PodNetwork", "", badPodNetwork,
			[]string{`spec.provider: Invalid value: "foo"`}},
		{"FastpathNodeConfig asking negative VFs of a PF named twice over", "FastpathNodeConfig", "", badNodeConfig,
			[]string{`spec.vfs[0].pf: Invalid value`, `spec.vfs[0].numVfs: Invalid value: -1`}},
		{"PodNetworkAttachment of no PodNetwork", "PodNetworkAttachment", "app", badAttachment,
			[]string{`spec.podNetworkName: Required value`}},
		{"pod selecting a network twice as one interface", "Pod", "app", sameNetTwice,
			[]string{`metadata.annotations[k8s.v1.cni.cncf.io/networks][1].interface: Duplicate value: "n1"`}},
		{"pod naming a PodNetwork twice", "Pod", "app", podNetworkTwice,
			[]string{`metadata.annotations[network.fastpath.dev/networks][1].podNetworkName: Duplicate value: "dataplane1`}},
		{"undecodable claim", "ResourceClaim", "tenant-a", `{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "x"}, "spec": "banana"}`,
			[]string{`cannot unmarshal string`}},
		{"claim with an unknown field", "ResourceClaim", "tenant-a", `{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "x"}, "spec": {"devicez": {}}}`,
			[]string{`spec.devicez: Forbidden: unknown field`}},
		{"not JSON", "Pod", "app", `"just a string"`, []string{`not a Kubernetes object`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.New()
			h := newHandler(m)
			resp, kind, verdict := h.Review(request(t, admissionv1.Create, tc.kind, tc.namespace, tc.object, ""))
			if resp.Allowed || verdict != VerdictDenied || kind != tc.kind {
				t.Fatalf("allowed %v, kind %s, verdict %s: want it denied, kind %s", resp.Allowed, kind, verdict, tc.kind)
			}
			if resp.UID != "4d6f7e1c" || resp.Result == nil || resp.Result.Code != http.StatusUnprocessableEntity || resp.Result.Reason != metav1.StatusReasonInvalid {
				t.Fatalf("response %+v: want the request's UID and a 422 Invalid", resp)
			}
			for _, want := range tc.want {
				if !strings.Contains(resp.Result.Message, want) {
					t.Errorf("message %q lacks %q", resp.Result.Message, want)
				}
			}
			if !strings.HasPrefix(resp.Result.Message, "fastpath: ") {
				t.Errorf("message %q: want it to say it is fastpath's", resp.Result.Message)
			}
		})
	}
}

// TestReviewAllows: good objects, claims of other drivers, deletions and
// updates that bring no new problem are allowed.
func TestReviewAllows(t *testing.T) {
	for _, tc := range []struct {
		name, kind, namespace string
		op                    admissionv1.Operation
		object, old, verdict  string
	}{
		{"claim with a good MTU", "ResourceClaim", "tenant-a", admissionv1.Create, goodMTU, "", VerdictAllowed},
		{"claim of another driver", "ResourceClaim", "tenant-a", admissionv1.Create, notOurs, "", VerdictAllowed},
		{"pod selecting networks", "Pod", "app", admissionv1.Create, goodPod, "", VerdictAllowed},
		{"deletion", "ResourceClaim", "tenant-a", admissionv1.Delete, "", lowMTU, VerdictUnjudged},
		{"update keeping an old problem", "ResourceClaim", "tenant-a", admissionv1.Update, lowMTU, lowMTU, VerdictAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _, verdict := newHandler(nil).Review(request(t, tc.op, tc.kind, tc.namespace, tc.object, tc.old))
			if !resp.Allowed || verdict != tc.verdict {
				t.Fatalf("allowed %v, verdict %s (%+v): want allowed, %s", resp.Allowed, verdict, resp.Result, tc.verdict)
			}
		})
	}
	// An update bringing a problem the object did not have is refused.
	resp, _, _ := newHandler(nil).Review(request(t, admissionv1.Update, "ResourceClaim", "tenant-a", lowMTU, goodMTU))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "interface.mtu: Invalid value: 60") {
		t.Fatalf("an update lowering the MTU to 60: allowed %v (%+v), want it refused", resp.Allowed, resp.Result)
	}
}

// post sends a review to the handler over HTTP and returns the status and
// the answer.
func post(t *testing.T, h http.Handler, body []byte) (int, admissionv1.AdmissionReview) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	var out admissionv1.AdmissionReview
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("the answer %q: %v", rec.Body.String(), err)
		}
	}
	return rec.Code, out
}

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return string(body)
}

// review is an AdmissionReview of req, as the API server sends it.
func review(t *testing.T, req *admissionv1.AdmissionRequest) []byte {
	t.Helper()
	data, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestServeHTTP: a review round trip, a kind the webhook does not judge
// allowed and counted, and a body that is no review a bad request.
func TestServeHTTP(t *testing.T) {
	m := metrics.New()
	h := newHandler(m)
	review := func(req *admissionv1.AdmissionRequest) []byte { return review(t, req) }
	code, out := post(t, h, review(request(t, admissionv1.Create, "ResourceClaim", "tenant-a", lowMTU, "")))
	if code != http.StatusOK || out.Response == nil || out.Response.Allowed || out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" {
		t.Fatalf("status %d, answer %+v: want a denial in an admission.k8s.io/v1 AdmissionReview", code, out)
	}
	if !strings.Contains(out.Response.Result.Message, "spec.devices.config[0].opaque.parameters.interface.mtu: Invalid value: 60") {
		t.Errorf("message %q does not name the field", out.Response.Result.Message)
	}
	code, out = post(t, h, review(request(t, admissionv1.Create, "ConfigMap", "app", `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}`, "")))
	if code != http.StatusOK || out.Response == nil || !out.Response.Allowed {
		t.Fatalf("status %d, answer %+v: want a ConfigMap allowed", code, out)
	}
	// A kind it judges, of a version it does not know, is not judged.
	code, out = post(t, h, review(request(t, admissionv1.Create, "PodNetwork", "", `{"apiVersion": "network.example.com/v1", "kind": "PodNetwork", "metadata": {"name": "c"}}`, "")))
	if code != http.StatusOK || out.Response == nil || !out.Response.Allowed {
		t.Fatalf("status %d, answer %+v: want another group's PodNetwork allowed", code, out)
	}
	if code, _ := post(t, h, []byte(`{"kind": "AdmissionReview"`)); code != http.StatusBadRequest {
		t.Errorf("a truncated review: status %d, want 400", code)
	}
	if code, _ := post(t, h, []byte(`{"kind": "AdmissionReview"}`)); code != http.StatusBadRequest {
		t.Errorf("a review without a request: status %d, want 400", code)
	}
	body := scrape(t, m)
	for _, want := range []string{
		`fastpath_webhook_reviews_total{kind="ResourceClaim",verdict="denied"} 1`,
		`fastpath_webhook_reviews_total{kind="other",verdict="unjudged"} 2`,
		`fastpath_webhook_reviews_total{kind="other",verdict="error"} 2`,
		`fastpath_webhook_review_duration_seconds_count{kind="ResourceClaim"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the metrics lack %s", want)
		}
	}
}

// TestDecodeReview: a review's objects are read as slices of its body,
// not copies; an object that is null is none, and a review without a
// request is none.
func TestDecodeReview(t *testing.T) {
	body := review(t, request(t, admissionv1.Update, "ResourceClaim", "tenant-a", goodMTU, lowMTU))
	in, err := decodeReview(body)
	if err != nil {
		t.Fatal(err)
	}
	req := in.Request
	if req.UID != "4d6f7e1c" || req.Namespace != "tenant-a" || req.Kind.Kind != "ResourceClaim" ||
		!bytes.Contains(req.Object.Raw, []byte(`"mtu":9000`)) || !bytes.Contains(req.OldObject.Raw, []byte(`"mtu":60`)) {
		t.Fatalf("request %+v: want the review's", req)
	}
	// A slice of the body sees the body change.
	for _, raw := range [][]byte{req.Object.Raw, req.OldObject.Raw} {
		at := bytes.Index(body, raw)
		body[at+1] = '!'
		if raw[1] != '!' {
			t.Errorf("object %.50s... is a copy, not a slice of the body", raw)
		}
	}
	in, err = decodeReview([]byte(`{"request": {"uid": "u", "object": null}}`))
	if err != nil || in.Request.Object.Raw != nil || in.Request.OldObject.Raw != nil {
		t.Errorf("a null object: %v, %+v; want none", err, in)
	}
	if _, err := decodeReview([]byte(`{"kind": "AdmissionReview"}`)); err == nil {
		t.Error("a review without a request decoded")
	}
}

// unread is a body that fails the test when it is read.
type unread struct{ t *testing.T }

func (u unread) Read([]byte) (int, error) {
	u.t.Error("a body over the bound was read")
	return 0, io.EOF
}

// zeros is a body of zero bytes without end.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestReadBody: a review whose length is over maxReviewBytes is refused
// unread, and one that does not say its length is read up to the bound
// and refused beyond it.
func TestReadBody(t *testing.T) {
	h := newHandler(nil)
	for name, r := range map[string]*http.Request{
		"length said":     httptest.NewRequest(http.MethodPost, Path, unread{t}),
		"length not said": httptest.NewRequest(http.MethodPost, Path, zeros{}),
	} {
		t.Run(name, func(t *testing.T) {
			r.ContentLength = maxReviewBytes + 1
			if name == "length not said" {
				r.ContentLength = -1
			}
			r.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusRequestEntityTooLarge {
				t.Errorf("status %d (%s), want 413", rec.Code, rec.Body)
			}
		})
	}
}
