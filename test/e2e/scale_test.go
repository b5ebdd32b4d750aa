//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/controller"
	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// scaleSize is the simulated cluster: make scale's (FASTPATH_SCALE_*) or
// the short form make e2e runs.
type scaleSize struct {
	nodes, vfs     int // simulated nodes, each a PF with vfs VFs
	scheduled      int // pods with a claim, scheduled one after another
	gated, network int // gated pods and the PodNetworks they list
}

func scaleSizeFromEnv(t *testing.T) scaleSize {
	t.Helper()
	s := scaleSize{nodes: 5, vfs: 1024, scheduled: 20, gated: 250, network: 25}
	for env, v := range map[string]*int{"FASTPATH_SCALE_NODES": &s.nodes, "FASTPATH_SCALE_VFS": &s.vfs,
		"FASTPATH_SCALE_PODS": &s.scheduled, "FASTPATH_SCALE_GATED_PODS": &s.gated, "FASTPATH_SCALE_PODNETWORKS": &s.network} {
		if e := os.Getenv(env); e != "" {
			n, err := strconv.Atoi(e)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a positive number", env, e)
			}
			*v = n
		}
	}
	if s.network > s.gated {
		t.Fatalf("%d PodNetworks for %d gated pods: want at most one network a pod", s.network, s.gated)
	}
	return s
}

// The simulated nodes: their names, the label that keeps the
// simulation's pods on them, and the namespace of those pods.
const (
	simNodePrefix = "fastpath-sim-"
	simLabel      = "fastpath.dev/simulated-node"
	simNamespace  = "e2e-scale"
	simClass      = "e2e-scale-netdev"
)

func simNode(i int) string { return fmt.Sprintf("%s%03d", simNodePrefix, i) }

