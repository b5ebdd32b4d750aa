package admission

import (
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// reviewBudget is the time one review may take, whatever its objects: it
// is generous, so that a run with the race detector on a busy machine of
// two cores stays within it. Judging the largest objects the bounds allow
// takes milliseconds; work that grows with the square of an object, at
// the bounds, takes seconds.
const reviewBudget = time.Second

// FuzzReview: whatever object a review carries, of any kind the webhook
// judges, the answer is a verdict for the request (never a panic), within
// reviewBudget; a denial says why, in at most bounds.MessageBytes, and the
// warnings are bounded.
func FuzzReview(f *testing.F) {
	for _, seed := range []string{lowMTU, goodMTU, notOurs, cniNotAllowed, badClass, badCNIConfig, masterNAD, badPodNetwork, badAttachment, sameNetTwice, podNetworkTwice, goodPod} {
		js, err := yaml.YAMLToJSON([]byte(seed))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(js), "")
	}
	f.Add(`{"kind": "Pod"}`, "")
	// A claim of many problems, and an update sharing hundreds.
	f.Add(cniClaim(cniParameters(7, 250)), "")
	f.Add(selectingPod(badNames(300), "", ""), selectingPod(badNames(299), "", ""))
	f.Add(`null`, `{}`)
	h := newHandler(nil)
	f.Fuzz(func(t *testing.T, object, old string) {
		for _, kind := range judgedKinds {
			op := admissionv1.Create
			if old != "" {
				op = admissionv1.Update
			}
			req := &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Kind: kind}, Namespace: "app", Operation: op,
				Object: runtime.RawExtension{Raw: []byte(object)}, OldObject: runtime.RawExtension{Raw: []byte(old)}}
			start := time.Now()
			resp, _, verdict := h.Review(req)
			if took := time.Since(start); took > reviewBudget {
				t.Errorf("%s: answered in %v, more than the %v a review may take", kind, took, reviewBudget)
			}
			if resp == nil || resp.UID != "u" {
				t.Fatalf("%s: answer %+v, want one for the request", kind, resp)
			}
			if !resp.Allowed && (verdict != VerdictDenied || resp.Result == nil || resp.Result.Message == "") {
				t.Fatalf("%s: refused (verdict %s) without saying why: %+v", kind, verdict, resp.Result)
			}
			if resp.Result != nil && len(resp.Result.Message) > bounds.MessageBytes {
				t.Errorf("%s: a message of %d bytes, more than %d", kind, len(resp.Result.Message), bounds.MessageBytes)
			}
			if len(resp.Warnings) > maxWarnings {
				t.Errorf("%s: %d warnings, more than %d", kind, len(resp.Warnings), maxWarnings)
			}
			for _, w := range resp.Warnings {
				if len(w) > warningBytes {
					t.Errorf("%s: a warning of %d bytes, more than %d", kind, len(w), warningBytes)
				}
			}
		}
	})
}
