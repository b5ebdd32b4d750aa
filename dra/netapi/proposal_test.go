package netapi

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// proposalMessage is a message of the proposal's own definitions
// (testdata/cri-network-api.proto), compiled as the proposal gives them.
func proposalMessage(t *testing.T, name string) *dynamicpb.Message {
	t.Helper()
	files, err := (&protocompile.Compiler{Resolver: &protocompile.SourceResolver{ImportPaths: []string{"testdata"}}}).
		Compile(context.Background(), "cri-network-api.proto")
	if err != nil {
		t.Fatal(err)
	}
	d := files[0].Messages().ByName(protoreflect.Name(name))
	if d == nil {
		t.Fatalf("the proposal has no message %s", name)
	}
	return dynamicpb.NewMessage(d)
}

// noUnknown fails the test if m or a message in it holds fields its type
// does not know.
func noUnknown(t *testing.T, m protoreflect.Message, path string) {
	t.Helper()
	if u := m.GetUnknown(); len(u) > 0 {
		t.Errorf("%s: %d bytes of unknown fields", path, len(u))
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				noUnknown(t, v.List().Get(i).Message(), path+"."+string(fd.Name()))
			}
		case fd.Message() != nil && !fd.IsMap():
			noUnknown(t, v.Message(), path+"."+string(fd.Name()))
		}
		return true
	})
}

// A SetPodNetworkRequest encoded with the proposal's messages decodes into
// fastpath's with nothing unknown, its IP ranges included; and
// fastpath's ListPodNetworkResponse decodes into the proposal's.
func TestProposalWire(t *testing.T) {
	req := proposalMessage(t, "SetPodNetworkRequest")
	if err := protojson.Unmarshal([]byte(`{"config": {
		"metadata": {"name": "dataplane", "namespace": "kube-system", "uid": "u-1", "generation": 3},
		"ipRanges": [{"cidr": "10.10.0.0/16"}, {"cidr": "fd00:10::/64"}],
		"networkType": "CNIv1",
		"cniv1Config": {"cniVersion": "1.1.0", "networkName": "dataplane", "disableCheck": true,
			"plugins": [{"type": "macvlan", "capabilities": ["ipRanges"], "parameters": {"master": "eth1"}}]}}}`), req); err != nil {
		t.Fatal(err)
	}
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var got SetPodNetworkRequest
	if err := proto.Unmarshal(wire, &got); err != nil {
		t.Fatal(err)
	}
	noUnknown(t, got.ProtoReflect(), "SetPodNetworkRequest")
	cfg := got.GetConfig()
	if r := cfg.GetIpRanges(); len(r) != 2 || r[0].GetCidr() != "10.10.0.0/16" || r[1].GetCidr() != "fd00:10::/64" {
		t.Errorf("ip_ranges = %v", r)
	}
	if m := cfg.GetMetadata(); m.GetName() != "dataplane" || m.GetNamespace() != "kube-system" || m.GetUid() != "u-1" || m.GetGeneration() != 3 {
		t.Errorf("metadata = %v", m)
	}
	c := cfg.GetCniv1Config()
	if c.GetCniVersion() != "1.1.0" || c.GetNetworkName() != "dataplane" || !c.GetDisableCheck() || len(c.GetPlugins()) != 1 ||
		c.GetPlugins()[0].GetType() != "macvlan" || c.GetPlugins()[0].GetCapabilities()[0] != "ipRanges" || c.GetPlugins()[0].GetParameters()["master"] != "eth1" {
		t.Errorf("cniv1_config = %v", c)
	}
	if cfg.GetNetworkType() != NetworkType_CNIv1 {
		t.Errorf("network_type = %v", cfg.GetNetworkType())
	}

	list := &ListPodNetworkResponse{Networks: []*PodNetworkResponse{{Config: cfg, Status: &NetworkStatus{SandboxManagement: true, Connectivity: true}}}}
	wire, err = proto.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	theirs := proposalMessage(t, "ListPodNetworkResponse")
	if err := proto.Unmarshal(wire, theirs); err != nil {
		t.Fatal(err)
	}
	noUnknown(t, theirs, "ListPodNetworkResponse")
	js, err := protojson.Marshal(theirs)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"ipRanges":[{"cidr":"10.10.0.0/16"}`, `"sandboxManagement":true`, `"connectivity":true`, `"networks":[`} {
		if !containsCompact(string(js), want) {
			t.Errorf("the proposal's ListPodNetworkResponse reads %s, want %s in it", js, want)
		}
	}
}

// containsCompact reports whether js, protojson's output (whose spacing
// varies), holds want once spaces are dropped.
func containsCompact(js, want string) bool {
	return strings.Contains(strings.ReplaceAll(js, " ", ""), want)
}

// A network's IP ranges fill the host-local IPAM of a plugin that names no
// subnet and does not take them as runtimeConfig (ipRanges); nothing else.
func TestConflistIPRanges(t *testing.T) {
	plugin := func(ipam string, caps ...string) *CNIv1PluginConfig {
		return &CNIv1PluginConfig{Type: "macvlan", Capabilities: caps, Parameters: map[string]string{"ipam": ipam}}
	}
	cfg := &NetworkConfig{Metadata: &NetworkMetadata{Name: "blue"},
		IpRanges: []*IPRange{{Cidr: "10.20.0.0/16"}, {Cidr: "fd00:20::/64"}, {Cidr: "10.21.0.0/16"}},
		Cniv1Config: &CNIv1Config{CniVersion: "1.0.0", Plugins: []*CNIv1PluginConfig{
			plugin(`{"type": "host-local"}`),
			plugin(`{"type": "host-local"}`, "ipRanges"),
			plugin(`{"type": "host-local", "ranges": [[{"subnet": "10.9.0.0/24"}]]}`),
			plugin(`{"type": "host-local", "subnet": "10.8.0.0/24"}`),
			plugin(`{"type": "static"}`),
		}}}
	data, err := Conflist(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Plugins []struct {
			IPAM json.RawMessage `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"ranges":[[{"subnet":"10.20.0.0/16"},{"subnet":"10.21.0.0/16"}],[{"subnet":"fd00:20::/64"}]],"type":"host-local"}`,
		`{"type":"host-local"}`,
		`{"type":"host-local","ranges":[[{"subnet":"10.9.0.0/24"}]]}`,
		`{"type":"host-local","subnet":"10.8.0.0/24"}`,
		`{"type":"static"}`,
	}
	for i, p := range list.Plugins {
		var got bytes.Buffer
		if err := json.Compact(&got, p.IPAM); err != nil {
			t.Fatal(err)
		}
		if got.String() != want[i] {
			t.Errorf("plugins[%d].ipam = %s, want %s", i, got.String(), want[i])
		}
	}
}
