package chart

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
)

// The admission policies of the chart, evaluated as the API server
// evaluates them (k8s.io/apiserver's compiler and validator), for what the
// bed's API server cannot show: rules a request never reaches there,
// because the API server refuses it first (a ResourceSlice's driver and
// node, and a claim's allocation, are immutable once set).

const (
	fastpathd = "system:serviceaccount:" + namespace + ":fastpath"
	ownNode   = "node-a"
	otherNode = "node-b"
)

var (
	slicesResource = schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}
	claimsResource = schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}
	podsResource   = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
)

// admissionPolicies compiles the ValidatingAdmissionPolicies the chart
// renders with args, by name.
func admissionPolicies(t *testing.T, args ...string) map[string]validating.Validator {
	t.Helper()
	out := map[string]validating.Validator{}
	for _, o := range render(t, args...) {
		p, ok := o.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		if !ok {
			continue
		}
		compiler, err := plugincel.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
		if err != nil {
			t.Fatal(err)
		}
		vars := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
		var named []plugincel.NamedExpressionAccessor
		for _, v := range p.Spec.Variables {
			named = append(named, &validating.Variable{Name: v.Name, Expression: v.Expression})
		}
		compiler.CompileAndStoreVariables(named, vars, environment.StoredExpressions)
		var match []plugincel.ExpressionAccessor
		for i := range p.Spec.MatchConditions {
			match = append(match, (*matchconditions.MatchCondition)(&p.Spec.MatchConditions[i]))
		}
		var validations, messages []plugincel.ExpressionAccessor
		for _, v := range p.Spec.Validations {
			validations = append(validations, &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason})
			messages = append(messages, &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression})
		}
		out[p.Name] = validating.NewValidator(
			compiler.CompileCondition(validations, vars, environment.StoredExpressions),
			matchconditions.NewMatcher(compiler.CompileCondition(match, vars, environment.StoredExpressions), p.Spec.FailurePolicy, "policy", "validate", p.Name),
			compiler.CompileCondition(nil, vars, environment.StoredExpressions),
			compiler.CompileCondition(messages, plugincel.OptionalVariableDeclarations{}, environment.StoredExpressions),
			p.Spec.FailurePolicy, nil)
	}
	return out
}

// admissionRequest is a write of a user (fastpathd's service account by
// default) with a token bound to node ("" for none).
type admissionRequest struct {
	op          admission.Operation
	resource    schema.GroupVersionResource
	subresource string
	kind        string
	namespace   string
	name        string
	user        string
	node        string
	obj, old    runtime.Object
}

// decide is what validator decides of r: "" if it admits it, else its
// message. An evaluation error fails the test: a rule must decide.
func decide(t *testing.T, v validating.Validator, r admissionRequest) string {
	t.Helper()
	if err := v.CompileError(); err != nil {
		t.Fatalf("the policy does not compile: %v", err)
	}
	if r.user == "" {
		r.user = fastpathd
	}
	info := &user.DefaultInfo{Name: r.user, Extra: map[string][]string{}}
	if r.node != "" {
		info.Extra["authentication.kubernetes.io/node-name"] = []string{r.node}
	}
	gvk := r.resource.GroupVersion().WithKind(r.kind)
	attr := admission.NewAttributesRecord(r.obj, r.old, gvk, r.namespace, r.name, r.resource, r.subresource, r.op, nil, false, info)
	versioned := &admission.VersionedAttributes{Attributes: attr, VersionedKind: gvk,
		VersionedObject: admission.NewLazyObject(r.obj), VersionedOldObject: admission.NewLazyObject(r.old)}
	res := v.Validate(context.Background(), r.resource, versioned, nil, nil, celconfig.RuntimeCELCostBudget, nil)
	for _, d := range res.Decisions {
		switch d.Evaluation {
		case validating.EvalError:
			t.Fatalf("the policy fails to evaluate: %s", d.Message)
		case validating.EvalDeny:
			return d.Message
		}
	}
	return ""
}

