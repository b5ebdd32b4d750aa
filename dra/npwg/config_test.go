package npwg

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const confDir = "testdata/netd"

func readNAD(t testing.TB, file string) *nadv1.NetworkAttachmentDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "nad", file))
	if err != nil {
		t.Fatal(err)
	}
	var nad nadv1.NetworkAttachmentDefinition
	if err := yaml.UnmarshalStrict(data, &nad); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return &nad
}

func nad(ns, name, config string) *nadv1.NetworkAttachmentDefinition {
	return &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       nadv1.NetworkAttachmentDefinitionSpec{Config: config},
	}
}

func pluginTypes(list *libcni.NetworkConfigList) []string {
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Network.Type)
	}
	return types
}

// jsonEqual says whether two JSON documents hold the same values.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

type wantConfig struct {
	name, version, source string
	types                 []string
}

func checkConfig(t *testing.T, c *Config, want wantConfig) {
	t.Helper()
	if c.List.Name != want.name || c.List.CNIVersion != want.version || c.Source != want.source || !reflect.DeepEqual(pluginTypes(c.List), want.types) {
		t.Errorf("config %s %s from %s, plugins %q; want %+v", c.List.Name, c.List.CNIVersion, c.Source, pluginTypes(c.List), want)
	}
	// What libcni runs reads back as the same list.
	again, err := libcni.NetworkConfFromBytes(c.List.Bytes)
	if err != nil {
		t.Fatalf("the list's bytes: %v", err)
	}
	if again.Name != c.List.Name || again.CNIVersion != c.List.CNIVersion || len(again.Plugins) != len(c.List.Plugins) {
		t.Errorf("the list's bytes read as %s %s with %d plugins", again.Name, again.CNIVersion, len(again.Plugins))
	}
}

// The standard's examples (§3.2.1-3.2.4, §3.4.2.1), verbatim.
func TestLoadConfigSpecExamples(t *testing.T) {
	for file, want := range map[string]wantConfig{
		"spec-3.2.1-config.yaml":     {name: "a-bridge-network", version: "0.3.0", source: SourceSpec, types: []string{"bridge"}},
		"spec-3.2.2-configlist.yaml": {name: "another-bridge-network", version: "0.3.0", source: SourceSpec, types: []string{"bridge", "port-forwarding", "tuning"}},
		"spec-3.2.3-thick.yaml":      {name: "a-bridge-network", version: "0.3.0", source: SourceSpec, types: []string{"awesome-plugin"}},
	} {
		t.Run(file, func(t *testing.T) {
			c, err := LoadConfig(readNAD(t, file), confDir)
			if err != nil {
				t.Fatal(err)
			}
			checkConfig(t, c, want)
		})
	}
	// §3.4.2.1: the thick plugin gets the object's name.
	c, err := LoadConfig(readNAD(t, "spec-3.4.2.1-injection.yaml"), confDir)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte(`{
    "cniVersion": "0.3.0",
    "name": "a-bridge-network",
    "type": "awesome-plugin"
}`)
	if len(c.List.Plugins) != 1 || !jsonEqual(t, c.List.Plugins[0].Bytes, want) {
		t.Errorf("the plugin's config is %s, want %s", c.List.Plugins[0].Bytes, want)
	}
	// §3.2.4: a network known to the implementation by name only; this
	// directory has none of that name.
	_, err = LoadConfig(readNAD(t, "spec-3.2.4-reference.yaml"), confDir)
	if !errors.Is(err, ErrNoConfig) || !strings.HasPrefix(err.Error(), `NetworkAttachmentDefinition a-bridge-network: no CNI configuration: spec.config is empty, and testdata/netd has no configuration list (*.conflist) or configuration (*.conf, *.json) named "a-bridge-network"; files passed over: 50-broken.conflist (`) {
		t.Errorf("error %v", err)
	}
}

