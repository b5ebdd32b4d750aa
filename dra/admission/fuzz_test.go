package admission

import (
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/api/bounds/boundstest"
)

// FuzzReview: whatever object a review carries, of any kind the webhook
// judges, the answer is a verdict for the request (never a panic), within
// boundstest.Budget; a denial says why, in at most bounds.MessageBytes,
// and the warnings are bounded.
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
			var resp *admissionv1.AdmissionResponse
			var verdict string
			boundstest.Check(t, func() string {
				resp, _, verdict = h.Review(req)
				if resp == nil || resp.Result == nil {
					return ""
				}
				return resp.Result.Message
			})
			if resp == nil || resp.UID != "u" {
				t.Fatalf("%s: answer %+v, want one for the request", kind, resp)
			}
			if !resp.Allowed && (verdict != VerdictDenied || resp.Result == nil || resp.Result.Message == "") {
				t.Fatalf("%s: refused (verdict %s) without saying why: %+v", kind, verdict, resp.Result)
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