// wantDecision checks that r is admitted (want "") or denied with a
// message containing want.
func wantDecision(t *testing.T, what string, v validating.Validator, r admissionRequest, want string) {
	t.Helper()
	got := decide(t, v, r)
	switch {
	case want == "" && got != "":
		t.Errorf("%s: denied: %s", what, got)
	case want != "" && got == "":
		t.Errorf("%s: admitted, want denied saying %q", what, want)
	case want != "" && !strings.Contains(got, want):
		t.Errorf("%s: denied saying %q, want %q", what, got, want)
	}
}

func slice(name, driver, node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}}
}

// TestOwnNodePolicySlices: fastpathd writes the ResourceSlices of its own
// node and its own drivers alone, as they are and as they would be.
func TestOwnNodePolicySlices(t *testing.T) {
	for name, args := range map[string][]string{"defaults": nil, "CNI driver": {"--set", "cni.enabled=true"}} {
		t.Run(name, func(t *testing.T) {
			v := admissionPolicies(t, args...)["fastpath-own-node"]
			if v == nil {
				t.Fatal("no policy fastpath-own-node")
			}
			cni := "fastpathd may write only the ResourceSlices of its drivers (fastpath.dev): ResourceSlice s is of driver cni.dra.networking.x-k8s.io"
			if name == "CNI driver" {
				cni = ""
			}
			req := func(op admission.Operation, obj, old *resourceapi.ResourceSlice) admissionRequest {
				r := admissionRequest{op: op, resource: slicesResource, kind: "ResourceSlice", name: "s", node: ownNode}
				if obj != nil {
					r.obj = obj
				}
				if old != nil {
					r.old = old
				}
				return r
			}
			own, otherDriver := slice("s", "fastpath.dev", ownNode), slice("s", "gpu.example.com", ownNode)
			for what, tc := range map[string]struct {
				r    admissionRequest
				want string
			}{
				"create":                                {req(admission.Create, own, nil), ""},
				"update":                                {req(admission.Update, own, own), ""},
				"delete":                                {req(admission.Delete, nil, own), ""},
				"create of the CNI driver's":            {req(admission.Create, slice("s", "cni.dra.networking.x-k8s.io", ownNode), nil), cni},
				"create of another driver's":            {req(admission.Create, otherDriver, nil), "ResourceSlice s is of driver gpu.example.com"},
				"update of another driver's":            {req(admission.Update, otherDriver, otherDriver), "ResourceSlice s is of driver gpu.example.com"},
				"update taking another driver's":        {req(admission.Update, own, otherDriver), "ResourceSlice s is of driver gpu.example.com"},
				"update giving it to another driver":    {req(admission.Update, otherDriver, own), "ResourceSlice s is of driver gpu.example.com"},
				"delete of another driver's":            {req(admission.Delete, nil, otherDriver), "ResourceSlice s is of driver gpu.example.com"},
				"create on another node":                {req(admission.Create, slice("s", "fastpath.dev", otherNode), nil), "fastpathd of node node-a may not write ResourceSlice s of node node-b: only its own node's"},
				"update taking another node's":          {req(admission.Update, own, slice("s", "fastpath.dev", otherNode)), "may not write ResourceSlice s of node node-b"},
				"update giving it to another node":      {req(admission.Update, slice("s", "fastpath.dev", otherNode), own), "may not write ResourceSlice s of node node-b"},
				"delete of another node's":              {req(admission.Delete, nil, slice("s", "fastpath.dev", otherNode)), "may not write ResourceSlice s of node node-b"},
				"a slice of no node":                    {req(admission.Create, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: resourceapi.ResourceSliceSpec{Driver: "fastpath.dev", AllNodes: new(true)}}, nil), "may not write ResourceSlice s of no node"},
				"a token bound to no node":              {admissionRequest{op: admission.Create, resource: slicesResource, kind: "ResourceSlice", name: "s", obj: own}, "this token names none"},
				"another user, whom the policy ignores": {admissionRequest{op: admission.Create, resource: slicesResource, kind: "ResourceSlice", name: "s", obj: otherDriver, user: "system:serviceaccount:kube-system:gpu"}, ""},
			} {
				wantDecision(t, what, v, tc.r, tc.want)
			}
		})
	}
}

