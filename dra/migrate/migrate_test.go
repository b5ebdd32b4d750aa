package migrate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/devices/filter"
	ncv1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/validate"
)

// input is the documents of testdata files, and of YAML given inline.
func input(t *testing.T, files []string, inline ...string) Input {
	t.Helper()
	docs := inline
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, regexp.MustCompile(`(?m)^---$`).Split(string(data), -1)...)
	}
	var in Input
	for i, doc := range docs {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if strings.TrimSpace(string(js)) != "null" {
			in.Objects = append(in.Objects, Object{Where: "test", JSON: js})
		}
	}
	return in
}

func convertTestdata(t *testing.T) Result {
	return Convert(input(t, []string{"operator.yaml", "drasriov.yaml"}), Options{})
}

func nodeConfig(t *testing.T, res Result, name string) *ncv1.FastpathNodeConfig {
	t.Helper()
	for _, nc := range res.NodeConfigs {
		if nc.Name == name {
			return nc
		}
	}
	t.Fatalf("no FastpathNodeConfig %s among %d", name, len(res.NodeConfigs))
	return nil
}

// The policies of one node selector are one FastpathNodeConfig: a PF's
// VFs by index range, vfio-pci's range bound to it, a PF by PCI address
// (lower-cased) with its MTU; PFs of switchdev, ib and externally managed
// policies get no vfs entry but keep their resource names; ranged entries
// come first.
func TestNodeConfigs(t *testing.T) {
	res := convertTestdata(t)
	if len(res.NodeConfigs) != 4 {
		t.Fatalf("%d FastpathNodeConfigs, want 4 (one per node selector)", len(res.NodeConfigs))
	}
	nc := nodeConfig(t, res, "sriov-intel-dpdk-intel-netdev-mlx-rdma")
	want := []ncv1.VFs{
		{PF: ncv1.PFSelector{Name: "ens1f0"}, NumVFs: 8, Ranges: []ncv1.VFRange{{First: 4, Last: 7, Driver: "vfio-pci"}}},
		{PF: ncv1.PFSelector{PCIAddress: "0000:3b:00.1"}, NumVFs: 4, MTU: 9000},
	}
	if got, _ := json.Marshal(nc.Spec.VFs); string(got) != string(must(json.Marshal(want))) {
		t.Errorf("vfs %s, want %s", got, must(json.Marshal(want)))
	}
	var names []string
	for _, rn := range nc.Spec.ResourceNames {
		names = append(names, rn.Name)
	}
	if want := []string{"openshift.io/intel_nics", "openshift.io/intel_dpdk", "openshift.io/mlx_rdma"}; !slices.Equal(names, want) {
		t.Errorf("resource names %v, want %v (ranged first)", names, want)
	}
	if f := nc.Spec.ResourceNames[0].Filter; !strings.Contains(f, `vfID >= 0`) || !strings.Contains(f, `vfID <= 3`) || !strings.Contains(f, `pfName == "ens1f0"`) {
		t.Errorf("intel_nics filter %s: want VFs 0-3 of ens1f0", f)
	}
	if nc.Spec.NodeSelector.MatchLabels["feature.node.kubernetes.io/network-sriov.capable"] != "true" {
		t.Errorf("node selector %v", nc.Spec.NodeSelector)
	}
	ovs := nodeConfig(t, res, "sriov-external-offload")
	if len(ovs.Spec.VFs) != 0 || len(ovs.Spec.ResourceNames) != 2 {
		t.Errorf("switchdev and externally managed: vfs %v (want none), resource names %v (want 2)", ovs.Spec.VFs, ovs.Spec.ResourceNames)
	}
	dra := nodeConfig(t, res, "sriov-dra-policy")
	if dra.Spec.Filter == nil || !strings.Contains(*dra.Spec.Filter, `pfName in ["eth0"]`) || len(dra.Spec.ResourceNames) != 1 ||
		dra.Spec.ResourceNames[0].Name != "openshift.io/eth0_resource" {
		t.Errorf("dra-driver-sriov: filter %v, resource names %v", dra.Spec.Filter, dra.Spec.ResourceNames)
	}
	for _, e := range dra.Spec.NodeSelector.MatchExpressions {
		if e.Key != "kubernetes.io/hostname" || !slices.Equal(e.Values, []string{"dra-node-0"}) {
			t.Errorf("dra-driver-sriov node selector %v", dra.Spec.NodeSelector)
		}
	}
}

