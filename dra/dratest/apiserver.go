package dratest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// Down is how an APIServer fails while it is down.
type Down int

const (
	// Up: it serves.
	Up Down = iota
	// Unavailable: it answers every request 503 Service Unavailable, as
	// an API server starting or not ready does.
	Unavailable
	// Closed: it closes every connection without an answer, as a load
	// balancer with no API server behind it does.
	Closed
)

// APIRequest is a request an APIServer got.
type APIRequest struct {
	At time.Time
	// Verb is get, update, create; Resource is resourceclaims/status,
	// resourceclaims, resourceslices, nodes or readyz.
	Verb, Resource, Name string
	// Code is the status answered; 0 for a connection closed.
	Code int
}

// APIServer is a Kubernetes API server of ResourceClaims (get, update of
// their status with the resourceVersion checked), ResourceSlices (create),
// Nodes (get) and /readyz, over real HTTP: a client-go clientset talks to
// it with its rate limiter, retries and errors as with a real one. It can
// go down.
type APIServer struct {
	*httptest.Server
	// Refuse, if set, gives the status code to answer a request that it
	// would serve (0: serve it): an API server that refuses some requests.
	Refuse func(verb, resource string) int

	mu       sync.Mutex
	claims   map[string]*resourceapi.ResourceClaim
	rv       int
	down     Down
	requests []APIRequest
}

// NewAPIServer starts an API server, stopped when the test ends.
func NewAPIServer(t testing.TB) *APIServer {
	s := &APIServer{claims: map[string]*resourceapi.ResourceClaim{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Config is a client configuration for the server, speaking JSON, with
// the daemon's default rate limit.
func (s *APIServer) Config() *rest.Config {
	return &rest.Config{Host: s.URL, QPS: 50, Burst: 100, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}
}

// AddClaim stores a claim.
func (s *APIServer) AddClaim(c *resourceapi.ResourceClaim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c = c.DeepCopy()
	s.rv++
	c.ResourceVersion = strconv.Itoa(s.rv)
	s.claims[c.Namespace+"/"+c.Name] = c
}

// Claim is the stored claim; nil if there is none.
func (s *APIServer) Claim(namespace, name string) *resourceapi.ResourceClaim {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.claims[namespace+"/"+name]; c != nil {
		return c.DeepCopy()
	}
	return nil
}

// Claims calls f with each stored claim, not to be changed.
func (s *APIServer) Claims(f func(*resourceapi.ResourceClaim)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.claims {
		f(c)
	}
}

// SetDown takes the server down, or up again.
func (s *APIServer) SetDown(d Down) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = d
}

// Requests are the requests received, in order.
func (s *APIServer) Requests() []APIRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]APIRequest(nil), s.requests...)
}

func (s *APIServer) serve(w http.ResponseWriter, r *http.Request) {
	verb, resource, namespace, name := route(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	req := APIRequest{At: time.Now(), Verb: verb, Resource: resource, Name: name}
	if s.down == Closed {
		s.requests = append(s.requests, req)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	code, body := s.answer(r, req, namespace)
	req.Code = code
	s.requests = append(s.requests, req)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// answer serves a request: the status code and the object answered.
func (s *APIServer) answer(r *http.Request, req APIRequest, namespace string) (int, any) {
	if s.down == Unavailable {
		return failure(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "the API server is not ready")
	}
	if s.Refuse != nil {
		if code := s.Refuse(req.Verb, req.Resource); code != 0 {
			return failure(code, metav1.StatusReasonInternalError, "refused")
		}
	}
	key := namespace + "/" + req.Name
	switch req.Verb + " " + req.Resource {
	case "get readyz":
		return http.StatusOK, "ok"
	case "get nodes":
		return http.StatusOK, &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: req.Name, UID: "node-uid"}}
	case "create resourceslices":
		var slice resourceapi.ResourceSlice
		if err := decode(r, &slice); err != nil {
			return failure(http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		}
		s.rv++
		slice.TypeMeta = metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice"}
		slice.ResourceVersion = strconv.Itoa(s.rv)
		if slice.Name == "" {
			slice.Name = slice.GenerateName + strconv.Itoa(s.rv)
		}
		return http.StatusCreated, &slice
	case "get resourceclaims":
		c := s.claims[key]
		if c == nil {
			return failure(http.StatusNotFound, metav1.StatusReasonNotFound, "resourceclaims "+req.Name+" not found")
		}
		return http.StatusOK, typed(c)
	case "update resourceclaims/status":
		c := s.claims[key]
		if c == nil {
			return failure(http.StatusNotFound, metav1.StatusReasonNotFound, "resourceclaims "+req.Name+" not found")
		}
		var in resourceapi.ResourceClaim
		if err := decode(r, &in); err != nil {
			return failure(http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		}
		if in.UID != "" && in.UID != c.UID || in.ResourceVersion != "" && in.ResourceVersion != c.ResourceVersion {
			return failure(http.StatusConflict, metav1.StatusReasonConflict, "the object has been modified; please apply your changes to the latest version and try again")
		}
		// As the API server does: the spec and metadata stay as stored.
		c = c.DeepCopy()
		c.Status = in.Status
		s.rv++
		c.ResourceVersion = strconv.Itoa(s.rv)
		s.claims[key] = c
		return http.StatusOK, typed(c)
	}
	return failure(http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("%s %s: not served here", req.Verb, r.URL.Path))
}

// decode reads a request's object: JSON only (Config's clients).
func decode(r *http.Request, into any) error {
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("content type %q: this API server speaks JSON only", ct)
	}
	return json.NewDecoder(r.Body).Decode(into)
}

// typed is a copy of the claim with its kind, as the API server answers.
func typed(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.TypeMeta = metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"}
	return c
}

func failure(code int, reason metav1.StatusReason, message string) (int, any) {
	return code, &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
		Code: int32(code), Reason: reason, Message: message}
}

// route splits a request into its verb, resource (with subresource),
// namespace and name.
func route(r *http.Request) (verb, resource, namespace, name string) {
	switch r.Method {
	case http.MethodGet:
		verb = "get"
	case http.MethodPut:
		verb = "update"
	case http.MethodPost:
		verb = "create"
	default:
		verb = strings.ToLower(r.Method)
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] == "readyz":
		return verb, "readyz", "", ""
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return verb, r.URL.Path, "", ""
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		namespace, parts = parts[1], parts[2:]
	}
	switch len(parts) {
	case 0:
		return verb, "", namespace, ""
	case 1:
		return verb, parts[0], namespace, ""
	case 2:
		return verb, parts[0], namespace, parts[1]
	default:
		return verb, parts[0] + "/" + parts[2], namespace, parts[1]
	}
}