func claimOn(nodes ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c"}}
	if len(nodes) > 0 {
		c.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "nic", Driver: "fastpath.dev", Pool: nodes[0], Device: "netdev-eth1"}}},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
				Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: nodes}}}}},
		}
	}
	return c
}

// TestOwnNodePolicyClaims: fastpathd writes the status of claims allocated
// on its own node alone, in the claim as it is and as it would be, and
// never their allocation.
func TestOwnNodePolicyClaims(t *testing.T) {
	v := admissionPolicies(t)["fastpath-own-node"]
	status := func(obj, old *resourceapi.ResourceClaim) admissionRequest {
		return admissionRequest{op: admission.Update, resource: claimsResource, subresource: "status", kind: "ResourceClaim",
			namespace: "default", name: "c", node: ownNode, obj: obj, old: old}
	}
	ready := claimOn(ownNode)
	ready.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: "fastpath.dev", Pool: ownNode, Device: "netdev-eth1",
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "NetworkInterfaceReady"}}}}
	otherDevice := claimOn(ownNode)
	otherDevice.Status.Allocation.Devices.Results[0].Device = "netdev-eth2"
	noStatus := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c"}}
	selected := claimOn(ownNode)
	selected.Status.Allocation.NodeSelector.NodeSelectorTerms[0].MatchExpressions = []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpExists}}
	const notAllocated = "fastpathd of node node-a may not write the status of ResourceClaim default/c of no node (not allocated on one node): only its own node's"
	for what, tc := range map[string]struct {
		r    admissionRequest
		want string
	}{
		"the device status of a claim of its node":  {status(ready, claimOn(ownNode)), ""},
		"the status of another node's claim":        {status(claimOn(otherNode), claimOn(otherNode)), "may not write the status of ResourceClaim default/c of node node-b"},
		"allocating an unallocated claim":           {status(claimOn(ownNode), claimOn()), notAllocated},
		"allocating a claim with no status":         {status(claimOn(ownNode), noStatus), notAllocated},
		"moving another node's claim to its node":   {status(claimOn(ownNode), claimOn(otherNode)), "may not write the status of ResourceClaim default/c of node node-b"},
		"moving a claim of its node to another":     {status(claimOn(otherNode), claimOn(ownNode)), "may not write the status of ResourceClaim default/c of node node-b"},
		"deallocating a claim of its node":          {status(claimOn(), claimOn(ownNode)), notAllocated},
		"changing the allocation on its node":       {status(otherDevice, claimOn(ownNode)), "fastpathd may not add or change status.allocation of ResourceClaim default/c: the allocation is the scheduler's"},
		"a claim of nodes more than its own":        {status(claimOn(ownNode, otherNode), claimOn(ownNode, otherNode)), notAllocated},
		"a claim of its node and a node expression": {status(selected, selected), notAllocated},
	} {
		wantDecision(t, what, v, tc.r, tc.want)
	}
}

