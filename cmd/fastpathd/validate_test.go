package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

func runValidate(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := validateCommand(args, strings.NewReader(stdin), &stdout, &stderr)
	code := 0
	switch {
	case err == nil:
	case errors.As(err, new(usageError)):
		code = 2
		stderr.WriteString(err.Error())
	default:
		code = 1
		stderr.WriteString(err.Error())
	}
	return code, stdout.String(), stderr.String()
}

// directives are what a testdata manifest says of itself, in comment
// lines: "# flags: ..." the flags it is validated with, "# want: ..." a
// problem it must give (a part of its line), "# skipped: ..." an object
// it must be said to skip.
type directives struct {
	flags, wants, skipped []string
}

func readDirectives(t *testing.T, file string) directives {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d directives
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if f, ok := strings.CutPrefix(sc.Text(), "# flags: "); ok {
			d.flags = append(d.flags, strings.Fields(f)...)
		}
		if w, ok := strings.CutPrefix(sc.Text(), "# want: "); ok {
			d.wants = append(d.wants, w)
		}
		if w, ok := strings.CutPrefix(sc.Text(), "# skipped: "); ok {
			d.skipped = append(d.skipped, w)
		}
	}
	return d
}

// matchLines checks that each of wants is in one of lines, and that each
// line has one of wants.
func matchLines(t *testing.T, what string, lines, wants []string) {
	t.Helper()
	matched := make([]bool, len(lines))
	for _, w := range wants {
		found := false
		for i, l := range lines {
			if strings.Contains(l, w) {
				found, matched[i] = true, true
			}
		}
		if !found {
			t.Errorf("no %s says %q; they are:\n%s", what, w, strings.Join(lines, "\n"))
		}
	}
	for i, l := range lines {
		if !matched[i] {
			t.Errorf("unexpected %s: %s", what, l)
		}
	}
}

// skippedLines are the lines of validate's standard error that say it
// skipped an object.
func skippedLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "skipped: ") {
			out = append(out, l)
		}
	}
	return out
}

// examplesFlags are the flags of the nodes deploy/examples are written
// for (make lint validates them so): delegate.yaml's network runs
// sriov-cni.
var examplesFlags = []string{"--cni-plugins", strings.Join(append(slices.Clone(cnipolicy.DefaultPlugins), "sriov"), ",")}

// Every example fastpath ships, the manifests deploy/ renders, and the
// good manifests (the CNI DRA driver design's examples verbatim among
// them), each with the flags it says, have no problem.
func TestValidateGood(t *testing.T) {
	t.Run("examples", func(t *testing.T) {
		args := append([]string{"-f", "../../deploy/examples", "-f", "../../deploy/deviceclasses.yaml", "-f", "../../deploy/cni-deviceclass.yaml"}, examplesFlags...)
		code, out, errOut := runValidate(t, "", args...)
		if code != 0 || out != "" || len(skippedLines(errOut)) > 0 {
			t.Errorf("exit %d, problems:\n%s%s", code, out, errOut)
		}
		examples, err := filepath.Glob("../../deploy/examples/*.yaml")
		if err != nil || len(examples) < 5 {
			t.Fatalf("examples: %v, %v", examples, err)
		}
	})
	files, err := filepath.Glob("testdata/validate/good/*")
	if err != nil || len(files) < 5 {
		t.Fatalf("good manifests: %v, %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			d := readDirectives(t, f)
			code, out, errOut := runValidate(t, "", append([]string{"-f", f}, d.flags...)...)
			if code != 0 || out != "" {
				t.Errorf("exit %d, problems:\n%s%s", code, out, errOut)
			}
			// JSON has no comments to say what it skips:
			// TestValidateInputs has list.json's.
			if filepath.Ext(f) != ".json" {
				matchLines(t, "skipped object", skippedLines(errOut), d.skipped)
			}
		})
	}
}

