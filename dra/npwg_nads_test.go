package dra

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// TestNADs: a NetworkAttachmentDefinition is read with one GET of its
// namespace and name, into the standard's type.
func TestNADs(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"namespace": "tenant", "name": "net-a"},
		"spec":     map[string]any{"config": `{"cniVersion":"1.0.0","type":"macvlan"}`},
	}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{NADResource: "NetworkAttachmentDefinitionList"})
	if err := client.Tracker().Create(NADResource, obj, "tenant"); err != nil {
		t.Fatal(err)
	}
	nads := NADs{Client: client}
	nad, err := nads.GetNAD(context.Background(), "tenant", "net-a")
	if err != nil {
		t.Fatal(err)
	}
	if nad.Name != "net-a" || nad.Namespace != "tenant" || nad.Spec.Config != `{"cniVersion":"1.0.0","type":"macvlan"}` {
		t.Errorf("read %+v", nad)
	}
	if _, err := nads.GetNAD(context.Background(), "other", "net-a"); err == nil {
		t.Error("read a network of another namespace")
	}
}

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
	go c.Run(ctx)
	// Polled: the watch delivers in its own time.
	eventually := func(what string, ok func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return ok(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eventually("listed", c.HasSynced)
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
	if err := client.Tracker().Delete(NADResource, "tenant", "net-a"); err != nil {
		t.Fatal(err)
	}
	eventually("the deletion seen", func() bool {
		_, err := c.GetNAD(ctx, "tenant", "net-a")
		return apierrors.IsNotFound(err)
	})
	before = gets()
	if _, err := c.GetNAD(ctx, "tenant", "net-b"); !apierrors.IsNotFound(err) || gets() != before+1 {
		t.Errorf("an object the watch does not have: %v, %d GETs; want NotFound from one GET", err, gets()-before)
	}
}
