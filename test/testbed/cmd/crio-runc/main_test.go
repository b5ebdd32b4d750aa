package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A bundle's spec loses what this host cannot give and keeps the rest,
// fields this program does not know among them; an exec's process file
// loses the capabilities.
func TestRestrict(t *testing.T) {
	bounding, err := boundingSet()
	if err != nil {
		t.Fatal(err)
	}
	var missing string
	for _, name := range capNames {
		if !bounding[name] {
			missing = name
		}
	}
	caps := []any{"CAP_NET_ADMIN", "CAP_NOT_A_CAPABILITY"}
	if missing != "" {
		caps = append(caps, missing)
	}
	dir := t.TempDir()
	spec := map[string]any{
		"ociVersion": "1.2.1",
		"process": map[string]any{"oomScoreAdj": -997, "args": []any{"/pause"},
			"capabilities": map[string]any{"bounding": caps, "effective": caps}},
		"linux": map[string]any{"resources": map[string]any{
			"hugepageLimits": []any{map[string]any{"pageSize": "2MB", "limit": 0}},
			"memory":         map[string]any{"limit": 1 << 20}}},
		"annotations": map[string]any{"io.kubernetes.pod.name": "p"},
	}
	data, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := flagOf([]string{"--root", "/r", "create", "--bundle", dir, "id"}, "--bundle", "-b"); got != dir {
		t.Fatalf("bundle %q, want %q", got, dir)
	}
	if got := flagOf([]string{"create", "--bundle=" + dir}, "--bundle", "-b"); got != dir {
		t.Fatalf("bundle %q, want %q", got, dir)
	}
	if err := rewrite(filepath.Join(dir, "config.json"), restrictSpec); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	data, _ = os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	p := got["process"].(map[string]any)
	if p["oomScoreAdj"] != float64(0) {
		t.Errorf("oomScoreAdj %v, want 0", p["oomScoreAdj"])
	}
	for _, set := range []string{"bounding", "effective"} {
		var names []string
		for _, n := range p["capabilities"].(map[string]any)[set].([]any) {
			names = append(names, n.(string))
		}
		if !slices.Equal(names, []string{"CAP_NET_ADMIN"}) {
			t.Errorf("%s capabilities %v, want those of the bounding set: CAP_NET_ADMIN", set, names)
		}
	}
	res := got["linux"].(map[string]any)["resources"].(map[string]any)
	if _, ok := res["hugepageLimits"]; ok || res["memory"] == nil {
		t.Errorf("resources %v, want the memory limit and no hugepage limits", res)
	}
	if got["annotations"] == nil || got["ociVersion"] != "1.2.1" {
		t.Errorf("fields lost: %v", got)
	}
	if err := rewrite(filepath.Join(dir, "absent.json"), restrictSpec); err != nil {
		t.Errorf("a missing file: %v", err)
	}
}
