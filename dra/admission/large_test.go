package admission

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/validate"
)

// list is a JSON list of n items.
func list(n int, item string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
}

// slashes is a JSON list of n strings "/a": each a host path to the
// nodes' CNI policy, and a problem.
func slashes(n int) string { return list(n, `"/a"`) }

// cniParameters is a CNI claim's config of n lists of "/a" strings, each
// of perList.
func cniParameters(n, perList int) string {
	var lists []string
	for i := range n {
		lists = append(lists, fmt.Sprintf(`"x%d": %s`, i, slashes(perList)))
	}
	return `{"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1", "plugins": [{"type": "macvlan", "config": {` +
		strings.Join(lists, ", ") + `}}]}`
}

// cniClaimSpec is the spec of a claim with a CNI request for each
// config.
func cniClaimSpec(configs ...string) string {
	var reqs, cfgs []string
	for i, c := range configs {
		reqs = append(reqs, fmt.Sprintf(`{"name": "r%d", "exactly": {"deviceClassName": "cni.networking.x-k8s.io"}}`, i))
		cfgs = append(cfgs, fmt.Sprintf(`{"requests": ["r%d"], "opaque": {"driver": "cni.dra.networking.x-k8s.io", "parameters": %s}}`, i, c))
	}
	return `{"devices": {"requests": [` + strings.Join(reqs, ", ") + `], "config": [` + strings.Join(cfgs, ", ") + `]}}`
}

// cniClaim is a ResourceClaim tenant-a/big with a CNI request for each
// config.
func cniClaim(configs ...string) string {
	return `{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "big", "namespace": "tenant-a"}, "spec": ` +
		cniClaimSpec(configs...) + `}`
}

// padded is head, x and tail, with as many x as make it n bytes.
func padded(n int, head, tail string) string {
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}

// selectingPod is a pod app/p selecting networks with the NPWG
// annotation, its containers and other annotations extra (JSON members,
// "" for none).
func selectingPod(selection, containers, annotations string) string {
	if annotations != "" {
		annotations = ", " + annotations
	}
	if containers == "" {
		containers = `[{"name": "c", "image": "x"}]`
	}
	return `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "app", "annotations": {"k8s.v1.cni.cncf.io/networks": "` +
		selection + `"` + annotations + `}}, "spec": {"containers": ` + containers + `}}`
}

// badNames is a selection of n networks whose names are not valid: a
// problem each.
func badNames(n int) string { return strings.TrimSuffix(strings.Repeat("A,", n), ",") }

// containers is a list of n containers.
func containers(n int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name": "c%d", "image": "registry.example.com/app:v1", "env": [{"name": "E", "value": "v"}]}`, i)
	}
	b.WriteByte(']')
	return b.String()
}

// allocated is how many bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// serve answers a review of req, as the API server sends it, and returns
// the answer and the bytes the handler allocated.
func serve(t *testing.T, h http.Handler, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, uint64) {
	t.Helper()
	body := review(t, req)
	var code int
	var out admissionv1.AdmissionReview
	var rec *httptest.ResponseRecorder
	n := allocated(func() {
		rec = httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, r)
	})
	if code = rec.Code; code != http.StatusOK {
		t.Fatalf("status %d: %s", code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("the answer %.200s: %v", rec.Body, err)
	}
	return out.Response, n
}

// TestReviewRefusesLargeClaim: a claim of 1.5 MB, one CNI config of
// 300,000 host paths, is refused unread: the message names the claim, the
// config, the bound and its size, and fits in bounds.MessageBytes;
// answering costs a small multiple of the claim's size.
func TestReviewRefusesLargeClaim(t *testing.T) {
	params := cniParameters(1, 300000)
	claim := cniClaim(params)
	// The API server sends the config without its white space.
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(params)); err != nil {
		t.Fatal(err)
	}
	resp, n := serve(t, newHandler(nil), &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"},
		Namespace: "tenant-a", Operation: admissionv1.Create, Object: k8sruntime.RawExtension{Raw: []byte(claim)}})
	if resp.Allowed || resp.Result == nil {
		t.Fatalf("allowed %v (%+v), want it refused", resp.Allowed, resp.Result)
	}
	msg := resp.Result.Message
	if len(msg) > bounds.MessageBytes {
		t.Errorf("the message is %d bytes, more than %d", len(msg), bounds.MessageBytes)
	}
	for _, want := range []string{"fastpath: ResourceClaim tenant-a/big is refused unread",
		fmt.Sprintf("spec.devices.config[0].opaque.parameters: Too long: is %d bytes, more than the %d a claim's config may have", compact.Len(), bounds.ConfigBytes)} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %.500q lacks %q", msg, want)
		}
	}
	t.Logf("a claim of %d bytes: %d bytes allocated, a message of %d bytes", len(claim), n, len(msg))
	if most := 4 * uint64(len(claim)); n > most {
		t.Errorf("answering a claim of %d bytes allocated %d bytes, more than %d", len(claim), n, most)
	}
}

