package admission

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/validate"
)

// Path is where the webhook serves its reviews; GatePath, where it serves
// the mutating webhook that gates pods listing PodNetworks.
const (
	Path     = "/validate"
	GatePath = "/gate"
)

// maxReviewBytes bounds a review's body: the API server's objects are at
// most 3 MiB, and an update's review carries two.
const maxReviewBytes = 8 << 20

// Verdicts, the metric's label values.
const (
	VerdictAllowed  = "allowed"
	VerdictDenied   = "denied"
	VerdictUnjudged = "unjudged"
	VerdictError    = "error"
	// VerdictGated: the pod was given the scheduling gate.
	VerdictGated = "gated"
)

// kindOther is the metric's kind of a review of a kind the webhook does
// not judge: the label's values stay few whatever the configuration sends.
const kindOther = "other"

// judgedKinds are the kinds the webhook judges (those of validate).
var judgedKinds = []string{"ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "CNIConfig", "Pod",
	"NetworkAttachmentDefinition", "PodNetwork", "PodNetworkAttachment", "FastpathNodeConfig"}

// Handler answers AdmissionReviews (admission.k8s.io/v1) with validate's
// judgement of their object.
type Handler struct {
	// Check is the claims' and classes' check, with the CNI policy of the
	// nodes (their --cni-plugins and related flags).
	Check validate.Check
	// NADs are the nodes' rules for a NetworkAttachmentDefinition's
	// configuration.
	NADs npwg.ConfigRules
	// Metrics records each review; nil records none.
	Metrics *metrics.Metrics
	// Claims are the cluster's ResourceClaims and DeviceClasses, against
	// which a new claim's static addresses on shared parents are checked;
	// nil: they are not.
	Claims ClaimIndex
}

// ServeHTTP answers one review. A body that is not an AdmissionReview is
// a bad request (the API server then applies the failure policy); an
// object in it that does not decode is refused with the decoder's message.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serveReview(w, r, h.Metrics, h.Review)
}

// serveReview answers one AdmissionReview with review's answer, and
// counts it.
func serveReview(w http.ResponseWriter, r *http.Request, m *metrics.Metrics,
	review func(*admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, string, string)) {
	start := time.Now()
	logger := klog.FromContext(r.Context())
	if r.Method != http.MethodPost {
		http.Error(w, "an AdmissionReview is POSTed", http.StatusMethodNotAllowed)
		return
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		http.Error(w, "an AdmissionReview is sent as application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil {
		http.Error(w, fmt.Sprintf("reading the review: %v", err), http.StatusBadRequest)
		return
	}
	if len(body) > maxReviewBytes {
		http.Error(w, fmt.Sprintf("the review is larger than %d bytes", maxReviewBytes), http.StatusRequestEntityTooLarge)
		return
	}
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
		if err == nil {
			err = fmt.Errorf("it has no request")
		}
		m.Review(kindOther, VerdictError, time.Since(start))
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	resp, kind, verdict := review(in.Request)
	out, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: resp})
	if err != nil {
		// An AdmissionReview of strings and bools always marshals.
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(out); err != nil {
		logger.V(2).Info("Writing an admission review's answer failed", "uid", in.Request.UID, "err", err)
	}
	m.Review(kind, verdict, time.Since(start))
	if verdict == VerdictDenied {
		logger.V(2).Info("Denied", "kind", in.Request.Kind.Kind, "namespace", in.Request.Namespace,
			"name", in.Request.Name, "operation", in.Request.Operation, "message", resp.Result.Message)
	}
}

// Review judges a request's object: a created object, or an updated one
// short of the problems it had before (an object already stored is not
// refused an update for what it already was, such as the controller's
// finalizer on an older PodNetwork). It returns the response, the kind
// for the metrics and the verdict.
func (h *Handler) Review(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, string, string) {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	kind := req.Kind.Kind
	if !slices.Contains(judgedKinds, kind) {
		return resp, kindOther, VerdictUnjudged
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return resp, kind, VerdictUnjudged
	}
	v := validate.Object(req.Object.Raw, req.Namespace, h.Check, h.NADs)
	if !v.Judged {
		// The configuration sent a kind by another group or version.
		return resp, kindOther, VerdictUnjudged
	}
	if v.Partly != "" {
		resp.Warnings = append(resp.Warnings, "fastpath judged this object only in part: "+v.Partly)
	}
	if kind == "ResourceClaim" && req.Operation == admissionv1.Create && h.Claims != nil {
		problems, warning := h.claimAddresses(req.Object.Raw, req.Namespace)
		v.Problems = append(v.Problems, problems...)
		if warning != "" {
			resp.Warnings = append(resp.Warnings, warning)
		}
	}
	problems := messages(v.Problems)
	if req.Operation == admissionv1.Update && len(problems) > 0 && len(req.OldObject.Raw) > 0 {
		old := messages(validate.Object(req.OldObject.Raw, req.Namespace, h.Check, h.NADs).Problems)
		problems = slices.DeleteFunc(problems, func(p string) bool { return slices.Contains(old, p) })
	}
	if len(problems) == 0 {
		return resp, kind, VerdictAllowed
	}
	resp.Allowed = false
	resp.Result = &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
		Message: "fastpath: " + strings.Join(problems, "; "),
	}
	return resp, kind, VerdictDenied
}

// claimAddresses are the problems of a new claim's static addresses on
// shared parents (addressProblems), or a warning that they were not
// checked: the index has not listed the cluster's claims yet.
func (h *Handler) claimAddresses(raw []byte, namespace string) ([]validate.Problem, string) {
	var claim resourceapi.ResourceClaim
	if err := json.Unmarshal(raw, &claim); err != nil {
		return nil, "" // validate says why
	}
	if claim.Namespace == "" {
		claim.Namespace = namespace
	}
	if !h.Claims.Synced() {
		return nil, "fastpath did not check the claim's static addresses against the cluster's other claims: it has not listed them yet; the node checks them at Prepare"
	}
	return addressProblems(h.Claims, &claim), ""
}

// messages are the problems as validate prints them: the request, if
// any, then the field and what is wrong with it.
func messages(problems []validate.Problem) []string {
	out := make([]string, 0, len(problems))
	for _, p := range problems {
		m := p.Err.Error()
		if p.Err.Field == "" || p.Err.Field == "<nil>" {
			// A problem of the whole object.
			m = p.Err.ErrorBody()
		}
		if p.Request != "" {
			m = fmt.Sprintf("request %q: %s", p.Request, m)
		}
		out = append(out, m)
	}
	return out
}