// §3.4.1: spec.config, else a list on disk, else a single configuration
// on disk, else failure.
func TestLoadConfigOnDisk(t *testing.T) {
	for name, tc := range map[string]struct {
		nad  *nadv1.NetworkAttachmentDefinition
		want wantConfig
	}{
		"a list":                        {nad("ns", "storage", ""), wantConfig{"storage", "1.1.0", confDir + "/20-storage.conflist", []string{"macvlan", "tuning"}}},
		"a single configuration":        {nad("ns", "sriov", ""), wantConfig{"sriov", "0.4.0", confDir + "/30-sriov.conf", []string{"host-device"}}},
		"a single configuration, .json": {nad("ns", "from-json", ""), wantConfig{"from-json", "0.3.1", confDir + "/90-kubelet.json", []string{"ipvlan"}}},
		"a list before a configuration": {nad("ns", "both", ""), wantConfig{"both", "0.4.0", confDir + "/40-both.conflist", []string{"bridge"}}},
		// A configuration without a cniVersion is one of CNI 0.1.0.
		"a configuration without a version": {nad("ns", "legacy", ""), wantConfig{"legacy", "0.1.0", confDir + "/60-legacy.conf", []string{"bridge"}}},
		"spec.config before the files":      {nad("ns", "storage", `{"cniVersion": "1.0.0", "type": "vlan"}`), wantConfig{"storage", "1.0.0", SourceSpec, []string{"vlan"}}},
		"a blank spec.config is none":       {nad("ns", "sriov", " \n "), wantConfig{"sriov", "0.4.0", confDir + "/30-sriov.conf", []string{"host-device"}}},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := LoadConfig(tc.nad, confDir)
			if err != nil {
				t.Fatal(err)
			}
			checkConfig(t, c, tc.want)
		})
	}
	c, err := LoadConfig(nad("ns", "both", ""), confDir)
	if err != nil || !strings.Contains(string(c.List.Plugins[0].Bytes), "br-list") {
		t.Errorf("both: %v, %v", c, err)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		nad     *nadv1.NetworkAttachmentDefinition
		dir     string
		want    string
		wantErr error
	}{
		"no object":                 {want: "a NetworkAttachmentDefinition without a name"},
		"no name":                   {nad: nad("ns", "", `{}`), want: "without a name"},
		"no file of its name":       {nad: nad("ns", "nothing", ""), dir: confDir, wantErr: ErrNoConfig, want: `NetworkAttachmentDefinition ns/nothing: no CNI configuration: spec.config is empty, and testdata/netd has no configuration list`},
		"a file that is broken":     {nad: nad("ns", "broken", ""), dir: confDir, wantErr: ErrNoConfig, want: "files passed over: 50-broken.conflist (error parsing configuration list: unexpected end of JSON input)"},
		"no directory":              {nad: nad("ns", "storage", ""), dir: "testdata/missing", wantErr: ErrNoConfig, want: "testdata/missing has no configuration list"},
		"no directory given":        {nad: nad("ns", "storage", ""), wantErr: ErrNoConfig, want: `there is no CNI configuration directory to look for a configuration named "storage" in`},
		"a list without version":    {nad: nad("ns", "unversioned", ""), dir: confDir, wantErr: ErrCNIVersion, want: "ns/unversioned: testdata/netd/70-unversioned.conflist: unsupported cniVersion: the configuration list names no cniVersion this node's CNI library runs (0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0); a list needs one, 0.3.0 or later"},
		"a version from the future": {nad: nad("ns", "future", ""), dir: confDir, wantErr: ErrCNIVersion, want: `80-future.conflist: unsupported cniVersion: cniVersion "2.0.0" is not one this node's CNI library runs`},
		"a plugin type with a path": {nad: nad("ns", "escape", ""), dir: confDir, want: `95-escape.conf: plugins[0].type "../../usr/bin/evil": must be a file name`},

		"spec.config not JSON":            {nad: nad("ns", "n", `{"type": bridge}`), want: "NetworkAttachmentDefinition ns/n: spec.config: not valid JSON: invalid character 'b' looking for beginning of value (at byte 10)"},
		"spec.config a list":              {nad: nad("ns", "n", `[{"type": "bridge"}]`), want: "spec.config: must be a JSON object (a CNI configuration or configuration list), not a list"},
		"spec.config with more":           {nad: nad("ns", "n", `{"type": "bridge"} {}`), want: "spec.config: not valid JSON: more after the first value"},
		"a name that is a number":         {nad: nad("ns", "n", `{"name": 5, "type": "bridge"}`), want: "spec.config: name must be a string, not a number"},
		"a version that is a number":      {nad: nad("ns", "n", `{"cniVersion": 1.0, "type": "bridge"}`), want: "spec.config: cniVersion must be a string, not a number"},
		"a list version that is a number": {nad: nad("ns", "n", `{"cniVersion": 1.0, "plugins": [{"type": "bridge"}]}`), want: "spec.config: cniVersion must be a string, not a number"},
		"a version libcni does not know":  {nad: nad("ns", "n", `{"cniVersion": "0.5.0", "type": "bridge"}`), wantErr: ErrCNIVersion, want: `cniVersion "0.5.0" is not one this node's CNI library runs`},
		"a version newer than libcni":     {nad: nad("ns", "n", `{"cniVersion": "1.2.0", "type": "bridge"}`), wantErr: ErrCNIVersion, want: `cniVersion "1.2.0"`},
		"a version that is not one":       {nad: nad("ns", "n", `{"cniVersion": "one", "type": "bridge"}`), wantErr: ErrCNIVersion, want: `cniVersion "one"`},
		"a list older than lists":         {nad: nad("ns", "n", `{"cniVersion": "0.2.0", "plugins": [{"type": "bridge"}]}`), wantErr: ErrCNIVersion, want: `cniVersion "0.2.0": configuration lists need 0.3.0 or later`},
		"a list without a version":        {nad: nad("ns", "n", `{"plugins": [{"type": "bridge"}]}`), wantErr: ErrCNIVersion, want: "names no cniVersion"},
		"versions none of them known":     {nad: nad("ns", "n", `{"cniVersions": ["9.0.0"], "plugins": [{"type": "bridge"}]}`), wantErr: ErrCNIVersion, want: "names no cniVersion"},
		"an empty list":                   {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "plugins": []}`), want: "no plugins in list"},
		"plugins not a list":              {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "plugins": {"type": "bridge"}}`), want: "invalid 'plugins' type"},
		"a plugin without a type":         {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "plugins": [{"bridge": "br0"}]}`), want: "missing 'type'"},
		"a configuration without a type":  {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "bridge": "br0"}`), want: "spec.config: error parsing configuration: missing 'type'"},
		"a type that is a path":           {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "type": "/bin/sh"}`), want: `plugins[0].type "/bin/sh": must be a file name`},
		"a plugin type that is a path":    {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "plugins": [{"type": "bridge"}, {"type": "../sh"}]}`), want: `plugins[1].type "../sh"`},
		"capabilities of the wrong type":  {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "type": "bridge", "capabilities": ["ips"]}`), want: "error parsing configuration"},
		// The network's name becomes a file name: libcni's cache,
		// host-local's directory of addresses (<dataDir>/<name>).
		"a name that climbs out":     {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "name": "../../../..", "type": "bridge"}`), want: `spec.config: name "../../../..": not a valid CNI network name`},
		"a list name that climbs":    {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "name": "..", "plugins": [{"type": "bridge"}]}`), want: `spec.config: name "..": not a valid CNI network name`},
		"a name with a slash":        {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "name": "a/b", "type": "bridge"}`), want: `name "a/b": not a valid CNI network name`},
		"a name that is a dot":       {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "name": ".", "type": "bridge"}`), want: `name ".": not a valid CNI network name`},
		"a hidden name":              {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "name": ".cache", "type": "bridge"}`), want: `name ".cache": not a valid CNI network name`},
		"a name with a NUL":          {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "name": "a\u0000b", "type": "bridge"}`), want: `not a valid CNI network name`},
		"a name too long for libcni": {nad: nad("ns", "n", `{"cniVersion": "1.0.0", "name": "`+strings.Repeat("n", 175)+`", "type": "bridge"}`), want: `175 bytes, more than the 174`},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := LoadConfig(tc.nad, tc.dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v and %q", err, tc.wantErr, tc.want)
			}
			if c != nil {
				t.Errorf("a config with an error: %+v", c)
			}
		})
	}
}

func TestLoadConfigInline(t *testing.T) {
	for name, tc := range map[string]struct {
		config string
		want   wantConfig
		plugin string // the first plugin's config, when it matters
	}{
		"a name of its own": {config: `{"cniVersion": "1.0.0", "name": "other", "type": "bridge"}`, want: wantConfig{"other", "1.0.0", SourceSpec, []string{"bridge"}}},
		"an empty name":     {config: `{"cniVersion": "1.0.0", "name": "", "type": "bridge"}`, want: wantConfig{"net", "1.0.0", SourceSpec, []string{"bridge"}}},
		"a list without a name": {config: `{"cniVersion": "1.0.0", "plugins": [{"type": "bridge"}, {"type": "tuning"}]}`,
			want: wantConfig{"net", "1.0.0", SourceSpec, []string{"bridge", "tuning"}}},
		"no version":               {config: `{"type": "bridge"}`, want: wantConfig{"net", "0.1.0", SourceSpec, []string{"bridge"}}, plugin: `{"cniVersion": "0.1.0", "name": "net", "type": "bridge"}`},
		"an empty version":         {config: `{"cniVersion": "", "type": "bridge"}`, want: wantConfig{"net", "0.1.0", SourceSpec, []string{"bridge"}}},
		"versions to pick from":    {config: `{"cniVersions": ["0.4.0", "1.1.0", "9.9.9"], "plugins": [{"type": "bridge"}]}`, want: wantConfig{"net", "1.1.0", SourceSpec, []string{"bridge"}}},
		"a single config of 0.2.0": {config: `{"cniVersion": "0.2.0", "type": "bridge"}`, want: wantConfig{"net", "0.2.0", SourceSpec, []string{"bridge"}}},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := LoadConfig(nad("ns", "net", tc.config), "")
			if err != nil {
				t.Fatal(err)
			}
			checkConfig(t, c, tc.want)
			got := c.List.Plugins[0].Bytes
			if tc.plugin != "" && !jsonEqual(t, got, []byte(tc.plugin)) {
				t.Errorf("plugin %s, want %s", got, tc.plugin)
			}
		})
	}
}
