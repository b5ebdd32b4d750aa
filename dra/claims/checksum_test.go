package claims

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// flip changes the first old in the file at path to new, of the same
// length: a record the disk changed, still JSON.
func flip(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndex(data, []byte(old))
	if i < 0 || len(old) != len(new) {
		t.Fatalf("%s holds no %q", path, old)
	}
	copy(data[i:], new)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A record whose checksum does not match, in the checkpoint or in a line
// of its journal, is held aside: Open serves every other claim, a change
// or a lock of that one fails naming the file, the line and the claim,
// the store writes it back as held until the operator drops it (Repair),
// and a later entry of the claim's replaces it.
func TestChecksumHoldsCorruptRecordAside(t *testing.T) {
	a, b := netdevClaim("a", "pod1", "dev-a", "net1"), netdevClaim("b", "pod2", "dev-b", "net1")
	setup := func(t *testing.T, whole bool) string {
		path := filepath.Join(t.TempDir(), "checkpoint.json")
		s := open(t, path)
		if whole {
			s.SetJournal(false)
		}
		for _, c := range []Claim{b, a} {
			if err := s.Put(c); err != nil {
				t.Fatal(err)
			}
		}
		return path
	}
	for _, tc := range []struct {
		name  string
		whole bool
		file  func(path string) string
		where string
	}{
		{"checkpoint version 2", true, func(path string) string { return path }, "checkpoint.json is corrupt"},
		{"journal", false, JournalPath, "checkpoint.json.journal, line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := setup(t, tc.whole)
			flip(t, tc.file(path), "dev-a", "dev-x")
			s, err := Open(path, Legacy{})
			if err != nil {
				t.Fatalf("Open of a store with one corrupt record: %v", err)
			}
			if got := s.Claims(); len(got) != 1 || got[0].Key() != b.Key() {
				t.Fatalf("claims served: %+v, want b's alone", got)
			}
			corrupt := s.Corrupt()
			if len(corrupt) != 1 || corrupt[0].Claim != "fastpath.dev/a" {
				t.Fatalf("held aside: %v, want a's record", corrupt)
			}
			want := []string{tc.where, "claim fastpath.dev/a", "checksum", "checkpoint repair --drop fastpath.dev/a"}
			_, lockErr := s.LockContext(context.Background(), a.Key())
			for _, err := range []error{lockErr, s.Put(a)} {
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("a change of the corrupt claim: %v, want its CorruptError", err)
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%v: does not say %q", err, w)
					}
				}
			}
			// The other claim changes; a compaction keeps the corrupt
			// record aside.
			if err := s.Delete(b.Key()); err != nil {
				t.Fatal(err)
			}
			if err := s.writeWhole(s.claims); err != nil {
				t.Fatal(err)
			}
			n, listed, err := Verify(path)
			if err != nil || n != 0 || len(listed) != 1 || !strings.Contains(listed[0].Error(), tc.where) {
				t.Fatalf("Verify after a compaction: %d claims, %v, %v; want a's record held, from %s", n, listed, err, tc.where)
			}
			if err := Repair(path, Legacy{}, []string{"fastpath.dev/b"}); err == nil || !strings.Contains(err.Error(), "not held aside") {
				t.Errorf("Repair of a claim not held aside: %v", err)
			}
			if err := Repair(path, Legacy{}, []string{"fastpath.dev/a"}); err != nil {
				t.Fatal(err)
			}
			again := open(t, path)
			if len(again.Corrupt()) != 0 || len(again.Claims()) != 0 {
				t.Errorf("after the repair: %v held, %d claims", again.Corrupt(), len(again.Claims()))
			}
			if err := again.Put(a); err != nil {
				t.Errorf("a change of the dropped claim: %v", err)
			}
		})
	}
	t.Run("replaced by a later entry", func(t *testing.T) {
		path := setup(t, false)
		flip(t, JournalPath(path), "dev-a", "dev-x")
		f, err := os.OpenFile(JournalPath(path), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		line, _ := entryLine(1, 0, a.Key(), &a)
		_, _ = f.Write(line)
		f.Close()
		s := open(t, path)
		if got, ok := s.Get(a.Key()); !ok || len(s.Corrupt()) != 0 || got.Devices[0].Device != "dev-a" {
			t.Errorf("a corrupt line followed by the claim's next: %+v, %v held", got, s.Corrupt())
		}
	})
	t.Run("a line naming no claim", func(t *testing.T) {
		path := setup(t, false)
		flip(t, JournalPath(path), `"key":"fastpath.dev/a"`, `"kex":"fastpath.dev/a"`)
		s := open(t, path)
		held := s.Corrupt()
		if len(held) != 1 || held[0].Line != 1 || held[0].File != JournalPath(path) || !strings.HasPrefix(held[0].Claim, "journal/") {
			t.Fatalf("held aside %v, want the journal's line 1 under a key of its own", held)
		}
		msg := held[0].Error()
		for _, want := range []string{JournalPath(path) + ", line 1", "names no claim", "repair --drop " + held[0].Claim} {
			if !strings.Contains(msg, want) {
				t.Errorf("%q does not say %q", msg, want)
			}
		}
		// The other claims are served and change; the line stays held
		// aside through a compaction, until repair drops it.
		if err := s.Put(b); err != nil {
			t.Fatal(err)
		}
		if err := s.Rewrite(); err != nil {
			t.Fatal(err)
		}
		if s := open(t, path); len(s.Corrupt()) != 1 || s.Corrupt()[0].Claim != held[0].Claim {
			t.Fatalf("reopened after a compaction: %v held, want %s", s.Corrupt(), held[0].Claim)
		}
		if err := Repair(path, Legacy{}, []string{held[0].Claim}); err != nil {
			t.Fatal(err)
		}
		if s := open(t, path); len(s.Corrupt()) != 0 {
			t.Errorf("after repair: %v held", s.Corrupt())
		}
	})
}

