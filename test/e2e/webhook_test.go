//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// The webhook's objects in the bed's release.
const (
	webhookName = "fastpath-webhook"
	// webhookPort is the controller's, in the host network (the bed's API
	// server has 26443).
	webhookPort = 26449
)

var (
	claimsResource = schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}
	nadsResource   = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}
	podsResource   = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
)

// webhookObject is an object of the test, from YAML.
func webhookObject(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// dryRun creates the object as kubectl apply --dry-run=server would: the
// API server's admission runs, webhooks included, and nothing is stored.
func dryRun(ctx context.Context, t *testing.T, gvr schema.GroupVersionResource, u *unstructured.Unstructured) error {
	t.Helper()
	r := dynamicClient(t).Resource(gvr)
	var err error
	if ns := u.GetNamespace(); ns != "" {
		_, err = r.Namespace(ns).Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	} else {
		_, err = r.Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	}
	return err
}

// controllerMemory reads the controller's resident memory and Go heap in
// use from its /metrics, in MiB.
func controllerMemory(ctx context.Context, t *testing.T) (rss, heap float64) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", testbed.ControllerPort), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the controller's metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, _ := strings.Cut(sc.Text(), " ")
		v, _ := strconv.ParseFloat(value, 64)
		switch name {
		case "process_resident_memory_bytes":
			rss = v / (1 << 20)
		case "go_memstats_heap_inuse_bytes":
			heap = v / (1 << 20)
		}
	}
	return rss, heap
}

// settledMemory is the controller's memory once it has run a while: the
// least of a few readings, after its start-up's garbage is collected.
func settledMemory(ctx context.Context, t *testing.T) (rss, heap float64) {
	t.Helper()
	rss, heap = 1e9, 1e9
	deadline := time.Now().Add(20 * time.Second)
	_ = wait.PollUntilContextTimeout(ctx, 2*time.Second, 25*time.Second, false, func(ctx context.Context) (bool, error) {
		r, h := controllerMemory(ctx, t)
		rss, heap = min(rss, r), min(heap, h)
		return time.Now().After(deadline), nil
	})
	return rss, heap
}

// controllerState says what became of the controller's pods: their
// phase, their containers' state and their logs.
func controllerState(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := bed.Client().CoreV1().Pods(testbed.ChartNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=fastpath-controller"})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s %+v\n", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		log, err := bed.PodLogs(ctx, p.Namespace, p.Name)
		if err != nil {
			log = err.Error()
		}
		fmt.Fprintf(&b, "%s\n", log)
	}
	return b.String()
}

// TestWebhook: with webhook.enabled, each object a node would refuse is
// refused when written, at once, with the field named: a claim with an
// MTU below 68, a CNI claim running a plugin not allowed, a
// NetworkAttachmentDefinition naming the host's eth0, a pod selecting one
// network twice as one interface, a pod naming a PodNetwork twice. The
// controller made the certificates and patched the CA bundle itself, and
// makes the serving certificate again, while reviews flow, none refused.
// With the webhook stopped, pods are still admitted, and fastpath's own
// kinds and claims are refused with a message saying the webhook cannot
// be called. It logs the controller's memory with the webhook
// (cert-controller's caches and rotation).
func TestWebhook(t *testing.T) {
	ctx, cancel := context.WithTimeout(klog.NewContext(t.Context(), klog.Background()), 8*time.Minute)
	defer cancel()
	client := bed.Client()
	vwcs := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	// Whatever happens, no configuration that fails closed is left on the
	// bed for the next test (the release's uninstall removes it too).
	t.Cleanup(func() { _ = vwcs.Delete(context.Background(), webhookName, metav1.DeleteOptions{}) })
	t.Cleanup(func() {
		_ = dynamicClient(t).Resource(pnv1.PodNetworkResource).Delete(context.Background(), pnv1.DefaultPodNetworkName, metav1.DeleteOptions{})
	})
	d := newDaemon(t, 26251, "--cni", "--npwg", "--podnetworks", "--cni-bin-dir", bed.Config().CNIBinDir())
	t.Cleanup(func() { d.stop(t) })
	deployments := client.AppsV1().Deployments(testbed.ChartNamespace)
	controllerReady := func(what string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
			dep, err := deployments.Get(ctx, "fastpath-controller", metav1.GetOptions{})
			return err == nil && dep.Status.ObservedGeneration == dep.Generation && dep.Status.ReadyReplicas == 1 &&
				dep.Status.UpdatedReplicas == 1 && dep.Status.Replicas == 1, nil
		})
		if err != nil {
			t.Fatalf("%s: the controller is not ready: %v\n%s", what, err, controllerState(t))
		}
	}
	// The webhook on from the install: the controller in the host network
	// is called at localhost (the bed's API server runs no kube-proxy).
	// An upgrade that turned it on would roll the controller, whose new
	// pod cannot start beside the old on the bed's one node (the host
	// network's ports).
	d.values["webhook"] = map[string]any{"enabled": true, "port": webhookPort, "url": fmt.Sprintf("https://localhost:%d/validate", webhookPort)}
	start := time.Now()
	d.start(t, ctx)
	controllerReady("with the webhook")
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		c, err := vwcs.Get(ctx, webhookName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, w := range c.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the controller did not patch the CA bundle into %s: %v", webhookName, err)
	}
	t.Logf("the webhook serves %s after the install (certificates made, the Secret's files updated by the kubelet)", time.Since(start).Round(time.Second))
	rss, heap := settledMemory(ctx, t)
	t.Logf("controller memory with the webhook (cert-controller): RSS %.1f MiB, heap in use %.1f MiB", rss, heap)

	lowMTU := webhookObject(t, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: e2e-webhook-mtu, namespace: default}