// TestPodNetworkStatusPolicy: with npwg, fastpathd changes the
// network-status annotations of its own node's pods, and nothing else of
// any pod's metadata or spec.
func TestPodNetworkStatusPolicy(t *testing.T) {
	v := admissionPolicies(t, "--set", "npwg.enabled=true")["fastpath-pod-network-status"]
	if v == nil {
		t.Fatal("no policy fastpath-pod-network-status")
	}
	base := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", GenerateName: "p-", UID: "u1", ResourceVersion: "5", Generation: 1,
			CreationTimestamp: metav1.Now(), Labels: map[string]string{"app": "a"},
			Annotations:     map[string]string{"k8s.v1.cni.cncf.io/networks": "net-a"},
			Finalizers:      []string{"example.com/keep"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "u2"}}},
		Spec: corev1.PodSpec{NodeName: ownNode, Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	changed := func(change func(p *corev1.Pod)) admissionRequest {
		p := base.DeepCopy()
		change(p)
		return admissionRequest{op: admission.Update, resource: podsResource, kind: "Pod", namespace: "default", name: "p", node: ownNode, obj: p, old: base}
	}
	const onlyStatus = "fastpathd may change only the network-status annotations (k8s.v1.cni.cncf.io/network-status, network.fastpath.dev/network-status) of pod default/p"
	deleting := base.DeepCopy()
	deleting.DeletionTimestamp, deleting.DeletionGracePeriodSeconds = new(metav1.Now()), new(int64(30))
	for what, tc := range map[string]struct {
		r    admissionRequest
		want string
	}{
		"network-status": {changed(func(p *corev1.Pod) {
			p.Annotations["k8s.v1.cni.cncf.io/network-status"] = "[]"
			p.Annotations["network.fastpath.dev/network-status"] = "[]"
			p.ResourceVersion, p.ManagedFields = "6", []metav1.ManagedFieldsEntry{{Manager: "fastpathd"}}
		}), ""},
		"network-status of a pod being deleted": {admissionRequest{op: admission.Update, resource: podsResource, kind: "Pod", namespace: "default", name: "p",
			node: ownNode, obj: func() *corev1.Pod {
				p := deleting.DeepCopy()
				p.Annotations["k8s.v1.cni.cncf.io/network-status"] = "[]"
				return p
			}(), old: deleting}, ""},
		"another node's pod":  {changed(func(p *corev1.Pod) { p.Spec.NodeName = otherNode }), "may not write pod default/p of node node-b"},
		"a finalizer added":   {changed(func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, "example.com/held") }), onlyStatus},
		"a finalizer removed": {changed(func(p *corev1.Pod) { p.Finalizers = nil }), onlyStatus},
		"an owner added": {changed(func(p *corev1.Pod) {
			p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "n", UID: "u3"})
		}), onlyStatus},
		"an owner removed":          {changed(func(p *corev1.Pod) { p.OwnerReferences = nil }), onlyStatus},
		"a label":                   {changed(func(p *corev1.Pod) { p.Labels["app"] = "b" }), onlyStatus},
		"another annotation":        {changed(func(p *corev1.Pod) { p.Annotations["k8s.v1.cni.cncf.io/networks"] = "net-b" }), onlyStatus},
		"an annotation removed":     {changed(func(p *corev1.Pod) { delete(p.Annotations, "k8s.v1.cni.cncf.io/networks") }), onlyStatus},
		"generateName":              {changed(func(p *corev1.Pod) { p.GenerateName = "q-" }), onlyStatus},
		"the deletion grace period": {changed(func(p *corev1.Pod) { p.DeletionGracePeriodSeconds = new(int64(0)) }), onlyStatus},
		"the spec":                  {changed(func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = new(int64(5)) }), onlyStatus},
	} {
		wantDecision(t, what, v, tc.r, tc.want)
	}
}

