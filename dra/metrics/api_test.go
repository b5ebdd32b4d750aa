package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestAPIResource(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/nodes/node-a":           "nodes",
		"/api/v1/namespaces/app/pods/p1": "pods",
		"/api/v1/namespaces/app/pods":    "pods",
		"/api/v1/namespaces/app":         "namespaces",
		"/api/v1/namespaces":             "namespaces",
		"/apis/resource.k8s.io/v1/namespaces/app/resourceclaims/c1/status": "resourceclaims/status",
		"/apis/resource.k8s.io/v1/resourceslices":                          "resourceslices",
		"/apis/resource.k8s.io/v1/resourceslices/s1":                       "resourceslices",
		"/apis/network.fastpath.dev/v1alpha1/podnetworks/default":          "podnetworks",
		"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":           "selfsubjectaccessreviews",
		"/readyz": "other",
		"/apis":   "other",
		"/api/v1/namespaces/fastpath-system/serviceaccounts/fastpath/token":      "serviceaccounts/token",
		"/apis/coordination.k8s.io/v1/namespaces/fastpath-system/leases/fp-lock": "leases",
	} {
		if got := APIResource(path); got != want {
			t.Errorf("APIResource(%s) = %s, want %s", path, got, want)
		}
	}
}

// TestCountAPIRequests: a client's requests counted by verb, resource and
// code.
func TestCountAPIRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/nodes/node-a"):
			_, _ = w.Write([]byte(`{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}`))
		}
	}))
	defer srv.Close()
	m := New()
	cfg := &rest.Config{Host: srv.URL}
	client, err := kubernetes.NewForConfig(m.CountAPIRequests(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WrapTransport != nil {
		t.Error("the config given was changed")
	}
	ctx := t.Context()
	if _, err := client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	_, _ = client.CoreV1().Pods("app").Patch(ctx, "p1", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{})
	_, _ = client.CoreV1().Pods("app").List(ctx, metav1.ListOptions{})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{
		`fastpath_api_requests_total{code="200",resource="nodes",verb="get"} 1`,
		`fastpath_api_requests_total{code="404",resource="pods",verb="patch"} 1`,
		`fastpath_api_requests_total{code="404",resource="pods",verb="list"} 1`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("the metrics lack %s", want)
		}
	}
}
