package chart

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

const namespace = "fastpath-system"

func config(t *testing.T) testbed.Config {
	t.Helper()
	cfg, err := testbed.Config{}.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.Helm()); err != nil {
		t.Fatalf("helm is not built: run make deps (test/deps.sh lint): %v", err)
	}
	return cfg
}

// helmTemplate renders the chart with args (--values, --set) for the test
// bed's Kubernetes version.
func helmTemplate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cfg := config(t)
	v, err := cfg.Versions()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cfg.Helm(), append([]string{"template", "fastpath", cfg.Chart(), "--namespace", namespace,
		"--kube-version", strings.TrimPrefix(v.Kubernetes, "v")}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", errors.New(stderr.String())
	}
	return stdout.String(), nil
}

// render renders the chart and decodes every object strictly: an unknown
// or duplicate field is an error, as the API server's strict field
// validation makes it. Objects of kinds client-go does not know (the
// ServiceMonitor) are returned as unstructured YAML maps.
func render(t *testing.T, args ...string) []runtime.Object {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatalf("helm template %v: %s", args, err)
	}
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{Yaml: true, Strict: true})
	var objs []runtime.Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var meta struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind == "" {
			continue
		}
		if meta.Kind == "ServiceMonitor" || meta.Kind == "CNIConfig" || meta.Kind == "CustomResourceDefinition" {
			var u runtime.Unknown
			u.Raw = doc
			objs = append(objs, &u)
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			t.Errorf("%s %s: %v\n%s", meta.APIVersion, meta.Kind, err, doc)
			continue
		}
		objs = append(objs, obj)
	}
}

func chartFile(t *testing.T, name string) string {
	t.Helper()
	return filepath.Join(config(t).Chart(), name)
}

// TestEveryValueExercised: ci/all-values.yaml, which make lint renders,
// sets every value values.yaml documents.
func TestEveryValueExercised(t *testing.T) {
	read := func(name string) map[string]any {
		data, err := os.ReadFile(chartFile(t, name))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(data, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return m
	}
	documented, all := leaves(read("values.yaml"), ""), leaves(read("ci/all-values.yaml"), "")
	for _, k := range documented {
		if !slices.Contains(all, k) {
			t.Errorf("ci/all-values.yaml does not set %s", k)
		}
	}
	if len(documented) < 50 {
		t.Errorf("values.yaml documents only %d values", len(documented))
	}
}

// freeForm are the values that are maps a user writes as a whole (Kubernetes
// objects, labels): values, not trees of values.
var freeForm = []string{"nodeSelector", "affinity", "resources", "securityContext", "podAnnotations", "podLabels",
	"serviceAccount.annotations", "metrics.serviceMonitor.labels", "cni.approvedConfigs", "controller.nodeSelector", "controller.resources"}

// leaves lists the paths of a values tree down to scalars, lists and
// free-form maps.
func leaves(m map[string]any, prefix string) []string {
	var out []string
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok && !slices.Contains(freeForm, prefix+k) {
			out = append(out, leaves(sub, prefix+k+".")...)
			continue
		}
		out = append(out, prefix+k)
	}
	return out
}

func daemonSet(t *testing.T, objs []runtime.Object) *appsv1.DaemonSet {
	t.Helper()
	for _, o := range objs {
		if ds, ok := o.(*appsv1.DaemonSet); ok {
			return ds
		}
	}
	t.Fatal("no DaemonSet rendered")
	return nil
}

