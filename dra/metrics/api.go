package metrics

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// CountAPIRequests makes every request of clients built from config count
// in fastpath_api_requests_total, by verb, resource and status code: what
// the daemon costs the API server, per pod, is read from its own metrics.
// It returns a copy; config is left as it is.
func (m *Metrics) CountAPIRequests(config *rest.Config) *rest.Config {
	config = rest.CopyConfig(config)
	if m == nil {
		return config
	}
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &countingTransport{next: rt, requests: m.apiRequests}
	})
	return config
}

type countingTransport struct {
	next     http.RoundTripper
	requests *prometheus.CounterVec
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	t.requests.WithLabelValues(APIVerb(req), APIResource(req.URL.Path), code).Inc()
	return resp, err
}

// APIVerb is the Kubernetes verb of a request: get, list, watch, create,
// update, patch, delete, deletecollection, or the HTTP method of one that
// is none of these.
func APIVerb(req *http.Request) string {
	q := req.URL.Query()
	switch req.Method {
	case http.MethodGet:
		if q.Get("watch") == "true" || q.Get("watch") == "1" {
			return "watch"
		}
		if _, name := apiResource(req.URL.Path); name == "" {
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if _, name := apiResource(req.URL.Path); name == "" {
			return "deletecollection"
		}
		return "delete"
	}
	return strings.ToLower(req.Method)
}

// APIResource is the resource of an API path, with its subresource
// (resourceclaims/status), without group, version, namespace or name;
// "other" for a path that names none (discovery, /readyz).
func APIResource(path string) string {
	r, _ := apiResource(path)
	return r
}

// apiResource splits /api/v1/..., /apis/GROUP/VERSION/... into the
// resource (and subresource) and the object's name.
func apiResource(path string) (resource, name string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "other", ""
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) != 2 {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "other", ""
	case 1:
		return parts[0], ""
	case 2:
		return parts[0], parts[1]
	default:
		return parts[0] + "/" + parts[2], parts[1]
	}
}
