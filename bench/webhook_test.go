package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	rtmetrics "runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/admission"
	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/validate"
)

// webhookPods are the pods of a burst, in turn: networks selected with
// each annotation, and one selecting a network twice as one interface
// (refused).
var webhookPods = []string{
	`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p%d", "namespace": "app", "annotations": {"k8s.v1.cni.cncf.io/networks": "net-a,net-b@n2,other/net-c"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}`,
	`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p%d", "namespace": "app", "annotations": {"network.fastpath.dev/networks": "[{\"podNetworkName\": \"dataplane1\", \"interfaceName\": \"net1\"}, {\"podNetworkName\": \"dataplane2\", \"interfaceName\": \"net2\"}]"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}`,
	`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p%d", "namespace": "app", "annotations": {"k8s.v1.cni.cncf.io/networks": "[{\"name\": \"net-a\", \"interface\": \"n1\"}, {\"name\": \"net-a\", \"interface\": \"n1\"}]"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}`,
}

// BenchmarkWebhookReview: bursts of 200 pod creations sent to the
// admission webhooks over HTTPS (HTTP/2, as the API server's client), 8
// pods in flight at once (the pods of a Deployment scaled up arrive in the
// ReplicaSet controller's batches of 1, 2, 4, 8...). Each pod is reviewed
// as the API server reviews it: by the mutating webhook (the scheduling
// gates, GatePath), then by the validating one (Path), each review timed
// from its send to its answer. The client is a process of its own, as the
// API server is, on the same CPUs. It reports the p50 and p99 of a review
// (the target: p99 under 10 ms, far within the API server's 2 s timeout)
// and the p99 of a pod's two reviews.
func BenchmarkWebhookReview(b *testing.B) {
	const burst, inFlight = 200, 8
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(10)))
	defer cancel()
	dir := b.TempDir()
	cr := &rotator.CertRotator{CAName: "fastpath-webhook-ca", CAOrganization: "fastpath", DNSName: "localhost",
		ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	now := time.Now()
	ca, err := cr.CreateCACert(now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	cert, key, err := cr.CreateCertPEM(ca, now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	for name, data := range map[string][]byte{admission.CertFile: cert, admission.KeyFile: key, "ca.crt": ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	m := metrics.New()
	h := &admission.Handler{
		Check:   validate.Check{Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}},
		NADs:    npwg.ConfigRules{Plugins: cnipolicy.DefaultPlugins},
		Metrics: m,
	}
	srv, err := admission.Listen(ctx, "127.0.0.1:0", dir, map[string]http.Handler{admission.Path: h, admission.GatePath: &admission.Gate{Metrics: m}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	bodies := make([][]byte, burst)
	for i := range bodies {
		bodies[i], err = json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "app", Operation: admissionv1.Create,
				Object: runtime.RawExtension{Raw: fmt.Appendf(nil, webhookPods[i%len(webhookPods)], i)}},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	data, err := json.Marshal(webhookClientJob{URL: "https://" + srv.Addr().String(), CAFile: filepath.Join(dir, "ca.crt"), Bodies: bodies, InFlight: inFlight})
	if err != nil {
		b.Fatal(err)
	}
	job := filepath.Join(dir, "job.json")
	if err := os.WriteFile(job, data, 0o600); err != nil {
		b.Fatal(err)
	}
	client := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	client.Env = append(os.Environ(), webhookClientEnv+"="+job)
	client.Stderr = os.Stderr
	toClient, err := client.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := client.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := client.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = toClient.Close(); _ = client.Wait() }()
	fromClient := bufio.NewScanner(out)
	fromClient.Buffer(nil, 1<<20)
	runBurst := func() webhookBurst {
		if _, err := io.WriteString(toClient, "burst\n"); err != nil {
			b.Fatal(err)
		}
		if !fromClient.Scan() {
			b.Fatalf("the client stopped: %v", fromClient.Err())
		}
		var res webhookBurst
		if err := json.Unmarshal(fromClient.Bytes(), &res); err != nil {
			b.Fatal(err)
		}
		if res.Err != "" {
			b.Fatal(res.Err)
		}
		return res
	}
	// The connection is made before the clock runs, as the API server's is.
	runBurst()
	var reviews, pods []time.Duration
	for b.Loop() {
		res := runBurst()
		reviews = append(append(reviews, res.Gate...), res.Validate...)
		for i := range res.Gate {
			pods = append(pods, res.Gate[i]+res.Validate[i])
		}
	}
	at := func(lat []time.Duration, q float64) float64 {
		slices.Sort(lat)
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Nanoseconds())
	}
	b.ReportMetric(at(reviews, 0.5), "p50-ns/review")
	b.ReportMetric(at(reviews, 0.99), "p99-ns/review")
	b.ReportMetric(at(pods, 0.99), "p99-ns/pod")
}

// webhookClientEnv names the job file of the benchmark's client process.
const webhookClientEnv = "FASTPATH_BENCH_WEBHOOK_CLIENT"

// webhookClientJob is what the client process sends, and where.
type webhookClientJob struct {
	URL, CAFile string
	Bodies      [][]byte
	InFlight    int
}

// webhookBurst is the client's answer for one burst: each pod's two
// reviews' latencies, in pod order, or what went wrong.
type webhookBurst struct {
	Gate, Validate []time.Duration
	Err            string
}

func TestMain(m *testing.M) {
	if job := os.Getenv(webhookClientEnv); job != "" {
		if err := webhookClient(job, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// webhookClient runs a burst of the job's pods, as the API server calls
// the webhooks, for every line of in, and writes its webhookBurst as a
// line of out.
func webhookClient(jobFile string, in io.Reader, out io.Writer) error {
	data, err := os.ReadFile(jobFile)
	if err != nil {
		return err
	}
	var job webhookClientJob
	if err := json.Unmarshal(data, &job); err != nil {
		return err
	}
	caPEM, err := os.ReadFile(job.CAFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: true, MaxIdleConnsPerHost: len(job.Bodies),
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}}}
	review := func(path string, body []byte) (*admissionv1.AdmissionResponse, error) {
		resp, err := client.Post(job.URL+path, "application/json", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		var out admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if out.Response == nil {
			return nil, fmt.Errorf("%s: no response: status %s", path, resp.Status)
		}
		return out.Response, nil
	}
	lines := bufio.NewScanner(in)
	enc := json.NewEncoder(out)
	for lines.Scan() {
		res := webhookBurst{Gate: make([]time.Duration, len(job.Bodies)), Validate: make([]time.Duration, len(job.Bodies))}
		var mu sync.Mutex
		var wg sync.WaitGroup
		slots := make(chan struct{}, job.InFlight)
		for i, body := range job.Bodies {
			slots <- struct{}{}
			wg.Go(func() {
				defer func() { <-slots }()
				fail := func(err error) {
					mu.Lock()
					defer mu.Unlock()
					if res.Err == "" {
						res.Err = fmt.Sprintf("pod %d: %v", i, err)
					}
				}
				start := time.Now()
				gated, err := review(admission.GatePath, body)
				res.Gate[i] = time.Since(start)
				if err != nil {
					fail(err)
					return
				}
				start = time.Now()
				judged, err := review(admission.Path, body)
				res.Validate[i] = time.Since(start)
				switch {
				case err != nil:
					fail(err)
				case !gated.Allowed || (len(gated.Patch) > 0) != (i%len(webhookPods) == 1):
					fail(fmt.Errorf("gate: allowed %v, patch %s", gated.Allowed, gated.Patch))
				case judged.Allowed != (i%len(webhookPods) != 2):
					fail(fmt.Errorf("allowed %v", judged.Allowed))
				}
			})
		}
		wg.Wait()
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return lines.Err()
}

// The chart's controller: its memory limit, and the share of it the
// webhook's answer to its largest object may take.
const (
	controllerLimit = 128 << 20
	webhookShare    = controllerLimit / 4
)

// webhookObject is an object sent to the validating webhook: old, when
// not nil, makes the review an update.
type webhookObject struct {
	name, kind string
	object     []byte
	old        []byte
	// allowed is the verdict; unread, whether the object is refused
	// unread.
	allowed, unread bool
}

// slashes is a JSON list of n strings "/a": each a host path to the
// nodes' CNI policy, and a problem.
func slashes(n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat(`"/a",`, n), ",") + "]"
}

// pathLists are as many members "xN": [...] of host paths, lists of at
// most bounds.Items, as fit in most bytes with head and tail around them.
func pathLists(most int, head, tail string) string {
	const item = len(`"/a",`)
	var b strings.Builder
	b.WriteString(head)
	for i := 0; ; i++ {
		key := fmt.Sprintf(`"x%d": `, i)
		sep := ""
		if i > 0 {
			sep = ", "
		}
		room := most - b.Len() - len(tail) - len(sep) - len(key) - len("[]")
		n := min(room/item, bounds.Items)
		if n < 1 {
			break
		}
		b.WriteString(sep + key + slashes(n))
	}
	b.WriteString(tail)
	return b.String()
}

// largestCNIConfig is a CNI claim's config of bounds.ConfigBytes full of
// host paths.
func largestCNIConfig(ifName string) string {
	return pathLists(bounds.ConfigBytes, `{"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "`+ifName+`", "plugins": [{"type": "macvlan", "config": {`, `}}]}`)
}

// largestClaimSpec is the spec of the largest claim: as many CNI requests
// and configs as the API server allows, each config full of host paths.
func largestClaimSpec() string {
	var reqs, cfgs []string
	for i := range resourceapi.DeviceConfigMaxSize {
		reqs = append(reqs, fmt.Sprintf(`{"name": "r%d", "exactly": {"deviceClassName": "cni.networking.x-k8s.io"}}`, i))
		cfgs = append(cfgs, fmt.Sprintf(`{"requests": ["r%d"], "opaque": {"driver": "cni.dra.networking.x-k8s.io", "parameters": %s}}`, i, largestCNIConfig(fmt.Sprintf("net%d", i))))
	}
	return `{"devices": {"requests": [` + strings.Join(reqs, ", ") + `], "config": [` + strings.Join(cfgs, ", ") + `]}}`
}

// badSelection is an NPWG selection of n bytes, each network's name not
// valid: a problem each.
func badSelection(n int) string { return strings.TrimSuffix(strings.Repeat("A,", (n+1)/2), ",") }

// badPodNetworks is a list of PodNetworks of about n bytes, each name not
// valid.
func badPodNetworks(n int) string {
	const item = `{"podNetworkName": "A"}`
	return "[" + strings.TrimSuffix(strings.Repeat(item+",", (n-2)/(len(item)+1)), ",") + "]"
}

// webhookPod is a pod app/p with the selection annotations and extra members of
// its spec.
func webhookPod(npwg, networks, spec string) []byte {
	annotations, _ := json.Marshal(map[string]string{"k8s.v1.cni.cncf.io/networks": npwg, "network.fastpath.dev/networks": networks})
	return []byte(`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "app", "annotations": ` + string(annotations) +
		`}, "spec": {"containers": [{"name": "c", "image": "x"}]` + spec + `}}`)
}

// manyContainers is a pod spec's containers member of about n bytes.
func manyContainers(n int) string {
	var b strings.Builder
	b.WriteString(`, "initContainers": [`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name": "i%d", "image": "registry.example.com/app:v1", "env": [{"name": "E", "value": "v"}]}`, i)
	}
	b.WriteByte(']')
	return b.String()
}

// largestNodeConfig is a FastpathNodeConfig with every list as long as its
// CRD allows.
func largestNodeConfig() string {
	var labels, exprs, names, pools, memifs, vfs []string
	for i := range 32 {
		labels = append(labels, fmt.Sprintf(`"l%d": "v"`, i))
		exprs = append(exprs, fmt.Sprintf(`{"key": "k%d", "operator": "In", "values": %s}`, i, slashes(64)))
		names = append(names, fmt.Sprintf(`{"name": "example.com/n%d", "filter": "%s"}`, i, strings.Repeat("x", 4096)))
	}
	for i := range 64 {
		var routes []string
		for j := range 64 {
			routes = append(routes, fmt.Sprintf(`{"destination": "10.%d.%d.0/24"}`, i, j))
		}
		pools = append(pools, fmt.Sprintf(`{"name": "p%d", "subnet": "10.%d.0.0/16", "exclude": %s, "routes": [%s]}`, i, i, slashes(256), strings.Join(routes, ",")))
		vfs = append(vfs, fmt.Sprintf(`{"pf": {"name": "ens%d"}, "numVfs": -1}`, i))
	}
	for i := range 256 {
		memifs = append(memifs, fmt.Sprintf(`{"name": "m%d", "role": "server"}`, i))
	}
	return `{"apiVersion": "fastpath.dev/v1alpha1", "kind": "FastpathNodeConfig", "metadata": {"name": "all"}, "spec": {"nodeSelector": {"matchLabels": {` +
		strings.Join(labels, ",") + `}, "matchExpressions": [` + strings.Join(exprs, ",") + `]}, "resourceNames": [` + strings.Join(names, ",") +
		`], "ipPools": [` + strings.Join(pools, ",") + `], "memifEndpoints": [` + strings.Join(memifs, ",") + `], "vfs": [` + strings.Join(vfs, ",") + `]}}`
}

// webhookObjects are the largest objects of each kind the webhook judges,
// each built to have the most problems, the largest it refuses unread
// and the largest review.
func webhookObjects() []webhookObject {
	claimSpec := largestClaimSpec()
	var classConfigs []string
	for i := range resourceapi.DeviceConfigMaxSize {
		classConfigs = append(classConfigs, fmt.Sprintf(`{"opaque": {"driver": "cni.dra.networking.x-k8s.io", "parameters": %s}}`, largestCNIConfig(fmt.Sprintf("net%d", i))))
	}
	var plugins []string
	for i := range bounds.Plugins {
		// ptp is not on the nodes' allowlist.
		plugins = append(plugins, pathLists(bounds.NetworkConfigBytes/bounds.Plugins-64, fmt.Sprintf(`{"type": "ptp", "config": {"name": "p%d", `, i), `}}`))
	}
	nadConfig, _ := json.Marshal(pathLists(bounds.NetworkConfigBytes, `{"cniVersion": "1.0.0", "name": "uplink", "plugins": [{"type": "macvlan", `, `}]}`))
	var refs []string
	for i := range 16 {
		refs = append(refs, fmt.Sprintf(`{"group": "k8s.cni.cncf.io", "kind": "NetworkAttachmentDefinition", "name": "n%d"}`, i))
	}
	largestPod := webhookPod(badSelection(bounds.AnnotationBytes), badPodNetworks(bounds.AnnotationBytes), "")
	return []webhookObject{
		{name: "ResourceClaim", kind: "ResourceClaim",
			object: []byte(`{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "big", "namespace": "tenant-a"}, "spec": ` + claimSpec + `}`)},
		{name: "ResourceClaimTemplate", kind: "ResourceClaimTemplate",
			object: []byte(`{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "big", "namespace": "tenant-a"}, "spec": {"spec": ` + claimSpec + `}}`)},
		{name: "DeviceClass", kind: "DeviceClass",
			object: []byte(`{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "big"}, "spec": {"config": [` + strings.Join(classConfigs, ",") + `]}}`)},
		{name: "CNIConfig", kind: "CNIConfig",
			object: []byte(`{"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNIConfig", "metadata": {"name": "big"}, "spec": {"ifName": "net1", "plugins": [` + strings.Join(plugins, ",") + `]}}`)},
		{name: "NetworkAttachmentDefinition", kind: "NetworkAttachmentDefinition",
			object: []byte(`{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", "metadata": {"name": "big", "namespace": "tenant-a"}, "spec": {"config": ` + string(nadConfig) + `}}`)},
		{name: "Pod", kind: "Pod", object: largestPod},
		{name: "Pod/update", kind: "Pod", object: webhookPod(badSelection(bounds.AnnotationBytes), badPodNetworks(bounds.AnnotationBytes), `, "hostNetwork": false`),
			old: webhookPod(badSelection(bounds.AnnotationBytes-2), badPodNetworks(bounds.AnnotationBytes), "")},
		{name: "PodNetwork", kind: "PodNetwork",
			object: []byte(`{"apiVersion": "network.fastpath.dev/v1alpha1", "kind": "PodNetwork", "metadata": {"name": "big"}, "spec": {"provider": "x", "parametersRefs": [` + strings.Join(refs, ",") + `]}}`)},
		{name: "PodNetworkAttachment", kind: "PodNetworkAttachment",
			object: []byte(`{"apiVersion": "network.fastpath.dev/v1alpha1", "kind": "PodNetworkAttachment", "metadata": {"name": "big", "namespace": "app"}, "spec": {"podNetworkName": "A", "parametersRefs": [` + strings.Join(refs, ",") + `]}}`)},
		{name: "FastpathNodeConfig", kind: "FastpathNodeConfig", object: []byte(largestNodeConfig())},
		{name: "unread/ResourceClaim-1.5MB", kind: "ResourceClaim", unread: true,
			object: []byte(`{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "big", "namespace": "tenant-a"}, "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "cni.networking.x-k8s.io"}}], "config": [{"requests": ["r"], "opaque": {"driver": "cni.dra.networking.x-k8s.io", "parameters": ` +
				`{"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1", "plugins": [{"type": "macvlan", "config": {"x": ` + slashes(300000) + `}}]}}}]}}}`)},
		{name: "largest-review/Pod-update-8MiB", kind: "Pod",
			object: webhookPod(badSelection(bounds.AnnotationBytes), badPodNetworks(bounds.AnnotationBytes), manyContainers(3900<<10)+`, "hostNetwork": false`),
			old:    webhookPod(badSelection(bounds.AnnotationBytes-2), badPodNetworks(bounds.AnnotationBytes), manyContainers(3900<<10))},
	}
}

// peakHeap runs op and returns the most heap it held at once beyond what
// was in use before it: the heap's objects, live and not yet collected,
// sampled from another goroutine every 50 µs and once at its end.
func peakHeap(op func()) uint64 {
	const heapObjects = "/memory/classes/heap/objects:bytes"
	read := func(s []rtmetrics.Sample) uint64 {
		rtmetrics.Read(s)
		return s[0].Value.Uint64()
	}
	goruntime.GC()
	base := read([]rtmetrics.Sample{{Name: heapObjects}})
	var peak atomic.Uint64
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		s := []rtmetrics.Sample{{Name: heapObjects}}
		for {
			if v := read(s); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Microsecond):
			}
		}
	}()
	op()
	if v := read([]rtmetrics.Sample{{Name: heapObjects}}); v > peak.Load() {
		peak.Store(v)
	}
	close(stop)
	<-stopped
	return max(peak.Load(), base) - base
}

// BenchmarkWebhookLargest: the largest object of each kind the validating
// webhook judges, built to have the most problems (a claim of 32 configs
// each 10 KiB of host paths, a NetworkAttachmentDefinition of a 64 KiB
// configuration, a pod of two 64 KiB selections of names that are not
// valid, and an update of that pod to one with a problem more), the
// claim of 1.5 MB, 300,000 host paths, it refuses unread, and the largest
// review it reads (the pod's update, each pod with 3.9 MiB of containers
// fastpath does not read), each sent to the handler as the API server
// sends it (an AdmissionReview of JSON, its length said) and answered.
// The time per op is the review's. It reports
// the heap's peak while answering beyond the heap before it (peak-MiB,
// sampled; B/op, the bytes allocated, bounds it), the answer's bytes
// (answer-B), and the peak's share of the controller's memory limit in
// the chart (128 MiB): the target is at most a quarter.
func BenchmarkWebhookLargest(b *testing.B) {
	h := &admission.Handler{
		Check: validate.Check{Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}},
		NADs:  npwg.ConfigRules{Plugins: cnipolicy.DefaultPlugins},
	}
	for _, o := range webhookObjects() {
		b.Run(o.name, func(b *testing.B) {
			op := admissionv1.Create
			if o.old != nil {
				op = admissionv1.Update
			}
			body, err := json.Marshal(admissionv1.AdmissionReview{
				TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Request: &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Kind: o.kind}, Namespace: "tenant-a", Operation: op,
					Object: runtime.RawExtension{Raw: o.object}, OldObject: runtime.RawExtension{Raw: o.old}},
			})
			if err != nil {
				b.Fatal(err)
			}
			var peak uint64
			var answer int
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				p := peakHeap(func() {
					r := httptest.NewRequest(http.MethodPost, admission.Path, bytes.NewReader(body))
					r.Header.Set("Content-Type", "application/json")
					h.ServeHTTP(rec, r)
				})
				peak = max(peak, p)
				var out admissionv1.AdmissionReview
				if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
					b.Fatalf("status %d, answer %.200s: %v", rec.Code, rec.Body, err)
				}
				if out.Response.Allowed != o.allowed {
					b.Fatalf("allowed %v (%+v), want %v", out.Response.Allowed, out.Response.Result, o.allowed)
				}
				if unread := out.Response.Result != nil && strings.Contains(out.Response.Result.Message, "refused unread"); unread != o.unread {
					b.Fatalf("refused unread: %v (%.300s), want %v", unread, out.Response.Result.Message, o.unread)
				}
				answer = rec.Body.Len()
			}
			b.ReportMetric(float64(len(body)), "review-B")
			b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
			b.ReportMetric(float64(peak)/controllerLimit*100, "%-of-limit")
			b.ReportMetric(float64(answer), "answer-B")
			if peak > webhookShare {
				b.Logf("the heap's peak was %d MiB, more than the %d MiB a quarter of the controller's limit is", peak>>20, webhookShare>>20)
			}
		})
	}
}

