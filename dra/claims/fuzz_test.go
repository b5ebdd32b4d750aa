package claims

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// memStore is the store Open makes of a checkpoint file holding data,
// with its files in memory: what it writes goes to files. It runs the
// parsing and migration Open runs, without a file system.
func memStore(path string, data []byte, files map[string][]byte) (*Store, error) {
	s := &Store{path: path, WriteFile: func(path string, data []byte, _ bool) error {
		files[path] = data
		return nil
	}}
	st, err := decodeState(path, data, nil)
	if err != nil {
		return nil, err
	}
	if err := s.load(st, Legacy{}); err != nil {
		return nil, err
	}
	return s, nil
}

// FuzzOpen feeds checkpoint files to Open's parsing and migration: it
// never panics, and what it loads answers every query and reloads the
// same after a write. The files are in memory (memStore): the file system
// half of Open has tests of its own.
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
	// Nothing is written here: the path only names the store's file.
	path := filepath.Join(f.TempDir(), "checkpoint.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		files := map[string][]byte{}
		s, err := memStore(path, data, files)
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
		written, ok := files[path]
		if !ok || len(files) != 1 {
			t.Fatalf("the store wrote %d files, not its checkpoint %s", len(files), path)
		}
		again, err := memStore(path, written, map[string][]byte{})
		if err != nil {
			t.Fatalf("reopening what was written: %v", err)
		}
		if got := again.Claims(); !reflect.DeepEqual(got, all) {
			t.Fatalf("reloaded %+v, want %+v", got, all)
		}
	})
}

// FuzzChecksums feeds checkpoints with checksums to their parse: it never
// panics; a record it serves matches its checksum when the checksums were
// written with the claims; a record held aside is not served; and what it
// writes of them parses to the same claims and the same records held
// aside, verified.
func FuzzChecksums(f *testing.F) {
	s := &Store{path: "checkpoint.json", claims: map[Key]*Claim{}}
	for _, c := range []Claim{netdevClaim("a", "pod1", "dev-a", "net1"), cniClaim("b", "pod2", "cni-0", "net1")} {
		rec, err := stored(&c)
		if err != nil {
			f.Fatal(err)
		}
		s.claims[c.Key()] = rec
	}
	for _, version := range []int{versionWhole, Version} {
		data, err := s.marshal(s.claims, version, uint64(version-versionWhole))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(bytes.Replace(data, []byte("dev-a"), []byte("dev-x"), 1))
	}
	f.Add([]byte(`{"version":2,"checksums":{"x/y":"00000000"},"claims":{"x/y":{}},"held":{"fastpath.dev/z":{"file":"f","reason":"r","record":"{"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := parse(data)
		if err != nil {
			return
		}
		for k, c := range p.claims {
			if p.corrupt[k] != nil {
				t.Fatalf("claim %s both served and held aside", k)
			}
			if c.Key() != k || c.check(k.String()) != nil {
				t.Fatalf("a record served under %s: %+v", k, c)
			}
		}
		if p.version < versionWhole {
			return
		}
		out, err := marshalCheckpoint(p.claims, p.version, p.gen, p.corrupt)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parse(out)
		if err != nil {
			t.Fatalf("parse of what was written: %v\n%s", err, out)
		}
		if !again.sealed || len(again.claims) != len(p.claims) || len(again.corrupt) != len(p.corrupt) {
			t.Fatalf("written again: %d claims, %d held, sealed %v; want %d and %d, sealed", len(again.claims), len(again.corrupt), again.sealed, len(p.claims), len(p.corrupt))
		}
		for k := range p.corrupt {
			if again.corrupt[k] == nil {
				t.Fatalf("claim %s no longer held aside once written", k)
			}
		}
	})
}