// TestScaleSimulation simulates a larger cluster against the bed's real
// API server, scheduler and controller manager: nodes Node objects (their
// leases renewed, no kubelet), each with the daemon's own publisher
// publishing a 1,024-VF node (a sysfs fixture discovered as fastpathd
// discovers it) under its name. It reports the time until every slice is
// published, the API server's memory and etcd's size before and after, the
// scheduler's time to allocate a claim of the netdev DeviceClass among all
// those devices (the pods are bound to simulated nodes and never started),
// and the PodNetwork controller's time to reconcile its PodNetworks and
// lift the scheduling gates of the pods listing them. make e2e runs it
// short (5 nodes); make scale runs 100 nodes, 5,000 gated pods and 500
// PodNetworks.
func TestScaleSimulation(t *testing.T) {
	size := scaleSizeFromEnv(t)
	ctx, cancel := context.WithTimeout(klog.NewContext(t.Context(), klog.Background()), 40*time.Minute)
	defer cancel()
	client := bulkClient(t)
	var report []string
	say := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		report = append(report, line)
		t.Log(line)
	}
	t.Cleanup(func() {
		t.Logf("the simulation, %d nodes × %d VFs:\n%s", size.nodes, size.vfs, strings.Join(report, "\n"))
	})

	// What a simulation killed before its cleanup left goes first.
	cleanUpSimulation(t, client)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: simNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanUpSimulation(t, client) })
	nodes := createSimNodes(t, ctx, client, size)
	stopLeases := renewLeases(ctx, client, nodes)
	defer stopLeases()

	// The inventory of one node, as fastpathd discovers it.
	root := t.TempDir()
	if err := sysfsfixture.Generated(size.vfs).Write(root); err != nil {
		t.Fatal(err)
	}
	disc, err := devices.New(devices.Options{SysfsRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := disc.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	perNode := len(inv.Devices)
	total := perNode * size.nodes

	apiBefore, etcdBefore := apiServerMemory(t, ctx), etcdSize(t, ctx)
	took := publishAll(t, ctx, nodes, inv)
	slicesN, devicesN := countSimSlices(t, ctx, client, size)
	if devicesN != total {
		t.Fatalf("the simulated nodes' slices hold %d devices, want %d × %d = %d", devicesN, size.nodes, perNode, total)
	}
	say("publish: %d devices in %d ResourceSlices of %d nodes, all written in %s", total, slicesN, size.nodes, took.Round(time.Millisecond))
	apiAfter, etcdAfter := apiServerMemory(t, ctx), etcdSize(t, ctx)
	say("kube-apiserver RSS %s → %s (%s per 1,000 devices); Go heap live %s → %s (%s per 1,000 devices)",
		mib(apiBefore.rss), mib(apiAfter.rss), kib((apiAfter.rss-apiBefore.rss)*1000/float64(total)),
		mib(apiBefore.heap), mib(apiAfter.heap), kib((apiAfter.heap-apiBefore.heap)*1000/float64(total)))
	if apiAfter.heap < apiBefore.heap {
		say("(the API server's heap shrank: it still held the events of objects a run before deleted, so its figure says nothing; run on a bed just started)")
	}
	say("etcd database %s → %s (%s per 1,000 devices)", mib(etcdBefore), mib(etcdAfter), kib((etcdAfter-etcdBefore)*1000/float64(total)))

	times := scheduleClaims(t, ctx, client, size)
	say("scheduling: %d pods, one at a time, each with a claim of one device of the netdev DeviceClass (%d candidates): "+
		"creation to bound p50 %s, p99 %s, max %s", size.scheduled, size.nodes*size.vfs/2,
		percentile(times, 50), percentile(times, 99), percentile(times, 100))

	ready, lifted, bound := reconcileNetworks(t, ctx, client, size)
	say("controller: %d PodNetworks Ready in %s, the gates of %d pods lifted in %s (with node affinity), all bound by the scheduler after %s",
		size.network, ready.Round(time.Millisecond), size.gated, lifted.Round(time.Millisecond), bound.Round(time.Millisecond))
}

// bulkClient is a client that creates the simulation's objects as fast as
// the API server takes them.
func bulkClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := bed.RESTConfig()
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// daemonConfig is the bed's client configuration as fastpathd makes its
// own: its default --kube-api-qps and --kube-api-burst, built-in kinds as
// protobuf.
func daemonConfig() *rest.Config {
	cfg := bed.RESTConfig()
	cfg.QPS, cfg.Burst = 50, 100
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg
}

// createSimNodes creates the simulated Node objects, Ready, with room for
// the pods.
func createSimNodes(t *testing.T, ctx context.Context, client kubernetes.Interface, size scaleSize) []*corev1.Node {
	t.Helper()
	nodes := make([]*corev1.Node, size.nodes)
	err := parallel(ctx, size.nodes, func(ctx context.Context, i int) error {
		now := metav1.Now()
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: simNode(i), Labels: map[string]string{simLabel: "true", corev1.LabelHostname: simNode(i)}},
			Status: corev1.NodeStatus{
				Capacity:    corev1.ResourceList{corev1.ResourcePods: resource.MustParse("250"), corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")},
				Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("250"), corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")},
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
					Message: "simulated by the e2e suite", LastHeartbeatTime: now, LastTransitionTime: now}},
			},
		}
		for n := i; n < size.network; n += size.nodes {
			node.Labels[pnv1.NodeLabel(simNetwork(n))] = "true"
		}
		created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		nodes[i] = created
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// renewLeases keeps the simulated nodes' leases fresh, as their kubelets
// would, so the node lifecycle controller neither taints them nor marks
// their pods not ready. It returns what stops it.
func renewLeases(ctx context.Context, client kubernetes.Interface, nodes []*corev1.Node) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		leases := client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
		renew := func() {
			_ = parallel(ctx, len(nodes), func(ctx context.Context, i int) error {
				now := metav1.NewMicroTime(time.Now())
				l, err := leases.Get(ctx, nodes[i].Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					_, err = leases.Create(ctx, &coordinationv1.Lease{
						ObjectMeta: metav1.ObjectMeta{Name: nodes[i].Name, OwnerReferences: []metav1.OwnerReference{
							{APIVersion: "v1", Kind: "Node", Name: nodes[i].Name, UID: nodes[i].UID}}},
						Spec: coordinationv1.LeaseSpec{HolderIdentity: &nodes[i].Name, LeaseDurationSeconds: new(int32(40)), RenewTime: &now},
					}, metav1.CreateOptions{})
					return err
				}
				if err != nil {
					return err
				}
				l.Spec.RenewTime = &now
				_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
				return err
			})
		}
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			renew()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// publishAll runs one publisher of fastpathd for each simulated node, each
// with its own client as each node's daemon has (fastpathd's default
// --kube-api-qps and --kube-api-burst), all at once, and returns the time
// until every one has written its slices.
func publishAll(t *testing.T, ctx context.Context, nodes []*corev1.Node, inv devices.Inventory) time.Duration {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		left    atomic.Int64
		allDone = make(chan struct{})
		failed  sync.Map // node: its last error
	)
	left.Store(int64(len(nodes)))
	start := time.Now()
	for _, node := range nodes {
		client, err := kubernetes.NewForConfig(daemonConfig())
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		p := kubelet.NewPublisher(client, claims.DriverFastpath, node.Name, func(_ context.Context, err error) {
			if err != nil {
				failed.Store(node.Name, err)
				return
			}
			failed.Delete(node.Name)
			once.Do(func() {
				if left.Add(-1) == 0 {
					close(allDone)
				}
			})
		})
		p.Publish(func() resourceslice.DriverResources { return dra.Resources(node.Name, inv, nil, nil) })
		wg.Go(func() { p.Run(ctx) })
	}
	defer func() { cancel(); wg.Wait() }()
	select {
	case <-allDone:
		return time.Since(start)
	case <-time.After(10 * time.Minute):
	case <-ctx.Done():
	}
	var errs []string
	failed.Range(func(k, v any) bool { errs = append(errs, fmt.Sprintf("%s: %v", k, v)); return true })
	t.Fatalf("%d of %d nodes' slices not published after %s; the last errors:\n%s", left.Load(), len(nodes),
		time.Since(start).Round(time.Second), strings.Join(errs, "\n"))
	return 0
}