// TestReviewRefusesUnread: a part of an object over the bound of the
// largest object of its kind is refused before anything is decoded, the
// object, the part, the bound and its size named; at the bound it is
// judged.
func TestReviewRefusesUnread(t *testing.T) {
	config := func(n int) string {
		return padded(n, `{"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1", "plugins": [{"type": "macvlan", "config": {"x": "`, `"}}]}`)
	}
	var configs []string
	for range 33 {
		configs = append(configs, config(200))
	}
	nad := func(n int) string {
		// A configuration in a string: its escapes are not counted.
		js, err := json.Marshal(padded(n, `{"cniVersion": "1.0.0", "name": "uplink", "type": "macvlan", "ipam": {"type": "static"}, "x": "`, `"}`))
		if err != nil {
			t.Fatal(err)
		}
		return `{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", "metadata": {"name": "uplink", "namespace": "tenant-a"}, "spec": {"config": ` + string(js) + `}}`
	}
	cniConfig := func(n int) string {
		return `{"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNIConfig", "metadata": {"name": "uplink"}, "spec": ` +
			padded(n, `{"ifName": "net1", "plugins": [{"type": "macvlan", "config": {"x": "`, `"}}]}`) + `}`
	}
	class := `{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "c.fastpath.dev"}, "spec": {"config": [{"opaque": {"driver": "fastpath.dev", "parameters": ` +
		padded(bounds.ConfigBytes+1, `{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "x": "`, `"}`) + `}}]}}`
	template := `{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "t", "namespace": "tenant-a"}, "spec": {"spec": ` +
		cniClaimSpec(config(bounds.ConfigBytes+1)) + `}}`
	selectors := `{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "s", "namespace": "tenant-a"}, "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "netdev.fastpath.dev", "selectors": ` +
		list(bounds.Items+1, `{}`) + `}}]}}}`
	selection := func(n int) string { return padded(n, "net-a,", "") }
	for _, tc := range []struct {
		name, kind, object string
		want               []string // nil: judged
	}{
		{"claim with 33 configs", "ResourceClaim", cniClaim(configs...), []string{"ResourceClaim tenant-a/big", "spec.devices.requests: Too many: 33: must have at most 32 items",
			"spec.devices.config: Too many: 33: must have at most 32 items"}},
		{"claim config of the bound", "ResourceClaim", cniClaim(config(bounds.ConfigBytes)), nil},
		{"template config over the bound", "ResourceClaimTemplate", template, []string{"ResourceClaimTemplate tenant-a/t",
			"spec.spec.devices.config[0].opaque.parameters: Too long: is 10241 bytes, more than the 10240 a claim's config may have"}},
		{"class config over the bound", "DeviceClass", class, []string{"DeviceClass c.fastpath.dev",
			"spec.config[0].opaque.parameters: Too long: is 10241 bytes, more than the 10240 a class's config may have"}},
		{"claim with a list of 257", "ResourceClaim", selectors, []string{"ResourceClaim tenant-a/s",
			"spec.devices.requests[0].exactly.selectors: Too many: 257: must have at most 256 items"}},
		{"CNIConfig spec of the bound", "CNIConfig", cniConfig(bounds.NetworkConfigBytes), nil},
		{"CNIConfig spec over the bound", "CNIConfig", cniConfig(bounds.NetworkConfigBytes + 1), []string{"CNIConfig uplink",
			"spec: Too long: is 65537 bytes, more than the 65536 a CNIConfig's spec may have"}},
		{"NAD config of the bound", "NetworkAttachmentDefinition", nad(bounds.NetworkConfigBytes), nil},
		{"NAD config over the bound", "NetworkAttachmentDefinition", nad(bounds.NetworkConfigBytes + 1), []string{"NetworkAttachmentDefinition tenant-a/uplink",
			"spec.config: Too long: is 65537 bytes, more than the 65536 a NetworkAttachmentDefinition's config may have"}},
		{"pod selection of the bound", "Pod", selectingPod(selection(bounds.AnnotationBytes), "", ""), nil},
		{"pod selection over the bound", "Pod", selectingPod(selection(bounds.AnnotationBytes+1), "", ""), []string{"Pod app/p",
			"metadata.annotations[k8s.v1.cni.cncf.io/networks]: Too long: is 65537 bytes, more than the 65536 an annotation fastpath reads may have"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			namespace := "tenant-a"
			if tc.kind == "DeviceClass" || tc.kind == "CNIConfig" {
				namespace = ""
			}
			resp, _, verdict := newHandler(nil).Review(&admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Kind: tc.kind},
				Namespace: namespace, Operation: admissionv1.Create, Object: k8sruntime.RawExtension{Raw: []byte(tc.object)}})
			unread := resp.Result != nil && strings.Contains(resp.Result.Message, "refused unread")
			if tc.want == nil {
				if unread {
					t.Fatalf("refused unread: %s", resp.Result.Message)
				}
				return
			}
			if resp.Allowed || verdict != VerdictDenied || !unread {
				t.Fatalf("allowed %v, verdict %s (%+v): want it refused unread", resp.Allowed, verdict, resp.Result)
			}
			for _, want := range tc.want {
				if !strings.Contains(resp.Result.Message, want) {
					t.Errorf("message %q lacks %q", resp.Result.Message, want)
				}
			}
		})
	}
}

