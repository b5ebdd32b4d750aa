package admission

import (
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
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

// TestReviewMessageBounded: an object with thousands of problems is
// answered with bounds.Problems of them, each cut to bounds.ProblemBytes,
// and the count of the rest, within bounds.MessageBytes.
func TestReviewMessageBounded(t *testing.T) {
	const names = 20000
	for _, tc := range []struct {
		name, pod, want string
	}{
		{"thousands of problems", selectingPod(badNames(names), "", ""), fmt.Sprintf("; ... and %d more", names-bounds.Problems)},
		{"a problem of a long value", `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "app", "annotations": {"network.fastpath.dev/networks": "[` +
			strings.Repeat(" ", 60<<10) + `"}}, "spec": {}}`, "..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, _, _ := newHandler(nil).Review(&admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Kind: "Pod"},
				Namespace: "app", Operation: admissionv1.Create, Object: k8sruntime.RawExtension{Raw: []byte(tc.pod)}})
			if resp.Allowed {
				t.Fatal("allowed, want it refused")
			}
			msg := resp.Result.Message
			if len(msg) > bounds.MessageBytes {
				t.Errorf("the message is %d bytes, more than %d", len(msg), bounds.MessageBytes)
			}
			if !strings.HasSuffix(msg, tc.want) {
				t.Errorf("message %.300q...%q does not end in %q", msg, msg[max(len(msg)-100, 0):], tc.want)
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
// it brings, the object's thousands of earlier ones aside.
func TestReviewUpdateSharesProblems(t *testing.T) {
	const names = 5000
	h := newHandler(nil)
	update := func(object, old string) *admissionv1.AdmissionRequest {
		return &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "app",
			Operation: admissionv1.Update, Object: k8sruntime.RawExtension{Raw: []byte(object)}, OldObject: k8sruntime.RawExtension{Raw: []byte(old)}}
	}
	old := selectingPod(badNames(names), "", "")
	t.Run("one problem more", func(t *testing.T) {
		resp, _, _ := h.Review(update(selectingPod(badNames(names+1), "", ""), old))
		if resp.Allowed {
			t.Fatal("allowed, want it refused for its new problem")
		}
		msg := resp.Result.Message
		if !strings.Contains(msg, fmt.Sprintf("metadata.annotations[k8s.v1.cni.cncf.io/networks][%d]", names)) || strings.Count(msg, "; ") != 0 {
			t.Errorf("message %.500q: want the new problem alone", msg)
		}
	})
	t.Run("the same problems", func(t *testing.T) {
		// hostNetwork said, as it was: the object differs, not its
		// problems.
		same := strings.Replace(old, `"spec": {`, `"spec": {"hostNetwork": false, `, 1)
		resp, _, _ := h.Review(update(same, old))
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