// countSimSlices lists the simulated nodes' slices, a page at a time, and
// counts them and their devices.
func countSimSlices(t *testing.T, ctx context.Context, client kubernetes.Interface, size scaleSize) (slicesN, devicesN int) {
	t.Helper()
	opts := metav1.ListOptions{Limit: 100}
	for {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Items {
			if s.Spec.NodeName != nil && strings.HasPrefix(*s.Spec.NodeName, simNodePrefix) && s.Spec.Driver == claims.DriverFastpath {
				slicesN++
				devicesN += len(s.Spec.Devices)
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return slicesN, devicesN
		}
	}
}

// scheduleClaims creates the pods with a claim each, one after the other,
// and returns the time of each from its creation to its binding to a
// simulated node, checking that its claim is allocated a device of that
// node's pool.
func scheduleClaims(t *testing.T, ctx context.Context, client kubernetes.Interface, size scaleSize) []time.Duration {
	t.Helper()
	objs, err := testbed.DecodeYAML(filepath.Join("..", "..", "deploy", "deviceclasses.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var class *resourceapi.DeviceClass
	for _, o := range objs {
		if c, ok := o.(*resourceapi.DeviceClass); ok && c.Name == "netdev.fastpath.dev" {
			class = c.DeepCopy()
		}
	}
	if class == nil {
		t.Fatal("deploy/deviceclasses.yaml has no netdev.fastpath.dev")
	}
	class.ObjectMeta = metav1.ObjectMeta{Name: simClass}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	pods := client.CoreV1().Pods(simNamespace)
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: "fastpath.dev/e2e=scale-claim"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var times []time.Duration
	seen := map[string]bool{}
	for i := range size.scheduled {
		name := fmt.Sprintf("claim-%04d", i)
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: simNamespace},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
				{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: simClass}}}}}}
		if _, err := client.ResourceV1().ResourceClaims(simNamespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := simPod(name, "scale-claim")
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "nic", ResourceClaimName: &claim.Name}}
		start := time.Now()
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		node, err := waitBound(ctx, w, name, 2*time.Minute)
		if err != nil {
			t.Fatalf("pod %s/%s: %v", simNamespace, name, err)
		}
		times = append(times, time.Since(start))
		c, err := client.ResourceV1().ResourceClaims(simNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 1 {
			t.Fatalf("claim %s of pod bound to %s: allocation %+v", name, node, c.Status.Allocation)
		}
		r := c.Status.Allocation.Devices.Results[0]
		if r.Driver != claims.DriverFastpath || r.Pool != node || seen[r.Pool+"/"+r.Device] {
			t.Fatalf("claim %s of pod bound to %s: allocated %s/%s/%s (allocated before: %v)", name, node, r.Driver, r.Pool, r.Device, seen[r.Pool+"/"+r.Device])
		}
		seen[r.Pool+"/"+r.Device] = true
	}
	return times
}

