package main

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// permission is one thing the daemon does with the API server.
type permission struct {
	group, resource, subresource, verb, name string
	why                                      string
}

func (p permission) String() string {
	s := p.verb + " " + p.resource
	if p.subresource != "" {
		s += "/" + p.subresource
	}
	if p.group != "" {
		s += "." + p.group
	}
	if p.name != "" {
		s += " " + p.name
	}
	return s + " (" + p.why + ")"
}

// permissions are what the daemon's service account must be allowed, as
// the chart's ClusterRole grants them.
func permissions(drivers []string, cni bool, granularStatus bool) []permission {
	ps := []permission{
		{"", "nodes", "", "get", "", "checking this node at start"},
		{"resource.k8s.io", "resourceclaims", "", "get", "", "reading a claim to write its status"},
		{"resource.k8s.io", "resourceclaims", "status", "update", "", "writing claim status"},
		{"", "events", "", "create", "", "device health events on the node and its pods"},
		{"", "events", "", "patch", "", "device health events on the node and its pods"},
	}
	for _, verb := range []string{"list", "watch", "create", "update", "delete"} {
		ps = append(ps, permission{"resource.k8s.io", "resourceslices", "", verb, "", "publishing the node's devices"})
	}
	if granularStatus {
		for _, d := range drivers {
			ps = append(ps, permission{"resource.k8s.io", "resourceclaims", "driver", "associated-node:update", d, "writing the driver's entries of claim status"})
		}
	}
	if cni {
		ps = append(ps, permission{"", "configmaps", "", "get", "", "CNI configs' configMapKeyRef and configName"})
	}
	return ps
}

// checkPermissions asks the API server (SelfSubjectAccessReview) whether
// the daemon may do each of its calls, and fails naming every one it may
// not, so that a wrong RBAC stops the daemon at start with a clear message
// instead of failing later, call by call.
func checkPermissions(ctx context.Context, client kubernetes.Interface, ps []permission) error {
	var missing []string
	for _, p := range ps {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: p.group, Resource: p.resource, Subresource: p.subresource, Verb: p.verb, Name: p.name},
		}}
		res, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("asking the API server what this daemon may do: %w", err)
		}
		if !res.Status.Allowed {
			missing = append(missing, p.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the daemon's service account may not:\n  %s\ngrant them (the Helm chart's ClusterRole does)", strings.Join(missing, "\n  "))
	}
	return nil
}
