package nodeconfig

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	v1alpha1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
)

// APIStatus writes a node's entry in FastpathNodeConfigs' status with a
// server-side apply of its own field manager (fastpathd-<node>): the
// entries are a map keyed by node name, so each node's daemon owns its
// entry alone, and applying none removes it.
type APIStatus struct {
	Client   dynamic.Interface
	NodeName string
}

// WriteNodeStatus implements StatusWriter.
func (s APIStatus) WriteNodeStatus(ctx context.Context, config string, st *v1alpha1.NodeStatus) error {
	nodes := []any{}
	if st != nil {
		entry, err := runtime.DefaultUnstructuredConverter.ToUnstructured(st)
		if err != nil {
			return err
		}
		nodes = append(nodes, entry)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.Group + "/" + v1alpha1.Version,
		"kind":       v1alpha1.Kind,
		"metadata":   map[string]any{"name": config},
		"status":     map[string]any{"nodes": nodes},
	}}
	_, err := s.Client.Resource(v1alpha1.GroupVersionResource).ApplyStatus(ctx, config, obj, metav1.ApplyOptions{FieldManager: FieldManager(s.NodeName), Force: true})
	if err != nil {
		return fmt.Errorf("FastpathNodeConfig %s: status of node %s: %w", config, s.NodeName, err)
	}
	return nil
}

// FieldManager is the field manager of a node's status entries.
func FieldManager(node string) string { return "fastpathd-" + node }