// TestReviewLargePod: a pod is judged by the parts fastpath reads: one
// of 3 MiB of containers and other annotations is judged as a small one,
// at a small multiple of its size, and not refused for it.
func TestReviewLargePod(t *testing.T) {
	h := newHandler(nil)
	other := `"example.com/notes": "` + strings.Repeat("n", 200<<10) + `"`
	for _, tc := range []struct {
		name, selection string
		allowed         bool
	}{
		{"networks", "net-a,net-b@n2", true},
		{"a network twice as one interface", "net-a@n1,net-a@n1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := selectingPod(tc.selection, containers(32000), other)
			if len(pod) < 3<<20 {
				t.Fatalf("the pod is %d bytes, want 3 MiB", len(pod))
			}
			resp, n := serve(t, h, &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
				Namespace: "app", Operation: admissionv1.Create, Object: k8sruntime.RawExtension{Raw: []byte(pod)}})
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed %v (%+v), want %v", resp.Allowed, resp.Result, tc.allowed)
			}
			if !tc.allowed && !strings.Contains(resp.Result.Message, `metadata.annotations[k8s.v1.cni.cncf.io/networks][1].interface: Duplicate value: "n1"`) {
				t.Errorf("message %q does not name the duplicate", resp.Result.Message)
			}
			t.Logf("a pod of %d bytes: %d bytes allocated", len(pod), n)
			if most := 3 * uint64(len(pod)); n > most {
				t.Errorf("answering a pod of %d bytes allocated %d bytes, more than %d", len(pod), n, most)
			}
		})
	}
}

