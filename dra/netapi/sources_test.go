package netapi

import (
	"context"
	"errors"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// fakeSource is a Source of fixed networks, or an error.
type fakeSource struct {
	nets []SourceNetwork
	err  error
}

func (f fakeSource) Networks(context.Context) ([]SourceNetwork, error) { return f.nets, f.err }

// The networks of the node's sources (PodNetworks, NetworkAttachmentDefinitions)
// are listed after those set through the API, each with its status and where
// it is from; one without a configuration is listed not ready, saying why;
// a source that fails is left out. They are not the API's to remove.
func TestListSources(t *testing.T) {
	r := newRig(t)
	opts := r.options()
	opts.Sources = []Source{
		fakeSource{nets: []SourceNetwork{
			{Name: "dataplane", From: "PodNetwork dataplane", Conflist: []byte(`{"cniVersion": "1.1.0", "name": "dataplane", "plugins": [{"type": "ready"}]}`)},
			{Name: "bare", From: "PodNetwork bare", Problem: "no NetworkAttachmentDefinition in parametersRefs"},
			{Name: "default/missing", From: "NetworkAttachmentDefinition default/missing", Conflist: []byte(`{"cniVersion": "1.1.0", "name": "missing", "plugins": [{"type": "absent"}]}`)},
		}},
		fakeSource{err: errors.New("the API server is away")},
	}
	reg, err := NewRegistry(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Set(context.Background(), network("blue", "ready")); err != nil {
		t.Fatal(err)
	}
	got := map[string]*NetworkStatus{}
	var names []string
	for _, n := range reg.List(context.Background()) {
		name := n.GetConfig().GetMetadata().GetName()
		names = append(names, name)
		got[name] = n.GetStatus()
	}
	if want := "blue,dataplane,bare,default/missing"; strings.Join(names, ",") != want {
		t.Errorf("listed %v, want %s", names, want)
	}
	if st := got["dataplane"]; !st.GetSandboxManagement() || !st.GetConnectivity() || st.GetMessage() != "PodNetwork dataplane" {
		t.Errorf("dataplane: %v", st)
	}
	if st := got["bare"]; st.GetSandboxManagement() || !strings.Contains(st.GetMessage(), "no NetworkAttachmentDefinition") {
		t.Errorf("bare: %v", st)
	}
	if st := got["default/missing"]; st.GetSandboxManagement() || !strings.Contains(st.GetMessage(), "absent") ||
		!strings.HasPrefix(st.GetMessage(), "NetworkAttachmentDefinition default/missing: ") {
		t.Errorf("default/missing: %v", st)
	}
	if _, ok := reg.Conflist("dataplane"); ok {
		t.Error("a source's network is given as one set through the API")
	}
}

// fakeObjects are the PodNetworks and NetworkAttachmentDefinitions of a
// cluster, as the daemon's watches give them.
type fakeObjects struct {
	pns  []*pnv1.PodNetwork
	nads map[string]*nadv1.NetworkAttachmentDefinition
}

func (f fakeObjects) ListPodNetworks(context.Context) ([]*pnv1.PodNetwork, error) { return f.pns, nil }

func (f fakeObjects) GetNAD(_ context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error) {
	nad, ok := f.nads[namespace+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "k8s.cni.cncf.io", Resource: "network-attachment-definitions"}, name)
	}
	return nad, nil
}

func (f fakeObjects) ListNADs(context.Context) ([]*nadv1.NetworkAttachmentDefinition, error) {
	var out []*nadv1.NetworkAttachmentDefinition
	for _, nad := range f.nads {
		out = append(out, nad)
	}
	return out, nil
}

// readyPodNetwork is a PodNetwork of fastpath's, Ready, whose
// configuration is the NetworkAttachmentDefinition net/<name>.
func readyPodNetwork(name string, enabled bool) *pnv1.PodNetwork {
	pn := &pnv1.PodNetwork{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1}}
	pn.Spec.Enabled = &enabled
	pn.Spec.ParametersRefs = []pnv1.ParametersRef{{Group: "k8s.cni.cncf.io", Kind: "NetworkAttachmentDefinition", Namespace: "net", Name: name}}
	pn.Status.Conditions = []metav1.Condition{{Type: pnv1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: 1, Reason: "Ready"}}
	return pn
}

