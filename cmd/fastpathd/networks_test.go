package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2/ktesting"
)

// statusPlugin answers VERSION and STATUS, as a CNI 1.1 plugin.
const statusPlugin = "#!/bin/sh\n[ \"$CNI_COMMAND\" = VERSION ] && echo '{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"1.0.0\",\"1.1.0\"]}'\nexit 0\n"

// The flags of fastpathd run start the CRI Network API on its socket,
// root's alone, with _fallback from --network-api-cni-conf-dir and the
// plugins of --cni-bin-dir; fastpathd networks sets, lists and removes
// networks through it; stopping removes the socket.
func TestNetworksCommand(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bin, confDir, stateDir := t.TempDir(), t.TempDir(), t.TempDir()
	socket := filepath.Join(t.TempDir(), "netapi", "network-api.sock")
	if err := os.WriteFile(filepath.Join(bin, "bridge"), []byte(statusPlugin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confDir, "10-node.conflist"), []byte(`{"cniVersion":"1.1.0","name":"node","plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}

	var o runOptions
	fs := newRunFlagSet(&bytes.Buffer{}, logsapi.NewLoggingConfiguration())
	o.addFlags(fs)
	if err := parseFlags(fs, []string{"--node-name", "n", "--state-dir", stateDir, "--cni-bin-dir", bin,
		"--network-api-socket", socket, "--network-api-cni-conf-dir", confDir}); err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	api, err := o.networkAPI.start(ctx, o.stateDir, splitList(o.cni.binDirs), nil)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v, want mode 0600", err)
	}

	conf := filepath.Join(t.TempDir(), "blue.conflist")
	if err := os.WriteFile(conf, []byte(`{"cniVersion":"1.1.0","name":"blue","plugins":[{"type":"bridge","bridge":"br-blue","ipam":{"type":"host-local"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := runMain(append([]string{"networks"}, args...), &stdout, &stderr)
		return stdout.String(), stderr.String(), code
	}
	steps := []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"set", "blue", "--socket", socket, "-f", conf, "--ip-range", "10.20.0.0/16"}, 0,
			"network blue set: sandbox management no, connectivity no (plugin host-local: no executable in " + bin + ")", ""},
		{[]string{"list", "--socket", socket}, 0, "blue       1           bridge   no       no", ""},
		{[]string{"list", "--socket", socket}, 0, "_fallback  0           bridge   yes      yes           from " + filepath.Join(confDir, "10-node.conflist"), ""},
		{[]string{"list", "--socket", socket, "-o", "json"}, 0, `"cidr": "10.20.0.0/16"`, ""},
		{[]string{"set", "_fallback", "--socket", socket, "-f", conf}, 1, "", "PermissionDenied"},
		{[]string{"set", "Bad/Name", "--socket", socket, "-f", conf}, 1, "", "config.metadata.name"},
		{[]string{"set", "blue", "--socket", socket}, 2, "", "-f FILE is required"},
		{[]string{"remove", "--socket", socket}, 2, "", "want the network's NAME"},
		{[]string{"remove", "blue", "--socket", socket}, 0, "network blue removed", ""},
		{[]string{"list", "--socket", socket}, 0, "_fallback", ""},
		{[]string{"frob"}, 2, "", `unknown "frob"`},
		{nil, 2, "", "want list, set or remove"},
		{[]string{"list", "--socket", filepath.Join(t.TempDir(), "none.sock"), "--timeout", "1s"}, 1, "", "list the networks"},
	}
	for _, s := range steps {
		out, errOut, code := cli(s.args...)
		if code != s.code || !strings.Contains(out, s.out) || !strings.Contains(errOut, s.err) {
			t.Errorf("fastpathd networks %s: exit %d, stdout %q, stderr %q; want exit %d, %q in stdout, %q in stderr",
				strings.Join(s.args, " "), code, out, errOut, s.code, s.out, s.err)
		}
	}
	if out, _, _ := cli("list", "--socket", socket); strings.Contains(out, "blue") {
		t.Errorf("blue listed after its removal:\n%s", out)
	}

	api.stop()
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after stop: %v, want it removed", err)
	}
}

// Without --network-api-socket there is no CRI Network API.
func TestNetworkAPIOff(t *testing.T) {
	var o networkAPIOptions
	api, err := o.start(t.Context(), t.TempDir(), nil, nil)
	if err != nil || api != nil {
		t.Errorf("start without a socket = %v, %v; want nothing", api, err)
	}
	if api.Err() != nil {
		t.Error("an API that is off delivers errors")
	}
	api.stop()
}