// simPod is a pod only the simulated nodes take, tolerating what they
// might be tainted with; it never runs.
func simPod(name, role string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: simNamespace, Labels: map[string]string{"fastpath.dev/e2e": role}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{simLabel: "true"},
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: new(int64(0)),
			Containers:                    []corev1.Container{{Name: "c", Image: testbed.WorkloadImage, Command: []string{"sleep", "infinity"}}},
		},
	}
}

// waitBound waits for the watch to show pod name bound, and returns its
// node.
func waitBound(ctx context.Context, w watch.Interface, name string, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return "", errors.New("the watch of the pods ended")
			}
			if pod, ok := ev.Object.(*corev1.Pod); ok && pod.Name == name && pod.Spec.NodeName != "" {
				return pod.Spec.NodeName, nil
			}
		case <-deadline:
			return "", fmt.Errorf("not bound after %s", timeout)
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// simNetworkPrefix begins the names of the simulation's PodNetworks.
const simNetworkPrefix = "e2e-scale-"

func simNetwork(i int) string { return fmt.Sprintf("%s%04d", simNetworkPrefix, i) }

// reconcileNetworks creates the PodNetworks and the gated pods listing
// them (pod i lists network i mod size.network, which the simulated node
// i mod size.nodes attaches), then runs the PodNetwork controller and
// returns the time until every PodNetwork is Ready, until every gate is
// lifted, and until every pod is bound.
func reconcileNetworks(t *testing.T, ctx context.Context, client kubernetes.Interface, size scaleSize) (ready, lifted, bound time.Duration) {
	t.Helper()
	installPodNetworkCRDs(t, ctx)
	dyn := dynamicClient(t)
	networks := dyn.Resource(pnv1.PodNetworkResource)
	err := parallel(ctx, size.network, func(ctx context.Context, i int) error {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": pnv1.PodNetworkResource.GroupVersion().String(), "kind": "PodNetwork",
			"metadata": map[string]any{"name": simNetwork(i)},
			"spec":     map[string]any{"enabled": true, "provider": pnv1.FastpathProvider},
		}}
		_, err := networks.Create(ctx, u, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	pods := client.CoreV1().Pods(simNamespace)
	err = parallel(ctx, size.gated, func(ctx context.Context, i int) error {
		pod := simPod(fmt.Sprintf("gated-%05d", i), "scale-gated")
		pod.Annotations = map[string]string{pnv1.AnnotationNetworks: fmt.Sprintf(`[{"podNetworkName":%q,"interfaceName":"net1"}]`, simNetwork(i%size.network))}
		pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: pnv1.SchedulingGate}}
		_, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// The controller's clients are fastpathd controller's: its default
	// --kube-api-qps and --kube-api-burst.
	cfg := daemonConfig()
	ctrlDyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctrlPods, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := controller.NewPodNetworkController(controller.PodNetworkControllerOptions{
		Client: ctrlDyn, Pods: ctrlPods, Resync: 10 * time.Minute, ParamsRecheck: 10 * time.Minute, NoDefault: true,
	})
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Run(cctx) }()
	defer func() {
		// The PodNetworks go while the controller runs: it removes their
		// InUse finalizers once no pod lists them.
		deleteSimPods(t, client)
		_ = parallel(context.Background(), size.network, func(ctx context.Context, i int) error {
			return networks.Delete(ctx, simNetwork(i), metav1.DeleteOptions{})
		})
		_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := networks.List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			return !slices.ContainsFunc(list.Items, func(u unstructured.Unstructured) bool { return strings.HasPrefix(u.GetName(), simNetworkPrefix) }), nil
		})
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the PodNetwork controller: %v", err)
		}
	}()

	poll := func(what string, done func(ctx context.Context) (bool, error)) time.Duration {
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, done); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return time.Since(start)
	}
	ready = poll("the PodNetworks Ready", func(ctx context.Context) (bool, error) {
		list, err := networks.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for _, u := range list.Items {
			if !strings.HasPrefix(u.GetName(), simNetworkPrefix) {
				continue
			}
			var conds []metav1.Condition
			if c := condition(&u, pnv1.ConditionReady); c != nil {
				conds = append(conds, *c)
			}
			if meta.IsStatusConditionTrue(conds, pnv1.ConditionReady) && slices.Contains(u.GetFinalizers(), pnv1.FinalizerInUse) {
				n++
			}
		}
		return n == size.network, nil
	})
	var stillGated, unbound int
	lifted = poll("the gates lifted", func(ctx context.Context) (bool, error) {
		stillGated, unbound = simPodsState(t, ctx, client, size)
		return stillGated == 0, nil
	})
	bound = poll("the pods bound", func(ctx context.Context) (bool, error) {
		stillGated, unbound = simPodsState(t, ctx, client, size)
		return unbound == 0, nil
	})
	return ready, lifted, bound
}

