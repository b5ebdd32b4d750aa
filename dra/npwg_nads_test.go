package dra

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
