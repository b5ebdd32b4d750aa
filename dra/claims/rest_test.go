package claims

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// A store at rest (SetRest) is of version 2, which the previous release
// reads: its changes go to the journal (version 3) while they come, and
// once none has come for the quiet time the checkpoint is rewritten whole
// in version 2, holding every claim, the journal gone. The next change
// writes version 3 again. With SetJournal off, or after Fold, it stays of
// version 2.
func TestRestWritesVersion2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	t.Cleanup(func() { s.SetRest(0) })
	atRest := func(want int) {
		t.Helper()
		var got map[Key]*Claim
		var v int
		var readErr error
		err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			got, v, readErr = Read(path)
			return readErr == nil && v == 2, nil
		})
		if err != nil || len(got) != want {
			t.Fatalf("at rest the checkpoint is of version %d with %d claims (%v), want version 2 with %d", v, len(got), readErr, want)
		}
		if _, err := os.Stat(JournalPath(path)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("at rest the journal is there (%v)", err)
		}
	}
	a, b, c := netdevClaim("a", "pod1", "dev-a", "net1"), netdevClaim("b", "pod2", "dev-b", "net1"), netdevClaim("c", "pod3", "dev-c", "net1")
	// While changes come (the quiet time not yet passed), version 3.
	s.SetRest(time.Hour)
	for i, c := range []Claim{a, b} {
		if err := s.Put(c); err != nil {
			t.Fatal(err)
		}
		if v := readVersion(t, path); v != Version {
			t.Fatalf("right after change %d the checkpoint is of version %d, want %d", i, v, Version)
		}
		s.settleRest() // the quiet time passed
		atRest(i + 1)
	}
	// The timer.
	s.SetRest(20 * time.Millisecond)
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	atRest(3)
	if again := open(t, path); len(again.Claims()) != 3 {
		t.Errorf("the store at rest opens with %d claims, want 3", len(again.Claims()))
	}
	if err := s.Fold(); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(a.Key()); err != nil {
		t.Fatal(err)
	}
	if v := readVersion(t, path); v != 2 {
		t.Errorf("after Fold a change wrote version %d, want 2", v)
	}
}

// readVersion is the version of the checkpoint at path as it stands.
func readVersion(t *testing.T, path string) int {
	t.Helper()
	_, v, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
