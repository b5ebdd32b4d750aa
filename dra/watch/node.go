package watch

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// NodeLabels watches the labels of one node: the daemon's own, by name
// (a field selector), never the others'.
type NodeLabels struct {
	informer cache.SharedIndexInformer
}

// NewNodeLabels watches node's labels through client.
func NewNodeLabels(client kubernetes.Interface, node string) *NodeLabels {
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "nodes", "", fields.OneTermEqualSelector("metadata.name", node))
	informer := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	// Only the labels are kept.
	_ = informer.SetTransform(func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			out := &corev1.Node{}
			out.Name, out.ResourceVersion, out.Labels = n.Name, n.ResourceVersion, n.Labels
			return out, nil
		}
		return obj, nil
	})
	return &NodeLabels{informer: informer}
}

// Run watches until ctx ends.
func (n *NodeLabels) Run(ctx context.Context) { n.informer.RunWithContext(ctx) }

// OnChange has changed called, in the watch's goroutine, when the node's
// labels may have changed: changed must not block.
func (n *NodeLabels) OnChange(changed func()) error {
	_, err := n.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	if err != nil {
		return fmt.Errorf("watch the node: %w", err)
	}
	return nil
}

// Labels are the node's labels as the watch last saw them; false until
// it has listed the node.
func (n *NodeLabels) Labels() (map[string]string, bool) {
	if !n.informer.HasSynced() {
		return nil, false
	}
	for _, obj := range n.informer.GetStore().List() {
		if node, ok := obj.(*corev1.Node); ok {
			return maps.Clone(node.Labels), true
		}
	}
	return nil, false
}
