package status

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// FeaturesOffCondition is the condition fastpathd keeps on its node's
// Node: True when something fastpath would use is off because the cluster
// (a DRA feature gate) or the node's runtime (its NRI version) lacks it,
// each in the message with what fastpath does instead; False when nothing
// is. As the kubelet's own pressure conditions, True is the state to look
// at.
const FeaturesOffCondition corev1.NodeConditionType = "FastpathFeaturesOff"

// Reasons of FeaturesOffCondition.
const (
	ReasonFeaturesOff = "FeaturesOff"
	ReasonAllServed   = "AllFeaturesServed"
)

// NodeConditionFieldManager owns FeaturesOffCondition on the Node.
const NodeConditionFieldManager = "fastpathd-features"

// FeatureOff is a feature fastpath turned off, and why.
type FeatureOff struct {
	// Name is the feature's (fastpath_cluster_feature{feature} or
	// fastpath_runtime_feature{feature}).
	Name string
	// Why says what lacks it and what fastpath does instead.
	Why string
}

// NodeCondition keeps FeaturesOffCondition on the node's Node, from the
// features each source (the cluster's, the runtime's) has turned off: it
// applies the condition server-side, its own field manager owning that
// condition alone, when what it would say changes, always once at start,
// and retries a failure with backoff. The condition stays when the
// daemon stops: what it says holds until a daemon finds otherwise.
type NodeCondition struct {
	Client   kubernetes.Interface
	NodeName string
	// Backoff is the first wait before a failed apply is tried again,
	// doubled up to MaxBackoff; 0: 1 s and 1 min.
	Backoff, MaxBackoff time.Duration

	mu      sync.Mutex
	off     map[string][]FeatureOff // by source
	changed chan struct{}
}

// NewNodeCondition keeps FeaturesOffCondition on the Node nodeName; Run
// does.
func NewNodeCondition(client kubernetes.Interface, nodeName string) *NodeCondition {
	return &NodeCondition{Client: client, NodeName: nodeName, off: map[string][]FeatureOff{}, changed: make(chan struct{}, 1)}
}

// Set says which features source ("cluster", "runtime") has turned off,
// none for none. It never blocks.
func (c *NodeCondition) Set(source string, off []FeatureOff) {
	c.mu.Lock()
	c.off[source] = slices.Clone(off)
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// Run applies the condition after each Set until ctx ends.
func (c *NodeCondition) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("node", c.NodeName, "condition", FeaturesOffCondition)
	first, most := c.Backoff, c.MaxBackoff
	if first <= 0 {
		first = time.Second
	}
	if most <= 0 {
		most = time.Minute
	}
	backoff, applied := first, ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.changed:
		}
		for {
			msg, err := c.apply(ctx, applied)
			if err == nil {
				applied, backoff = msg, first
				break
			}
			logger.Error(err, "Writing the node's condition failed; retrying", "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, most)
		}
	}
}

// Condition is the condition as the sources' features make it, without
// its times.
func (c *NodeCondition) Condition() corev1.NodeCondition {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, source := range slices.Sorted(maps.Keys(c.off)) {
		for _, f := range c.off[source] {
			parts = append(parts, fmt.Sprintf("%s (%s): %s", f.Name, source, f.Why))
		}
	}
	if len(parts) == 0 {
		return corev1.NodeCondition{Type: FeaturesOffCondition, Status: corev1.ConditionFalse, Reason: ReasonAllServed,
			Message: "the cluster and the runtime serve every feature fastpath uses"}
	}
	return corev1.NodeCondition{Type: FeaturesOffCondition, Status: corev1.ConditionTrue, Reason: ReasonFeaturesOff,
		Message: "turned off, as the cluster or the runtime lacks them: " + strings.Join(parts, "; ")}
}

// apply writes the condition unless its status and message are those of
// applied (the message last applied, "" for none); it returns the
// message applied. The transition time is kept while the status is.
func (c *NodeCondition) apply(ctx context.Context, applied string) (string, error) {
	want := c.Condition()
	key := string(want.Status) + "/" + want.Message
	if key == applied {
		return applied, nil
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read node %s for its condition %s: %w", c.NodeName, FeaturesOffCondition, err)
	}
	now := metav1.Now()
	transition := now
	for _, have := range node.Status.Conditions {
		if have.Type == FeaturesOffCondition && have.Status == want.Status && !have.LastTransitionTime.IsZero() {
			transition = have.LastTransitionTime
		}
	}
	cond := corev1ac.NodeCondition().WithType(want.Type).WithStatus(want.Status).WithReason(want.Reason).WithMessage(want.Message).
		WithLastHeartbeatTime(now).WithLastTransitionTime(transition)
	ac := corev1ac.Node(c.NodeName).WithStatus(corev1ac.NodeStatus().WithConditions(cond))
	if _, err := c.Client.CoreV1().Nodes().ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: NodeConditionFieldManager, Force: true}); err != nil {
		return "", fmt.Errorf("apply the condition %s=%s of node %s: %w", FeaturesOffCondition, want.Status, c.NodeName, err)
	}
	klog.FromContext(ctx).Info("Wrote the node's condition", "status", want.Status, "reason", want.Reason, "message", want.Message)
	return key, nil
}