// Each class selects its resource, is the resource's extended resource,
// and pins the mode of its deviceType; each network's NAD is what the
// operator renders; each network has a claim template of its class.
func TestClassesAndNetworks(t *testing.T) {
	res := convertTestdata(t)
	modes := map[string]string{}
	for _, c := range res.DeviceClasses {
		var cfg struct{ Mode string }
		_ = json.Unmarshal(c.Spec.Config[0].Opaque.Parameters.Raw, &cfg)
		modes[c.Name] = cfg.Mode
		if c.Spec.ExtendedResourceName == nil || !strings.Contains(c.Spec.Selectors[0].CEL.Expression, `resourceName == "`+*c.Spec.ExtendedResourceName+`"`) {
			t.Errorf("class %s: extended resource %v, selector %s", c.Name, c.Spec.ExtendedResourceName, c.Spec.Selectors[0].CEL.Expression)
		}
	}
	if modes["intel-nics.sriov.fastpath.dev"] != "delegate" || modes["intel-dpdk.sriov.fastpath.dev"] != "vfio" {
		t.Errorf("class modes %v: want intel-nics delegate, intel-dpdk vfio", modes)
	}
	var nads []string
	for _, n := range res.NetworkAttachmentDefinitions {
		nads = append(nads, n.Namespace+"/"+n.Name)
		if n.Name != "storage" {
			continue
		}
		if n.Annotations["k8s.v1.cni.cncf.io/resourceName"] != "openshift.io/intel_nics" {
			t.Errorf("storage annotations %v", n.Annotations)
		}
		var conf struct {
			CNIVersion string           `json:"cniVersion"`
			Plugins    []map[string]any `json:"plugins"`
		}
		if err := json.Unmarshal([]byte(n.Spec.Config), &conf); err != nil || len(conf.Plugins) != 2 {
			t.Fatalf("storage config %s: %v; want a conflist of sriov and tuning", n.Spec.Config, err)
		}
		s := conf.Plugins[0]
		if s["type"] != "sriov" || s["vlan"] != 100.0 || s["vlanQoS"] != 2.0 || s["spoofchk"] != "on" || s["trust"] != "off" ||
			s["link_state"] != "enable" || s["max_tx_rate"] != 1000.0 || s["ipam"].(map[string]any)["type"] != "host-local" ||
			s["capabilities"].(map[string]any)["mac"] != true || conf.Plugins[1]["type"] != "tuning" || conf.CNIVersion != "1.0.0" {
			t.Errorf("storage's sriov plugin %v", s)
		}
	}
	// The vfio-pci network has no NAD: its VF settings are its claim's.
	if want := []string{"tenant-a/storage", "tenant-a/ib-net"}; !slices.Equal(nads, want) {
		t.Errorf("NetworkAttachmentDefinitions %v, want %v", nads, want)
	}
	for _, rct := range res.ResourceClaimTemplates {
		if rct.Name == "dpdk" && (len(rct.Spec.Spec.Devices.Config) != 1 || !strings.Contains(string(rct.Spec.Spec.Devices.Config[0].Opaque.Parameters.Raw), `"vlan":200`)) {
			t.Errorf("dpdk claim template config %v: want mode vfio with vlan 200", rct.Spec.Spec.Devices.Config)
		}
	}
	if len(res.ResourceClaimTemplates) != 3 {
		t.Errorf("%d ResourceClaimTemplates, want one per network", len(res.ResourceClaimTemplates))
	}
}

