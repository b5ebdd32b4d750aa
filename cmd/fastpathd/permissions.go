package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// permission is one thing the daemon does with the API server.
type permission struct {
	group, resource, subresource, verb, name string
	namespace                                string // "": cluster-wide
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
	if p.namespace != "" {
		s += " in namespace " + p.namespace
	}
	return s + " (" + p.why + ")"
}

// permissions are what the daemon's service account must be allowed, as
// the chart's roles grant them. cniConfigNamespace is the CNI driver's
// --cni-config-namespace, "" without the CNI driver.
func permissions(drivers []string, cniConfigNamespace string, granularStatus bool) []permission {
	ps := []permission{
		{group: "", resource: "nodes", verb: "get", why: "checking this node at start"},
		{group: "", resource: "nodes", subresource: "status", verb: "patch", why: "the node's condition FastpathFeaturesOff"},
		{group: "resource.k8s.io", resource: "resourceclaims", verb: "get", why: "reading a claim to write its status"},
		{group: "resource.k8s.io", resource: "resourceclaims", subresource: "status", verb: "update", why: "writing claim status"},
		{group: "", resource: "events", verb: "create", why: "device health events on the node and its pods"},
		{group: "", resource: "events", verb: "patch", why: "device health events on the node and its pods"},
	}
	for _, verb := range []string{"list", "watch", "create", "update", "delete"} {
		ps = append(ps, permission{group: "resource.k8s.io", resource: "resourceslices", verb: verb, why: "publishing the node's devices"})
	}
	if granularStatus {
		for _, d := range drivers {
			ps = append(ps, permission{group: "resource.k8s.io", resource: "resourceclaims", subresource: "driver", verb: "associated-node:update", name: d,
				why: "writing the driver's entries of claim status"})
		}
	}
	if cniConfigNamespace != "" {
		// ConfigMaps of other namespaces are the operator's to open
		// (cni.configMapNamespaces): a claim of a namespace that is not
		// open is refused at Prepare, naming it.
		ps = append(ps,
			permission{group: "cni.networking.x-k8s.io", resource: "cniconfigs", verb: "get", why: "approved CNI configs that claims name with configName"},
			permission{group: "", resource: "configmaps", verb: "get", namespace: cniConfigNamespace, why: "approved CNI configs' configMapKeyRef"})
	}
	return ps
}

// bindingPermissions are what --binding-conditions needs beyond the
// rest: the claims allocated on the node are found by watching them all.
var bindingPermissions = []permission{
	{group: "resource.k8s.io", resource: "resourceclaims", verb: "list", why: "binding conditions: finding the claims allocated on this node"},
	{group: "resource.k8s.io", resource: "resourceclaims", verb: "watch", why: "binding conditions: finding the claims allocated on this node"},
}

// checkPermissions asks the API server (SelfSubjectAccessReview) whether
// the daemon may do each of its calls, and fails naming every one it may
// not, so that a wrong RBAC stops the daemon at start with a clear message
// instead of failing later, call by call.
func checkPermissions(ctx context.Context, client kubernetes.Interface, ps []permission) error {
	var missing []string
	for _, p := range ps {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: p.group, Resource: p.resource, Subresource: p.subresource, Verb: p.verb, Name: p.name,
				Namespace: p.namespace},
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
		return &missingPermissions{missing}
	}
	return nil
}

// missingPermissions are the calls the daemon may not make.
type missingPermissions struct{ calls []string }

func (m *missingPermissions) Error() string {
	return fmt.Sprintf("the daemon's service account may not:\n  %s\ngrant them (the Helm chart's roles do)", strings.Join(m.calls, "\n  "))
}

// awaitPermissions checks the permissions until they are all granted, for
// up to grace: the roles a chart installs with the DaemonSet may reach the
// API server's authorizer a moment after the daemon starts. Missing ones
// after grace, or a check the API server does not answer, are the error.
func awaitPermissions(ctx context.Context, client kubernetes.Interface, ps []permission, grace, every time.Duration) error {
	deadline := time.Now().Add(grace)
	for {
		err := checkPermissions(ctx, client, ps)
		var missing *missingPermissions
		if !errors.As(err, &missing) || time.Now().After(deadline) {
			return err
		}
		klog.FromContext(ctx).Info("Waiting for the daemon's roles", "missing", missing.calls, "until", deadline.Format(time.RFC3339))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(every):
		}
	}
}