// TestDefaults: with its defaults the chart runs fastpathd with the
// daemon's standard paths, text logs (no --logging-format), probes on the
// metrics port, and the RBAC the daemon's calls need and no more.
func TestDefaults(t *testing.T) {
	objs := render(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetObjectKind().GroupVersionKind().Kind]++
	}
	for kind, n := range map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "DaemonSet": 1, "DeviceClass": 7,
		"ValidatingAdmissionPolicy": 2, "ValidatingAdmissionPolicyBinding": 2} {
		if kinds[kind] != n {
			t.Errorf("%d %s rendered, want %d (all: %v)", kinds[kind], kind, n, kinds)
		}
	}
	ds := daemonSet(t, objs)
	c := ds.Spec.Template.Spec.Containers[0]
	want := []string{"run", "--plugin-dir=/var/lib/kubelet/plugins/fastpath.dev", "--registry-dir=/var/lib/kubelet/plugins_registry",
		"--nri-socket=/var/run/nri/nri.sock", "--state-dir=/var/lib/fastpath", "--cdi-dir=/var/run/cdi",
		"--bpf-dir=/sys/fs/bpf/fastpath", "--metrics-addr=:9178", "--health-socket=/run/fastpath-probe/health.sock", "-v=0", "--pf-counters"}
	if !slices.Equal(c.Args, want) {
		t.Errorf("args = %q\nwant   %q", c.Args, want)
	}
	// pfCounters auto: on from Kubernetes 1.36, where DRAPartitionableDevices
	// is on by default; true or false whatever the version.
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--kube-version", "1.35.4"}, false},
		{[]string{"--kube-version", "1.36.0"}, true},
		{[]string{"--kube-version", "1.35.4", "--set", "pfCounters=true"}, true},
		{[]string{"--set", "pfCounters=false"}, false},
	} {
		args := daemonSet(t, render(t, tc.args...)).Spec.Template.Spec.Containers[0].Args
		if got := slices.Contains(args, "--pf-counters"); got != tc.want {
			t.Errorf("%v: --pf-counters %v, want %v", tc.args, got, tc.want)
		}
	}
	if !ds.Spec.Template.Spec.HostNetwork || c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Errorf("the daemon is not privileged in the host network namespace")
	}
	// The probes ask this pod's daemon on its own socket: during a rolling
	// update two daemons of a node share the metrics port.
	for name, p := range map[string]string{"startup": probePath(c.StartupProbe), "liveness": probePath(c.LivenessProbe), "readiness": probePath(c.ReadinessProbe)} {
		if want := map[string]string{"startup": "ready", "liveness": "alive", "readiness": "ready"}[name]; p != want {
			t.Errorf("%s probe asks %q, want %q", name, p, want)
		}
	}
	if len(c.Ports) != 0 {
		t.Errorf("ports %v: a port of a pod in the host network is a host port, which two pods of a node cannot both have", c.Ports)
	}
	if u := ds.Spec.UpdateStrategy.RollingUpdate; u == nil || u.MaxSurge.IntValue() != 1 || u.MaxUnavailable.IntValue() != 0 {
		t.Errorf("update strategy %+v, want a new pod beside the old one (maxSurge 1, maxUnavailable 0)", ds.Spec.UpdateStrategy)
	}
	for _, o := range objs {
		role, ok := o.(*rbacv1.ClusterRole)
		if !ok {
			continue
		}
		if role.Name != "fastpath" {
			t.Errorf("ClusterRole %s rendered without cni.enabled", role.Name)
		}
		var got []string
		for _, r := range role.Rules {
			for _, res := range r.Resources {
				got = append(got, res+":"+strings.Join(r.Verbs, ",")+":"+strings.Join(r.ResourceNames, ","))
			}
		}
		want := []string{"resourceslices:list,watch,create,update,delete:", "resourceclaims:get:", "resourceclaims/status:update:",
			"resourceclaims/driver:associated-node:update:fastpath.dev", "nodes:get:", "nodes/status:patch:",
			// claimPrefetch: the node's pods watched (a field selector).
			"pods:list,watch:", "events:create,patch:"}
		if !slices.Equal(got, want) {
			t.Errorf("ClusterRole rules = %q\nwant %q", got, want)
		}
	}
}

// probePath is what a probe asks fastpathd probe: alive or ready.
func probePath(p *corev1.Probe) string {
	if p == nil || p.Exec == nil || len(p.Exec.Command) != 5 || p.Exec.Command[1] != "probe" || p.Exec.Command[3] != "/run/fastpath-probe/health.sock" {
		return ""
	}
	return p.Exec.Command[4]
}

