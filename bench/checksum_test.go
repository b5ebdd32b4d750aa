package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// BenchmarkOpenChecksums is the cost of the checksums at load: Open of a
// version-2 checkpoint of 1000 prepared claims as this build writes it
// (each record's checksum verified), beside the same file without its
// checksums, as v0.1.0 writes it (nothing to verify).
func BenchmarkOpenChecksums(b *testing.B) {
	dir := b.TempDir()
	sealed := filepath.Join(dir, "sealed", "checkpoint.json")
	store, err := claims.Open(sealed, claims.Legacy{})
	if err != nil {
		b.Fatal(err)
	}
	store.SetJournal(false)
	fillStore(b, store, 1000)
	data, err := os.ReadFile(sealed)
	if err != nil {
		b.Fatal(err)
	}
	var cp map[string]json.RawMessage
	if err := json.Unmarshal(data, &cp); err != nil {
		b.Fatal(err)
	}
	if _, ok := cp["checksums"]; !ok {
		b.Fatalf("%s has no checksums", sealed)
	}
	delete(cp, "checksums")
	plain := filepath.Join(dir, "plain", "checkpoint.json")
	unsealed, err := json.Marshal(cp)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(plain), 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(plain, unsealed, 0o600); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, path string }{{"checksums", sealed}, {"none", plain}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				s, err := claims.Open(bc.path, claims.Legacy{})
				if err != nil {
					b.Fatal(err)
				}
				if n := len(s.View()); n != 1000 {
					b.Fatalf("%d claims, want 1000", n)
				}
			}
		})
	}
}