// A node labels itself only with the PodNetworks its runtime hook would
// attach: their NetworkAttachmentDefinition's configuration judged by the
// node's rules (the allowlist, the objects of the host the operator
// allows, the namespaces that may use the operator's directory), the
// PodNetwork enabled and Ready. One the hook refuses is not attachable,
// saying why, and its label goes.
func TestPodNetworkJudgeRules(t *testing.T) {
	conf := func(name, plugins string) *nadv1.NetworkAttachmentDefinition {
		return &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "net", Name: name},
			Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: `{"cniVersion": "1.0.0", "name": "` + name + `", "plugins": [` + plugins + `]}`}}
	}
	objs := fakeObjects{nads: map[string]*nadv1.NetworkAttachmentDefinition{
		"net/fine":      conf("fine", `{"type": "macvlan", "master": "lo", "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"}}`),
		"net/uplink":    conf("uplink", `{"type": "macvlan", "master": "eth0"}`),
		"net/p2p":       conf("p2p", `{"type": "macvlan", "master": "lo"}, {"type": "ptp"}`),
		"net/sysctl":    conf("sysctl", `{"type": "macvlan", "master": "lo"}, {"type": "tuning", "sysctl": {}, "args": {"cni": {"sysctl": {"kernel.core_pattern": "|/x"}}}}`),
		"net/on-disk":   {ObjectMeta: metav1.ObjectMeta{Namespace: "net", Name: "on-disk"}},
		"net/disabled":  conf("disabled", `{"type": "macvlan", "master": "lo"}`),
		"net/not-ready": conf("not-ready", `{"type": "macvlan", "master": "lo"}`),
	}}
	for _, name := range []string{"fine", "uplink", "p2p", "sysctl", "on-disk", "not-ready"} {
		objs.pns = append(objs.pns, readyPodNetwork(name, true))
	}
	objs.pns = append(objs.pns, readyPodNetwork("disabled", false))
	objs.pns[5].Status.Conditions = nil // not-ready
	rules := npwg.ConfigRules{ConfDir: npwg.ConfDir{Path: t.TempDir()}, Plugins: []string{"macvlan", "host-local", "tuning"},
		Policy: npwg.Policy{HostDevices: []string{"lo"}}}
	j := PodNetworkJudge{Source: PodNetworkSource{Objects: objs, NADs: objs, Rules: rules}, BinDirs: []string{pluginBin(t, "macvlan", "host-local", "tuning", "ptp")}}
	got, err := j.Attachable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"fine":      "",
		"uplink":    `PodNetwork uplink: NetworkAttachmentDefinition net/uplink: spec.config: names an object of the host: plugins[0] (macvlan): master "eth0"`,
		"p2p":       `PodNetwork p2p: NetworkAttachmentDefinition net/p2p: spec.config: plugin type not allowed: ["ptp"]`,
		"sysctl":    `PodNetwork sysctl: NetworkAttachmentDefinition net/sysctl: spec.config: names an object of the host: plugins[1] (tuning): args.cni.sysctl[kernel.core_pattern]`,
		"on-disk":   "PodNetwork on-disk: NetworkAttachmentDefinition net/on-disk: on-disk configuration not allowed",
		"disabled":  "PodNetwork disabled: PodNetwork disabled: AdministrativelyDisabled: enabled is false",
		"not-ready": "PodNetwork not-ready: PodNetwork not-ready: not Ready yet",
	} {
		if g, ok := got[name]; !ok || (want == "") != (g == "") || !strings.HasPrefix(g, want) {
			t.Errorf("%s: %q, want %q", name, g, want)
		}
	}
	// The CRI Network API's network of a PodNetwork's name is its
	// configuration, not its readiness.
	j.API = apiNetworks{"disabled": `{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "macvlan", "master": "lo"}]}`,
		"uplink": `{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "macvlan", "master": "lo"}]}`}
	if got, err = j.Attachable(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got["disabled"] == "" || got["uplink"] != "" {
		t.Errorf("with the API's networks: disabled %q, uplink %q; want disabled refused, uplink the API's", got["disabled"], got["uplink"])
	}
}
