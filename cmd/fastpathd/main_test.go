package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	logsapi "k8s.io/component-base/logs/api/v1"
)

func TestExitCodes(t *testing.T) {
	missingKubeconfig := filepath.Join(t.TempDir(), "missing.kubeconfig")
	e810 := "../../devices/testdata/sysfs/e810"
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string // in stdout
		wantErr  string // in stderr
	}{
		{name: "no command", args: nil, wantCode: 2, wantErr: "Usage:"},
		{name: "help", args: []string{"--help"}, wantCode: 0, wantOut: "fastpathd run"},
		{name: "version", args: []string{"--version"}, wantCode: 0, wantOut: "fastpathd dev (go"},
		{name: "unknown command", args: []string{"frobnicate"}, wantCode: 2, wantErr: `unknown command "frobnicate"`},
		{name: "run without node name", args: []string{"run"}, wantCode: 2, wantErr: "--node-name"},
		{name: "run with unknown flag", args: []string{"run", "--no-such-flag"}, wantCode: 2, wantErr: "no-such-flag"},
		{name: "run with stray argument", args: []string{"run", "--node-name", "n", "extra"}, wantCode: 2, wantErr: "unexpected arguments"},
		{name: "run with bad metrics address", args: []string{"run", "--node-name", "n", "--metrics-addr", "nonsense"}, wantCode: 2, wantErr: "--metrics-addr"},
		{name: "run with missing kubeconfig", args: []string{"run", "--node-name", "n", "--kubeconfig", missingKubeconfig}, wantCode: 2, wantErr: missingKubeconfig},
		{name: "run help", args: []string{"run", "--help"}, wantCode: 0, wantErr: "-node-name"},
		{name: "run help names the log formats", args: []string{"run", "--help"}, wantCode: 0, wantErr: "Permitted formats: \"json\""},
		{name: "run with an unknown log format", args: []string{"run", "--node-name", "n", "--logging-format", "yaml"}, wantCode: 2, wantErr: "Unsupported log format"},
		{name: "run negative checkpoint rest", args: []string{"run", "--node-name", "n", "--checkpoint-rest", "-1s"}, wantCode: 2, wantErr: "--checkpoint-rest -1s: must not be negative"},
		{name: "run negative rediscover interval", args: []string{"run", "--node-name", "n", "--rediscover-interval", "-1m"}, wantCode: 2, wantErr: "--rediscover-interval -1m0s: must not be negative"},
		{name: "run empty CNI allowlist", args: []string{"run", "--node-name", "n", "--cni", "--cni-plugins", ""}, wantCode: 2, wantErr: "--cni-plugins must name at least one plugin type"},
		{name: "run CNI allowlist of commas", args: []string{"run", "--node-name", "n", "--cni", "--cni-plugins", " , "}, wantCode: 2, wantErr: "--cni-plugins must name at least one plugin type"},
		{name: "run CNI plugin path", args: []string{"run", "--node-name", "n", "--cni", "--cni-plugins", "macvlan,../../bin/sh"}, wantCode: 2, wantErr: `"../../bin/sh": must be a file name`},
		{name: "run negative CHECK interval", args: []string{"run", "--node-name", "n", "--cni", "--cni-check-interval", "-1s"}, wantCode: 2, wantErr: "--cni-check-interval"},
		{name: "run NRI plugin index of one digit", args: []string{"run", "--node-name", "n", "--nri-plugin-index", "7"}, wantCode: 2, wantErr: `--nri-plugin-index "7": must be two digits`},
		{name: "run negative CNI plugins at once", args: []string{"run", "--node-name", "n", "--cni-max-plugins", "-1"}, wantCode: 2, wantErr: "--cni-max-plugins -1: must not be negative"},
		{name: "run bad config namespace", args: []string{"run", "--node-name", "n", "--cni", "--cni-config-namespace", "Not_A_Namespace"}, wantCode: 2, wantErr: "--cni-config-namespace"},
		{name: "run NPWG bad allowed namespace", args: []string{"run", "--node-name", "n", "--npwg", "--npwg-allowed-namespaces", "ok,Not_A_Namespace"}, wantCode: 2, wantErr: "--npwg-allowed-namespaces"},
		{name: "run NPWG bad conf namespace", args: []string{"run", "--node-name", "n", "--npwg", "--npwg-conf-namespaces", "net-ops,Not_A_Namespace"}, wantCode: 2, wantErr: `--npwg-conf-namespaces: namespace "Not_A_Namespace"`},
		{name: "run NPWG bad host device pattern", args: []string{"run", "--node-name", "n", "--npwg", "--npwg-host-devices", "ens1f*,[eth"}, wantCode: 2, wantErr: `host device "[eth"`},
		{name: "run NPWG relative host path", args: []string{"run", "--node-name", "n", "--npwg", "--npwg-host-paths", "var/lib/cni"}, wantCode: 2, wantErr: `host path "var/lib/cni"`},
		{name: "run NPWG without a configuration directory", args: []string{"run", "--node-name", "n", "--npwg", "--npwg-conf-dir", ""}, wantCode: 2, wantErr: "--npwg-conf-dir"},
		{name: "run NPWG bad default interface", args: []string{"run", "--node-name", "n", "--npwg-default-interface", "a/b"}, wantCode: 2, wantErr: "--npwg-default-interface"},
		{name: "run IPAMClaims without NPWG", args: []string{"run", "--node-name", "n", "--npwg-ipamclaims"}, wantCode: 2, wantErr: "--npwg-ipamclaims needs --npwg"},
		{name: "run help names NPWG", args: []string{"run", "--help"}, wantCode: 0, wantErr: "-npwg-allowed-namespaces"},
		// The chart passes it with allowPFWithVFs.
		{name: "run help names allow-pf-with-vfs", args: []string{"run", "--help"}, wantCode: 0, wantErr: "-allow-pf-with-vfs"},
		{name: "validate an example", args: []string{"validate", "-f", "../../deploy/examples/cni.yaml"}, wantCode: 0},
		{name: "validate a bad manifest", args: []string{"validate", "-f", "testdata/validate/bad/attacks.yaml"}, wantCode: 1, wantOut: `ResourceClaim tenant-a/uplink: request "net"`, wantErr: "validate: 7 problems in 5 objects"},
		{name: "validate a missing file", args: []string{"validate", "-f", missingKubeconfig}, wantCode: 2, wantErr: "missing.kubeconfig"},
		{name: "validate help", args: []string{"validate", "--help"}, wantCode: 0, wantErr: "Exit codes: 0 no problem, 1 problems found, 2 unreadable input"},
		{name: "controller without namespace", args: []string{"controller"}, wantCode: 2, wantErr: "--leader-election-namespace"},
		{name: "controller PodNetwork params recheck too short", args: []string{"controller", "--leader-election-namespace", "ns", "--podnetworks", "--podnetwork-params-recheck", "10ms"}, wantCode: 2, wantErr: "--podnetwork-params-recheck 10ms: must be at least 1s"},
		{name: "controller bad allowed namespace", args: []string{"controller", "--leader-election-namespace", "ns", "--podnetworks", "--npwg-allowed-namespaces", "Bad_NS"}, wantCode: 2, wantErr: `--npwg-allowed-namespaces: allowed namespace "Bad_NS"`},
		{name: "controller help names PodNetworks", args: []string{"controller", "--help"}, wantCode: 0, wantErr: "-disable-default-podnetwork-creation"},
		{name: "controller webhook without a certificate directory", args: []string{"controller", "--leader-election-namespace", "ns", "--webhook-port", "9443"}, wantCode: 2, wantErr: "--webhook-port needs --webhook-cert-dir"},
		{name: "controller webhook port out of range", args: []string{"controller", "--leader-election-namespace", "ns", "--webhook-port", "70000", "--webhook-cert-dir", "/tmp"}, wantCode: 2, wantErr: "--webhook-port 70000: not a port"},
		{name: "controller webhook bad Secret name", args: []string{"controller", "--leader-election-namespace", "ns", "--webhook-port", "9443", "--webhook-cert-dir", "/tmp", "--webhook-secret", "Bad_Name"}, wantCode: 2, wantErr: `--webhook-secret "Bad_Name"`},
		{name: "controller webhook bad DNS name", args: []string{"controller", "--leader-election-namespace", "ns", "--webhook-port", "9443", "--webhook-cert-dir", "/tmp", "--webhook-secret", "certs", "--webhook-dns-names", "local_host"}, wantCode: 2, wantErr: `--webhook-dns-names: "local_host"`},
		{name: "controller webhook bad host devices", args: []string{"controller", "--leader-election-namespace", "ns", "--webhook-port", "9443", "--webhook-cert-dir", "/tmp", "--npwg-host-devices", "["}, wantCode: 2, wantErr: "--npwg-host-devices"},
		{name: "controller empty allowlist", args: []string{"controller", "--cni-plugins", ""}, wantCode: 2, wantErr: "--cni-plugins"},
		{name: "run relative network API socket", args: []string{"run", "--node-name", "n", "--network-api-socket", "api.sock"}, wantCode: 2, wantErr: `--network-api-socket "api.sock": must be an absolute path`},
		{name: "run help names the network API", args: []string{"run", "--help"}, wantCode: 0, wantErr: "-network-api-cni-conf-dir"},
		{name: "help names networks", args: []string{"--help"}, wantCode: 0, wantOut: "fastpathd networks list|set|remove"},
		{name: "networks help", args: []string{"networks", "--help"}, wantCode: 0, wantOut: "fastpathd networks set NAME -f FILE"},
		{name: "networks list with a name", args: []string{"networks", "list", "x"}, wantCode: 2, wantErr: "networks list takes no name"},
		{name: "inventory bad output", args: []string{"inventory", "-o", "yaml"}, wantCode: 2, wantErr: `-o "yaml"`},
		{name: "inventory bad filter", args: []string{"inventory", "--sysfs-root", e810, "--filter", "device.nope =="}, wantCode: 2, wantErr: "filter"},
		{name: "run bad IP pools", args: []string{"run", "--node-name", "n", "--ip-pools", "testdata/bad-ip-pools.yaml"}, wantCode: 2, wantErr: "testdata/bad-ip-pools.yaml.pools[0].subnet: Invalid value: \"10.56.0.1/24\": must be canonical: 10.56.0.0/24"},
		{name: "run missing IP pools", args: []string{"run", "--node-name", "n", "--ip-pools", missingKubeconfig}, wantCode: 2, wantErr: "--ip-pools"},
		{name: "run bad share", args: []string{"run", "--node-name", "n", "--share", "1 +"}, wantCode: 2, wantErr: "share"},
		{name: "inventory shared", args: []string{"inventory", "--sysfs-root", e810, "-o", "slices", "--node-name", "n", "--share", `device.attributes["fastpath.dev"].ifName == "ens1f0"`, "--share-interfaces", "8"}, wantCode: 0, wantOut: "allowMultipleAllocations: true"},
		{name: "run bad filter", args: []string{"run", "--node-name", "n", "--filter", "1 +"}, wantCode: 2, wantErr: "filter"},
		{name: "inventory bad memif config", args: []string{"inventory", "--sysfs-root", e810, "--memif-config", missingKubeconfig}, wantCode: 2, wantErr: "memif config"},
		{name: "inventory table", args: []string{"inventory", "--sysfs-root", e810}, wantCode: 0, wantOut: "pci-0000-3b-01-2  sriov-vf  0000:3b:01.2  8086:1889      vfio-pci"},
		{name: "inventory json", args: []string{"inventory", "--sysfs-root", e810, "-o", "json"}, wantCode: 0, wantOut: `"pfPciAddress": "0000:3b:00.0"`},
		{name: "inventory warnings", args: []string{"inventory", "--sysfs-root", "../../devices/testdata/sysfs/broken"}, wantCode: 0, wantErr: `numa_node: malformed integer "zero"`},
		{name: "inventory missing sysfs root", args: []string{"inventory", "--sysfs-root", "/no/such/dir"}, wantCode: 2, wantErr: "/no/such/dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", "")
			t.Setenv("POD_NAMESPACE", "")
			var stdout, stderr bytes.Buffer
			code := runMain(tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantOut) {
				t.Errorf("stdout = %q, want it to contain %q", stdout.String(), tt.wantOut)
			}
			if !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tt.wantErr)
			}
		})
	}
}

func TestNodeNameFromEnvironment(t *testing.T) {
	t.Setenv("NODE_NAME", "node-from-env")
	var o runOptions
	fs := newRunFlagSet(&bytes.Buffer{}, logsapi.NewLoggingConfiguration())
	o.addFlags(fs)
	if err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	if o.nodeName != "node-from-env" {
		t.Errorf("node name = %q, want it from $NODE_NAME", o.nodeName)
	}
}