// TestReviewMessageBounded: an object with thousands of problems, or
// one of a long value, is answered with at most bounds.Problems of them,
// each cut to bounds.ProblemBytes, and the count of the rest, within
// bounds.MessageBytes.
func TestReviewMessageBounded(t *testing.T) {
	var configs []string
	for range resourceapi.DeviceConfigMaxSize {
		configs = append(configs, cniParameters(1, 100))
	}
	h := newHandler(nil)
	for _, tc := range []struct {
		name, kind, namespace, object string
		// many: the object has more problems than a denial says.
		many bool
	}{
		{"a pod selecting thousands of networks that are not valid", "Pod", "app", selectingPod(badNames(20000), "", ""), false},
		{"a claim of 32 requests, each with problems", "ResourceClaim", "tenant-a", cniClaim(configs...), true},
		{"a problem of a long value", "Pod", "app", `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "app", "annotations": {"network.fastpath.dev/networks": "[` +
			strings.Repeat(" ", 60<<10) + `"}}, "spec": {}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems := len(validate.Object([]byte(tc.object), tc.namespace, h.Check, h.NADs).Problems)
			if tc.many && problems <= bounds.Problems {
				t.Fatalf("the object has %d problems, want more than %d", problems, bounds.Problems)
			}
			resp, _, _ := h.Review(&admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Kind: tc.kind},
				Namespace: tc.namespace, Operation: admissionv1.Create, Object: k8sruntime.RawExtension{Raw: []byte(tc.object)}})
			if resp.Allowed {
				t.Fatal("allowed, want it refused")
			}
			msg := resp.Result.Message
			if len(msg) > bounds.MessageBytes {
				t.Errorf("the message is %d bytes, more than %d", len(msg), bounds.MessageBytes)
			}
			more := fmt.Sprintf("; ... and %d more", problems-bounds.Problems)
			if problems > bounds.Problems && !strings.HasSuffix(msg, more) {
				t.Errorf("message %.300q...%q does not end in %q", msg, msg[max(len(msg)-100, 0):], more)
			}
			if problems <= bounds.Problems && strings.Contains(msg, "... and") {
				t.Errorf("message %.300q counts more than its %d problems", msg, problems)
			}
			for p := range strings.SplitSeq(strings.TrimPrefix(msg, "fastpath: "), "; ") {
				if len(p) > bounds.ProblemBytes {
					t.Errorf("a problem of %d bytes, more than %d: %.100q...", len(p), bounds.ProblemBytes, p)
				}
			}
		})
	}
}

// TestReviewUpdateSharesProblems: an update is refused for the problems
// it brings, the object's thousands of earlier ones aside; one that
// changes nothing fastpath reads is allowed without judging either
// object.
func TestReviewUpdateSharesProblems(t *testing.T) {
	h := newHandler(nil)
	update := func(kind, namespace, object, old string) *admissionv1.AdmissionRequest {
		return &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Kind: kind}, Namespace: namespace,
			Operation: admissionv1.Update, Object: k8sruntime.RawExtension{Raw: []byte(object)}, OldObject: k8sruntime.RawExtension{Raw: []byte(old)}}
	}
	t.Run("nothing fastpath reads changed", func(t *testing.T) {
		old := selectingPod(badNames(5000), "", "")
		labelled := strings.Replace(old, `"name": "p",`, `"name": "p", "labels": {"tier": "web"}, "resourceVersion": "2",`, 1)
		resp, n := serve(t, h, update("Pod", "app", labelled, old))
		if !resp.Allowed {
			t.Fatalf("refused: %s", resp.Result.Message)
		}
		t.Logf("an update of %d and %d bytes: %d bytes allocated", len(labelled), len(old), n)
		if most := 4 * uint64(len(old)+len(labelled)); n > most {
			t.Errorf("answering an update of %d and %d bytes allocated %d bytes, more than %d", len(labelled), len(old), n, most)
		}
	})
	// Claims of requests whose configs have 250 host paths each.
	claim := func(requests int) string {
		var configs []string
		for range requests {
			configs = append(configs, cniParameters(1, 250))
		}
		return cniClaim(configs...)
	}
	old := claim(8)
	t.Run("a request more", func(t *testing.T) {
		resp, _, _ := h.Review(update("ResourceClaim", "tenant-a", claim(9), old))
		if resp.Allowed {
			t.Fatal("allowed, want it refused for its new request's problems")
		}
		msg := resp.Result.Message
		if !strings.Contains(msg, `request "r8"`) {
			t.Errorf("message %.300q does not name the new request", msg)
		}
		for r := range 8 {
			if earlier := fmt.Sprintf(`request "r%d"`, r); strings.Contains(msg, earlier) {
				t.Errorf("message %.300q names %s, which the claim had before", msg, earlier)
			}
		}
	})
	t.Run("the same problems", func(t *testing.T) {
		// Constraints said, none: the judged parts differ, not their
		// problems.
		same := strings.Replace(old, `"devices": {`, `"devices": {"constraints": [], `, 1)
		resp, _, _ := h.Review(update("ResourceClaim", "tenant-a", same, old))
		if !resp.Allowed {
			t.Fatalf("refused: %.300s", resp.Result.Message)
		}
	})
}

// TestEarlier: a problem the object had before is counted off once for
// each time it had it.
func TestEarlier(t *testing.T) {
	e := newEarlierTexts("a", "b", "b")
	for i, tc := range []struct {
		problem string
		had     bool
	}{{"a", true}, {"a", false}, {"b", true}, {"b", true}, {"b", false}, {"c", false}} {
		if got := e.had(tc.problem); got != tc.had {
			t.Errorf("%d: had(%s) = %v, want %v", i, tc.problem, got, tc.had)
		}
	}
	if (*earlier)(nil).had("a") {
		t.Error("no earlier problems had one")
	}
}

// newEarlierTexts are earlier problems of these texts.
func newEarlierTexts(texts ...string) *earlier {
	e := newEarlier(nil)
	for _, t := range texts {
		e.add(t)
	}
	return e
}