// TestAllValues: with every value set, each shows in what the chart
// renders: the flags (--logging-format only now), the mounts, the CNI
// driver's RBAC and approved configs, the memif config, the ServiceMonitor.
func TestAllValues(t *testing.T) {
	objs := render(t, "--values", chartFile(t, "ci/all-values.yaml"))
	ds := daemonSet(t, objs)
	c := ds.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--logging-format=json", "-v=4", "--metrics-addr=0.0.0.0:9300", "--health-grace=3s", "--health-degraded-hold=10m", "--health-evict", "--cni", "--cni-plugins=macvlan,host-local,tuning",
		"--cni-require-approved", "--cni-vlan-ids=0,100-199", "--cni-check-interval=1m",
		"--cni-devices=16", "--cni-shared-device", "--cni-interface=ens1f0", "--cni-config-namespace=cni-configs", "--cni-bin-dir=/opt/cni/bin,/usr/libexec/cni",
		"--cni-plugin-dir=/data/kubelet/plugins/cni.dra.networking.x-k8s.io", "--memif-dir=/run/vpp/memif",
		"--memif-config=/etc/fastpath/memif/config.yaml", "--rediscover-interval=10m", "--profiling",
		`--share=device.attributes["fastpath.dev"].ifName == "ens1f1"`, "--share-interfaces=32", "--share-bandwidth-mbps=25000", "--allow-pf-with-vfs", "--numa-node-list", `--binding-conditions=device.attributes["fastpath.dev"].kind == "sriov-vf"`, "--binding-timeout=2m", "--interface-sysctls=ipv4.route_localnet,ipv6.mtu", "--ip-pools=/etc/fastpath/ip-pools/pools.yaml",
		`--filter=device.attributes["fastpath.dev"].kind == "sriov-vf" && device.attributes["fastpath.dev"].pfName == "ens1f0"`,
		"--npwg", "--npwg-conf-dir=/etc/cni/multus/net.d", "--npwg-conf-namespaces=net-ops", "--npwg-allowed-namespaces=net-shared", "--npwg-host-devices=ens1f*,br-data", "--npwg-host-paths=/var/lib/cni/networks", "--npwg-host-options=bridge.isGateway,macvlan.passthru", "--npwg-vlan-ids=300,400-499", "--npwg-default-network=kube-system/cluster-net",
		"--npwg-ipamclaims", "--npwg-ipamclaim-check-interval=30s", "--npwg-device-info-dir=/run/k8s.cni.cncf.io/devinfo", "--npwg-max-networks=16", "--npwg-max-interfaces=48",
		`--resource-name=intel.com/intel_sriov_netdevice=device.attributes["fastpath.dev"].pfName == "ens1f0"`,
		"--network-api-socket=/run/fp-netapi/network-api.sock", "--network-api-cni-conf-dir=/etc/cni/net.d", "--nri-plugin-index=20", "--cni-max-plugins=4", "--attach-overlap=false", "--device-metadata=false", "--claim-prefetch=false"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args lack %q: %q", want, c.Args)
		}
	}
	// The webhook judges with the nodes' rules.
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			for _, want := range []string{"--cni-vlan-ids=0,100-199", "--npwg-host-options=bridge.isGateway,macvlan.passthru", "--npwg-vlan-ids=300,400-499"} {
				if args := d.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, want) {
					t.Errorf("controller args lack %q: %q", want, args)
				}
			}
		}
	}
	if c.Image != "registry.example/fastpath/fastpathd@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
		t.Errorf("image = %s", c.Image)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	for _, path := range []string{"/data/kubelet/plugins", "/data/kubelet/plugins_registry", "/run/nri", "/etc/cdi", "/data/fastpath",
		"/sys/fs/bpf/fp", "/run/netns", "/dev", "/run/vpp/memif", "/etc/fastpath/memif", "/etc/fastpath/ip-pools", "/opt/cni/bin", "/usr/libexec/cni",
		"/var/lib/cni", "/run/cni", "/run/vswitch", "/etc/cni/multus/net.d", "/run/fp-netapi", "/etc/cni/net.d"} {
		if mounts[path] == "" {
			t.Errorf("nothing mounted at %s: %v", path, mounts)
		}
	}
	if s := ds.Spec.UpdateStrategy.RollingUpdate; s == nil || s.MaxSurge == nil || s.MaxSurge.IntValue() != 1 {
		t.Errorf("update strategy = %+v", ds.Spec.UpdateStrategy)
	}
	kinds := map[string][]string{}
	for _, o := range objs {
		kind := o.GetObjectKind().GroupVersionKind().Kind
		name := ""
		if m, ok := o.(metav1.Object); ok {
			name = m.GetNamespace() + "/" + m.GetName()
		}
		if u, ok := o.(*runtime.Unknown); ok {
			var meta struct {
				Kind     string
				Metadata struct{ Name, Namespace string }
			}
			if err := yaml.Unmarshal(u.Raw, &meta); err != nil {
				t.Fatal(err)
			}
			kind, name = meta.Kind, meta.Metadata.Namespace+"/"+meta.Metadata.Name
		}
		kinds[kind] = append(kinds[kind], name)
	}
	for kind, want := range map[string][]string{
		"ConfigMap": {"fastpath-system/fastpathd-memif", "fastpath-system/fastpathd-ip-pools",
			// No PrometheusRule served: the rule file (TestMonitoring).
			"fastpath-system/fastpathd-alerts", "fastpath-system/fastpathd-dashboard"},
		"CNIConfig":      {"/macvlan-storage"},
		"ServiceAccount": {"fastpath-system/fastpathd-node", "fastpath-system/fastpathd-controller"},
		"DeviceClass":    {"/netdev.fastpath.dev", "/afxdp.fastpath.dev", "/rdma.fastpath.dev", "/vfio.fastpath.dev", "/memif.fastpath.dev", "/shared.fastpath.dev", "/delegate.fastpath.dev", "/cni.networking.x-k8s.io"},
		"ServiceMonitor": {"fastpath-system/fastpathd"},
		"Service":        {"fastpath-system/fastpathd-metrics", "fastpath-system/fastpathd-webhook"},
		"Secret":         {"fastpath-system/fastpathd-webhook-certs"},

		"ValidatingWebhookConfiguration": {"/fastpathd-webhook"},
		"ClusterRole":                    {"/fastpathd", "/fastpathd-cni-configmaps", "/fastpathd-controller"},
		"ClusterRoleBinding":             {"/fastpathd", "/fastpathd-controller"},
		"Role":                           {"fastpath-system/fastpathd-controller"},
		// ConfigMaps: the approved configs' namespace, and the tenants'.
		"RoleBinding": {"fastpath-system/fastpathd-controller", "cni-configs/fastpathd-cni-configmaps",
			"tenant-a/fastpathd-cni-configmaps", "tenant-b/fastpathd-cni-configmaps"},
		"Deployment": {"fastpath-system/fastpathd-controller"},
		"CustomResourceDefinition": {"/network-attachment-definitions.k8s.cni.cncf.io", "/ipamclaims.k8s.cni.cncf.io",
			"/podnetworks.network.fastpath.dev", "/podnetworkattachments.network.fastpath.dev", "/fastpathnodeconfigs.fastpath.dev"},
		"ValidatingAdmissionPolicy": {"/fastpathd-own-node", "/fastpathd-pod-network-status", "/fastpathd-podnetwork-node-labels", "/fastpathd-ipamclaim-status",
			"/fastpathd-node-config-status", "/fastpathd-node-condition"},
	} {
		got := slices.Clone(kinds[kind])
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", kind, got, want)
		}
	}
	for _, o := range objs {
		if role, ok := o.(*rbacv1.ClusterRole); ok && role.Name == "fastpathd" {
			has := func(resource string, verbs ...string) bool {
				return slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
					return slices.Equal(r.Resources, []string{resource}) && slices.Equal(r.Verbs, verbs)
				})
			}
			if !has("cniconfigs", "get") {
				t.Errorf("with cni.enabled, no rule gets cniconfigs: %+v", role.Rules)
			}
			if !has("network-attachment-definitions", "get", "list", "watch") || !has("pods", "get", "patch") {
				t.Errorf("with npwg.enabled, no rule gets, lists and watches NetworkAttachmentDefinitions, or gets and patches pods: %+v", role.Rules)
			}
			if !has("podnetworks", "get", "list", "watch") || !has("podnetworkattachments", "get", "list", "watch") {
				t.Errorf("with podNetworks.enabled, no rule gets, lists and watches PodNetworks and PodNetworkAttachments: %+v", role.Rules)
			}
			if !has("nodes", "patch") {
				t.Errorf("with podNetworks.enabled, no rule patches nodes (the labels of the PodNetworks the node attaches): %+v", role.Rules)
			}
			if !has("fastpathnodeconfigs", "get", "list", "watch") || !has("fastpathnodeconfigs/status", "patch") || !has("nodes", "list", "watch") {
				t.Errorf("with nodeConfig.enabled, no rule watches FastpathNodeConfigs and the node, or patches their status: %+v", role.Rules)
			}
			if !has("ipamclaims", "get") || !has("ipamclaims/status", "update") {
				t.Errorf("with npwg.ipamClaims.enabled, no rule gets IPAMClaims, or updates their status: %+v", role.Rules)
			}
			for _, r := range role.Rules {
				if slices.Contains(r.Resources, "ipamclaims") && !slices.Equal(r.Verbs, []string{"get"}) {
					t.Errorf("the daemon may do more than read IPAMClaims: %+v", r)
				}
			}
			for _, r := range role.Rules {
				if slices.Contains(r.Resources, "configmaps") {
					t.Errorf("the daemon may read ConfigMaps of every namespace: %+v", r)
				}
			}
			for _, r := range role.Rules {
				if slices.Contains(r.Resources, "resourceclaims/driver") && !slices.Equal(r.ResourceNames, []string{"fastpath.dev", "cni.dra.networking.x-k8s.io"}) {
					t.Errorf("resourceclaims/driver for %q, want both drivers", r.ResourceNames)
				}
			}
			// bindingConditions.selector: the claims allocated on the node
			// are found by watching them.
			if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool {
				return slices.Equal(r.Resources, []string{"resourceclaims"}) && slices.Equal(r.Verbs, []string{"get", "list", "watch"})
			}) {
				t.Errorf("with bindingConditions.selector, the daemon may not list and watch claims: %+v", role.Rules)
			}
		}
	}
}