// The checksums v0.1.0 and earlier builds leave: a version 2 file without
// any (v0.1.0 drops the field when it writes), and stale ones a build that
// keeps the fields it does not know carried after the claims. The file
// loads, unverified, and its next write checksums it.
func TestChecksumsOfOlderWriters(t *testing.T) {
	rec := `{"driver":"fastpath.dev","uid":"a","namespace":"n","name":"a","pod":{"uid":"p"}}`
	// The record's checksum, had this build written it.
	stale := checksum([]byte(`{"driver":"fastpath.dev","uid":"a","namespace":"n","name":"a","pod":{"uid":"p","name":""},"prepared":false}`))
	for name, data := range map[string]string{
		"none":             `{"version":2,"claims":{"fastpath.dev/a":` + rec + `}}`,
		"stale":            `{"version":2,"claims":{"fastpath.dev/a":` + rec + `},"checksums":{"fastpath.dev/a":"` + stale + `"}}`,
		"stale, version 3": `{"version":3,"generation":4,"claims":{"fastpath.dev/a":` + rec + `},"checksums":{"fastpath.dev/a":"` + stale + `"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			s := open(t, path)
			if len(s.Claims()) != 1 || len(s.Corrupt()) != 0 {
				t.Fatalf("loaded %d claims, %v held; want the claim", len(s.Claims()), s.Corrupt())
			}
			if err := s.writeWhole(s.claims); err != nil {
				t.Fatal(err)
			}
			written, _ := os.ReadFile(path)
			if p, err := parse(written); err != nil || !p.sealed || len(p.claims) != 1 || len(p.corrupt) != 0 {
				t.Errorf("written again: %s; want the record's checksum before the claims", written)
			}
		})
	}
}

// What this build writes in version 2 decodes as v0.1.0 decodes it (a
// struct of version and claims, unknown fields ignored), and its
// checksums are verified when this build reads it back.
func TestVersion2ForV010(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := openWhole(t, path)
	if err := s.Put(netdevClaim("a", "pod1", "dev-a", "net1")); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	p, err := parse(data)
	if err != nil || !p.sealed || len(p.claims) != 1 || p.version != 2 {
		t.Fatalf("parse: %+v, %v; want one verified claim of version 2", p, err)
	}
	var v010 struct {
		Version int               `json:"version"`
		Claims  map[string]*Claim `json:"claims"`
	}
	if err := json.Unmarshal(data, &v010); err != nil || v010.Version != 2 || len(v010.Claims) != 1 {
		t.Errorf("decoded as v0.1.0 does: %+v, %v", v010, err)
	}
}

// The journal's last line torn by a power cut before its sync (zeros where
// its bytes were not written, and its newline) was never acknowledged: it
// is dropped as a cut entry, not held aside, and the next change writes
// over it.
func TestChecksumTornLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	a, b := netdevClaim("a", "pod1", "dev-a", "net1"), netdevClaim("b", "pod2", "dev-b", "net1")
	for _, c := range []Claim{a, b} {
		if err := s.Put(c); err != nil {
			t.Fatal(err)
		}
	}
	flip(t, JournalPath(path), `"dev-b"`, "\x00\x00\x00\x00\x00\x00\x00")
	again := open(t, path)
	if _, ok := again.Get(b.Key()); ok || len(again.Corrupt()) != 0 || len(again.Claims()) != 1 {
		t.Fatalf("a torn last line: %d claims, %v held; want it dropped", len(again.Claims()), again.Corrupt())
	}
	if err := again.Put(b); err != nil {
		t.Fatal(err)
	}
	if got := open(t, path).Claims(); len(got) != 2 {
		t.Errorf("after a change over the torn line: %d claims, want 2", len(got))
	}
}

// A pending write (version 2) a killed daemon left, of a store holding a
// record aside, is adopted at the next Open: the record held aside is no
// checksum of its own that fails.
func TestPendingWriteWithRecordHeldAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := openWhole(t, path)
	a, b := netdevClaim("a", "pod1", "dev-a", "net1"), netdevClaim("b", "pod2", "dev-b", "net1")
	if err := s.Put(a); err != nil {
		t.Fatal(err)
	}
	flip(t, path, "dev-a", "dev-x")
	s = openWhole(t, path)
	if len(s.Corrupt()) != 1 {
		t.Fatalf("held aside: %v, want a's record", s.Corrupt())
	}
	// Written, not committed: a kill here.
	if err := writePending(s, b); err != nil {
		t.Fatal(err)
	}
	again := open(t, path)
	if _, ok := again.Get(b.Key()); !ok || len(again.Corrupt()) != 1 {
		t.Errorf("after the killed pending write: b recorded %v, %v held; want b and a's record held", ok, again.Corrupt())
	}
}

// A record held aside still holds its devices: a claim wanting one of them
// is refused, naming the held claim; another device is admitted.
func TestHeldAsideRecordKeepsItsDevices(t *testing.T) {
	a, b := netdevClaim("a", "pod1", "dev-a", "net1"), netdevClaim("b", "pod2", "dev-b", "net1")
	for _, whole := range []bool{true, false} {
		t.Run(map[bool]string{true: "checkpoint version 2", false: "journal"}[whole], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			s := open(t, path)
			file := JournalPath(path)
			if whole {
				s.SetJournal(false)
				file = path
			}
			for _, c := range []Claim{b, a} {
				if err := s.Put(c); err != nil {
					t.Fatal(err)
				}
			}
			flip(t, file, "p-pod1", "p-podX")
			s, err := Open(path, Legacy{})
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Corrupt()) != 1 {
				t.Fatalf("held aside: %v, want a's record", s.Corrupt())
			}
			err = s.Admit(netdevClaim("c", "pod3", "dev-a", "net1"))
			var ce *ConflictError
			if !errors.As(err, &ce) || ce.Other != a.String() || ce.Device != "dev-a" || !strings.Contains(err.Error(), "held aside") {
				t.Errorf("a claim of the held record's device: %v, want a conflict with %s, held aside", err, a.String())
			}
			refused := netdevClaim("c", "pod3", "dev-a", "net1")
			if _, ok := s.Get(refused.Key()); ok {
				t.Errorf("the refused claim is recorded")
			}
			if err := s.Admit(netdevClaim("d", "pod4", "dev-d", "net1")); err != nil {
				t.Errorf("a claim of another device: %v", err)
			}
		})
	}
}
