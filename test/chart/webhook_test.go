package chart

import (
	"context"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

// webhookConfiguration is the ValidatingWebhookConfiguration the chart
// renders with args, or nil.
func webhookConfiguration(t *testing.T, args ...string) (*admissionregistrationv1.ValidatingWebhookConfiguration, []runtime.Object) {
	t.Helper()
	objs := render(t, args...)
	for _, o := range objs {
		if c, ok := o.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
			return c, objs
		}
	}
	return nil, objs
}

// matches says whether the webhook's match conditions send it obj, as
// the API server's matcher evaluates them; an evaluation error fails the
// test.
func matches(t *testing.T, w admissionregistrationv1.ValidatingWebhook, resource schema.GroupVersionResource, kind string, obj runtime.Object) bool {
	t.Helper()
	return matchesOp(t, w, resource, kind, admission.Create, obj, nil)
}

// matchesOp is matches for an operation, with the old object of an update.
func matchesOp(t *testing.T, w admissionregistrationv1.ValidatingWebhook, resource schema.GroupVersionResource, kind string, op admission.Operation, obj, old runtime.Object) bool {
	t.Helper()
	compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		t.Fatal(err)
	}
	var conds []plugincel.ExpressionAccessor
	for i := range w.MatchConditions {
		conds = append(conds, (*matchconditions.MatchCondition)(&w.MatchConditions[i]))
	}
	vars := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
	m := matchconditions.NewMatcher(compiler.CompileCondition(conds, vars, environment.StoredExpressions), w.FailurePolicy, "webhook", "validating", w.Name)
	gvk := resource.GroupVersion().WithKind(kind)
	attr := admission.NewAttributesRecord(obj, old, gvk, "app", "x", resource, "", op, nil, false, &user.DefaultInfo{Name: "alice"})
	versioned := &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(obj)}
	if old != nil {
		versioned.VersionedOldObject = admission.NewLazyObject(old)
	}
	res := m.Match(context.Background(), versioned, nil, nil)
	if res.Error != nil {
		t.Fatalf("webhook %s: the match conditions fail to evaluate: %v", w.Name, res.Error)
	}
	return res.Matches
}

