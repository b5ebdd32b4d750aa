package controller

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/watch"
)

var podNetworkListKinds = map[schema.GroupVersionResource]string{
	pnv1.PodNetworkResource:           "PodNetworkList",
	pnv1.PodNetworkAttachmentResource: "PodNetworkAttachmentList",
	watch.CNIConfigResource:           "CNIConfigList",
	watch.NADResource:                 "NetworkAttachmentDefinitionList",
}

// pnFixture is a PodNetworkController over a fake API server, its caches
// filled from the fake before each reconcile, as the informers would.
type pnFixture struct {
	t     *testing.T
	ctx   context.Context
	dyn   *dynamicfake.FakeDynamicClient
	pods  []*corev1.Pod
	nodes []*corev1.Node
	c     *PodNetworkController
}

func newPNFixture(t *testing.T, objs ...runtime.Object) *pnFixture {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	f := &pnFixture{t: t, ctx: ctx, dyn: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), podNetworkListKinds, objs...)}
	f.c = NewPodNetworkController(PodNetworkControllerOptions{Client: f.dyn, Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}})
	return f
}

func (f *pnFixture) sync() {
	f.t.Helper()
	f.c.networks = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	f.c.attachments = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{indexByReference: attachmentReferences})
	f.c.pods = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{indexByReference: podReferences, indexGated: gatedIndex})
	f.c.nodes = cache.NewStore(cache.MetaNamespaceKeyFunc)
	for _, n := range f.nodes {
		kept, _ := nodeLabels(n)
		if err := f.c.nodes.Add(kept); err != nil {
			f.t.Fatal(err)
		}
	}
	for gvr, idx := range map[schema.GroupVersionResource]cache.Indexer{pnv1.PodNetworkResource: f.c.networks, pnv1.PodNetworkAttachmentResource: f.c.attachments} {
		list, err := f.dyn.Resource(gvr).List(f.ctx, metav1.ListOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		for i := range list.Items {
			if err := idx.Add(&list.Items[i]); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	for _, p := range f.pods {
		kept, _ := activePod(p)
		if err := f.c.pods.Add(kept); err != nil {
			f.t.Fatal(err)
		}
	}
}

// reconcile reconciles key with caches as the API server has it.
func (f *pnFixture) reconcile(key objectKey) {
	f.t.Helper()
	f.sync()
	if _, err := f.c.reconcile(f.ctx, key); err != nil {
		f.t.Fatalf("reconcile %s: %v", key, err)
	}
}

func (f *pnFixture) get(key objectKey) *unstructured.Unstructured {
	f.t.Helper()
	var u *unstructured.Unstructured
	var err error
	if key.attachment {
		u, err = f.dyn.Resource(pnv1.PodNetworkAttachmentResource).Namespace(key.namespace).Get(f.ctx, key.name, metav1.GetOptions{})
	} else {
		u, err = f.dyn.Resource(pnv1.PodNetworkResource).Get(f.ctx, key.name, metav1.GetOptions{})
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return u
}

func (f *pnFixture) condition(key objectKey, typ string) *metav1.Condition {
	f.t.Helper()
	conds, _, _ := unstructured.NestedSlice(f.get(key).Object, "status", "conditions")
	var st pnv1.PodNetworkStatus
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"conditions": conds}, &st); err != nil {
		f.t.Fatal(err)
	}
	return meta.FindStatusCondition(st.Conditions, typ)
}

// want checks key's condition typ: status and reason, and that its message
// contains msg.
func (f *pnFixture) want(key objectKey, typ string, status metav1.ConditionStatus, reason, msg string) {
	f.t.Helper()
	c := f.condition(key, typ)
	switch {
	case status == "" && c != nil:
		f.t.Errorf("%s: %s = %+v, want none", key, typ, c)
	case status == "":
	case c == nil:
		f.t.Errorf("%s: no %s condition, want %s %s", key, typ, status, reason)
	case c.Status != status || c.Reason != reason || !strings.Contains(c.Message, msg):
		f.t.Errorf("%s: %s = %s %s %q, want %s %s containing %q", key, typ, c.Status, c.Reason, c.Message, status, reason, msg)
	}
}

func (f *pnFixture) update(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	f.t.Helper()
	var err error
	if ns := u.GetNamespace(); ns != "" {
		_, err = f.dyn.Resource(gvr).Namespace(ns).Update(f.ctx, u, metav1.UpdateOptions{})
	} else {
		_, err = f.dyn.Resource(gvr).Update(f.ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *pnFixture) create(gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
	f.t.Helper()
	var err error
	if ns := u.GetNamespace(); ns != "" {
		_, err = f.dyn.Resource(gvr).Namespace(ns).Create(f.ctx, u, metav1.CreateOptions{})
	} else {
		_, err = f.dyn.Resource(gvr).Create(f.ctx, u, metav1.CreateOptions{})
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

func podNetwork(name string, enabled *bool, refs ...pnv1.ParametersRef) *unstructured.Unstructured {
	return toUnstructured(&pnv1.PodNetwork{
		TypeMeta:   metav1.TypeMeta{APIVersion: pnv1.SchemeGroupVersion.String(), Kind: pnv1.KindPodNetwork},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       pnv1.PodNetworkSpec{Enabled: enabled, ParametersRefs: refs},
	})
}

func podNetworkAttachment(namespace, name, network string, refs ...pnv1.ParametersRef) *unstructured.Unstructured {
	return toUnstructured(&pnv1.PodNetworkAttachment{
		TypeMeta:   metav1.TypeMeta{APIVersion: pnv1.SchemeGroupVersion.String(), Kind: pnv1.KindPodNetworkAttachment},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       pnv1.PodNetworkAttachmentSpec{PodNetworkName: network, ParametersRefs: refs},
	})
}

func nad(namespace, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     map[string]any{"config": `{"cniVersion":"1.0.0","name":"x","type":"macvlan"}`},
	}}
}

func toUnstructured(obj runtime.Object) *unstructured.Unstructured {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func networksPod(namespace, name string, phase corev1.PodPhase, annotation string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Status: corev1.PodStatus{Phase: phase}}
	if annotation != "" {
		p.Annotations = map[string]string{pnv1.AnnotationNetworks: annotation}
	}
	return p
}

var (
	nadRef = func(ns, name string) pnv1.ParametersRef {
		return pnv1.ParametersRef{Group: "k8s.cni.cncf.io", Kind: "NetworkAttachmentDefinition", Name: name, Namespace: ns}
	}
	cniConfigRef = func(name string) pnv1.ParametersRef {
		return pnv1.ParametersRef{Group: v1alpha1.CNIGroup, Kind: "CNIConfig", Name: name}
	}
	no, yes = new(bool), func() *bool { b := true; return &b }()
)

// Every transition of a PodNetwork's Ready and ParamsReady.
func TestPodNetworkConditions(t *testing.T) {
	set := testApproved(t)
	refused := *set["storage-net"]
	refused.Name = "refused"
	refused.Spec.Plugins = append(refused.Spec.Plugins, v1alpha1.CNIPlugin{Type: "host-device"})
	f := newPNFixture(t, unstructuredCNIConfig(t, set["macvlan-host-local"]), unstructuredCNIConfig(t, &refused))
	key := func(name string) objectKey { return objectKey{name: name} }

	// No refs: Ready, no ParamsReady; enabled absent means true.
	f.create(pnv1.PodNetworkResource, podNetwork("plain", nil))
	f.reconcile(key("plain"))
	f.want(key("plain"), pnv1.ConditionReady, metav1.ConditionTrue, pnv1.ReasonReady, "")
	f.want(key("plain"), pnv1.ConditionParamsReady, "", "", "")

	// enabled: false, then true again.
	u := f.get(key("plain"))
	_ = unstructured.SetNestedField(u.Object, false, "spec", "enabled")
	f.update(pnv1.PodNetworkResource, u)
	f.reconcile(key("plain"))
	f.want(key("plain"), pnv1.ConditionReady, metav1.ConditionFalse, pnv1.ReasonAdministrativelyDisabled, "spec.enabled is false")
	u = f.get(key("plain"))
	_ = unstructured.SetNestedField(u.Object, true, "spec", "enabled")
	f.update(pnv1.PodNetworkResource, u)
	f.reconcile(key("plain"))
	f.want(key("plain"), pnv1.ConditionReady, metav1.ConditionTrue, pnv1.ReasonReady, "")

	// A NAD ref: missing, then created.
	f.create(pnv1.PodNetworkResource, podNetwork("nad", yes, nadRef("default", "macvlan-conf"), nadRef("default", "other")))
	f.create(watch.NADResource, nad("default", "other"))
	f.reconcile(key("nad"))
	f.want(key("nad"), pnv1.ConditionParamsReady, metav1.ConditionFalse, pnv1.ReasonParamsMissing, "NetworkAttachmentDefinition default/macvlan-conf")
	f.want(key("nad"), pnv1.ConditionReady, metav1.ConditionFalse, pnv1.ReasonParamsNotReady, "NetworkAttachmentDefinition default/macvlan-conf")
	f.create(watch.NADResource, nad("default", "macvlan-conf"))
	f.reconcile(key("nad"))
	f.want(key("nad"), pnv1.ConditionParamsReady, metav1.ConditionTrue, pnv1.ReasonParamsReady, "2 objects")
	f.want(key("nad"), pnv1.ConditionReady, metav1.ConditionTrue, pnv1.ReasonReady, "")
	// Its params gone again: not Ready again.
	if err := f.dyn.Resource(watch.NADResource).Namespace("default").Delete(f.ctx, "macvlan-conf", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.reconcile(key("nad"))
	f.want(key("nad"), pnv1.ConditionReady, metav1.ConditionFalse, pnv1.ReasonParamsNotReady, "macvlan-conf")
	// Disabled wins over params.
	u = f.get(key("nad"))
	_ = unstructured.SetNestedField(u.Object, false, "spec", "enabled")
	f.update(pnv1.PodNetworkResource, u)
	f.reconcile(key("nad"))
	f.want(key("nad"), pnv1.ConditionReady, metav1.ConditionFalse, pnv1.ReasonAdministrativelyDisabled, "")

	// The KEP's example names NADs by resource; a NAD ref without a
	// namespace on a PodNetwork cannot be read.
	f.create(pnv1.PodNetworkResource, podNetwork("by-resource", nil,
		pnv1.ParametersRef{Group: "k8s.cni.cncf.io", Kind: "network-attachment-definitions", Name: "other", Namespace: "default"}))
	f.reconcile(key("by-resource"))
	f.want(key("by-resource"), pnv1.ConditionReady, metav1.ConditionTrue, pnv1.ReasonReady, "")
	f.create(pnv1.PodNetworkResource, podNetwork("no-namespace", nil, nadRef("", "other")))
	f.reconcile(key("no-namespace"))
	f.want(key("no-namespace"), pnv1.ConditionParamsReady, metav1.ConditionFalse, pnv1.ReasonParamsInvalid, "set the ref's namespace")

	// CNIConfig refs: accepted, not accepted, missing.
	f.create(pnv1.PodNetworkResource, podNetwork("cni", nil, cniConfigRef("macvlan-host-local")))
	f.reconcile(key("cni"))
	f.want(key("cni"), pnv1.ConditionParamsReady, metav1.ConditionTrue, pnv1.ReasonParamsReady, "")
	f.want(key("cni"), pnv1.ConditionReady, metav1.ConditionTrue, pnv1.ReasonReady, "")
	f.create(pnv1.PodNetworkResource, podNetwork("cni-refused", nil, cniConfigRef("refused")))
	f.reconcile(key("cni-refused"))
	f.want(key("cni-refused"), pnv1.ConditionParamsReady, metav1.ConditionFalse, pnv1.ReasonParamsInvalid, "CNIConfig refused is not accepted (PluginNotAllowed)")
	f.want(key("cni-refused"), pnv1.ConditionReady, metav1.ConditionFalse, pnv1.ReasonParamsNotReady, "host-device")
	f.create(pnv1.PodNetworkResource, podNetwork("cni-missing", nil, cniConfigRef("nope"), nadRef("default", "other")))
	f.reconcile(key("cni-missing"))
	f.want(key("cni-missing"), pnv1.ConditionParamsReady, metav1.ConditionFalse, pnv1.ReasonParamsMissing, "CNIConfig nope")

	// A kind fastpath does not own: its owner writes ParamsReady; Ready
	// follows what it writes.
	foreign := pnv1.ParametersRef{Group: "acme.io", Kind: "Params", Name: "p"}
	f.create(pnv1.PodNetworkResource, podNetwork("foreign", nil, foreign, nadRef("default", "other")))
	f.reconcile(key("foreign"))
	f.want(key("foreign"), pnv1.ConditionParamsReady, "", "", "")
	f.want(key("foreign"), pnv1.ConditionReady, metav1.ConditionFalse, pnv1.ReasonParamsNotReady, "no ParamsReady condition yet")
	u = f.get(key("foreign"))
	_ = unstructured.SetNestedSlice(u.Object, append(u.Object["status"].(map[string]any)["conditions"].([]any),
		map[string]any{"type": "ParamsReady", "status": "True", "reason": "AcmeReady", "message": "", "lastTransitionTime": "2022-11-17T18:38:01Z"}), "status", "conditions")
	f.update(pnv1.PodNetworkResource, u)
	f.reconcile(key("foreign"))
	f.want(key("foreign"), pnv1.ConditionReady, metav1.ConditionTrue, pnv1.ReasonReady, "")
	f.want(key("foreign"), pnv1.ConditionParamsReady, metav1.ConditionTrue, "AcmeReady", "")
}

// Every transition of a PodNetworkAttachment's Ready.
func TestPodNetworkAttachmentConditions(t *testing.T) {
	f := newPNFixture(t)
	att := objectKey{attachment: true, namespace: "ns1", name: "pod1"}

	f.create(pnv1.PodNetworkAttachmentResource, podNetworkAttachment("ns1", "pod1", "dataplane"))
	f.reconcile(att)
	f.want(att, pnv1.ConditionReady, metav1.ConditionFalse, pnv1.ReasonPodNetworkNotReady, "PodNetwork dataplane does not exist")

	f.create(pnv1.PodNetworkResource, podNetwork("dataplane", no))
	f.reconcile(objectKey{name: "dataplane"})
	f.reconcile(att)
	f.want(att, pnv1.ConditionReady, metav1.ConditionFalse, pnv1.ReasonPodNetworkNotReady, "PodNetwork dataplane is not Ready (AdministrativelyDisabled")

	u := f.get(objectKey{name: "dataplane"})
	_ = unstructured.SetNestedField(u.Object, true, "spec", "enabled")
	f.update(pnv1.PodNetworkResource, u)
	f.reconcile(att) // the PodNetwork's Ready is still the old one
	f.want(att, pnv1.ConditionReady, metav1.ConditionFalse, pnv1.ReasonPodNetworkNotReady, "")
	f.reconcile(objectKey{name: "dataplane"})
	f.reconcile(att)
	f.want(att, pnv1.ConditionReady, metav1.ConditionTrue, pnv1.ReasonReady, "PodNetwork dataplane")

	// Its own params, in its namespace when the ref names none.
	params := objectKey{attachment: true, namespace: "ns1", name: "params"}
	f.create(pnv1.PodNetworkAttachmentResource, podNetworkAttachment("ns1", "params", "dataplane", nadRef("", "attach")))
	f.reconcile(params)
	f.want(params, pnv1.ConditionReady, metav1.ConditionFalse, pnv1.ReasonParamsNotReady, "NetworkAttachmentDefinition ns1/attach")
	f.want(params, pnv1.ConditionParamsReady, metav1.ConditionFalse, pnv1.ReasonParamsMissing, "")
	f.create(watch.NADResource, nad("ns1", "attach"))
	f.reconcile(params)
	f.want(params, pnv1.ConditionReady, metav1.ConditionTrue, pnv1.ReasonReady, "")
	f.want(params, pnv1.ConditionParamsReady, metav1.ConditionTrue, pnv1.ReasonParamsReady, "")

	// The PodNetwork deleted: not Ready.
	if err := f.dyn.Resource(pnv1.PodNetworkResource).Delete(f.ctx, "dataplane", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.reconcile(params)
	f.want(params, pnv1.ConditionReady, metav1.ConditionFalse, pnv1.ReasonPodNetworkNotReady, "does not exist")
}

func finalizers(u *unstructured.Unstructured) []string { return u.GetFinalizers() }

func hasInUse(u *unstructured.Unstructured) bool {
	for _, f := range finalizers(u) {
		if f == pnv1.FinalizerInUse {
			return true
		}
	}
	return false
}

// A PodNetworkAttachment naming a NetworkAttachmentDefinition of a
// namespace it may not use learns nothing of it: its conditions are the
// same, message and all, whether the object exists or not, and the
// controller never reads it. One of a namespace the operator allows is
// read, as one of its own namespace is.
func TestPodNetworkAttachmentForeignNamespace(t *testing.T) {
	f := newPNFixture(t)
	f.c = NewPodNetworkController(PodNetworkControllerOptions{Client: f.dyn, Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins},
		AllowedNamespaces: []string{"shared"}})
	f.create(pnv1.PodNetworkResource, podNetwork("dataplane", nil))
	f.reconcile(objectKey{name: "dataplane"})

	probe := objectKey{attachment: true, namespace: "tenant-a", name: "probe"}
	f.create(pnv1.PodNetworkAttachmentResource, podNetworkAttachment("tenant-a", "probe", "dataplane", nadRef("tenant-b", "secret-net")))
	conditions := func() []metav1.Condition {
		var out []metav1.Condition
		for _, typ := range []string{pnv1.ConditionParamsReady, pnv1.ConditionReady} {
			c := f.condition(probe, typ)
			if c == nil {
				t.Fatalf("no %s condition", typ)
			}
			out = append(out, metav1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
		}
		return out
	}
	f.reconcile(probe)
	missing := conditions()
	f.create(watch.NADResource, nad("tenant-b", "secret-net"))
	f.reconcile(probe)
	if exists := conditions(); !reflect.DeepEqual(exists, missing) {
		t.Errorf("another tenant's NetworkAttachmentDefinition shows:\nmissing: %+v\nexists:  %+v", missing, exists)
	}
	f.want(probe, pnv1.ConditionParamsReady, metav1.ConditionFalse, pnv1.ReasonParamsMissing,
		"NetworkAttachmentDefinition tenant-b/secret-net (none that PodNetworkAttachments of namespace tenant-a may use")
	for _, a := range f.dyn.Actions() {
		if a.GetResource() == watch.NADResource && a.GetNamespace() == "tenant-b" && a.GetVerb() != "create" {
			t.Errorf("the controller read another tenant's namespace: %s %s", a.GetVerb(), a.GetNamespace())
		}
	}

	// An allowed namespace's, and the attachment's own: read.
	for _, ns := range []string{"shared", "tenant-a"} {
		key := objectKey{attachment: true, namespace: "tenant-a", name: "from-" + ns}
		f.create(pnv1.PodNetworkAttachmentResource, podNetworkAttachment("tenant-a", key.name, "dataplane", nadRef(ns, "net")))
		f.reconcile(key)
		f.want(key, pnv1.ConditionParamsReady, metav1.ConditionFalse, pnv1.ReasonParamsMissing, "parametersRefs name objects that do not exist: NetworkAttachmentDefinition "+ns+"/net")
		f.create(watch.NADResource, nad(ns, "net"))
		f.reconcile(key)
		f.want(key, pnv1.ConditionParamsReady, metav1.ConditionTrue, pnv1.ReasonParamsReady, "")
	}

	// A PodNetwork is the operator's: its refs are read in any namespace.
	f.create(pnv1.PodNetworkResource, podNetwork("operator", nil, nadRef("tenant-b", "secret-net")))
	f.reconcile(objectKey{name: "operator"})
	f.want(objectKey{name: "operator"}, pnv1.ConditionParamsReady, metav1.ConditionTrue, pnv1.ReasonParamsReady, "")
}

// The InUse finalizer: on while an active pod or an attachment references
// the object, off otherwise, so a deletion proceeds.
func TestPodNetworkInUse(t *testing.T) {
	f := newPNFixture(t)
	pn := objectKey{name: "dataplane"}
	att := objectKey{attachment: true, namespace: "ns1", name: "fast"}
	f.create(pnv1.PodNetworkResource, podNetwork("dataplane", nil))
	f.reconcile(pn)
	if hasInUse(f.get(pn)) {
		t.Fatal("InUse with no reference")
	}

	for _, tc := range []struct {
		name  string
		pods  []*corev1.Pod
		inUse bool
	}{
		{"a running pod", []*corev1.Pod{networksPod("ns1", "a", corev1.PodRunning, `[{"podNetworkName":"dataplane"}]`)}, true},
		{"a pending pod", []*corev1.Pod{networksPod("ns1", "a", corev1.PodPending, `[{"podNetworkName":"dataplane","interfaceName":"net1"}]`)}, true},
		{"an invalid list still references", []*corev1.Pod{networksPod("ns1", "a", corev1.PodRunning, `[{"podNetworkName":"dataplane"},{"podNetworkName":"dataplane"}]`)}, true},
		{"a succeeded pod", []*corev1.Pod{networksPod("ns1", "a", corev1.PodSucceeded, `[{"podNetworkName":"dataplane"}]`)}, false},
		{"a failed pod", []*corev1.Pod{networksPod("ns1", "a", corev1.PodFailed, `[{"podNetworkName":"dataplane"}]`)}, false},
		{"another network", []*corev1.Pod{networksPod("ns1", "a", corev1.PodRunning, `[{"podNetworkName":"other"}]`)}, false},
		{"no annotation", []*corev1.Pod{networksPod("ns1", "a", corev1.PodRunning, "")}, false},
		{"an annotation that does not parse", []*corev1.Pod{networksPod("ns1", "a", corev1.PodRunning, `dataplane`)}, false},
		{"no pod", nil, false},
	} {
		f.pods = tc.pods
		f.reconcile(pn)
		if got := hasInUse(f.get(pn)); got != tc.inUse {
			t.Errorf("%s: InUse = %v, want %v", tc.name, got, tc.inUse)
		}
	}

	// An attachment keeps its PodNetwork in use; a pod through it keeps
	// the attachment in use (in its namespace only).
	f.create(pnv1.PodNetworkAttachmentResource, podNetworkAttachment("ns1", "fast", "dataplane"))
	f.reconcile(pn)
	f.reconcile(att)
	if !hasInUse(f.get(pn)) || hasInUse(f.get(att)) {
		t.Fatalf("attachment made: PodNetwork %v, attachment %v", finalizers(f.get(pn)), finalizers(f.get(att)))
	}
	f.pods = []*corev1.Pod{networksPod("ns2", "b", corev1.PodRunning, `[{"podNetworkAttachmentName":"fast"}]`)}
	f.reconcile(att)
	if hasInUse(f.get(att)) {
		t.Fatal("a pod of another namespace keeps the attachment in use")
	}
	f.pods = append(f.pods, networksPod("ns1", "c", corev1.PodRunning, `[{"podNetworkAttachmentName":"fast","interfaceName":"net2"}]`))
	f.reconcile(att)
	if !hasInUse(f.get(att)) {
		t.Fatal("a running pod through the attachment: not InUse")
	}

	// Deleting the attachment while the pod runs: blocked (the finalizer
	// stays, its status is left alone); the pod gone, it proceeds.
	u := f.get(att)
	now := metav1.Now()
	u.SetDeletionTimestamp(&now)
	f.update(pnv1.PodNetworkAttachmentResource, u)
	f.reconcile(att)
	if !hasInUse(f.get(att)) {
		t.Fatal("deleting while in use: the finalizer went")
	}
	f.pods[1].Status.Phase = corev1.PodSucceeded
	f.reconcile(att)
	if hasInUse(f.get(att)) {
		t.Fatal("deleting, the pod done: the finalizer stays")
	}
	// The attachment gone, its PodNetwork is free.
	if err := f.dyn.Resource(pnv1.PodNetworkAttachmentResource).Namespace("ns1").Delete(f.ctx, "fast", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.reconcile(pn)
	if hasInUse(f.get(pn)) {
		t.Fatal("no reference left: the PodNetwork keeps its finalizer")
	}
	// Another's finalizer is left alone.
	u = f.get(pn)
	u.SetFinalizers([]string{"acme.io/keep"})
	f.update(pnv1.PodNetworkResource, u)
	f.pods = []*corev1.Pod{networksPod("ns1", "a", corev1.PodRunning, `[{"podNetworkName":"dataplane"}]`)}
	f.reconcile(pn)
	if got := finalizers(f.get(pn)); len(got) != 2 || got[0] != "acme.io/keep" {
		t.Fatalf("finalizers %v", got)
	}
	f.pods = nil
	f.reconcile(pn)
	if got := finalizers(f.get(pn)); len(got) != 1 || got[0] != "acme.io/keep" {
		t.Fatalf("finalizers %v", got)
	}

	// The default PodNetwork gets none: it is created again instead.
	f.create(pnv1.PodNetworkResource, podNetwork("default", yes))
	f.pods = []*corev1.Pod{networksPod("ns1", "a", corev1.PodRunning, `[{"podNetworkName":"default"}]`)}
	f.reconcile(objectKey{name: "default"})
	if hasInUse(f.get(objectKey{name: "default"})) {
		t.Fatal("the default PodNetwork has the InUse finalizer")
	}
}

// Run creates the default PodNetwork, judges the objects, and creates the
// default PodNetwork again when it is deleted; a pod's annotation adds and
// removes the finalizer through the informers.
func TestPodNetworkControllerRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), podNetworkListKinds,
		podNetwork("dataplane", nil), podNetworkAttachment("default", "fast", "dataplane"))
	pods := fake.NewClientset()
	c := NewPodNetworkController(PodNetworkControllerOptions{Client: dyn, Pods: pods, Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins},
		Resync: time.Hour, ParamsRecheck: time.Hour})
	if c.Synced() == nil {
		t.Error("synced before running")
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	f := &pnFixture{t: t, ctx: ctx, dyn: dyn}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return ok(), nil
		}); err != nil {
			t.Fatalf("%s: never", what)
		}
	}
	ready := func(key objectKey) func() bool {
		return func() bool {
			if _, err := (func() (*unstructured.Unstructured, error) {
				if key.attachment {
					return dyn.Resource(pnv1.PodNetworkAttachmentResource).Namespace(key.namespace).Get(ctx, key.name, metav1.GetOptions{})
				}
				return dyn.Resource(pnv1.PodNetworkResource).Get(ctx, key.name, metav1.GetOptions{})
			})(); err != nil {
				return false
			}
			c := f.condition(key, pnv1.ConditionReady)
			return c != nil && c.Status == metav1.ConditionTrue
		}
	}
	waitFor("the default PodNetwork Ready", ready(objectKey{name: "default"}))
	waitFor("the attachment Ready", ready(objectKey{attachment: true, namespace: "default", name: "fast"}))
	if err := c.Synced(); err != nil {
		t.Errorf("Synced: %v", err)
	}
	waitFor("the PodNetwork InUse by the attachment", func() bool { return hasInUse(f.get(objectKey{name: "dataplane"})) })

	if err := dyn.Resource(pnv1.PodNetworkResource).Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the default PodNetwork again", ready(objectKey{name: "default"}))

	pod := networksPod("default", "p", corev1.PodRunning, `[{"podNetworkAttachmentName":"fast"}]`)
	if _, err := pods.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	att := objectKey{attachment: true, namespace: "default", name: "fast"}
	waitFor("the attachment InUse by the pod", func() bool { return hasInUse(f.get(att)) })
	if err := pods.CoreV1().Pods("default").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the attachment free", func() bool { return !hasInUse(f.get(att)) })

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
