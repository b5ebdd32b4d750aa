package admission

import (
	"encoding/json"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/metrics"
)

// Gate is the mutating webhook of the KEP's active validation: a pod
// created with a list of PodNetworks (the annotation
// network.fastpath.dev/networks) gets the scheduling gate
// pnv1.SchedulingGate, which fastpathd controller lifts once the networks
// can be attached. Nothing else of any object changes. A pod whose
// annotation does not parse is left as it is: the validating webhook
// refuses it, or, with that one down, the node's check holds.
type Gate struct {
	// Metrics records each review; nil records none.
	Metrics *metrics.Metrics
}

// ServeHTTP answers one review, as Handler's.
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serveReview(w, r, g.Metrics, g.Review)
}

// gatedPod is what Review reads of a pod, its keys matched exactly, as
// the API server writes them: of its annotations, the list of PodNetworks
// alone (pnv1.AnnotationNetworks), so that the others, and the rest of
// the pod, cost a pass over their bytes and no more.
type gatedPod struct {
	Metadata struct {
		Annotations struct {
			Networks *string `json:"network.fastpath.dev/networks"`
		} `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		NodeName        string                     `json:"nodeName"`
		HostNetwork     bool                       `json:"hostNetwork"`
		SchedulingGates []corev1.PodSchedulingGate `json:"schedulingGates"`
	} `json:"spec"`
}

// Review gates a pod being created that lists networks, unless it is
// gated already, names its node (the scheduler is not asked: a gate would
// be refused), or is in the host's network (which lists none). The
// metrics count it as a Pod, gated or allowed.
func (g *Gate) Review(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, string, string) {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Kind.Kind != "Pod" || req.Kind.Group != "" || req.Operation != admissionv1.Create {
		return resp, kindOther, VerdictUnjudged
	}
	var pod gatedPod
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, &pod); err != nil {
		resp.Warnings = addWarning(resp.Warnings, "fastpath: the pod does not decode, so it is not gated: "+err.Error())
		return resp, "Pod", VerdictError
	}
	value := pod.Metadata.Annotations.Networks
	if value == nil || pod.Spec.NodeName != "" || pod.Spec.HostNetwork {
		return resp, "Pod", VerdictAllowed
	}
	// A list longer than the bound is refused by the validating webhook.
	if len(*value) > bounds.AnnotationBytes {
		return resp, "Pod", VerdictAllowed
	}
	if _, err := pnv1.ParseNetworks(*value); err != nil {
		return resp, "Pod", VerdictAllowed
	}
	for _, gate := range pod.Spec.SchedulingGates {
		if gate.Name == pnv1.SchedulingGate {
			return resp, "Pod", VerdictAllowed
		}
	}
	var patch []map[string]any
	if pod.Spec.SchedulingGates == nil {
		patch = []map[string]any{{"op": "add", "path": "/spec/schedulingGates", "value": []corev1.PodSchedulingGate{{Name: pnv1.SchedulingGate}}}}
	} else {
		patch = []map[string]any{{"op": "add", "path": "/spec/schedulingGates/-", "value": corev1.PodSchedulingGate{Name: pnv1.SchedulingGate}}}
	}
	out, err := json.Marshal(patch)
	if err != nil {
		// Strings alone: it always marshals.
		return resp, "Pod", VerdictError
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = out, &pt
	return resp, "Pod", VerdictGated
}