var nodesResource = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// TestPodNetworkNodeLabelsPolicy: with podNetworks, fastpathd's service
// account, with a token bound to a node, changes the labels of the
// PodNetworks the node attaches on that Node (to "true", or removed), and
// nothing else of any Node.
func TestPodNetworkNodeLabelsPolicy(t *testing.T) {
	v := admissionPolicies(t, "--set", "npwg.enabled=true", "--set", "podNetworks.enabled=true")["fastpath-podnetwork-node-labels"]
	if v == nil {
		t.Fatal("no policy fastpath-podnetwork-node-labels")
	}
	if admissionPolicies(t, "--set", "npwg.enabled=true")["fastpath-podnetwork-node-labels"] != nil {
		t.Error("the policy is rendered without podNetworks.enabled")
	}
	const prefix = "podnetwork.network.fastpath.dev/"
	nodeNamed := func(name string) *corev1.Node {
		return &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: "u1", ResourceVersion: "5", CreationTimestamp: metav1.Now(),
				Labels:      map[string]string{"kubernetes.io/hostname": name, prefix + "old": "true"},
				Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"}},
			Spec: corev1.NodeSpec{PodCIDR: "10.244.0.0/24", Taints: []corev1.Taint{{Key: "example.com/dedicated", Value: "net", Effect: corev1.TaintEffectNoSchedule}}}}
	}
	changedOn := func(name, node string, change func(n *corev1.Node)) admissionRequest {
		old := nodeNamed(name)
		n := old.DeepCopy()
		n.ResourceVersion, n.ManagedFields = "6", []metav1.ManagedFieldsEntry{{Manager: "fastpathd-podnetworks", Operation: metav1.ManagedFieldsOperationApply}}
		change(n)
		return admissionRequest{op: admission.Update, resource: nodesResource, kind: "Node", name: name, node: node, obj: n, old: old}
	}
	changed := func(change func(n *corev1.Node)) admissionRequest { return changedOn(ownNode, ownNode, change) }
	const onlyLabels = "fastpathd may change only the labels podnetwork.network.fastpath.dev/* of Node node-a: not its spec (taints included), other labels, annotations"
	for what, tc := range map[string]struct {
		r    admissionRequest
		want string
	}{
		"a PodNetwork's label added":   {changed(func(n *corev1.Node) { n.Labels[prefix+"blue"] = "true" }), ""},
		"a PodNetwork's label removed": {changed(func(n *corev1.Node) { delete(n.Labels, prefix+"old") }), ""},
		"all of them removed":          {changed(func(n *corev1.Node) { n.Labels = map[string]string{"kubernetes.io/hostname": ownNode} }), ""},
		"a PodNetwork's label not true": {changed(func(n *corev1.Node) { n.Labels[prefix+"blue"] = "false" }),
			`fastpathd may set the labels podnetwork.network.fastpath.dev/* of Node node-a only to "true"`},
		"another node's label": {changedOn(otherNode, ownNode, func(n *corev1.Node) { n.Labels[prefix+"blue"] = "true" }),
			"fastpathd of node node-a may not write Node node-b: only its own Node's labels"},
		"a token bound to no node": {changedOn(ownNode, "", func(n *corev1.Node) { n.Labels[prefix+"blue"] = "true" }),
			"fastpathd may write Node node-a only with a service account token bound to a node"},
		"another label added":                {changed(func(n *corev1.Node) { n.Labels["example.com/role"] = "net" }), onlyLabels},
		"another label changed":              {changed(func(n *corev1.Node) { n.Labels["kubernetes.io/hostname"] = "x" }), onlyLabels},
		"another label removed":              {changed(func(n *corev1.Node) { delete(n.Labels, "kubernetes.io/hostname") }), onlyLabels},
		"a label of the prefix's look-alike": {changed(func(n *corev1.Node) { n.Labels["podnetwork.network.fastpath.dev.evil/x"] = "true" }), onlyLabels},
		"an annotation":                      {changed(func(n *corev1.Node) { n.Annotations["example.com/a"] = "b" }), onlyLabels},
		"a taint added": {changed(func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/evict", Effect: corev1.TaintEffectNoExecute})
		}), onlyLabels},
		"a taint removed": {changed(func(n *corev1.Node) { n.Spec.Taints = nil }), onlyLabels},
		"unschedulable":   {changed(func(n *corev1.Node) { n.Spec.Unschedulable = true }), onlyLabels},
		"a finalizer":     {changed(func(n *corev1.Node) { n.Finalizers = []string{"example.com/held"} }), onlyLabels},
		"an owner reference": {changed(func(n *corev1.Node) {
			n.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: otherNode, UID: "u2"}}
		}), onlyLabels},
		"the admin's taint": {func() admissionRequest {
			r := changed(func(n *corev1.Node) { n.Spec.Taints = nil })
			r.user = "kubernetes-admin"
			return r
		}(), ""},
	} {
		wantDecision(t, what, v, tc.r, tc.want)
	}
}

