package claims

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzOpen feeds checkpoint files to Open: it never panics, and what it
// loads answers every query and reloads the same after a write.
func FuzzOpen(f *testing.F) {
	for _, p := range []string{"testdata/v1/checkpoint.json", "testdata/v1/cni/cni-checkpoint.json"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"version": 2, "claims": {"fastpath.dev/a": {"driver": "fastpath.dev", "uid": "a", "namespace": "n", "name": "a", "pod": {"uid": "p"}, "devices": [{"request": "r", "pool": "p", "device": "d", "pod": {"name": "net1"}}]}}}`))
	f.Add([]byte(`{"version": 2, "claims": {"x": null}}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "checkpoint.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, Legacy{})
		if err != nil {
			return
		}
		all := s.Claims()
		for _, c := range all {
			if got, ok := s.Get(c.Key()); !ok || !reflect.DeepEqual(got, c) {
				t.Fatalf("Get(%s) = %+v, %v", c.Key(), got, ok)
			}
			_ = s.PodClaims(c.Pod.UID)
			_ = c.InterfaceNames()
		}
		_ = s.Pods()
		probe := netdevClaim("fuzz-probe", "fuzz-pod", "fuzz-device", "fuzz0")
		if err := s.Admit(probe); err != nil {
			t.Fatalf("Admit of an unrelated claim: %v", err)
		}
		if err := s.Delete(probe.Key()); err != nil {
			t.Fatal(err)
		}
		again, err := Open(path, Legacy{})
		if err != nil {
			t.Fatalf("reopening what was written: %v", err)
		}
		if got := again.Claims(); !reflect.DeepEqual(got, all) {
			t.Fatalf("reloaded %+v, want %+v", got, all)
		}
	})
}
