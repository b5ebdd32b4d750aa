package watch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
)

// TestNADCache: before its watch has listed them, and for an object it
// does not have, the cache reads the API server; once listed, it serves
// them without a round trip, follows their changes, and forgets deleted
// ones. What it returns is the caller's to change.
func TestNADCache(t *testing.T) {
	nad := func(config string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
			"metadata": map[string]any{"namespace": "tenant", "name": "net-a"},
			"spec":     map[string]any{"config": config},
		}}
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{NADResource: "NetworkAttachmentDefinitionList"})
	if err := client.Tracker().Create(NADResource, nad(`{"v":1}`), "tenant"); err != nil {
		t.Fatal(err)
	}
	gets := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" {
				n++
			}
		}
		return n
	}
	c, err := NewNADCache(client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if got, err := c.GetNAD(ctx, "tenant", "net-a"); err != nil || got.Spec.Config != `{"v":1}` || gets() != 1 {
		t.Fatalf("before the watch: %+v, %v, %d GETs; want the object by one GET", got, err, gets())
	}
	// Every object delivered is announced: the first list's, an update,
	// a deletion.
	var changes atomic.Int32
	if err := c.OnChange(func() { changes.Add(1) }); err != nil {
		t.Fatal(err)
	}
	go c.Run(ctx)
	// Polled: the watch delivers in its own time.
	eventually := func(what string, ok func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return ok(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eventually("listed", c.HasSynced)
	eventually("the listed object announced", func() bool { return changes.Load() == 1 })
	before := gets()
	got, err := c.GetNAD(ctx, "tenant", "net-a")
	if err != nil || got.Spec.Config != `{"v":1}` || gets() != before {
		t.Errorf("once listed: %+v, %v, %d more GETs; want the object from the watch", got, err, gets()-before)
	}
	got.Spec.Config = "changed by the caller"
	if again, _ := c.GetNAD(ctx, "tenant", "net-a"); again.Spec.Config != `{"v":1}` {
		t.Errorf("a caller's change reached the cache: %q", again.Spec.Config)
	}
	if err := client.Tracker().Update(NADResource, nad(`{"v":2}`), "tenant"); err != nil {
		t.Fatal(err)
	}
	eventually("the update seen", func() bool {
		got, err := c.GetNAD(ctx, "tenant", "net-a")
		return err == nil && got.Spec.Config == `{"v":2}`
	})
	eventually("the update announced", func() bool { return changes.Load() == 2 })
	if err := client.Tracker().Delete(NADResource, "tenant", "net-a"); err != nil {
		t.Fatal(err)
	}
	eventually("the deletion seen", func() bool {
		_, err := c.GetNAD(ctx, "tenant", "net-a")
		return apierrors.IsNotFound(err)
	})
	eventually("the deletion announced", func() bool { return changes.Load() == 3 })
	before = gets()
	if _, err := c.GetNAD(ctx, "tenant", "net-b"); !apierrors.IsNotFound(err) || gets() != before+1 {
		t.Errorf("an object the watch does not have: %v, %d GETs; want NotFound from one GET", err, gets()-before)
	}
}

// TestPodNetworkCache: PodNetworks (cluster-scoped) and
// PodNetworkAttachments (namespaced) read and listed from the API server
// before the watches have listed them, from the watches after.
func TestPodNetworkCache(t *testing.T) {
	obj := func(kind, namespace, name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": pnv1.SchemeGroupVersion.String(), "kind": kind,
			"spec": map[string]any{"provider": "fastpath.dev/fastpathd"}}}
		u.SetNamespace(namespace)
		u.SetName(name)
		return u
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		pnv1.PodNetworkResource: "PodNetworkList", pnv1.PodNetworkAttachmentResource: "PodNetworkAttachmentList"})
	for _, o := range []struct {
		r schema.GroupVersionResource
		u *unstructured.Unstructured
	}{{pnv1.PodNetworkResource, obj("PodNetwork", "", "dataplane")}, {pnv1.PodNetworkAttachmentResource, obj("PodNetworkAttachment", "tenant", "fast")}} {
		if err := client.Tracker().Create(o.r, o.u, o.u.GetNamespace()); err != nil {
			t.Fatal(err)
		}
	}
	c, err := NewPodNetworkCache(client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	check := func(when string) {
		t.Helper()
		if pn, err := c.GetPodNetwork(ctx, "dataplane"); err != nil || pn.Spec.Provider != "fastpath.dev/fastpathd" {
			t.Errorf("%s: PodNetwork %+v, %v", when, pn, err)
		}
		if pna, err := c.GetPodNetworkAttachment(ctx, "tenant", "fast"); err != nil || pna.Namespace != "tenant" {
			t.Errorf("%s: PodNetworkAttachment %+v, %v", when, pna, err)
		}
		if _, err := c.GetPodNetworkAttachment(ctx, "other", "fast"); !apierrors.IsNotFound(err) {
			t.Errorf("%s: another namespace's PodNetworkAttachment: %v, want NotFound", when, err)
		}
		if list, err := c.Networks.List(ctx); err != nil || len(list) != 1 || list[0].Name != "dataplane" {
			t.Errorf("%s: list %+v, %v", when, list, err)
		}
	}
	check("before the watches")
	var changes atomic.Int32
	if err := c.OnChange(func() { changes.Add(1) }); err != nil {
		t.Fatal(err)
	}
	go c.Run(ctx)
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.Networks.HasSynced() && c.Attachments.HasSynced(), nil
	}); err != nil {
		t.Fatalf("the watches did not list: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return changes.Load() == 1, nil
	}); err != nil {
		t.Errorf("the listed PodNetwork announced %d times, want once (the attachments are not announced)", changes.Load())
	}
	gets := len(client.Actions())
	check("from the watches")
	if n := len(client.Actions()) - gets; n != 1 {
		t.Errorf("from the watches: %d calls to the API server, want 1 (the GET of what the watch does not have)", n)
	}
}
