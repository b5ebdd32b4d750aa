package validate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/bounds/boundstest"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/dratest"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// docBoundary is a line that separates YAML documents.
var docBoundary = regexp.MustCompile(`(?m)^---.*$`)

// seedManifests are the documents of the test and example manifests, one
// by one, and each file whole.
func seedManifests(f *testing.F) (docs, files []string) {
	for _, dir := range []string{"../../cmd/fastpathd/testdata/validate/good", "../../cmd/fastpathd/testdata/validate/bad", "../../deploy/examples"} {
		names, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			f.Fatal(err)
		}
		for _, name := range names {
			data, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			files = append(files, string(data))
			for _, doc := range docBoundary.Split(string(data), -1) {
				if strings.TrimSpace(doc) != "" {
					docs = append(docs, strings.TrimSpace(doc)+"\n")
				}
			}
		}
	}
	if len(docs) == 0 {
		f.Fatal("no seed manifests")
	}
	return docs, files
}

// FuzzSplitManifests: any input splits into documents without panicking,
// within boundstest.Budget; every document and every error names the file
// and a line of the input.
// The seeds are single documents: the engine traces every comparison of
// the YAML parser, and a mutation of a small input runs in a fraction of
// the time of a large one.
func FuzzSplitManifests(f *testing.F) {
	docs, _ := seedManifests(f)
	for _, doc := range docs {
		f.Add(doc)
	}
	f.Add("---\n---\n")
	f.Add("# a comment\n---\nkind: List\nitems: [{kind: Pod}, 3]\n")
	f.Fuzz(func(t *testing.T, input string) {
		// The engine grows inputs by repeating parts of them; a large one
		// parses slowly and finds nothing a small one does not.
		if len(input) > 4<<10 {
			return
		}
		lines := strings.Count(input, "\n") + 1
		var docs []*Manifest
		var err error
		boundstest.Check(t, func() string {
			docs, err = SplitManifests("in.yaml", []byte(input))
			return ""
		})
		for _, d := range docs {
			if d.file != "in.yaml" || d.line < 1 || d.line > lines+1 || !json.Valid(d.js) {
				t.Errorf("document %s: %q", d.Where(), d.js)
			}
		}
		var errs []error
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			errs = joined.Unwrap()
		} else if err != nil {
			errs = []error{err}
		}
		for _, err := range errs {
			if !strings.HasPrefix(err.Error(), "in.yaml:") {
				t.Errorf("error without its place: %q", err)
			}
		}
	})
}

// FuzzValidateManifests: any set of objects is checked without panicking,
// within boundstest.Budget, their problems joined saying at most
// bounds.MessageBytes, and every problem names its file, line and object. An input is one JSON
// document, an object or a List of them (so that claims meet their classes,
// approved configurations and pods); the seeds are the test and example
// manifests, by document and by file. Splitting YAML is FuzzSplitManifests'.
func FuzzValidateManifests(f *testing.F) {
	docs, files := seedManifests(f)
	for _, file := range files {
		objects, err := SplitManifests("seed.yaml", []byte(file))
		if err != nil {
			continue
		}
		list := struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Items      []json.RawMessage `json:"items"`
		}{APIVersion: "v1", Kind: "List"}
		for _, o := range objects {
			list.Items = append(list.Items, o.js)
		}
		js, err := json.Marshal(list)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(js))
	}
	for _, doc := range docs {
		if js, err := yaml.YAMLToJSON([]byte(doc)); err == nil {
			f.Add(string(js))
		}
	}
	f.Add(`{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Pod"}, 3]}`)
	// Claims with configs at and over their bounds.
	claim := func(driver, params string) string {
		return `{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "default"}, "spec": {"devices": {` +
			`"requests": [{"name": "r", "exactly": {"deviceClassName": "netdev.fastpath.dev"}}], "config": [{"opaque": {"driver": "` + driver + `", "parameters": ` + params + `}}]}}}`
	}
	for _, seed := range dratest.ConfigSeeds() {
		f.Add(claim("fastpath.dev", seed))
	}
	for _, seed := range dratest.CNISeeds() {
		f.Add(claim("cni.dra.networking.x-k8s.io", seed))
	}
	check := Check{Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}}
	rules := npwg.ConfigRules{Plugins: cnipolicy.DefaultPlugins}
	f.Fuzz(func(t *testing.T, input string) {
		if len(input) > 16<<10 {
			return
		}
		docs, err := objectsOf("in.yaml", 1, []byte(input))
		if err != nil && !strings.HasPrefix(err.Error(), "in.yaml:1: ") {
			t.Errorf("error without its place: %v", err)
		}
		var problems []Finding
		boundstest.Check(t, func() string {
			problems, _ = CheckManifests(docs, check, rules)
			// What the webhook says of one object: its problems joined.
			var errs field.ErrorList
			for _, p := range problems {
				errs = append(errs, p.Err)
			}
			return bounds.Join(errs)
		})
		for _, p := range problems {
			s := p.String()
			if !strings.HasPrefix(s, "in.yaml:1: ") || p.Doc.line != 1 || p.Err == nil {
				t.Errorf("problem %q", s)
			}
		}
	})
}
