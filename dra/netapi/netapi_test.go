package netapi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// readyPlugin is a CNI 1.1 plugin whose STATUS fails while not-ready
// exists in its directory.
const readyPlugin = `#!/bin/sh
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["0.3.1","0.4.0","1.0.0","1.1.0"]}' ;;
STATUS) if [ -e "$(dirname "$0")/not-ready" ]; then echo '{"cniVersion":"1.1.0","code":50,"msg":"no addresses left"}'; exit 1; fi ;;
esac
`

// rig is a registry's surroundings: a CNI bin directory with the plugin
// "ready", a CNI configuration directory and a state file.
type rig struct {
	bin, confDir, stateFile string
}

func newRig(t *testing.T) rig {
	t.Helper()
	r := rig{bin: t.TempDir(), confDir: t.TempDir(), stateFile: filepath.Join(t.TempDir(), "netapi", "networks.json")}
	if err := os.WriteFile(filepath.Join(r.bin, "ready"), []byte(readyPlugin), 0o755); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r rig) options() Options {
	return Options{StateFile: r.stateFile, CNIConfDir: r.confDir, BinDirs: []string{r.bin}}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func network(name, pluginType string) *NetworkConfig {
	return &NetworkConfig{
		Metadata: &NetworkMetadata{Name: name},
		IpRanges: []*IPRange{{Cidr: "10.10.0.0/16"}},
		Cniv1Config: &CNIv1Config{CniVersion: "1.1.0", Plugins: []*CNIv1PluginConfig{{
			Type: pluginType, Capabilities: []string{"ipRanges"},
			Parameters: map[string]string{"master": "eth0", "mtu": "1500"},
		}}},
	}
}

func find(list []*PodNetworkResponse, name string) *PodNetworkResponse {
	for _, n := range list {
		if n.GetConfig().GetMetadata().GetName() == name {
			return n
		}
	}
	return nil
}

func names(list []*PodNetworkResponse) []string {
	var out []string
	for _, n := range list {
		out = append(out, n.GetConfig().GetMetadata().GetName())
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

// The CRI Network API over its socket: set, list with statuses, remove;
// "_fallback" from the CNI configuration directory, updated as its file
// changes; reserved names and bad input refused with their codes; the
// networks set kept across a restart.
func TestServer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := newRig(t)
	writeFile(t, filepath.Join(r.confDir, "10-default.conflist"),
		`{"cniVersion":"1.1.0","name":"default","plugins":[{"type":"ready","ipam":{"type":"ready"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`)
	writeFile(t, filepath.Join(r.confDir, "20-other.conf"), `{"cniVersion":"1.0.0","name":"other","type":"ready"}`)
	reg, err := NewRegistry(ctx, r.options())
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- reg.Run(ctx) }()
	socket := filepath.Join(t.TempDir(), "api", "network.sock")
	srv, err := Serve(ctx, socket, reg)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v, mode %v; want 0600", err, fi.Mode())
	}
	if fi, err := os.Stat(filepath.Dir(socket)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket directory: %v, mode %v; want 0700", err, fi.Mode())
	}
	client, conn, err := Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	list := func() []*PodNetworkResponse {
		t.Helper()
		resp, err := client.ListPodNetwork(ctx, &ListPodNetworkRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetNetworks()
	}

	// _fallback: the first file; portmap is not installed.
	fb := find(list(), FallbackName)
	if fb == nil || fb.GetConfig().GetCniv1Config().GetNetworkName() != "default" {
		t.Fatalf("_fallback = %v, want the network default of 10-default.conflist", fb)
	}
	if st := fb.GetStatus(); st.GetSandboxManagement() || st.GetConnectivity() || !strings.Contains(st.GetMessage(), "plugin portmap: no executable in "+r.bin) {
		t.Errorf("_fallback status = %v, want neither flag: portmap is missing", st)
	}
	if p := fb.GetConfig().GetCniv1Config().GetPlugins(); len(p) != 2 || p[0].GetParameters()["ipam"] != `{"type":"ready"}` || !slices.Equal(p[1].GetCapabilities(), []string{"portMappings"}) {
		t.Errorf("_fallback plugins = %v", p)
	}

	// Set: a network whose plugin is installed and ready, one whose
	// plugin is missing.
	resp, err := client.SetPodNetwork(ctx, &SetPodNetworkRequest{Config: network("blue", "ready")})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.GetStatus(); !st.GetSandboxManagement() || !st.GetConnectivity() || st.GetMessage() != "" {
		t.Errorf("blue's status = %v, want both flags", st)
	}
	if _, err := client.SetPodNetwork(ctx, &SetPodNetworkRequest{Config: network("red", "macvlan-missing")}); err != nil {
		t.Fatal(err)
	}
	got := list()
	if !slices.Equal(names(got), []string{FallbackName, "blue", "red"}) {
		t.Errorf("networks = %v, want _fallback, blue, red", names(got))
	}
	if st := find(got, "red").GetStatus(); st.GetSandboxManagement() || st.GetConnectivity() || !strings.Contains(st.GetMessage(), "plugin macvlan-missing: no executable") {
		t.Errorf("red's status = %v, want neither flag: its plugin is missing", st)
	}
	if blue := find(got, "blue"); !proto.Equal(blue.GetConfig().GetCniv1Config(), network("blue", "ready").GetCniv1Config()) || blue.GetConfig().GetMetadata().GetGeneration() != 1 {
		t.Errorf("blue = %v, want it as set, generation 1", blue.GetConfig())
	}

	// STATUS failing: sandbox management, no connectivity.
	writeFile(t, filepath.Join(r.bin, "not-ready"), "")
	if st := find(list(), "blue").GetStatus(); !st.GetSandboxManagement() || st.GetConnectivity() || !strings.Contains(st.GetMessage(), "no addresses left") {
		t.Errorf("blue's status with STATUS failing = %v, want sandbox_management only", st)
	}
	if err := os.Remove(filepath.Join(r.bin, "not-ready")); err != nil {
		t.Fatal(err)
	}

	// Refused: reserved names, bad input (naming the field).
	for _, tt := range []struct {
		name string
		call func() error
		code codes.Code
		want string
	}{
		{"set _fallback", func() error {
			_, err := client.SetPodNetwork(ctx, &SetPodNetworkRequest{Config: network(FallbackName, "ready")})
			return err
		}, codes.PermissionDenied, "reserved network"},
		{"remove _fallback", func() error {
			_, err := client.RemovePodNetwork(ctx, &RemovePodNetworkRequest{Name: FallbackName})
			return err
		}, codes.PermissionDenied, "remove that file instead"},
		{"bad plugin type", func() error {
			_, err := client.SetPodNetwork(ctx, &SetPodNetworkRequest{Config: network("bad", "../sh")})
			return err
		}, codes.InvalidArgument, "config.cniv1_config.plugins[0].type"},
		{"no config", func() error {
			_, err := client.SetPodNetwork(ctx, &SetPodNetworkRequest{})
			return err
		}, codes.InvalidArgument, "config: required"},
		// Requests of another shape than netapi.proto's: refused, never
		// answered OK with nothing done.
		{"remove with no name", func() error {
			_, err := client.RemovePodNetwork(ctx, &RemovePodNetworkRequest{})
			return err
		}, codes.InvalidArgument, "name: required"},
		{"remove with a field it has not", func() error {
			return conn.Invoke(ctx, NetworkService_RemovePodNetwork_FullMethodName, &NetworkMetadata{Name: "blue", Namespace: "default"}, &RemovePodNetworkResponse{})
		}, codes.InvalidArgument, "RemovePodNetwork: field 2: not a field of fastpath.netapi.v1alpha1.RemovePodNetworkRequest"},
		{"remove with a message where the name is", func() error {
			req := &SetPodNetworkRequest{Config: &NetworkConfig{Metadata: &NetworkMetadata{Name: "blue"}}}
			return conn.Invoke(ctx, NetworkService_RemovePodNetwork_FullMethodName, req, &RemovePodNetworkResponse{})
		}, codes.InvalidArgument, `name: "\n\x06\n\x04blue": must be letters`},
		{"set with a field a nested message has not", func() error {
			cfg := network("green", "ready")
			cfg.Metadata.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
			_, err := client.SetPodNetwork(ctx, &SetPodNetworkRequest{Config: cfg})
			return err
		}, codes.InvalidArgument, "SetPodNetwork: field config.metadata.9: not a field of fastpath.netapi.v1alpha1.SetPodNetworkRequest"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want code %v and %q", err, tt.code, tt.want)
			}
		})
	}

	if got := names(list()); !slices.Equal(got, []string{FallbackName, "blue", "red"}) {
		t.Errorf("networks after the refused calls = %v, want them unchanged", got)
	}

	// Remove, and remove again: a removal is idempotent, as the CRI's
	// are (RemovePodSandbox).
	for range 2 {
		if _, err := client.RemovePodNetwork(ctx, &RemovePodNetworkRequest{Name: "blue"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := names(list()); !slices.Equal(got, []string{FallbackName, "red"}) {
		t.Errorf("networks after removing blue = %v", got)
	}

	// _fallback follows its file.
	writeFile(t, filepath.Join(r.confDir, "10-default.conflist"), `{"cniVersion":"1.1.0","name":"default2","plugins":[{"type":"ready"}]}`)
	waitFor(t, "_fallback to follow its file", func() bool {
		fb := find(list(), FallbackName)
		return fb.GetConfig().GetCniv1Config().GetNetworkName() == "default2" && fb.GetStatus().GetConnectivity()
	})
	if err := os.Remove(filepath.Join(r.confDir, "10-default.conflist")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "_fallback to be the next file", func() bool {
		return find(list(), FallbackName).GetConfig().GetCniv1Config().GetNetworkName() == "other"
	})

	srv.Stop()
	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("Run: %v", err)
	}
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after Stop: %v, want it removed", err)
	}

	// A restart: red is still there.
	reg2, err := NewRegistry(t.Context(), r.options())
	if err != nil {
		t.Fatal(err)
	}
	if got := names(reg2.List(t.Context())); !slices.Equal(got, []string{FallbackName, "red"}) {
		t.Errorf("networks after a restart = %v, want _fallback and red", got)
	}
	if err := reg2.Remove(t.Context(), "red"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(r.stateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory with no network: %v, want it removed", err)
	}
}

// A server whose socket another daemon took over leaves that socket.
func TestServerLeavesAReplacedSocket(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	reg, err := NewRegistry(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "network.sock")
	old, err := Serve(ctx, socket, reg)
	if err != nil {
		t.Fatal(err)
	}
	repl, err := Serve(ctx, socket, reg)
	if err != nil {
		t.Fatal(err)
	}
	old.Stop()
	client, conn, err := Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := client.ListPodNetwork(ctx, &ListPodNetworkRequest{}); err != nil {
		t.Errorf("the new server after the old one stopped: %v", err)
	}
	repl.Stop()
}

// A CNI directory with no configuration: _fallback is not listed (the
// proposal creates it once a configuration is detected), and the log says
// why, naming the file passed over; once one is there, it is.
func TestFallbackMissing(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	r := newRig(t)
	writeFile(t, filepath.Join(r.confDir, "00-broken.conflist"), `{"cniVersion":`)
	reg, err := NewRegistry(ctx, r.options())
	if err != nil {
		t.Fatal(err)
	}
	if fb := find(reg.List(ctx), FallbackName); fb != nil {
		t.Errorf("_fallback listed with no configuration in the directory: %v", fb)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if !strings.Contains(logs, "no CNI configuration") || !strings.Contains(logs, "00-broken.conflist") {
		t.Errorf("the log does not say there is no configuration, naming the broken file:\n%s", logs)
	}
	writeFile(t, filepath.Join(r.confDir, "10-default.conflist"), `{"cniVersion":"1.1.0","name":"default","plugins":[{"type":"ready"}]}`)
	reg.reloadFallback(ctx)
	if fb := find(reg.List(ctx), FallbackName); fb == nil || !strings.Contains(fb.GetStatus().GetMessage(), "00-broken.conflist") {
		t.Errorf("_fallback once a configuration is there: %v, want it, naming the file passed over", fb)
	}
}

func TestValidateConfig(t *testing.T) {
	mod := func(f func(*NetworkConfig)) *NetworkConfig {
		c := network("n", "ready")
		f(c)
		return c
	}
	tests := []struct {
		name string
		cfg  *NetworkConfig
		want string // "" valid
	}{
		{"valid", network("n", "ready"), ""},
		{"no name", mod(func(c *NetworkConfig) { c.Metadata = nil }), "config.metadata.name: must not be empty"},
		{"bad name", mod(func(c *NetworkConfig) { c.Metadata.Name = "a/b" }), "config.metadata.name"},
		{"reserved", mod(func(c *NetworkConfig) { c.Metadata.Name = "_mine" }), "reserved network"},
		{"bad type", mod(func(c *NetworkConfig) { c.NetworkType = 7 }), "config.network_type: 7"},
		{"bad range", mod(func(c *NetworkConfig) { c.IpRanges[0].Cidr = "10.0.0.1/8" }), "config.ip_ranges[0].cidr: \"10.0.0.1/8\": must be the subnet's address: 10.0.0.0/8"},
		{"not a range", mod(func(c *NetworkConfig) { c.IpRanges[0].Cidr = "ten" }), "config.ip_ranges[0].cidr"},
		{"no CNI config", mod(func(c *NetworkConfig) { c.Cniv1Config = nil }), "config.cniv1_config: required"},
		{"no version", mod(func(c *NetworkConfig) { c.Cniv1Config.CniVersion = "" }), "config.cniv1_config.cni_version: required"},
		{"unknown version", mod(func(c *NetworkConfig) { c.Cniv1Config.CniVersion = "9.9.9" }), "config.cniv1_config.cni_version: \"9.9.9\""},
		{"old version", mod(func(c *NetworkConfig) { c.Cniv1Config.CniVersion = "0.2.0" }), "configuration lists need 0.3.0"},
		{"bad network name", mod(func(c *NetworkConfig) { c.Cniv1Config.NetworkName = "a b" }), "config.cniv1_config.network_name"},
		{"no plugins", mod(func(c *NetworkConfig) { c.Cniv1Config.Plugins = nil }), "config.cniv1_config.plugins: must name at least one plugin"},
		{"empty plugin type", mod(func(c *NetworkConfig) { c.Cniv1Config.Plugins[0].Type = "" }), "config.cniv1_config.plugins[0].type"},
		{"twice a capability", mod(func(c *NetworkConfig) { c.Cniv1Config.Plugins[0].Capabilities = []string{"a", "a"} }), "config.cniv1_config.plugins[0].capabilities[1]"},
		{"reserved parameter", mod(func(c *NetworkConfig) { c.Cniv1Config.Plugins[0].Parameters["cniVersion"] = "1.0.0" }), `config.cniv1_config.plugins[0].parameters["cniVersion"]`},
		// Plugins and libcni read keys in any letter case.
		{"reserved parameter in another case", mod(func(c *NetworkConfig) {
			c.Cniv1Config.Plugins[0].Parameters["RuntimeConfig"] = `{"deviceID": "0000:00:03.0"}`
		}),
			`config.cniv1_config.plugins[0].parameters["RuntimeConfig"]`},
		{"reserved parameter folded", mod(func(c *NetworkConfig) { c.Cniv1Config.Plugins[0].Parameters["TYPE"] = "host-device" }), `config.cniv1_config.plugins[0].parameters["TYPE"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateConfig(tt.cfg)
			if tt.want == "" {
				if err != nil {
					t.Errorf("ValidateConfig: %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ValidateConfig: %v, want %q", err, tt.want)
			}
		})
	}
}

// A configuration file read as a CNIv1Config and written back is the
// same configuration; parameters keep their JSON types.
func TestConflistRoundTrip(t *testing.T) {
	in := `{"cniVersion":"1.0.0","disableCheck":true,"name":"net","plugins":[{"ipam":{"type":"host-local"},"master":"eth0","mtu":1500,"note":"1500","type":"macvlan"},{"capabilities":{"portMappings":true},"type":"portmap"}]}`
	c, err := FromConflist([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.GetPlugins()[0].GetParameters(); p["master"] != "eth0" || p["mtu"] != "1500" || p["note"] != `"1500"` {
		t.Errorf("parameters = %v", p)
	}
	out, err := Conflist(&NetworkConfig{Metadata: &NetworkMetadata{Name: "other"}, Cniv1Config: c})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("round trip:\n got %s\nwant %s", out, in)
	}
	single, err := FromConflist([]byte(`{"name":"s","type":"bridge","bridge":"br0"}`))
	if err != nil {
		t.Fatal(err)
	}
	if single.GetCniVersion() != "0.1.0" || len(single.GetPlugins()) != 1 || single.GetPlugins()[0].GetParameters()["bridge"] != "br0" {
		t.Errorf("single configuration = %v", single)
	}
}

// The state file round-trips, and refuses a version it does not know.
func TestStoreRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "networks.json")
	want := []*NetworkConfig{network("a", "ready"), network("b", "bridge")}
	if err := saveNetworks(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := loadNetworks(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !proto.Equal(got[0], want[0]) || !proto.Equal(got[1], want[1]) {
		t.Errorf("loaded %v, want %v", got, want)
	}
	writeFile(t, path, `{"version": 2, "networks": []}`)
	if _, err := loadNetworks(path); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("a file of version 2: %v", err)
	}
}