// BenchmarkWebhookUpdate: an update of a claim of n CNI requests, each
// config 10 KiB of host paths, to one with a request more: the webhook
// judges both and refuses the update for the new request's problems
// alone. It reports the problems of the claim before (problems); the
// work grows with them, not their square.
func BenchmarkWebhookUpdate(b *testing.B) {
	h := &admission.Handler{
		Check: validate.Check{Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}},
		NADs:  npwg.ConfigRules{Plugins: cnipolicy.DefaultPlugins},
	}
	claim := func(n int) []byte {
		var reqs, cfgs []string
		for i := range n {
			reqs = append(reqs, fmt.Sprintf(`{"name": "r%d", "exactly": {"deviceClassName": "cni.networking.x-k8s.io"}}`, i))
			cfgs = append(cfgs, fmt.Sprintf(`{"requests": ["r%d"], "opaque": {"driver": "cni.dra.networking.x-k8s.io", "parameters": %s}}`, i, largestCNIConfig(fmt.Sprintf("net%d", i))))
		}
		return []byte(`{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "big", "namespace": "tenant-a"}, "spec": {"devices": {"requests": [` +
			strings.Join(reqs, ", ") + `], "config": [` + strings.Join(cfgs, ", ") + `]}}}`)
	}
	for _, n := range []int{4, 8, 16, resourceapi.DeviceConfigMaxSize - 1} {
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) {
			old := claim(n)
			req := &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Kind: "ResourceClaim"}, Namespace: "tenant-a", Operation: admissionv1.Update,
				Object: runtime.RawExtension{Raw: claim(n + 1)}, OldObject: runtime.RawExtension{Raw: old}}
			problems := len(validate.Object(old, "tenant-a", h.Check, h.NADs).Problems)
			b.ReportAllocs()
			for b.Loop() {
				resp, _, _ := h.Review(req)
				if resp.Allowed {
					b.Fatal("allowed, want it refused for the new request's problems")
				}
				for r := range n {
					if msg := resp.Result.Message; strings.Contains(msg, fmt.Sprintf(`request "r%d"`, r)) {
						b.Fatalf("refused for request r%d, which the claim had before: %.300s", r, msg)
					}
				}
			}
			b.ReportMetric(float64(problems), "problems")
		})
	}
}