spec:
  devices:
    requests: [{name: nic, exactly: {deviceClassName: netdev.fastpath.dev}}]
    config:
    - opaque: {driver: fastpath.dev, parameters: {apiVersion: fastpath.dev/v1alpha1, kind: InterfaceConfig, interface: {mtu: 60}}}
`)
	ptp := webhookObject(t, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: e2e-webhook-ptp, namespace: default}
spec:
  devices:
    requests: [{name: net, exactly: {deviceClassName: cni.networking.x-k8s.io}}]
    config:
    - opaque:
        driver: cni.dra.networking.x-k8s.io
        parameters: {apiVersion: cni.networking.x-k8s.io/v1alpha1, kind: CNI, ifName: net1, plugins: [{type: ptp, config: {}}]}
`)
	eth0 := webhookObject(t, `
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: e2e-webhook-eth0, namespace: default}
spec:
  config: '{"cniVersion": "1.0.0", "name": "uplink", "type": "macvlan", "master": "eth0", "ipam": {"type": "static"}}'
`)
	pod := func(name, key, value string) *unstructured.Unstructured {
		u := webhookObject(t, fmt.Sprintf(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": %q, "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}`, name))
		u.SetAnnotations(map[string]string{key: value})
		return u
	}
	sameNet := pod("e2e-webhook-same-net", "k8s.v1.cni.cncf.io/networks", `[{"name": "net-a", "interface": "n1"}, {"name": "net-a", "interface": "n1"}]`)
	podNetworkTwice := pod("e2e-webhook-pn-twice", pnv1.AnnotationNetworks, `[{"podNetworkName": "dataplane", "interfaceName": "net1"}, {"podNetworkName": "dataplane", "interfaceName": "net2"}]`)
	goodPod := pod("e2e-webhook-good", "k8s.v1.cni.cncf.io/networks", "net-a,net-b@n2")
	dataplane := webhookObject(t, `{"apiVersion": "network.fastpath.dev/v1alpha1", "kind": "PodNetwork", "metadata": {"name": "e2e-webhook-dataplane"}, "spec": {"enabled": true}}`)

	t.Run("refused at once, the field named", func(t *testing.T) {
		for _, tc := range []struct {
			what string
			gvr  schema.GroupVersionResource
			obj  *unstructured.Unstructured
			want string
		}{
			{"a claim with an MTU below 68", claimsResource, lowMTU, `spec.devices.config[0].opaque.parameters.interface.mtu: Invalid value: 60: must be between 68 and 65535`},
			{"a CNI claim running a plugin not allowed", claimsResource, ptp, `spec.devices.config[0].opaque.parameters.plugins[0].type: Forbidden: plugin type "ptp" is not on this node's allowlist`},
			{"a NetworkAttachmentDefinition naming eth0", nadsResource, eth0, `spec.config: Forbidden: names an object of the host: plugins[0] (macvlan): master "eth0"`},
			{"a pod selecting a network twice", podsResource, sameNet, `metadata.annotations[k8s.v1.cni.cncf.io/networks][1].interface: Duplicate value: "n1"`},
			{"a pod naming a PodNetwork twice", podsResource, podNetworkTwice, `metadata.annotations[network.fastpath.dev/networks][1].podNetworkName: Duplicate value: "dataplane`},
		} {
			start := time.Now()
			err := dryRun(ctx, t, tc.gvr, tc.obj)
			took := time.Since(start)
			switch {
			case err == nil:
				t.Errorf("%s: admitted", tc.what)
			case !strings.Contains(err.Error(), "denied the request: fastpath: ") || !strings.Contains(err.Error(), tc.want):
				t.Errorf("%s: %v; want the webhook's denial naming %s", tc.what, err, tc.want)
			case took > 2*time.Second:
				t.Errorf("%s: refused after %s, want at once", tc.what, took)
			default:
				t.Logf("%s: refused in %s: %v", tc.what, took.Round(time.Millisecond), err)
			}
		}
		for what, ok := range map[string]struct {
			gvr schema.GroupVersionResource
			obj *unstructured.Unstructured
		}{"a pod selecting networks": {podsResource, goodPod}, "a PodNetwork": {pnv1.PodNetworkResource, dataplane}} {
			if err := dryRun(ctx, t, ok.gvr, ok.obj); err != nil {
				t.Errorf("%s: %v, want it admitted", what, err)
			}
		}
	})

	t.Run("the serving certificate made again while reviews flow", func(t *testing.T) {
		// served is the certificate the webhook hands a new connection.
		served := func() []byte {
			conn, err := tls.Dial("tcp", fmt.Sprintf("localhost:%d", webhookPort), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only the leaf is read
			if err != nil {
				return nil
			}
			defer func() { _ = conn.Close() }()
			return conn.ConnectionState().PeerCertificates[0].Raw
		}
		old := served()
		if old == nil {
			t.Fatal("no certificate served")
		}
		// cert-controller makes a serving certificate again (same CA) when
		// the Secret's is gone; the kubelet then updates the mounted files.
		patch := []byte(`[{"op": "remove", "path": "/data/tls.crt"}]`)
		if _, err := client.CoreV1().Secrets(testbed.ChartNamespace).Patch(ctx, webhookName+"-certs", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		good := webhookObject(t, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: e2e-webhook-good, namespace: default}
spec:
  devices:
    requests: [{name: nic, exactly: {deviceClassName: netdev.fastpath.dev}}]
    config:
    - opaque: {driver: fastpath.dev, parameters: {apiVersion: fastpath.dev/v1alpha1, kind: InterfaceConfig, interface: {mtu: 9000}}}
`)
		var sent, refused int
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			sent++
			if err := dryRun(ctx, t, claimsResource, good); err != nil {
				refused++
				t.Errorf("a good claim refused while the certificate is made again: %v", err)
			}
			now := served()
			return now != nil && !bytes.Equal(now, old), nil
		})
		if err != nil {
			t.Fatalf("the webhook still serves the old certificate: %v", err)
		}
		t.Logf("certificate made again and served; %d reviews sent meanwhile, %d refused", sent, refused)
	})

	t.Run("gated until its PodNetwork can be attached", func(t *testing.T) {
		gatedUntilEnabled(t, ctx)
	})

	t.Run("stopped: pods admitted, fastpath's kinds refused", func(t *testing.T) {
		scale, err := deployments.GetScale(ctx, "fastpath-controller", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		scale.Spec.Replicas = 0
		if _, err := deployments.UpdateScale(ctx, "fastpath-controller", scale, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := client.CoreV1().Pods(testbed.ChartNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=fastpath-controller"})
			return err == nil && len(pods.Items) == 0, nil
		})
		if err != nil {
			t.Fatalf("the controller's pods outlived its scale to 0: %v", err)
		}
		// The pod the webhook refused is admitted (failure policy Ignore);
		// the node would refuse it at sandbox creation. A pod listing
		// PodNetworks goes ungated: the node's check holds.
		if err := dryRun(ctx, t, podsResource, sameNet); err != nil {
			t.Errorf("a pod while the webhook is down: %v, want it admitted", err)
		}
		listing := pod("e2e-webhook-listing", pnv1.AnnotationNetworks, `[{"name": "dataplane", "interfaceName": "net1"}]`)
		if gates, err := dryRunGates(ctx, t, listing); err != nil || len(gates) != 0 {
			t.Errorf("a pod listing PodNetworks while the webhook is down: gates %v, %v; want it admitted ungated", gates, err)
		}
		for what, tc := range map[string]struct {
			gvr     schema.GroupVersionResource
			obj     *unstructured.Unstructured
			webhook string
		}{
			"a claim of fastpath.dev": {claimsResource, lowMTU, "namespaced.webhook.fastpath.dev"},
			"a PodNetwork":            {pnv1.PodNetworkResource, dataplane, "cluster.webhook.fastpath.dev"},
		} {
			err := dryRun(ctx, t, tc.gvr, tc.obj)
			if err == nil || !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), `failed calling webhook "`+tc.webhook+`"`) {
				t.Errorf("%s while the webhook is down: %v; want it refused, the webhook %s not called", what, err, tc.webhook)
			} else {
				t.Logf("%s while the webhook is down: %v", what, err)
			}
		}
	})
}