var ipamClaimsResource = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1alpha1", Resource: "ipamclaims"}

// ipamClaimObject is an IPAMClaim as the API server has it: held by the
// pod owner ("" for none), with the condition fastpath.dev/HeldOnNode
// naming node (status "True" or "False"; none when node is "").
func ipamClaimObject(owner, node, status string, ips ...string) *unstructured.Unstructured {
	st := map[string]any{"ips": toAny(ips), "conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Allocated",
		"message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}}}
	if owner != "" {
		st["ownerPod"] = map[string]any{"name": owner}
	}
	if node != "" {
		st["conditions"] = append(st["conditions"].([]any), map[string]any{"type": "fastpath.dev/HeldOnNode", "status": status, "reason": "PodOnNode",
			"message": node, "lastTransitionTime": "2026-01-01T00:00:00Z"})
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "k8s.cni.cncf.io/v1alpha1", "kind": "IPAMClaim",
		"metadata": map[string]any{"namespace": "tenant", "name": "vm-a", "uid": "u1", "resourceVersion": "5"},
		"spec":     map[string]any{"network": "tenant/pooled", "interface": "net1"},
		"status":   st}}
}

func toAny(l []string) []any {
	out := make([]any, 0, len(l))
	for _, s := range l {
		out = append(out, s)
	}
	return out
}

