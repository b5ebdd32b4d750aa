package netapi

import (
	"context"
	"errors"
	"strings"
	"testing"
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
	if want := "_fallback,blue,dataplane,bare,default/missing"; strings.Join(names, ",") != want {
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
