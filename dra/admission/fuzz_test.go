package admission

import (
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// FuzzReview: whatever object a review carries, of any kind the webhook
// judges, the answer is a verdict for the request (never a panic), and a
// denial says why.
func FuzzReview(f *testing.F) {
	for _, seed := range []string{lowMTU, goodMTU, notOurs, cniNotAllowed, badClass, badCNIConfig, masterNAD, badPodNetwork, badAttachment, sameNetTwice, podNetworkTwice, goodPod} {
		js, err := yaml.YAMLToJSON([]byte(seed))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(js), "")
	}
	f.Add(`{"kind": "Pod"}`, "")
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
			resp, _, verdict := h.Review(req)
			if resp == nil || resp.UID != "u" {
				t.Fatalf("%s: answer %+v, want one for the request", kind, resp)
			}
			if !resp.Allowed && (verdict != VerdictDenied || resp.Result == nil || resp.Result.Message == "") {
				t.Fatalf("%s: refused (verdict %s) without saying why: %+v", kind, verdict, resp.Result)
			}
		}
	})
}