// TestIPAMClaimStatusPolicy: with npwg.ipamClaims, fastpathd's service
// account, with a token bound to a node, writes the status of an IPAMClaim
// no other node holds, naming its own node as the holder (or letting go
// of what it holds); its addresses once; no spec, label or other
// writer's condition.
func TestIPAMClaimStatusPolicy(t *testing.T) {
	v := admissionPolicies(t, "--set", "npwg.enabled=true", "--set", "npwg.ipamClaims.enabled=true")["fastpath-ipamclaim-status"]
	if v == nil {
		t.Fatal("no policy fastpath-ipamclaim-status")
	}
	write := func(node string, old, obj *unstructured.Unstructured) admissionRequest {
		return admissionRequest{op: admission.Update, resource: ipamClaimsResource, subresource: "status", kind: "IPAMClaim", namespace: "tenant", name: "vm-a",
			node: node, obj: obj, old: old}
	}
	const (
		heldElsewhere = "fastpathd of node node-a may not write IPAMClaim tenant/vm-a, which node node-b holds (status condition fastpath.dev/HeldOnNode)"
		namesItsNode  = "fastpathd of node node-a may write the status of IPAMClaim tenant/vm-a only naming its node in the condition fastpath.dev/HeldOnNode"
	)
	withOther := ipamClaimObject("p2", ownNode, "True", "10.0.0.5/24")
	withOther.Object["status"].(map[string]any)["conditions"].([]any)[0].(map[string]any)["status"] = "False"
	for what, tc := range map[string]struct {
		r    admissionRequest
		want string
	}{
		"a new IPAMClaim taken":             {write(ownNode, ipamClaimObject("", "", ""), ipamClaimObject("p1", ownNode, "True", "10.0.0.5/24")), ""},
		"one it holds, another pod of it":   {write(ownNode, ipamClaimObject("p1", ownNode, "True", "10.0.0.5/24"), ipamClaimObject("p2", ownNode, "True", "10.0.0.5/24")), ""},
		"one another node let go":           {write(ownNode, ipamClaimObject("p1", otherNode, "False", "10.0.0.5/24"), ipamClaimObject("p2", ownNode, "True", "10.0.0.5/24")), ""},
		"one it holds, let go":              {write(ownNode, ipamClaimObject("p1", ownNode, "True", "10.0.0.5/24"), ipamClaimObject("p1", ownNode, "False", "10.0.0.5/24")), ""},
		"one another node holds":            {write(ownNode, ipamClaimObject("p1", otherNode, "True", "10.0.0.5/24"), ipamClaimObject("p2", ownNode, "True", "10.0.0.5/24")), heldElsewhere},
		"one another node holds, its owner": {write(ownNode, ipamClaimObject("p1", otherNode, "True"), ipamClaimObject("p2", otherNode, "True", "10.0.0.9/24")), heldElsewhere},
		"another node's hold let go":        {write(ownNode, ipamClaimObject("p1", otherNode, "True"), ipamClaimObject("p1", otherNode, "False")), heldElsewhere},
		"naming no node":                    {write(ownNode, ipamClaimObject("", "", ""), ipamClaimObject("p1", "", "", "10.0.0.5/24")), namesItsNode},
		"naming another node":               {write(ownNode, ipamClaimObject("", "", ""), ipamClaimObject("p1", otherNode, "True", "10.0.0.5/24")), namesItsNode},
		"letting go of what it does not hold": {write(ownNode, ipamClaimObject("p1", otherNode, "False", "10.0.0.5/24"), ipamClaimObject("p1", ownNode, "False", "10.0.0.5/24")),
			namesItsNode},
		"letting go, another owner": {write(ownNode, ipamClaimObject("p1", ownNode, "True", "10.0.0.5/24"), ipamClaimObject("p9", ownNode, "False", "10.0.0.5/24")), namesItsNode},
		"another writer's condition": {write(ownNode, ipamClaimObject("p1", ownNode, "True", "10.0.0.5/24"), withOther),
			"fastpathd may not change the conditions of IPAMClaim tenant/vm-a but fastpath.dev/HeldOnNode"},
		"the addresses changed": {write(ownNode, ipamClaimObject("p1", ownNode, "True", "10.0.0.5/24"), ipamClaimObject("p1", ownNode, "True", "10.0.0.6/24")),
			"fastpathd may not change the addresses of IPAMClaim tenant/vm-a once set"},
		"a token bound to no node": {write("", ipamClaimObject("", "", ""), ipamClaimObject("p1", ownNode, "True", "10.0.0.5/24")),
			"fastpathd may write IPAMClaim tenant/vm-a only with a service account token bound to a node"},
		"the IPAMClaim, not its status": {func() admissionRequest {
			r := write(ownNode, ipamClaimObject("p1", ownNode, "True"), ipamClaimObject("p1", ownNode, "True"))
			r.subresource = ""
			return r
		}(), "fastpathd may write only the status of IPAMClaim tenant/vm-a"},
		"the admin's": {func() admissionRequest {
			r := write("", ipamClaimObject("p1", otherNode, "True", "10.0.0.5/24"), ipamClaimObject("", "", ""))
			r.user = "kubernetes-admin"
			return r
		}(), ""},
	} {
		wantDecision(t, what, v, tc.r, tc.want)
	}
}

// TestIPAMClaimController: with npwg.ipamClaims, the controller runs (the
// CNI driver off) and lets go of IPAMClaims whose holding node or pod is
// gone: --ipamclaims, a watch of IPAMClaims and the update of their
// status, a get of nodes and pods; without, none of it.
func TestIPAMClaimController(t *testing.T) {
	var role *rbacv1.ClusterRole
	var args []string
	for _, o := range render(t, "--set", "cni.enabled=false", "--set", "npwg.enabled=true", "--set", "npwg.ipamClaims.enabled=true") {
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			if o.Name == "fastpath-controller" {
				role = o
			}
		case *appsv1.Deployment:
			args = o.Spec.Template.Spec.Containers[0].Args
		}
	}
	if role == nil || !slices.Contains(args, "--ipamclaims") {
		t.Fatalf("the controller does not run with --ipamclaims: role %v, args %q", role, args)
	}
	for _, want := range []rbacv1.PolicyRule{
		{APIGroups: []string{"k8s.cni.cncf.io"}, Resources: []string{"ipamclaims"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"k8s.cni.cncf.io"}, Resources: []string{"ipamclaims/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get"}},
	} {
		if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return reflect.DeepEqual(r, want) }) {
			t.Errorf("the controller's role lacks %+v: %+v", want, role.Rules)
		}
	}
	for _, o := range render(t, "--set", "npwg.enabled=true") {
		if d, ok := o.(*appsv1.Deployment); ok && slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--ipamclaims") {
			t.Errorf("without npwg.ipamClaims the controller runs with --ipamclaims: %q", d.Spec.Template.Spec.Containers[0].Args)
		}
	}
}

