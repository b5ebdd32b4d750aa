package status

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
)

// NodeLabelsFieldManager owns the Node labels of the PodNetworks a node
// attaches.
const NodeLabelsFieldManager = "fastpathd-podnetworks"

// AttachableNetworks says which PodNetworks the node can attach
// (netapi.PodNetworkJudge).
type AttachableNetworks interface {
	// Attachable is every PodNetwork the node attaches by name, with ""
	// for one it can attach now, else why it cannot.
	Attachable(ctx context.Context) (map[string]string, error)
}

// NodeLabels keeps, on the node's own Node, the label
// pnv1.NodeLabel(name) = "true" of each PodNetwork the node can attach
// now, and no other of these labels: it applies the Node server-side with
// those labels alone, as NodeLabelsFieldManager, so that the labels it
// applied before and no longer lists go, and no other label or field of
// the Node is touched. It judges the networks again on Changed (the
// watches of the PodNetworks and their parameters), a moment later so
// that a burst of changes is one judgement, and every Period (plugins
// installed, interfaces appearing); it applies only when the labels
// differ from those last applied, always once at start (which removes
// those a previous run left that no longer hold), and retries a failure
// with backoff.
type NodeLabels struct {
	Client   kubernetes.Interface
	NodeName string
	Networks AttachableNetworks
	// Period is how often the networks are judged again besides on
	// Changed; 0: 30 s.
	Period time.Duration
	// Settle is how long after Changed they are judged; 0: 500 ms.
	Settle time.Duration
	// Backoff is the first wait before a failed judgement or apply is
	// tried again, doubled up to MaxBackoff; 0: 1 s and Period.
	Backoff, MaxBackoff time.Duration

	changed chan struct{}
}

// NewNodeLabels keeps the labels of the PodNetworks networks says the node
// attaches on the Node nodeName; Run does.
func NewNodeLabels(client kubernetes.Interface, nodeName string, networks AttachableNetworks) *NodeLabels {
	return &NodeLabels{Client: client, NodeName: nodeName, Networks: networks, changed: make(chan struct{}, 1)}
}

// Changed says that what the judgement reads may have changed. It never
// blocks.
func (l *NodeLabels) Changed() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// Run keeps the labels until ctx ends. They stay on the Node after:
// a daemon restarting does not make its node unschedulable for the pods
// of its PodNetworks.
func (l *NodeLabels) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("node", l.NodeName)
	ctx = klog.NewContext(ctx, logger)
	period, settle := l.Period, l.Settle
	if period <= 0 {
		period = 30 * time.Second
	}
	if settle <= 0 {
		settle = 500 * time.Millisecond
	}
	first, most := l.Backoff, l.MaxBackoff
	if first <= 0 {
		first = time.Second
	}
	if most <= 0 {
		most = period
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	var applied []string // the labels last applied; nil before the first apply
	problems := map[string]string{}
	backoff := first
	for {
		var retry *time.Timer
		labels, err := l.sync(ctx, applied, problems)
		if err != nil {
			logger.Error(err, "Labelling the node with the PodNetworks it attaches failed; retrying", "in", backoff)
			retry = time.NewTimer(backoff)
			backoff = min(2*backoff, most)
		} else {
			applied, backoff = labels, first
		}
		if !l.wait(ctx, tick, retry, settle) {
			return
		}
	}
}

// wait waits for the next judgement: the tick, the retry (nil for none)
// or, settle after it, Changed; false when ctx ends first.
func (l *NodeLabels) wait(ctx context.Context, tick *time.Ticker, retry *time.Timer, settle time.Duration) bool {
	var retryC <-chan time.Time
	if retry != nil {
		defer retry.Stop()
		retryC = retry.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-retryC:
	case <-tick.C:
	case <-l.changed:
		// A burst of changes (a watch's first list, a
		// NetworkAttachmentDefinition and its PodNetwork created
		// together) is one judgement.
		timer := time.NewTimer(settle)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
		}
	}
	return true
}

// sync judges the networks and applies their labels unless they are
// applied (applied is not nil and lists them); it returns the labels the
// Node has from it now. problems are the reasons logged last, by
// PodNetwork: a change is logged.
func (l *NodeLabels) sync(ctx context.Context, applied []string, problems map[string]string) ([]string, error) {
	logger := klog.FromContext(ctx)
	judged, err := l.Networks.Attachable(ctx)
	if err != nil {
		return nil, err
	}
	names := []string{}
	for name, problem := range judged {
		if problem == "" {
			names = append(names, name)
		} else if problems[name] != problem {
			logger.Info("This node cannot attach the PodNetwork", "podNetwork", name, "reason", problem)
		}
	}
	clear(problems)
	for name, problem := range judged {
		if problem != "" {
			problems[name] = problem
		}
	}
	labels := make([]string, 0, len(names))
	for _, name := range names {
		labels = append(labels, pnv1.NodeLabel(name))
	}
	slices.Sort(labels)
	slices.Sort(names)
	if applied != nil && slices.Equal(labels, applied) {
		return applied, nil
	}
	values := make(map[string]string, len(labels))
	for _, k := range labels {
		values[k] = "true"
	}
	node := corev1ac.Node(l.NodeName).WithLabels(values)
	if _, err := l.Client.CoreV1().Nodes().Apply(ctx, node, metav1.ApplyOptions{FieldManager: NodeLabelsFieldManager, Force: true}); err != nil {
		return nil, fmt.Errorf("apply the labels %v of node %s: %w", labels, l.NodeName, err)
	}
	logger.Info("Labelled the node with the PodNetworks it attaches", "podNetworks", names, "labels", labels)
	return labels, nil
}
