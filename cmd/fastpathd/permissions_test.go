package main

import (
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestCheckPermissions(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		attr := r.Spec.ResourceAttributes
		// Everything but deleting slices and reading ConfigMaps.
		r.Status.Allowed = (attr.Resource != "resourceslices" || attr.Verb != "delete") && attr.Resource != "configmaps"
		return true, r, nil
	})
	if err := checkPermissions(t.Context(), client, permissions([]string{"fastpath.dev"}, "", true)); err == nil ||
		!strings.Contains(err.Error(), "delete resourceslices.resource.k8s.io (publishing the node's devices)") {
		t.Errorf("error = %v, want the missing verb named", err)
	}
	err := checkPermissions(t.Context(), client, permissions([]string{"fastpath.dev", "cni.dra.networking.x-k8s.io"}, "fastpath-system", true))
	if err == nil || !strings.Contains(err.Error(), "get configmaps in namespace fastpath-system (approved CNI configs'") || !strings.Contains(err.Error(), "delete resourceslices") {
		t.Errorf("error = %v, want both missing verbs named", err)
	}
}

func TestPermissionsOfGranularStatus(t *testing.T) {
	var names []string
	for _, p := range permissions([]string{"fastpath.dev", "cni.dra.networking.x-k8s.io"}, "fastpath-system", true) {
		if p.subresource == "driver" {
			names = append(names, p.name)
		}
	}
	if strings.Join(names, ",") != "fastpath.dev,cni.dra.networking.x-k8s.io" {
		t.Errorf("associated-node:update asked for %v", names)
	}
	for _, p := range permissions([]string{"fastpath.dev"}, "", false) {
		if p.subresource == "driver" || p.resource == "configmaps" || p.resource == "cniconfigs" {
			t.Errorf("asked for %s without granular status or CNI", p)
		}
	}
}

// TestAwaitPermissions: roles that reach the authorizer a moment after the
// daemon starts are waited for; roles still missing after the grace are
// the error, naming them.
func TestAwaitPermissions(t *testing.T) {
	denied := 3
	client := fake.NewClientset()
	client.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		attr := r.Spec.ResourceAttributes
		r.Status.Allowed = attr.Resource != "resourceslices" || attr.Verb != "delete" || denied <= 0
		if !r.Status.Allowed {
			denied--
		}
		return true, r, nil
	})
	ps := permissions([]string{"fastpath.dev"}, "", true)
	if err := awaitPermissions(t.Context(), client, ps, time.Minute, time.Millisecond); err != nil || denied != 0 {
		t.Errorf("roles granted at the fourth look: %v (denied %d more)", err, denied)
	}
	denied = 1 << 30
	if err := awaitPermissions(t.Context(), client, ps, 20*time.Millisecond, time.Millisecond); err == nil || !strings.Contains(err.Error(), "delete resourceslices") {
		t.Errorf("roles never granted: %v, want the missing verb named", err)
	}
}
