package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
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
// most 3 MiB, an update's review carries two, and the rest of a review
// (the user's groups and extra, the options) is small. A body is read
// into one buffer of its size, and the objects judged are slices of it:
// the webhook's memory is this, the judged parts of the objects (each
// within partBounds) and what judging those costs.
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
	body, err := readBody(r)
	if err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, errTooLarge) {
			code = http.StatusRequestEntityTooLarge
		}
		m.Review(kindOther, VerdictError, time.Since(start))
		http.Error(w, fmt.Sprintf("reading the review: %v", err), code)
		return
	}
	in, err := decodeReview(body)
	if err != nil {
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

// errTooLarge is the error of a body over maxReviewBytes.
var errTooLarge = fmt.Errorf("it is larger than %d bytes", maxReviewBytes)

// readBody reads a review's body: into one buffer of its length when the
// request says it (the API server does), refused unread when that is over
// maxReviewBytes.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > maxReviewBytes {
		return nil, errTooLarge
	}
	if r.ContentLength < 0 {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
		if err == nil && len(body) > maxReviewBytes {
			err = errTooLarge
		}
		return body, err
	}
	body := make([]byte, r.ContentLength)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return nil, err
	}
	return body, nil
}

// reviewIn is an AdmissionReview as the webhook reads it: its objects are
// slices of the body, not copies (review.Request.Object.Raw and
// OldObject.Raw are set to them).
type reviewIn struct {
	metav1.TypeMeta
	Request *requestIn `json:"request"`
}

// requestIn is an AdmissionRequest whose objects are read as slices of
// the body: its own fields Object and OldObject take the JSON names of the
// embedded request's, which then has none.
type requestIn struct {
	admissionv1.AdmissionRequest
	Object    rawSlice `json:"object"`
	OldObject rawSlice `json:"oldObject"`
}

// rawSlice is a JSON value kept as the slice of the document it is in:
// json.Unmarshal hands a value's decoder a slice of its input, which
// readBody made for this review alone and nothing writes to.
type rawSlice []byte

func (r *rawSlice) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*r = nil
		return nil
	}
	*r = data
	return nil
}

// decodeReview decodes a review's body, which it keeps: the objects of
// the request it returns are slices of it.
func decodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	var in reviewIn
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	if in.Request == nil {
		return nil, errors.New("it has no request")
	}
	req := &in.Request.AdmissionRequest
	req.Object.Raw, req.OldObject.Raw = in.Request.Object, in.Request.OldObject
	return &admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Request: req}, nil
}

// Review judges a request's object: a created object, or an updated one
// short of the problems it had before (an object already stored is not
// refused an update for what it already was, such as the controller's
// finalizer on an older PodNetwork). It judges the parts of the object
// fastpath reads, and refuses unread an object whose parts are over the
// bounds of the largest object of its kind (judgedParts). An update is
// judged against the object before it only when it has problems, and not
// at all when its judged parts are as they were. It returns the response,
// the kind for the metrics and the verdict.
func (h *Handler) Review(req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, string, string) {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	kind := req.Kind.Kind
	if !slices.Contains(judgedKinds, kind) {
		return resp, kindOther, VerdictUnjudged
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return resp, kind, VerdictUnjudged
	}
	obj := judgedParts(req.Object.Raw, req.Namespace)
	if len(obj.over) > 0 {
		d := newDenial("fastpath: " + obj.name + " is refused unread, larger than fastpath judges: ")
		for _, e := range obj.over {
			d.add(problemText(validate.Problem{Err: e}))
		}
		return deny(resp, d.message()), kind, VerdictDenied
	}
	var prev judged
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		prev = judgedParts(req.OldObject.Raw, req.Namespace)
		if obj.parts && prev.parts && bytes.Equal(prev.js, obj.js) {
			// What fastpath judges is as it was: so are its problems.
			return resp, kind, VerdictAllowed
		}
	}
	check := h.check()
	v := validate.Object(obj.js, req.Namespace, check, h.NADs)
	if !v.Judged {
		// The configuration sent a kind by another group or version.
		return resp, kindOther, VerdictUnjudged
	}
	if v.Partly != "" {
		resp.Warnings = addWarning(resp.Warnings, "fastpath judged this object only in part: "+v.Partly)
	}
	if kind == "ResourceClaim" && req.Operation == admissionv1.Create && h.Claims != nil {
		problems, warning := h.claimAddresses(obj.js, req.Namespace)
		v.Problems = append(v.Problems, problems...)
		if warning != "" {
			resp.Warnings = addWarning(resp.Warnings, warning)
		}
	}
	if len(v.Problems) == 0 {
		return resp, kind, VerdictAllowed
	}
	// The object before the update, unless it is over the bounds: its
	// problems are then unknown, and all of the update's count.
	var before *earlier
	if prev.js != nil && prev.over == nil {
		before = newEarlier(validate.Object(prev.js, req.Namespace, check, h.NADs).Problems)
	}
	d := newDenial("fastpath: ")
	for i, p := range v.Problems {
		if before == nil && d.full() {
			// The rest are counted, not printed.
			d.more += len(v.Problems) - i
			break
		}
		if n, ok := bounds.Counted(p.Err); ok {
			// Problems validate counted and did not keep.
			d.more += before.beyond(n)
			continue
		}
		if text := problemText(p); !before.had(text) {
			d.add(text)
		}
	}
	if d.problems() == 0 {
		return resp, kind, VerdictAllowed
	}
	return deny(resp, d.message()), kind, VerdictDenied
}

// deny makes resp a denial with message.
func deny(resp *admissionv1.AdmissionResponse, message string) *admissionv1.AdmissionResponse {
	resp.Allowed = false
	resp.Result = &metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
		Message: message,
	}
	return resp
}

// check is the handler's Check with the cluster's DeviceClasses, once the
// index has listed them: a claim is judged by its class as the cluster has
// it (an operator's share.class values, a class of their own), as the
// node judges it by the class its allocation carries. Until then, and
// without an index, by the chart's defaults.
func (h *Handler) check() validate.Check {
	if h.Claims == nil || !h.Claims.Synced() {
		return h.Check
	}
	check := h.Check
	if check.Classes = h.Claims.Classes(); check.Classes == nil {
		return h.Check
	}
	maps.Copy(check.Classes, h.Check.Classes)
	return check
}

// claimAddresses are the problems of a new claim's static addresses on
// shared parents (addressProblems), or a warning that they were not
// checked: the index has not listed the cluster's claims yet. raw is the
// claim's judged parts, held to the bounds of the largest claim.
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