// Every object written passes fastpath's own validation.
func TestOutputValidates(t *testing.T) {
	res := convertTestdata(t)
	data, err := YAML(res.Objects())
	if err != nil {
		t.Fatal(err)
	}
	docs, err := validate.SplitManifests("out.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != len(res.Objects()) {
		t.Fatalf("%d documents of %d objects", len(docs), len(res.Objects()))
	}
	rules := npwg.ConfigRules{Plugins: []string{"sriov", "ib-sriov", "host-local", "tuning"}}
	problems, skipped := validate.CheckManifests(docs, validate.Check{
		CompileFilter: func(expr string) error { _, err := filter.Compile(expr); return err }}, rules)
	for _, p := range problems {
		t.Error(p)
	}
	for _, s := range skipped {
		t.Error(s)
	}
}

// Each thing without an equivalent is reported, naming object and field.
func TestReport(t *testing.T) {
	res := convertTestdata(t)
	var lines []string
	for _, i := range res.Report {
		lines = append(lines, i.String())
	}
	all := strings.Join(lines, "\n")
	for _, want := range []string{
		"SriovNetworkNodePolicy sriov-network-operator/by-vendor: spec.nicSelector: selects PFs by vendor and deviceID only",
		"sriov-network-operator/offload: spec.eSwitchMode: switchdev: no equivalent",
		"sriov-network-operator/external: spec.externallyManaged: true",
		"sriov-network-operator/infiniband: spec.linkType: ib: no equivalent",
		"sriov-network-operator/intel-netdev: spec.nicSelector: vendor and deviceID are redundant",
		"sriov-network-operator/mlx-rdma: spec.isRdma: true: the class of openshift.io/mlx_rdma is mode delegate",
		"SriovNetwork tenant-b/dpdk: spec.resourceName: resource openshift.io/intel_dpdk is vfio-pci",
		"SriovNetworkPoolConfig sriov-network-operator/workers: spec.maxUnavailable: 10%: no equivalent",
		"SriovNetworkPoolConfig sriov-network-operator/workers: spec.rdmaMode: exclusive",
		"netns_mode=0",
		"SriovResourcePolicy dra-driver-sriov/dra-policy: spec.configs[0].resourceFilters[0].drivers",
		"SriovResourcePolicy dra-driver-sriov/dra-policy: spec.configs[0].resourceFilters[0].linkType: no equivalent",
		"DeviceAttributes dra-driver-sriov/eth0-attrs: spec.attributes[example.com/rack]: no equivalent",
		"DeviceAttributes dra-driver-sriov/unused: selected by no SriovResourcePolicy",
		"FastpathNodeConfig sriov-external-offload: spec.nodeSelector: may select a node that FastpathNodeConfig sriov-intel-dpdk-intel-netdev-mlx-rdma selects too",
		"merge them",
		"runs plugin types sriov, host-local, tuning",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("report lacks %q; it is:\n%s", want, all)
		}
	}
}

const policyHead = `apiVersion: sriovnetwork.openshift.io/v1
kind: SriovNetworkNodePolicy
metadata: {name: %s, namespace: ops}
`