// Each bad manifest, validated with the flags it says, has exactly the
// problems its "# want:" lines say, one line each, naming file, line,
// object, request and field.
func TestValidateBad(t *testing.T) {
	files, err := filepath.Glob("testdata/validate/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("bad manifests: %v, %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			d := readDirectives(t, f)
			code, out, errOut := runValidate(t, "", append([]string{"-f", f}, d.flags...)...)
			if code != 1 {
				t.Errorf("exit %d, want 1; stderr %s", code, errOut)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			matchLines(t, "problem", lines, d.wants)
			for _, l := range lines {
				if !strings.HasPrefix(l, f+":") {
					t.Errorf("problem does not name the file: %s", l)
				}
			}
			matchLines(t, "skipped object", skippedLines(errOut), d.skipped)
		})
	}
}

// hostPathsClaim is a CNI claim whose plugin's config holds n host paths:
// n problems.
func hostPathsClaim(n int) string {
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf(`"/a%d"`, i)
	}
	return `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: paths, namespace: default}
spec:
  devices:
    requests: [{name: net, exactly: {deviceClassName: cni.networking.x-k8s.io}}]
    config:
    - opaque:
        driver: cni.dra.networking.x-k8s.io
        parameters: {apiVersion: cni.networking.x-k8s.io/v1alpha1, kind: CNI, ifName: net1,
          plugins: [{type: macvlan, config: {l: [` + strings.Join(paths, ", ") + `]}, arguments: [{fieldPath: master, valueFrom: {attributeRef: name}}]}]}
`
}

// uplinkNAD is a NetworkAttachmentDefinition naming the host's eth0.
const uplinkNAD = `apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: {name: uplink, namespace: app}
spec:
  config: '{"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0"}'
`

