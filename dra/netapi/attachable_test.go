package netapi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastpath-dra/fastpath/dataplane"
)

// noSuchLink is the name of no interface of any network namespace the
// tests run in: the suites' links are fp... and e2e-... .
const noSuchLink = "fpnl-absent0"

// pluginBin is a bin directory with executables of the given plugin types.
func pluginBin(t *testing.T, types ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, typ := range types {
		if err := os.WriteFile(filepath.Join(dir, typ), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A configuration list is attachable when it parses, its plugins are
// installed and the host interfaces its macvlan, ipvlan, vlan or
// host-device names exist in this network namespace ("lo" is in every
// one); else the problem says what is missing.
func TestSandboxProblem(t *testing.T) {
	c := checker{binDirs: []string{pluginBin(t, "macvlan", "ipvlan", "vlan", "host-device", "host-local")}}
	list := func(plugins string) []byte {
		return []byte(`{"cniVersion": "1.0.0", "name": "n", "plugins": [` + plugins + `]}`)
	}
	for what, tc := range map[string]struct {
		conflist []byte
		want     string
	}{
		"macvlan on lo":                {list(`{"type": "macvlan", "master": "lo", "ipam": {"type": "host-local"}}`), ""},
		"macvlan on the default route": {list(`{"type": "macvlan"}`), ""},
		"host-device lo":               {list(`{"type": "host-device", "device": "lo"}`), ""},
		"host-device by PCI address":   {list(`{"type": "host-device", "pciBusID": "0000:03:00.1"}`), ""},
		"vlan on the pod's link":       {list(`{"type": "vlan", "master": "` + noSuchLink + `", "linkInContainer": true, "vlanId": 5}`), ""},
		"another plugin's master":      {list(`{"type": "host-local", "master": "` + noSuchLink + `"}`), ""},
		"plugin missing":               {list(`{"type": "bridge"}`), "plugin bridge: no executable in "},
		"IPAM missing":                 {list(`{"type": "macvlan", "master": "lo", "ipam": {"type": "whereabouts"}}`), "plugin whereabouts: no executable in "},
		"macvlan master missing": {list(`{"type": "macvlan", "master": "` + noSuchLink + `"}`),
			"macvlan: master " + noSuchLink + ": no such interface on this node"},
		"master spelt Master": {list(`{"type": "ipvlan", "Master": "` + noSuchLink + `"}`),
			"ipvlan: master " + noSuchLink + ": no such interface on this node"},
		"vlan master missing": {list(`{"type": "vlan", "master": "` + noSuchLink + `", "vlanId": 5}`),
			"vlan: master " + noSuchLink + ": no such interface on this node"},
		"host-device device missing": {list(`{"type": "host-device", "device": "` + noSuchLink + `"}`),
			"host-device: device " + noSuchLink + ": no such interface on this node"},
		"a name no interface has": {list(`{"type": "macvlan", "master": "a-name-longer-than-ifnamsiz"}`),
			"macvlan: master a-name-longer-than-ifnamsiz: no such interface on this node"},
		"two missing": {list(`{"type": "macvlan", "master": "` + noSuchLink + `"}, {"type": "host-device", "device": "fpnl-absent1"}`),
			"macvlan: master " + noSuchLink + ": no such interface on this node; host-device: device fpnl-absent1: no such interface on this node"},
		"not CNI":      {[]byte(`{`), "not a configuration CNI reads"},
		"old version":  {[]byte(`{"cniVersion": "0.0.9", "name": "n", "plugins": [{"type": "macvlan"}]}`), `cniVersion "0.0.9"`},
		"no plugins":   {list(``), "no plugins"},
		"bad JSON key": {list(`{"type": "macvlan", "master": 5}`), ""},
	} {
		got := c.sandboxProblem(tc.conflist)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", what, got, tc.want)
		}
	}
}

// ListPodNetwork's sandbox_management is the same judgement: a network
// whose master is not on the node cannot have sandboxes, and says why.
func TestStatusMissingMaster(t *testing.T) {
	bin := pluginBin(t, "macvlan")
	c := checker{binDirs: []string{bin}, runner: readyRunner{}}
	st := c.status(context.Background(), []byte(`{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "macvlan", "master": "`+noSuchLink+`"}]}`))
	if st.GetSandboxManagement() || st.GetConnectivity() || st.GetMessage() != "macvlan: master "+noSuchLink+": no such interface on this node" {
		t.Errorf("missing master: %v", st)
	}
	st = c.status(context.Background(), []byte(`{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "macvlan", "master": "lo"}]}`))
	if !st.GetSandboxManagement() || !st.GetConnectivity() || st.GetMessage() != "" {
		t.Errorf("master lo: %v", st)
	}
}

// apiNetworks are networks set through the API, by name.
type apiNetworks map[string]string

func (a apiNetworks) Conflist(name string) ([]byte, bool) {
	c, ok := a[name]
	return []byte(c), ok
}

// The judge takes the API's network of a PodNetwork's name over the
// source's configuration, and says where a problem is from.
func TestPodNetworkJudge(t *testing.T) {
	conf := func(master string) []byte {
		return []byte(`{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "macvlan", "master": "` + master + `"}]}`)
	}
	src := fakeSource{nets: []SourceNetwork{
		{Name: "on-lo", From: "PodNetwork on-lo", Conflist: conf("lo")},
		{Name: "absent", From: "PodNetwork absent", Conflist: conf(noSuchLink)},
		{Name: "overridden", From: "PodNetwork overridden", Conflist: conf(noSuchLink)},
		{Name: "bare", From: "PodNetwork bare", Problem: "no NetworkAttachmentDefinition in parametersRefs"},
		{Name: "by-api", From: "PodNetwork by-api", Problem: "no NetworkAttachmentDefinition in parametersRefs"},
		{Name: "api-absent", From: "PodNetwork api-absent", Conflist: conf("lo")},
	}}
	api := apiNetworks{"overridden": string(conf("lo")), "by-api": string(conf("lo")), "api-absent": string(conf(noSuchLink)), "not-a-podnetwork": string(conf("lo"))}
	j := PodNetworkJudge{Source: src, API: api, BinDirs: []string{pluginBin(t, "macvlan")}}
	got, err := j.Attachable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"on-lo":      "",
		"absent":     "PodNetwork absent: macvlan: master " + noSuchLink + ": no such interface on this node",
		"overridden": "",
		"bare":       "PodNetwork bare: no NetworkAttachmentDefinition in parametersRefs",
		"by-api":     "",
		"api-absent": "the CRI Network API's network api-absent: macvlan: master " + noSuchLink + ": no such interface on this node",
	}
	if len(got) != len(want) {
		t.Errorf("judged %v, want %v", got, want)
	}
	for name, w := range want {
		if p, ok := got[name]; !ok || p != w {
			t.Errorf("%s: %q (judged: %t), want %q", name, p, ok, w)
		}
	}
	// Without the API, the source's configuration alone.
	j.API = nil
	if got, err := j.Attachable(context.Background()); err != nil || got["overridden"] == "" || got["by-api"] == "" {
		t.Errorf("without the API: %v, %v", got, err)
	}
	j.Source = fakeSource{err: errors.New("the API server is away")}
	if _, err := j.Attachable(context.Background()); err == nil || !strings.Contains(err.Error(), "the API server is away") {
		t.Errorf("a failing source: %v", err)
	}
}

// readyRunner answers every STATUS: what is judged here is before it.
type readyRunner struct{}

func (readyRunner) Status(context.Context, dataplane.CNINetwork) error { return nil }