// Odd letter case, missing fields, unknown fields, conflicts between the
// policies of one PF.
func TestPolicies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		docs   []string
		vfs    string   // the one FastpathNodeConfig's vfs, as JSON
		report []string // substrings of the report
	}{{
		name: "defaults: no deviceType is netdevice, no nodeSelector every node",
		docs: []string{strings.Replace(policyHead, "%s", "a", 1) + `spec: {resourceName: a, numVfs: 2, nicSelector: {pfNames: [ens1f0]}}`},
		vfs:  `[{"pf":{"name":"ens1f0"},"numVfs":2}]`,
	}, {
		name: "VFIO-PCI in capitals",
		docs: []string{strings.Replace(policyHead, "%s", "a", 1) + `spec: {resourceName: a, numVfs: 2, deviceType: VFIO-PCI, nicSelector: {pfNames: [ens1f0]}}`},
		vfs:  `[{"pf":{"name":"ens1f0"},"numVfs":2,"driver":"vfio-pci"}]`,
	}, {
		name:   "unknown field",
		docs:   []string{strings.Replace(policyHead, "%s", "a", 1) + `spec: {resourceName: a, numVfs: 2, DeviceType: vfio-pci, nicSelector: {pfNames: [ens1f0]}}`},
		vfs:    `[{"pf":{"name":"ens1f0"},"numVfs":2}]`,
		report: []string{`unknown field "spec.DeviceType"`},
	}, {
		name: "numVfs and mtu disagree, overlapping ranges",
		docs: []string{
			strings.Replace(policyHead, "%s", "hi", 1) + `spec: {resourceName: hi, priority: 1, mtu: 9000, numVfs: 4, nicSelector: {pfNames: ["ens1f0#0-3"]}}`,
			strings.Replace(policyHead, "%s", "lo", 1) + `spec: {resourceName: lo, priority: 5, mtu: 1500, numVfs: 8, deviceType: vfio-pci, nicSelector: {pfNames: ["ens1f0#2-7"]}}`,
		},
		vfs:    `[{"pf":{"name":"ens1f0"},"numVfs":8,"ranges":[{"first":4,"last":7,"driver":"vfio-pci"}],"mtu":9000}]`,
		report: []string{"ops/hi: spec.numVfs: 4: PF ens1f0 gets 8 VFs", "ops/lo: spec.mtu: 1500: PF ens1f0 takes MTU 9000", "ops/lo: spec.nicSelector.pfNames: PF ens1f0: VFs 2-3 are also SriovNetworkNodePolicy ops/hi's"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			res := Convert(input(t, nil, tc.docs...), Options{})
			if len(res.NodeConfigs) != 1 {
				t.Fatalf("%d FastpathNodeConfigs, want 1", len(res.NodeConfigs))
			}
			nc := res.NodeConfigs[0]
			if got := string(must(json.Marshal(nc.Spec.VFs))); got != tc.vfs {
				t.Errorf("vfs %s, want %s", got, tc.vfs)
			}
			if sel := nc.Spec.NodeSelector; len(sel.MatchLabels)+len(sel.MatchExpressions) != 0 {
				t.Errorf("node selector %v, want {}", sel)
			}
			var all []string
			for _, i := range res.Report {
				all = append(all, i.String())
			}
			for _, want := range tc.report {
				if !strings.Contains(strings.Join(all, "\n"), want) {
					t.Errorf("report lacks %q: %v", want, all)
				}
			}
			if len(tc.report) == 0 && len(all) > 0 {
				t.Errorf("report %v, want none", all)
			}
		})
	}
}

// Selectors that cannot select one node are not reported; any other pair
// is.
func TestDisjoint(t *testing.T) {
	sel := func(s string) metav1.LabelSelector {
		var l metav1.LabelSelector
		if err := yaml.Unmarshal([]byte(s), &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, tc := range []struct {
		a, b     string
		disjoint bool
	}{
		{`{matchLabels: {pool: a}}`, `{matchLabels: {pool: b}}`, true},
		{`{matchLabels: {pool: a}}`, `{matchExpressions: [{key: pool, operator: NotIn, values: [a]}]}`, true},
		{`{matchLabels: {pool: a}}`, `{matchExpressions: [{key: pool, operator: DoesNotExist}]}`, true},
		{`{matchLabels: {pool: a}}`, `{matchLabels: {zone: a}}`, false},
		{`{matchLabels: {pool: a}}`, `{}`, false},
		{`{matchExpressions: [{key: pool, operator: In, values: [a, b]}]}`, `{matchLabels: {pool: b}}`, false},
	} {
		if got := disjoint(sel(tc.a), sel(tc.b)); got != tc.disjoint {
			t.Errorf("disjoint(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.disjoint)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