// simPodsState counts the gated pods still gated and those not bound yet,
// checking each bound one is on the node its network's label is on.
func simPodsState(t *testing.T, ctx context.Context, client kubernetes.Interface, size scaleSize) (gated, unbound int) {
	t.Helper()
	opts := metav1.ListOptions{LabelSelector: "fastpath.dev/e2e=scale-gated", Limit: 1000}
	for {
		list, err := client.CoreV1().Pods(simNamespace).List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if len(p.Spec.SchedulingGates) > 0 {
				gated++
			}
			if p.Spec.NodeName == "" {
				unbound++
				continue
			}
			var i int
			if _, err := fmt.Sscanf(p.Name, "gated-%05d", &i); err != nil {
				t.Fatal(err)
			}
			if want := simNode((i % size.network) % size.nodes); p.Spec.NodeName != want {
				t.Fatalf("pod %s lists PodNetwork %s, attached only by node %s, and is bound to %s", p.Name, simNetwork(i%size.network), want, p.Spec.NodeName)
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			return gated, unbound
		}
	}
}

// installPodNetworkCRDs creates the PodNetwork CRDs as the chart renders
// them, when the bed does not have them yet (the chart keeps them after
// its release is uninstalled), and waits until they are served.
func installPodNetworkCRDs(t *testing.T, ctx context.Context) {
	t.Helper()
	v, err := bed.Config().Versions()
	if err != nil {
		t.Fatal(err)
	}
	out, err := bed.Helm(ctx, "template", "fastpath", bed.Config().Chart(), "--kube-version", strings.TrimPrefix(v.Kubernetes, "v"),
		"--show-only", "templates/podnetwork-crd.yaml", "--set", "podNetworks.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	crds := dynamicClient(t).Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := r.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if _, err := crds.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err1 := dynamicClient(t).Resource(pnv1.PodNetworkResource).List(ctx, metav1.ListOptions{Limit: 1})
		_, err2 := dynamicClient(t).Resource(pnv1.PodNetworkAttachmentResource).List(ctx, metav1.ListOptions{Limit: 1})
		return err1 == nil && err2 == nil, nil
	})
	if err != nil {
		t.Fatal("the PodNetwork CRDs are not served")
	}
}