func TestValidateInputs(t *testing.T) {
	inline, err := os.ReadFile("testdata/validate/good/design-inline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	broken := filepath.Join(t.TempDir(), "broken.yaml")
	if err := os.WriteFile(broken, []byte("apiVersion: v1\nkind: Pod\n---\nkind: [unclosed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		stdin   string
		args    []string
		code    int
		out     string // in stdout
		errOut  string // in stderr
		noLines bool
	}{
		"stdin":                      {stdin: string(inline), args: []string{"-f", "-"}, code: 0, noLines: true},
		"a path as an argument":      {args: []string{"testdata/validate/good/design-inline.yaml"}, code: 0, noLines: true},
		"only approved configs":      {stdin: string(inline), args: []string{"-f", "-", "--cni-require-approved"}, code: 1, out: `<stdin>:2: ResourceClaim one-macvlan-attachment: request "macvlan0": spec.devices.config[0].opaque.parameters.plugins: Forbidden: this node runs only approved configs`},
		"another allowlist":          {stdin: string(inline), args: []string{"-f", "-", "--cni-plugins", "ipvlan,host-local"}, code: 1, out: `plugin type "macvlan" is not on this node's allowlist [ipvlan host-local]`},
		"a missing file":             {args: []string{"-f", missing}, code: 2, errOut: missing},
		"YAML that does not parse":   {args: []string{"-f", broken}, code: 2, errOut: broken + ":4: not YAML"},
		"no input":                   {code: 2, errOut: "-f FILE"},
		"an empty allowlist":         {args: []string{"-f", "-", "--cni-plugins", ","}, code: 2, errOut: "--cni-plugins must name at least one plugin type"},
		"a plugin type with a slash": {args: []string{"-f", "-", "--cni-plugins", "../bin/sh"}, code: 2, errOut: `--cni-plugins: "../bin/sh"`},
		"not an object":              {stdin: "- a\n- b\n", args: []string{"-f", "-"}, code: 2, errOut: "not a Kubernetes object"},
		"forty host paths, sixteen said": {stdin: hostPathsClaim(40), args: []string{"-f", "-"}, code: 1,
			out: `<stdin>:1: ResourceClaim default/paths: request "net": and 24 more problems, not each said`, errOut: "40 problems in 1 objects"},
		"a FastpathNodeConfig's filter that does not compile": {stdin: "apiVersion: fastpath.dev/v1alpha1\nkind: FastpathNodeConfig\nmetadata: {name: a}\n" +
			"spec:\n  nodeSelector: {}\n  filter: 'device.attributes[\"fastpath.dev\"].kind =='\n", args: []string{"-f", "-"}, code: 1,
			out: `<stdin>:1: FastpathNodeConfig a: spec.filter: Invalid value: "device.attributes[\"fastpath.dev\"].kind ==": filter`},
		"no kind": {stdin: "metadata: {name: x}\n", args: []string{"-f", "-"}, code: 1, out: "kind: Required value"},
		"a kind it does not judge": {args: []string{"-f", "testdata/validate/good/list.json"}, code: 0, noLines: true,
			errOut: "skipped: Deployment not-checked (testdata/validate/good/list.json:1): not a kind validate judges\n"},
		"a kind it does not judge, --strict": {args: []string{"--strict", "-f", "testdata/validate/good/list.json"}, code: 1,
			out:    "testdata/validate/good/list.json:1: Deployment not-checked: not judged (--strict): not a kind validate judges\n",
			errOut: "validate: 1 problems in 1 objects"},
		"KEP-3698's PodNetwork as the KEP writes it": {stdin: "apiVersion: v1\nkind: PodNetwork\nmetadata: {name: dataplane}\nspec: {provider: foo.io/bar}\n", args: []string{"-f", "-"}, code: 1,
			out: `<stdin>:1: PodNetwork dataplane: apiVersion: Invalid value: "v1": KEP-3698's PodNetwork is not in Kubernetes' core group (v1) in any release; fastpath serves it as network.fastpath.dev/v1alpha1: set apiVersion: network.fastpath.dev/v1alpha1`},
		"KEP-3698's PodNetworkAttachment as the KEP writes it": {stdin: "apiVersion: v1\nkind: PodNetworkAttachment\nmetadata: {name: a, namespace: default}\nspec: {podNetworkName: dataplane}\n", args: []string{"-f", "-"}, code: 1,
			out: `set apiVersion: network.fastpath.dev/v1alpha1`},
		"a host device by default": {stdin: uplinkNAD, args: []string{"-f", "-"}, code: 1,
			out: `<stdin>:1: NetworkAttachmentDefinition app/uplink: spec.config: Forbidden: names an object of the host: plugins[0] (macvlan): master "eth0" is not one of the host devices the operator allows (none) (--npwg-host-devices, --npwg-host-paths, --npwg-host-options, --npwg-vlan-ids)`},
		"a host device the operator allows": {stdin: uplinkNAD, args: []string{"-f", "-", "--npwg-host-devices", "ens*,eth0"}, code: 0, noLines: true},
		"another allowlist for a NAD": {stdin: uplinkNAD, args: []string{"-f", "-", "--npwg-host-devices", "eth0", "--cni-plugins", "ipvlan"}, code: 1,
			out: `spec.config: Forbidden: plugin type not allowed: ["macvlan"] not on this node's allowlist [ipvlan] (--cni-plugins)`},
		"a bad conf namespace": {args: []string{"-f", "-", "--npwg-conf-namespaces", "net-ops,Net_Ops"}, code: 2, errOut: `validate: --npwg-conf-namespaces: namespace "Net_Ops"`},
		"a bad host device":    {args: []string{"-f", "-", "--npwg-host-devices", "[eth"}, code: 2, errOut: `host device "[eth"`},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runValidate(t, tc.stdin, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errOut, tc.errOut) || (tc.noLines && out != "") {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, %q, %q", code, out, errOut, tc.code, tc.out, tc.errOut)
			}
		})
	}
}