// TestWebhookConfiguration: off by default; on, the claims of fastpath's
// drivers and its own kinds fail closed, pods fail open, everything
// within 2 s, and the match conditions send the webhook only what it
// judges.
func TestWebhookConfiguration(t *testing.T) {
	if c, _ := webhookConfiguration(t); c != nil {
		t.Fatalf("the webhook is on by default: %s", c.Name)
	}
	c, objs := webhookConfiguration(t, "--set", "webhook.enabled=true", "--set", "npwg.enabled=true", "--set", "podNetworks.enabled=true")
	if c == nil {
		t.Fatal("webhook.enabled renders no ValidatingWebhookConfiguration")
	}
	byName := map[string]admissionregistrationv1.ValidatingWebhook{}
	for _, w := range c.Webhooks {
		byName[w.Name] = w
		if w.TimeoutSeconds == nil || *w.TimeoutSeconds > 2 {
			t.Errorf("webhook %s: timeoutSeconds %v, want at most 2", w.Name, w.TimeoutSeconds)
		}
		if w.ClientConfig.Service == nil || w.ClientConfig.Service.Path == nil || *w.ClientConfig.Service.Path != "/validate" {
			t.Errorf("webhook %s: client config %+v, want the Service's /validate", w.Name, w.ClientConfig)
		}
	}
	policy := map[string]admissionregistrationv1.FailurePolicyType{
		"cluster.webhook.fastpath.dev": admissionregistrationv1.Fail, "namespaced.webhook.fastpath.dev": admissionregistrationv1.Fail,
		"pods.webhook.fastpath.dev": admissionregistrationv1.Ignore,
	}
	for name, want := range policy {
		if w, ok := byName[name]; !ok || w.FailurePolicy == nil || *w.FailurePolicy != want {
			t.Errorf("webhook %s: failure policy %v, want %s", name, w.FailurePolicy, want)
		}
	}
	claims := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}
	templates := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaimtemplates"}
	classes := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "deviceclasses"}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nads := schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}
	claim := func(class, driver string) resourceapi.ResourceClaimSpec {
		s := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}}}}
		if driver != "" {
			s.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(`{}`)}}}}}
		}
		return s
	}
	rc := func(s resourceapi.ResourceClaimSpec) runtime.Object {
		return &resourceapi.ResourceClaim{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"}, ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "app"}, Spec: s}
	}
	tmpl := func(s resourceapi.ResourceClaimSpec) runtime.Object {
		return &resourceapi.ResourceClaimTemplate{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"}, ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "app"},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: s}}
	}
	alternatives := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "r",
		FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "gpu.example.com"}, {Name: "b", DeviceClassName: "vfio.fastpath.dev"}}}}}}
	class := func(driver string) runtime.Object {
		c := &resourceapi.DeviceClass{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"}, ObjectMeta: metav1.ObjectMeta{Name: "x"}}
		if driver != "" {
			c.Spec.Config = []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(`{}`)}}}}}
		}
		return c
	}
	pod := func(annotations map[string]string) runtime.Object {
		return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "app", Annotations: annotations}}
	}
	for _, tc := range []struct {
		what, webhook string
		resource      schema.GroupVersionResource
		kind          string
		obj           runtime.Object
		want          bool
	}{
		{"a claim of a chart class", "namespaced.webhook.fastpath.dev", claims, "ResourceClaim", rc(claim("netdev.fastpath.dev", "")), true},
		{"a claim with a config of the CNI driver", "namespaced.webhook.fastpath.dev", claims, "ResourceClaim", rc(claim("mine.example.com", "cni.dra.networking.x-k8s.io")), true},
		{"a claim of the CNI class", "namespaced.webhook.fastpath.dev", claims, "ResourceClaim", rc(claim("cni.networking.x-k8s.io", "")), true},
		{"a claim with a chart class among alternatives", "namespaced.webhook.fastpath.dev", claims, "ResourceClaim", rc(alternatives), true},
		{"a claim of another driver", "namespaced.webhook.fastpath.dev", claims, "ResourceClaim", rc(claim("gpu.example.com", "gpu.example.com")), false},
		{"a template of a chart class", "namespaced.webhook.fastpath.dev", templates, "ResourceClaimTemplate", tmpl(claim("afxdp.fastpath.dev", "")), true},
		{"a template of another driver", "namespaced.webhook.fastpath.dev", templates, "ResourceClaimTemplate", tmpl(claim("gpu.example.com", "")), false},
		{"a NetworkAttachmentDefinition", "namespaced.webhook.fastpath.dev", nads, "NetworkAttachmentDefinition", pod(nil), true},
		{"a class with a config of fastpath.dev", "cluster.webhook.fastpath.dev", classes, "DeviceClass", class("fastpath.dev"), true},
		{"a class without configs", "cluster.webhook.fastpath.dev", classes, "DeviceClass", class(""), false},
		{"a class with another driver's config", "cluster.webhook.fastpath.dev", classes, "DeviceClass", class("gpu.example.com"), false},
		{"a pod selecting NetworkAttachmentDefinitions", "pods.webhook.fastpath.dev", pods, "Pod", pod(map[string]string{"k8s.v1.cni.cncf.io/networks": "a"}), true},
		{"a pod naming PodNetworks", "pods.webhook.fastpath.dev", pods, "Pod", pod(map[string]string{"network.fastpath.dev/networks": "[]"}), true},
		{"a pod with other annotations", "pods.webhook.fastpath.dev", pods, "Pod", pod(map[string]string{"a": "b"}), false},
		{"a pod without annotations", "pods.webhook.fastpath.dev", pods, "Pod", pod(nil), false},
	} {
		if got := matches(t, byName[tc.webhook], tc.resource, tc.kind, tc.obj); got != tc.want {
			t.Errorf("%s: sent to %s %v, want %v", tc.what, tc.webhook, got, tc.want)
		}
	}
	// An update that leaves the spec as it is (a finalizer) is not judged;
	// one that changes it is.
	podNetwork := func(enabled bool, finalizers ...string) runtime.Object {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "network.fastpath.dev/v1alpha1", "kind": "PodNetwork",
			"metadata": map[string]any{"name": "dataplane"}, "spec": map[string]any{"enabled": enabled}}}
		u.SetFinalizers(finalizers)
		return u
	}
	podNetworks := schema.GroupVersionResource{Group: "network.fastpath.dev", Version: "v1alpha1", Resource: "podnetworks"}
	if matchesOp(t, byName["cluster.webhook.fastpath.dev"], podNetworks, "PodNetwork", admission.Update, podNetwork(true, "network.fastpath.dev/in-use"), podNetwork(true)) {
		t.Error("a PodNetwork's finalizer added: sent to the webhook, want not")
	}
	if !matchesOp(t, byName["cluster.webhook.fastpath.dev"], podNetworks, "PodNetwork", admission.Update, podNetwork(false), podNetwork(true)) {
		t.Error("a PodNetwork disabled: not sent to the webhook")
	}
	for _, r := range byName["namespaced.webhook.fastpath.dev"].Rules {
		if slices.Contains(r.Resources, "resourceclaims") && !slices.Equal(r.Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
			t.Errorf("claims judged on %v: their spec is immutable, and an update judged (a finalizer) would fail while the webhook is down", r.Operations)
		}
	}
	// The chart's own classes and approved configs are left out: they are
	// written with the configuration, before the webhook serves.
	if sel := byName["cluster.webhook.fastpath.dev"].ObjectSelector; sel == nil || len(sel.MatchExpressions) != 1 || sel.MatchExpressions[0].Key != "app.kubernetes.io/part-of" {
		t.Errorf("cluster-scoped kinds: object selector %+v, want the chart's objects left out", sel)
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			args := o.Spec.Template.Spec.Containers[0].Args
			for _, want := range []string{"--webhook-port=9443", "--webhook-cert-dir=/var/run/fastpath/webhook", "--webhook-secret=fastpath-webhook-certs",
				"--webhook-service=fastpath-webhook", "--webhook-configuration=fastpath-webhook"} {
				if !slices.Contains(args, want) {
					t.Errorf("controller args lack %q: %q", want, args)
				}
			}
			if v := o.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].Secret == nil || v[0].Secret.SecretName != "fastpath-webhook-certs" {
				t.Errorf("controller volumes %+v, want the webhook's Secret", v)
			}
		case *rbacv1.Role:
			if !slices.ContainsFunc(o.Rules, func(r rbacv1.PolicyRule) bool {
				return slices.Equal(r.Resources, []string{"secrets"}) && slices.Equal(r.Verbs, []string{"update"}) && slices.Equal(r.ResourceNames, []string{"fastpath-webhook-certs"})
			}) {
				t.Errorf("the controller's Role may not update the webhook's Secret alone: %+v", o.Rules)
			}
		case *rbacv1.ClusterRole:
			if o.Name == "fastpath-controller" && !slices.ContainsFunc(o.Rules, func(r rbacv1.PolicyRule) bool {
				return slices.Equal(r.Resources, []string{"validatingwebhookconfigurations"}) && slices.Equal(r.Verbs, []string{"update"}) && slices.Equal(r.ResourceNames, []string{"fastpath-webhook"})
			}) {
				t.Errorf("the controller's ClusterRole may not update its webhook configuration alone: %+v", o.Rules)
			}
			// The index of the cluster's claims, for their static
			// addresses on shared parents.
			if o.Name == "fastpath-controller" && !slices.ContainsFunc(o.Rules, func(r rbacv1.PolicyRule) bool {
				return slices.Equal(r.Resources, []string{"resourceclaims", "deviceclasses"}) && slices.Equal(r.Verbs, []string{"list", "watch"})
			}) {
				t.Errorf("the controller's ClusterRole may not list and watch claims and classes: %+v", o.Rules)
			}
		}
	}
	// With a URL, the API server calls it, and the certificate is for its
	// host.
	c, objs = webhookConfiguration(t, "--set", "webhook.enabled=true", "--set", "webhook.url=https://localhost:26443/validate")
	for _, w := range c.Webhooks {
		if w.ClientConfig.URL == nil || *w.ClientConfig.URL != "https://localhost:26443/validate" || w.ClientConfig.Service != nil {
			t.Errorf("webhook %s: client config %+v, want the URL alone", w.Name, w.ClientConfig)
		}
	}
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok && !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--webhook-dns-names=localhost") {
			t.Errorf("controller args lack --webhook-dns-names=localhost: %q", d.Spec.Template.Spec.Containers[0].Args)
		}
	}
	// Without npwg.enabled, Multus's NetworkAttachmentDefinitions are not
	// fastpath's to judge.
	c, _ = webhookConfiguration(t, "--set", "webhook.enabled=true")
	for _, w := range c.Webhooks {
		for _, r := range w.Rules {
			if slices.Contains(r.Resources, "network-attachment-definitions") || slices.Contains(r.Resources, "pods") {
				t.Errorf("without npwg.enabled and podNetworks.enabled, webhook %s judges %v", w.Name, r.Resources)
			}
		}
	}
}

