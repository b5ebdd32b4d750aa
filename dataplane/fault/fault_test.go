package fault

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestPointsAreMarked: the code marks exactly the points Points lists,
// each once.
func TestPointsAreMarked(t *testing.T) {
	call := regexp.MustCompile(`fault\.Point\("([a-z.]+)"\)`)
	step := regexp.MustCompile(`fault\.Point\("prepare\." \+ s\.kind\(\) \+ "\.(before|applied)"\)`)
	var marked, stepPoints []string
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "test" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range call.FindAllStringSubmatch(string(data), -1) {
			marked = append(marked, m[1])
		}
		for _, m := range step.FindAllStringSubmatch(string(data), -1) {
			stepPoints = append(stepPoints, m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The steps' points are marked once, before and after every step, for
	// every kind of step.
	if slices.Sort(stepPoints); !slices.Equal(stepPoints, []string{"applied", "before"}) {
		t.Fatalf("the points before and after each step are marked %v, want once each", stepPoints)
	}
	for _, p := range Points {
		if strings.HasPrefix(p, "prepare.") && (strings.HasSuffix(p, ".before") || strings.HasSuffix(p, ".applied")) {
			marked = append(marked, p)
		}
	}
	for _, p := range Points {
		if n := countOf(marked, p); n != 1 {
			t.Errorf("point %s is marked %d times", p, n)
		}
	}
	for _, m := range marked {
		if !slices.Contains(Points, m) {
			t.Errorf("point %s is marked but not listed in Points", m)
		}
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, l := range list {
		if l == s {
			n++
		}
	}
	return n
}
