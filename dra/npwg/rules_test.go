package npwg

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An object with an empty spec.config gets the configuration of its name
// in the operator's directory only in a namespace the operator lists
// (or with "*"); elsewhere it is refused, naming the object, the
// configuration it would have had and the flag, before the directory is
// read.
func TestConfDir(t *testing.T) {
	for name, tc := range map[string]struct {
		namespaces []string
		nad        string // namespace/name
		want       string // in the error; "" for the configuration
	}{
		"listed":                   {namespaces: []string{"net-ops", "tenant-a"}, nad: "tenant-a/storage"},
		"every namespace":          {namespaces: []string{AllNamespaces}, nad: "tenant-b/storage"},
		"none by default":          {nad: "tenant-a/storage", want: `NetworkAttachmentDefinition tenant-a/storage: on-disk configuration not allowed: spec.config is empty, and the NetworkAttachmentDefinitions of namespace tenant-a may not use the operator's on-disk CNI configurations (--npwg-conf-namespaces: none), so the configuration named "storage" in testdata/netd is not read for it; set spec.config, or ask the operator to add namespace tenant-a to --npwg-conf-namespaces`},
		"another namespace listed": {namespaces: []string{"net-ops"}, nad: "tenant-a/storage", want: `(--npwg-conf-namespaces: net-ops), so the configuration named "storage" in testdata/netd is not read`},
		"no namespace is special":  {namespaces: []string{"net-ops"}, nad: "default/storage", want: "namespace default may not use"},
	} {
		t.Run(name, func(t *testing.T) {
			ns, n, _ := strings.Cut(tc.nad, "/")
			cfg, err := ConfDir{Path: confDir, Namespaces: tc.namespaces}.Load(nad(ns, n, ""))
			if tc.want == "" {
				if err != nil || cfg.Source != filepath.Join(confDir, "20-storage.conflist") {
					t.Errorf("configuration %+v, error %v; want the directory's 20-storage.conflist", cfg, err)
				}
				return
			}
			if !errors.Is(err, ErrConfDirNotAllowed) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want ErrConfDirNotAllowed and %q", err, tc.want)
			}
			if _, ok := errors.AsType[*ConfigError](err); !ok {
				t.Errorf("error %v is not a *ConfigError", err)
			}
		})
	}
}

// The refusal is the same whether the directory holds a configuration of
// that name or not, or cannot be read at all: it tells a tenant nothing
// of the operator's files.
func TestConfDirRefusalRevealsNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "storage.conflist"), []byte(`{"cniVersion": "1.0.0", "name": "storage", "plugins": [{"type": "macvlan", "master": "eth1"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	rules := ConfigRules{ConfDir: ConfDir{Path: dir, Namespaces: []string{"net-ops"}}, Plugins: []string{"macvlan"}}
	if _, err := rules.Config(nad("net-ops", "storage", "")); err != nil {
		t.Fatalf("the file is there for a namespace that may use it: %v", err)
	}
	_, there := rules.Config(nad("tenant-a", "storage", ""))
	if err := os.Remove(filepath.Join(dir, "storage.conflist")); err != nil {
		t.Fatal(err)
	}
	_, gone := rules.Config(nad("tenant-a", "storage", ""))
	if err := os.Chmod(dir, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	_, unreadable := rules.Config(nad("tenant-a", "storage", ""))
	if there == nil || gone == nil || unreadable == nil || there.Error() != gone.Error() || there.Error() != unreadable.Error() {
		t.Errorf("refusals differ: with the file %v; without it %v; the directory unreadable %v", there, gone, unreadable)
	}
}

// ConfigRules judge a configuration as the node does: the allowlist
// first, then, for a spec.config, the objects of the host; the operator's
// on-disk configurations may name any.
func TestConfigRules(t *testing.T) {
	rules := ConfigRules{ConfDir: ConfDir{Path: confDir, Namespaces: []string{AllNamespaces}}, Plugins: []string{"macvlan", "static", "tuning"},
		Policy: Policy{HostDevices: []string{"ens1f*"}}}
	for name, tc := range map[string]struct {
		config string
		target error  // nil: accepted
		want   string // the whole error
	}{
		"allowed":                       {config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f0", "ipam": {"type": "static"}}`},
		"on disk, naming a host device": {config: ""},
		"a plugin off the allowlist": {config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "ens1f0", "ipam": {"type": "host-local"}}`, target: ErrPluginNotAllowed,
			want: `NetworkAttachmentDefinition app/storage: spec.config: plugin type not allowed: ["host-local"] not on this node's allowlist [macvlan static tuning] (--cni-plugins): a network's configuration may run only the plugins the operator allows`},
		"a host device not allowed": {config: `{"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0"}`, target: ErrHostObject,
			want: `NetworkAttachmentDefinition app/storage: spec.config: names an object of the host: plugins[0] (macvlan): master "eth0" is not one of the host devices the operator allows (ens1f*) (--npwg-host-devices, --npwg-host-paths, --npwg-host-options)`},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := rules.Config(nad("app", "storage", tc.config))
			if tc.target == nil {
				if err != nil || cfg == nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			ce, ok := errors.AsType[*ConfigError](err)
			if !errors.Is(err, tc.target) || !ok || ce.Source != SourceSpec || err.Error() != tc.want {
				t.Errorf("error %v\nwant %v: %s", err, tc.target, tc.want)
			}
		})
	}
}

func TestConfDirValidate(t *testing.T) {
	if err := (ConfDir{Namespaces: []string{"net-ops", AllNamespaces}}).Validate(); err != nil {
		t.Errorf("valid namespaces refused: %v", err)
	}
	if err := (ConfDir{Namespaces: []string{"net-ops", "Not_A_Namespace"}}).Validate(); err == nil || !strings.Contains(err.Error(), `namespace "Not_A_Namespace"`) {
		t.Errorf("error %v, want the bad namespace named", err)
	}
}