// TestSchemaRefuses: a value of the wrong type or form, or one the chart
// does not have, fails rendering (and so helm install) with the field
// named.
func TestSchemaRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		values string
		want   []string
	}{
		"port not a number":    {"metrics: {port: nine}", []string{"/metrics/port", "want integer"}},
		"port out of range":    {"metrics: {port: 70000}", []string{"/metrics/port"}},
		"unknown format":       {"logging: {format: xml}", []string{"/logging/format"}},
		"relative kubelet dir": {"kubeletRootDir: var/lib/kubelet", []string{"/kubeletRootDir"}},
		"misspelt key":         {"cni: {plugin: [macvlan]}", []string{"/cni", "'plugin' not allowed"}},
		"unknown top level":    {"kubeletDir: /var/lib/kubelet", []string{"'kubeletDir' not allowed"}},
		"bad digest":           {"image: {digest: latest}", []string{"/image/digest"}},
		"memif role":           {"memif: {endpoints: [{name: fw0, role: server}]}", []string{"/memif/endpoints/0/role"}},
		"cni plugins a string": {"cni: {plugins: macvlan}", []string{"/cni/plugins", "want array"}},
		"approved config of old": {"cni: {approvedConfigs: {x: {plugins: [{type: macvlan, master: eth0}]}}}",
			[]string{"/cni/approvedConfigs/x/plugins/0", "'master' not allowed"}},
		"CHECK interval":                       {"cni: {checkInterval: soon}", []string{"/cni/checkInterval"}},
		"ConfigMap namespace":                  {"cni: {configMapNamespaces: [Tenant_A]}", []string{"/cni/configMapNamespaces/0"}},
		"controller port":                      {"controller: {port: 0}", []string{"/controller/port"}},
		"IPAMClaim interval":                   {"npwg: {ipamClaims: {checkInterval: often}}", []string{"/npwg/ipamClaims/checkInterval"}},
		"no network per pod":                   {"npwg: {maxNetworks: 0}", []string{"/npwg/maxNetworks"}},
		"conf namespace":                       {"npwg: {confNamespaces: [Net_Ops]}", []string{"/npwg/confNamespaces/0"}},
		"network API socket dir":               {"networkAPI: {socketDir: run/netapi}", []string{"/networkAPI/socketDir"}},
		"extended resource without a domain":   {"deviceClasses: {extendedResourceNames: {netdev: sriov_netdevice}}", []string{"/deviceClasses/extendedResourceNames/netdev"}},
		"extended resource of kubernetes.io":   {"deviceClasses: {extendedResourceNames: {vfio: kubernetes.io/vf}}", []string{"/deviceClasses/extendedResourceNames/vfio"}},
		"extended resource of no such class":   {"deviceClasses: {extendedResourceNames: {gpu: example.com/gpu}}", []string{"'gpu' not allowed"}},
		"CNI plugins at once a negative count": {"cni: {maxPlugins: -1}", []string{"/cni/maxPlugins"}},
		"shared class in mode netdev":          {"share: {class: {mode: netdev}}", []string{"/share/class/mode"}},
		"shared class macvlan mode source":     {"share: {class: {macvlanModes: [bridge, source]}}", []string{"/share/class/macvlanModes/1"}},
		"shared class VLAN 0":                  {"share: {class: {vlanIDs: [0]}}", []string{"/share/class/vlanIDs/0"}},
		"shared class VLAN range of words":     {"share: {class: {vlanIDs: [one-two]}}", []string{"/share/class/vlanIDs/0"}},
		"shared class VLAN protocol qinq":      {"share: {class: {vlanProtocols: [qinq]}}", []string{"/share/class/vlanProtocols/0"}},
		"CNI VLAN 4095":                        {"cni: {vlanIDs: [4095]}", []string{"/cni/vlanIDs/0"}},
		"NAD VLAN range of words":              {"npwg: {vlanIDs: [one-two]}", []string{"/npwg/vlanIDs/0"}},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(file, []byte(tc.values), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := helmTemplate(t, "--values", file)
			if err == nil {
				t.Fatalf("%s rendered", tc.values)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q: %s", w, err)
				}
			}
		})
	}
}

