package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastpath-dra/fastpath/dra"
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

// Every example fastpath ships, the manifests deploy/ renders, and the
// good manifests (the CNI DRA driver design's examples verbatim among
// them) have no problem.
func TestValidateGood(t *testing.T) {
	code, out, errOut := runValidate(t, "", "-f", "testdata/validate/good", "-f", "../../deploy/examples",
		"-f", "../../deploy/deviceclasses.yaml", "-f", "../../deploy/cni-deviceclass.yaml")
	if code != 0 || out != "" {
		t.Errorf("exit %d, problems:\n%s%s", code, out, errOut)
	}
	examples, err := filepath.Glob("../../deploy/examples/*.yaml")
	if err != nil || len(examples) < 5 {
		t.Fatalf("examples: %v, %v", examples, err)
	}
}

// Each bad manifest has exactly the problems its "# want:" lines say, one
// line each, naming file, line, object, request and field.
func TestValidateBad(t *testing.T) {
	files, err := filepath.Glob("testdata/validate/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("bad manifests: %v, %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var wants []string
			sc := bufio.NewScanner(bytes.NewReader(data))
			for sc.Scan() {
				if w, ok := strings.CutPrefix(sc.Text(), "# want: "); ok {
					wants = append(wants, w)
				}
			}
			code, out, errOut := runValidate(t, "", "-f", f)
			if code != 1 {
				t.Errorf("exit %d, want 1; stderr %s", code, errOut)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			matched := make([]bool, len(lines))
			for _, w := range wants {
				found := false
				for i, l := range lines {
					if strings.Contains(l, w) {
						found, matched[i] = true, true
					}
				}
				if !found {
					t.Errorf("no problem says %q; the problems:\n%s", w, out)
				}
			}
			for i, l := range lines {
				if !matched[i] {
					t.Errorf("unexpected problem: %s", l)
				}
				if !strings.HasPrefix(l, f+":") {
					t.Errorf("problem does not name the file: %s", l)
				}
			}
		})
	}
}

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
		"no kind":                    {stdin: "metadata: {name: x}\n", args: []string{"-f", "-"}, code: 1, out: "kind: Required value"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runValidate(t, tc.stdin, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errOut, tc.errOut) || (tc.noLines && out != "") {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, %q, %q", code, out, errOut, tc.code, tc.out, tc.errOut)
			}
		})
	}
}

// FuzzValidateManifests: any input is read and checked without panicking,
// and every problem names its file, line and object.
func FuzzValidateManifests(f *testing.F) {
	for _, dir := range []string{"testdata/validate/good", "testdata/validate/bad", "../../deploy/examples"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(string(data))
			}
		}
	}
	f.Add("---\n---\n")
	f.Add(`{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Pod"}, 3]}`)
	f.Fuzz(func(t *testing.T, input string) {
		docs, _ := splitManifests("in.yaml", []byte(input))
		for _, p := range checkManifests(docs, dra.StaticCheck{Policy: dra.CNIPolicy{Plugins: dra.DefaultCNIPlugins}}) {
			s := p.String()
			if !strings.HasPrefix(s, "in.yaml:") || p.doc.line < 1 || p.err == nil {
				t.Errorf("problem %q", s)
			}
		}
	})
}