// TestNodeConditionPolicy: fastpathd's service account, with a token
// bound to a node, writes the condition FastpathFeaturesOff of its own
// Node's status, and nothing else of any Node's status.
func TestNodeConditionPolicy(t *testing.T) {
	v := admissionPolicies(t)["fastpath-node-condition"]
	if v == nil {
		t.Fatal("no policy fastpath-node-condition")
	}
	const condition = corev1.NodeConditionType("FastpathFeaturesOff")
	nodeNamed := func(name string) *corev1.Node {
		return &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: "u1", ResourceVersion: "5"},
			Status: corev1.NodeStatus{
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"},
					{Type: condition, Status: corev1.ConditionFalse, Reason: "AllFeaturesServed"}},
				Capacity:  corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
				Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
				NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"}}}
	}
	changedOn := func(name, node string, change func(n *corev1.Node)) admissionRequest {
		old := nodeNamed(name)
		n := old.DeepCopy()
		n.ResourceVersion = "6"
		change(n)
		return admissionRequest{op: admission.Update, resource: nodesResource, subresource: "status", kind: "Node", name: name, node: node, obj: n, old: old}
	}
	changed := func(change func(n *corev1.Node)) admissionRequest { return changedOn(ownNode, ownNode, change) }
	ours := func(status corev1.ConditionStatus) func(n *corev1.Node) {
		return func(n *corev1.Node) {
			n.Status.Conditions[1] = corev1.NodeCondition{Type: condition, Status: status, Reason: "FeaturesOff", Message: "taints (cluster): ..."}
		}
	}
	const onlyOurs = "fastpathd may change only the condition FastpathFeaturesOff of Node node-a's status"
	for what, tc := range map[string]struct {
		r    admissionRequest
		want string
	}{
		"its condition changed": {changed(ours(corev1.ConditionTrue)), ""},
		"its condition added": {changedOn(ownNode, ownNode, func(n *corev1.Node) {
			n.Status.Conditions = n.Status.Conditions[:1]
		}), ""},
		"another node's condition": {changedOn(otherNode, ownNode, ours(corev1.ConditionTrue)),
			"fastpathd of node node-a may not write Node node-b's status: only its own Node's condition FastpathFeaturesOff"},
		"a token bound to no node": {changedOn(ownNode, "", ours(corev1.ConditionTrue)),
			"fastpathd may write Node node-a's status only with a service account token bound to a node"},
		"Ready changed": {changed(func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }), onlyOurs},
		"a condition added": {changed(func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: "NetworkUnavailable", Status: corev1.ConditionTrue})
		}), onlyOurs},
		"Ready removed":   {changed(func(n *corev1.Node) { n.Status.Conditions = n.Status.Conditions[1:] }), onlyOurs},
		"the capacity":    {changed(func(n *corev1.Node) { n.Status.Capacity["example.com/vf"] = resource.MustParse("64") }), onlyOurs},
		"an address":      {changed(func(n *corev1.Node) { n.Status.Addresses[0].Address = "10.0.0.2" }), onlyOurs},
		"the node's info": {changed(func(n *corev1.Node) { n.Status.NodeInfo.KubeletVersion = "v1.99.0" }), onlyOurs},
		"the kubelet's write": {func() admissionRequest {
			r := changed(func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse })
			r.user = "system:node:node-a"
			return r
		}(), ""},
	} {
		wantDecision(t, what, v, tc.r, tc.want)
	}
}