// deviceClasses.extendedResourceNames gives the named classes their
// extendedResourceName, and no other class one.
func TestExtendedResourceNames(t *testing.T) {
	objs := render(t, "--values", chartFile(t, "ci/all-values.yaml"))
	want := map[string]string{"netdev.fastpath.dev": "intel.com/sriov_netdevice", "vfio.fastpath.dev": "intel.com/intel_sriov_dpdk", "rdma.fastpath.dev": "nvidia.com/rdma_vf"}
	seen := 0
	for _, o := range objs {
		c, ok := o.(*resourceapi.DeviceClass)
		if !ok {
			continue
		}
		seen++
		got := ""
		if c.Spec.ExtendedResourceName != nil {
			got = *c.Spec.ExtendedResourceName
		}
		if got != want[c.Name] {
			t.Errorf("DeviceClass %s: extendedResourceName %q, want %q", c.Name, got, want[c.Name])
		}
	}
	if seen < 5 {
		t.Errorf("rendered %d DeviceClasses, want fastpath's", seen)
	}
}

// The IP pools of the values render as a ConfigMap the daemon reads as it
// is: a valid IPPoolConfig.
func TestIPPools(t *testing.T) {
	objs := render(t, "--values", chartFile(t, "ci/all-values.yaml"))
	for _, o := range objs {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok || cm.Name != "fastpathd-ip-pools" {
			continue
		}
		cfg, errs := v1alpha1.DecodeIPPoolConfig([]byte(cm.Data["pools.yaml"]), field.NewPath("pools.yaml"))
		if len(errs) == 0 {
			errs = cfg.Validate(field.NewPath("pools.yaml"))
		}
		if len(errs) > 0 || len(cfg.Pools) != 1 || cfg.Pools[0].Name != "fast" || cfg.Pools[0].Gateway != "10.56.0.1" {
			t.Errorf("pools.yaml = %+v, %v\n%s", cfg, errs, cm.Data["pools.yaml"])
		}
		return
	}
	t.Error("no ConfigMap of IP pools rendered")
}