// A pod's k8s.v1.cni.cncf.io/networks annotation: each malformed element
// or key is a problem line of its own, naming the element and the key.
func TestValidateNetworks(t *testing.T) {
	pod := func(annotation string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: app\n  namespace: app\n  annotations:\n    k8s.v1.cni.cncf.io/networks: '" + annotation + "'\n"
	}
	const claim = `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: fast, namespace: app}
spec:
  spec:
    devices:
      requests:
      - {name: nic, exactly: {deviceClassName: netdev.fastpath.dev}}
      config:
      - opaque:
          driver: fastpath.dev
          parameters: {apiVersion: fastpath.dev/v1alpha1, kind: InterfaceConfig, interface: {name: net1}}
---
`
	const path = "<stdin>:1: Pod app/app: metadata.annotations[k8s.v1.cni.cncf.io/networks]"
	for name, tc := range map[string]struct {
		stdin string
		want  []string // the problem lines, whole or their beginnings
	}{
		"the comma-delimited format":    {stdin: pod("net-a, other-ns/net-b@data,net-a")},
		"the JSON format":               {stdin: pod(`[{"name": "net-a", "ips": ["10.0.0.2/24"], "interface": "data"}, {"name": "net-a"}]`)},
		"no namespace: the default one": {stdin: "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {k8s.v1.cni.cncf.io/networks: net-a}\n"},
		"each element on its own line": {stdin: pod("Net_A,,ns/a/b,net-c@,net-d@a:b"), want: []string{
			path + `[0].name: Invalid value: "Net_A": a lowercase RFC 1123 subdomain must consist of`,
			path + `[1]: Required value: empty element: network references are separated by single commas, like net-a,other-ns/net-b`,
			path + `[2]: Invalid value: "ns/a/b": must be [namespace/]name[@interface], with at most one '/'`,
			path + `[3].interface: Required value: an interface name after '@'; leave it out to have one chosen`,
			path + `[4].interface: Invalid value: "a:b": a Linux interface name must not contain '/' or ':'`,
		}},
		"each key on its own line": {stdin: pod(`[{"name": "net-a", "mac": "01:00:5e:00:00:01", "colour": "red"}, {"name": 5, "ips": []}]`), want: []string{
			path + `[0].mac: Invalid value: "01:00:5e:00:00:01": must be a unicast address (the lowest bit of the first byte clear)`,
			path + `[0].colour: Forbidden: unknown key: the standard reserves keys without a period; other implementations' keys are in reverse domain notation, like org.example.key`,
			path + `[1].name: Invalid value: "5": must be a string, not a number`,
			path + `[1].ips: Invalid value: "[]": must list at least one address; leave the key out to have the network choose`,
		}},
		"JSON that is not a list": {stdin: pod(`{"name": "net-a"}`), want: []string{
			path + `: Invalid value: "{\"name\": \"net-a\"}": must be a JSON list of objects, like [{"name": "net-a"}], not an object`,
		}},
		"an interface asked for twice": {stdin: pod("net-a@data,net-b@data"), want: []string{
			path + `[1].interface: Duplicate value: "data": element [0] (network app/net-a) asks for this interface name too; interface names are unique in the pod`,
		}},
		"the primary network's interface": {stdin: pod("net-a@eth0"), want: []string{
			path + `[0].interface: Invalid value: "eth0": the pod has an interface of this name already (the loopback, the cluster default network's, or a DRA claim's); ask network app/net-a for another`,
		}},
		"an interface of the pod's claim": {stdin: claim + pod("net-a@net1,net-b") + "spec:\n  resourceClaims: [{name: fast, resourceClaimTemplateName: fast}]\n", want: []string{
			`<stdin>:14: Pod app/app: metadata.annotations[k8s.v1.cni.cncf.io/networks][0].interface: Invalid value: "net1": the pod has an interface of this name already`,
		}},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runValidate(t, tc.stdin, "-f", "-")
			var lines []string
			if out = strings.TrimSpace(out); out != "" {
				lines = strings.Split(out, "\n")
			}
			if wantCode := min(len(tc.want), 1); code != wantCode {
				t.Errorf("exit %d, want %d; stderr %s", code, wantCode, errOut)
			}
			if len(lines) != len(tc.want) {
				t.Fatalf("problems:\n%s\nwant %d", out, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("problem %d:\n%s\nwant\n%s", i, lines[i], w)
				}
			}
		})
	}
}
