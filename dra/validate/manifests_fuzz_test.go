package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// FuzzValidateManifests: any input is read and checked without panicking,
// and every problem names its file, line and object.
func FuzzValidateManifests(f *testing.F) {
	for _, dir := range []string{"../../cmd/fastpathd/testdata/validate/good", "../../cmd/fastpathd/testdata/validate/bad", "../../deploy/examples"} {
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