// The CRI Network API alone: its socket in its host directory, the CNI
// configuration directory read-only, and the plugins' directories it
// looks for the networks' plugins in.
func TestNetworkAPI(t *testing.T) {
	ds := daemonSet(t, render(t, "--set", "networkAPI.enabled=true"))
	c := ds.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--network-api-socket=/run/fastpath-netapi/network-api.sock", "--network-api-cni-conf-dir=/etc/cni/net.d", "--cni-bin-dir=/opt/cni/bin"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args lack %q: %q", want, c.Args)
		}
	}
	if slices.Contains(c.Args, "--cni") || slices.Contains(c.Args, "--npwg") {
		t.Errorf("the CRI Network API turned on another driver: %q", c.Args)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m, ok := mounts["/run/fastpath-netapi"]; !ok || m.ReadOnly {
		t.Errorf("socket directory mount = %+v, want it writable", m)
	}
	if m, ok := mounts["/etc/cni/net.d"]; !ok || !m.ReadOnly {
		t.Errorf("CNI configuration directory mount = %+v, want it read-only", m)
	}
	if _, ok := mounts["/opt/cni/bin"]; !ok {
		t.Errorf("the CNI plugins' directory is not mounted: %v", mounts)
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == "network-api" && (v.HostPath == nil || v.HostPath.Path != "/run/fastpath-netapi") {
			t.Errorf("volume network-api = %+v, want the host's /run/fastpath-netapi", v)
		}
	}
}