// deleteSimPods deletes the simulation's pods at once: no kubelet is
// there to end them.
func deleteSimPods(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pods := client.CoreV1().Pods(simNamespace)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete the simulation's pods: %v", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("the simulation's pods are not gone: %v", err)
	}
}

// cleanUpSimulation removes everything a simulation made, this one's or
// one killed before its cleanup: its pods and claims, PodNetworks,
// slices, nodes, leases, DeviceClass and namespace.
func cleanUpSimulation(t *testing.T, client kubernetes.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	deleteSimPods(t, client)
	networks := dynamicClient(t).Resource(pnv1.PodNetworkResource)
	if list, err := networks.List(ctx, metav1.ListOptions{}); err == nil {
		_ = parallel(ctx, len(list.Items), func(ctx context.Context, i int) error {
			name := list.Items[i].GetName()
			if !strings.HasPrefix(name, simNetworkPrefix) {
				return nil
			}
			// The controller may be gone: nothing else takes the
			// finalizers off.
			_, _ = networks.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			return networks.Delete(ctx, name, metav1.DeleteOptions{})
		})
	}
	claimsAPI := client.ResourceV1().ResourceClaims(simNamespace)
	if list, err := claimsAPI.List(ctx, metav1.ListOptions{}); err == nil {
		_ = parallel(ctx, len(list.Items), func(ctx context.Context, i int) error {
			name := list.Items[i].Name
			_, _ = claimsAPI.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			return claimsAPI.Delete(ctx, name, metav1.DeleteOptions{})
		})
	}
	_ = client.ResourceV1().DeviceClasses().Delete(ctx, simClass, metav1.DeleteOptions{})
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: simLabel + "=true"})
	if err != nil {
		t.Errorf("list the simulated nodes: %v", err)
		return
	}
	_ = parallel(ctx, len(nodes.Items), func(ctx context.Context, i int) error {
		name := nodes.Items[i].Name
		sel := fields.OneTermEqualSelector("spec.nodeName", name).String()
		if err := client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: sel}); err != nil {
			t.Errorf("delete the slices of %s: %v", name, err)
		}
		_ = client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
		if err := client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete node %s: %v", name, err)
		}
		return nil
	})
	if err := client.CoreV1().Namespaces().Delete(ctx, simNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete namespace %s: %v", simNamespace, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, simNamespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("namespace %s is not gone", simNamespace)
	}
}

// parallel runs f for 0..n-1 on 16 goroutines and returns the errors.
func parallel(ctx context.Context, n int, f func(context.Context, int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next atomic.Int64
	)
	for range min(16, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// apiMemory is a process's resident set and the Go heap live after a
// garbage collection, in bytes.
type apiMemory struct{ rss, heap float64 }

// apiServerMemory collects the API server's garbage and reads its own
// metrics: the live heap of that collection is what it keeps, not what it
// threw away since the last one.
func apiServerMemory(t *testing.T, ctx context.Context) apiMemory {
	t.Helper()
	rc := bed.Client().CoreV1().RESTClient()
	if _, err := rc.Get().AbsPath("/debug/pprof/heap").Param("gc", "1").DoRaw(ctx); err != nil {
		t.Fatalf("collect the API server's garbage (a bed started before it had --profiling=true must be restarted: make cluster-down): %v", err)
	}
	body, err := rc.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("the API server's metrics: %v", err)
	}
	return apiMemory{rss: metricValue(t, string(body), "process_resident_memory_bytes"), heap: metricValue(t, string(body), "go_gc_heap_live_bytes")}
}

// etcdSize is the size of etcd's database file, from its metrics.
func etcdSize(t *testing.T, ctx context.Context) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", bed.Config().EtcdPort), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("etcd's metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return metricValue(t, string(body), "etcd_mvcc_db_total_size_in_bytes")
}

// metricValue is the value of an unlabelled metric in a Prometheus text
// exposition.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/(1<<10)) }

// percentile is the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))].Round(time.Millisecond)
}
