package validate

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// docBoundary is a line that separates YAML documents.
var docBoundary = regexp.MustCompile(`(?m)^---.*$`)

// FuzzValidateManifests: any input is read and checked without panicking,
// and every problem names its file, line and object. The seeds are the
// documents of the test and example manifests, one by one: a mutation of a
// small input runs in a fraction of the time of a large one (the engine
// traces every comparison of the YAML parser), so that the target tries
// thousands of inputs in the seconds make test gives it.
func FuzzValidateManifests(f *testing.F) {
	seen := map[string]bool{}
	seed := func(s string) {
		if strings.TrimSpace(s) != "" && !seen[s] {
			seen[s] = true
			f.Add(s)
		}
	}
	for _, dir := range []string{"../../cmd/fastpathd/testdata/validate/good", "../../cmd/fastpathd/testdata/validate/bad", "../../deploy/examples"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				continue
			}
			docs := docBoundary.Split(string(data), -1)
			for _, doc := range docs {
				seed(strings.TrimSpace(doc) + "\n")
			}
		}
	}
	f.Add("---\n---\n")
	f.Add(`{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Pod"}, 3]}`)
	f.Fuzz(func(t *testing.T, input string) {
		// The engine grows inputs by repeating parts of them; a large one
		// parses slowly and finds nothing a small one does not.
		if len(input) > 4<<10 {
			return
		}
		docs, _ := SplitManifests("in.yaml", []byte(input))
		problems, _ := CheckManifests(docs, Check{Policy: cnipolicy.Options{Plugins: cnipolicy.DefaultPlugins}}, npwg.ConfigRules{Plugins: cnipolicy.DefaultPlugins})
		for _, p := range problems {
			s := p.String()
			if !strings.HasPrefix(s, "in.yaml:") || p.Doc.line < 1 || p.Err == nil {
				t.Errorf("problem %q", s)
			}
		}
	})
}
