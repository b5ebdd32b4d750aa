package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
)

// apiServer answers the requests of checkCluster: down (503) for its
// first down requests, then as a Kubernetes 1.36 API server that serves
// resource.k8s.io/v1 when dra is true, and knows node-a.
func apiServer(t *testing.T, down int32, dra bool) (kubernetes.Interface, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= down {
			http.Error(w, "the API server is starting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		var body any
		switch {
		case r.URL.Path == "/apis/resource.k8s.io/v1" && dra:
			body = metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "resource.k8s.io/v1"}
		case r.URL.Path == "/api/v1/nodes/node-a":
			body = corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
		case r.URL.Path == "/version":
			body = k8sversion.Info{GitVersion: "v1.36.0"}
		default:
			w.WriteHeader(http.StatusNotFound)
			body = metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound}
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(srv.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return client, &calls
}

// At start the daemon waits for an API server that does not answer yet,
// and goes on once it does; one that answers it does not serve DRA, or
// does not know the node, is an error at once, saying so.
func TestWaitForCluster(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client, calls := apiServer(t, 5, true)
	granular, err := waitForCluster(ctx, client, "node-a", time.Millisecond)
	if err != nil || !granular {
		t.Fatalf("after the outage: %v, %v; want the cluster checked", granular, err)
	}
	if calls.Load() <= 5 {
		t.Errorf("%d requests: the outage was not waited out", calls.Load())
	}

	client, _ = apiServer(t, 0, false)
	if _, err := waitForCluster(ctx, client, "node-a", time.Millisecond); err == nil || !strings.Contains(err.Error(), "does not serve resource.k8s.io/v1") {
		t.Errorf("without DRA: %v", err)
	}
	client, _ = apiServer(t, 0, true)
	if _, err := waitForCluster(ctx, client, "node-b", time.Millisecond); err == nil || !strings.Contains(err.Error(), `node "node-b"`) {
		t.Errorf("an unknown node: %v", err)
	}

	client, _ = apiServer(t, 1<<30, true)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := waitForCluster(short, client, "node-a", time.Millisecond); err == nil || !strings.Contains(err.Error(), "the API server") || strings.Contains(err.Error(), "1.34") {
		t.Errorf("an API server down until the end: %v, want the reason it cannot be reached", err)
	}
}