// TestSchedulingGatesConfiguration: with the webhook and PodNetworks on,
// pods created with a list of PodNetworks are sent to the gates' mutating
// webhook, failing open within 2 s; pods it could not gate (a node named,
// the host's network) and pods listing none are not; the controller may
// lift gates and write why a pod waits, and keeps the CA bundle of the
// mutating configuration too. Off with either off.
func TestSchedulingGatesConfiguration(t *testing.T) {
	gates := func(args ...string) (*admissionregistrationv1.MutatingWebhookConfiguration, []runtime.Object) {
		t.Helper()
		objs := render(t, args...)
		for _, o := range objs {
			if c, ok := o.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
				return c, objs
			}
		}
		return nil, objs
	}
	for _, args := range [][]string{
		{"--set", "webhook.enabled=true"},
		{"--set", "podNetworks.enabled=true"},
		{"--set", "webhook.enabled=true", "--set", "podNetworks.enabled=true", "--set", "webhook.schedulingGates=false"},
	} {
		if c, _ := gates(args...); c != nil {
			t.Errorf("%v: renders %s, want no gates", args, c.Name)
		}
	}
	c, objs := gates("--set", "webhook.enabled=true", "--set", "podNetworks.enabled=true")
	if c == nil || len(c.Webhooks) != 1 {
		t.Fatalf("webhook.enabled and podNetworks.enabled: gates %+v, want one mutating webhook", c)
	}
	w := c.Webhooks[0]
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore || w.TimeoutSeconds == nil || *w.TimeoutSeconds > 2 ||
		w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
		t.Errorf("gates: failure policy %v, timeout %v, side effects %v; want Ignore, at most 2 s, None", w.FailurePolicy, w.TimeoutSeconds, w.SideEffects)
	}
	if w.ClientConfig.Service == nil || w.ClientConfig.Service.Path == nil || *w.ClientConfig.Service.Path != "/gate" {
		t.Errorf("gates: client config %+v, want the Service's /gate", w.ClientConfig)
	}
	if len(w.Rules) != 1 || !slices.Equal(w.Rules[0].Resources, []string{"pods"}) ||
		!slices.Equal(w.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
		t.Errorf("gates: rules %+v, want pods at creation alone", w.Rules)
	}
	asValidating := admissionregistrationv1.ValidatingWebhook{Name: w.Name, FailurePolicy: w.FailurePolicy, MatchConditions: w.MatchConditions}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	listing := map[string]string{"network.fastpath.dev/networks": `[{"name":"dataplane"}]`}
	pod := func(annotations map[string]string, spec corev1.PodSpec) runtime.Object {
		return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "app", Annotations: annotations}, Spec: spec}
	}
	for _, tc := range []struct {
		what string
		obj  runtime.Object
		want bool
	}{
		{"a pod listing PodNetworks", pod(listing, corev1.PodSpec{}), true},
		{"a pod naming its node", pod(listing, corev1.PodSpec{NodeName: "node-a"}), false},
		{"a pod in the host's network", pod(listing, corev1.PodSpec{HostNetwork: true}), false},
		{"a pod selecting NetworkAttachmentDefinitions alone", pod(map[string]string{"k8s.v1.cni.cncf.io/networks": "a"}, corev1.PodSpec{}), false},
		{"a pod without annotations", pod(nil, corev1.PodSpec{}), false},
	} {
		if got := matches(t, asValidating, pods, "Pod", tc.obj); got != tc.want {
			t.Errorf("%s: sent to the gates %v, want %v", tc.what, got, tc.want)
		}
	}
	var lifts, says, nodes, bundle bool
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			if args := o.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--webhook-gate-configuration="+c.Name) {
				t.Errorf("controller args %q lack --webhook-gate-configuration=%s", args, c.Name)
			}
		case *rbacv1.ClusterRole:
			for _, r := range o.Rules {
				lifts = lifts || (slices.Contains(r.Resources, "pods") && slices.Contains(r.Verbs, "patch") && slices.Contains(r.Verbs, "get") && slices.Contains(r.Verbs, "update"))
				says = says || (slices.Equal(r.Resources, []string{"pods/status"}) && slices.Contains(r.Verbs, "patch"))
				nodes = nodes || (slices.Contains(r.Resources, "nodes") && slices.Contains(r.Verbs, "watch"))
				bundle = bundle || (slices.Equal(r.Resources, []string{"mutatingwebhookconfigurations"}) && slices.Equal(r.ResourceNames, []string{c.Name}) && slices.Contains(r.Verbs, "update"))
			}
		}
	}
	if !lifts || !says || !nodes || !bundle {
		t.Errorf("controller RBAC: pods patch, get and update %v, pods/status patch %v, nodes watch %v, the gates' CA bundle %v; want all", lifts, says, nodes, bundle)
	}
}
