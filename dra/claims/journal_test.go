package claims

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/go-logr/logr/funcr"
)

// A change appends one entry to the journal and leaves the checkpoint as
// it was; once the journal is longer than the checkpoint, the checkpoint
// is written whole, of the next generation, and the journal emptied. A
// store opened at any moment holds every change.
func TestJournal(t *testing.T) {
	defer func(n int64) { compactMin = n }(compactMin)
	compactMin = 4 << 10
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	if err := s.Put(netdevClaim("first", "pod0", "dev-first", "net1")); err != nil {
		t.Fatal(err)
	}
	checkpoint, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if v := fileVersion(checkpoint); v != Version {
		t.Fatalf("the first change wrote version %d, want %d", v, Version)
	}
	var compactions int
	gen := s.gen
	for i := range 40 {
		c := netdevClaim(fmt.Sprint("c", i), fmt.Sprint("pod", i), fmt.Sprint("dev-", i), "net1")
		if err := s.Put(c); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := s.Delete(c.Key()); err != nil {
				t.Fatal(err)
			}
		}
		if s.gen != gen {
			compactions++
			gen = s.gen
		} else if now, _ := os.ReadFile(path); !bytes.Equal(now, checkpoint) {
			t.Fatalf("change %d rewrote the checkpoint without compacting the journal", i)
		}
		checkpoint, _ = os.ReadFile(path)
		if got := open(t, path).Claims(); !equalClaims(got, s.Claims()) {
			t.Fatalf("after change %d a store opened holds %d claims, want %d", i, len(got), len(s.Claims()))
		}
	}
	if compactions == 0 {
		t.Error("the journal was never compacted")
	}
	if fi, err := os.Stat(JournalPath(path)); err != nil || fi.Size() > max(compactMin, int64(len(checkpoint)))+4<<10 {
		t.Errorf("the journal: %v, %v; want it compacted once longer than the checkpoint", fi.Size(), err)
	}
}

// seal is the journal's line of the entry e (JSON, without its newline),
// with its checksum.
func seal(e string) string {
	var buf bytes.Buffer
	buf.WriteString(strings.TrimSuffix(e, "}"))
	sealLine(&buf)
	return buf.String()
}

func equalClaims(a, b []Claim) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key() != b[i].Key() || a[i].Pod != b[i].Pod {
			return false
		}
	}
	return true
}

// What a kill or a power loss leaves at the journal's end, an entry cut
// short, was never synced, so never counted on: Open drops it, the next
// change writes over it. A whole entry that is wrong is corruption: Open
// refuses the store, naming the journal and the line. Entries of an older
// generation (a kill after a compaction wrote the checkpoint, before it
// emptied the journal) are in the checkpoint already, and skipped.
func TestJournalDamage(t *testing.T) {
	setup := func(t *testing.T) (string, *Store) {
		path := filepath.Join(t.TempDir(), "checkpoint.json")
		s := open(t, path)
		for _, c := range []Claim{netdevClaim("a", "pod1", "dev-a", "net1"), netdevClaim("b", "pod2", "dev-b", "net1")} {
			if err := s.Put(c); err != nil {
				t.Fatal(err)
			}
		}
		return path, s
	}
	appendTo := func(t *testing.T, path, data string) {
		f, err := os.OpenFile(JournalPath(path), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(data); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("cut", func(t *testing.T) {
		path, _ := setup(t)
		appendTo(t, path, `{"generation":1,"key":"fastpath.dev/c","claim":{"driver":"fastp`)
		s := open(t, path)
		if got := s.Claims(); len(got) != 2 {
			t.Fatalf("Open of a journal cut short: %d claims, want 2", len(got))
		}
		if err := s.Put(netdevClaim("d", "pod4", "dev-d", "net1")); err != nil {
			t.Fatal(err)
		}
		if got := open(t, path).Claims(); len(got) != 3 {
			t.Fatalf("after a change over the cut entry: %d claims, want 3", len(got))
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		path, _ := setup(t)
		appendTo(t, path, seal(`{"generation":1,"key":"fastpath.dev/c","claim":{"driver":"fastpath.dev"}}`))
		_, err := Open(path, Legacy{})
		for _, want := range []string{JournalPath(path), "line 2", "uid, namespace and name are required"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Open = %v, want an error saying %q", err, want)
			}
		}
	})
	t.Run("older generation", func(t *testing.T) {
		path, s := setup(t)
		journal, err := os.ReadFile(JournalPath(path))
		if err != nil {
			t.Fatal(err)
		}
		// The compaction's checkpoint, and a kill before the journal was
		// emptied: its entries are of the generation before.
		if err := s.writeWhole(s.claims); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(JournalPath(path), append(journal, `{"generation":1,"key":"fastpath.dev/a"}`+"\n"...), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := open(t, path).Claims(); len(got) != 2 {
			t.Fatalf("%d claims, want both: the older generation's deletion skipped", len(got))
		}
	})
	t.Run("newer generation", func(t *testing.T) {
		path, _ := setup(t)
		appendTo(t, path, seal(`{"generation":9,"key":"fastpath.dev/a"}`))
		if _, err := Open(path, Legacy{}); err == nil || !strings.Contains(err.Error(), "generation 9") {
			t.Errorf("Open = %v, want an error naming the entry's generation", err)
		}
	})
}

// A link planted at the journal's name is not written through: the change
// fails saying so, the file it points to is untouched, and the store holds
// what it held.
func TestJournalRefusesLinks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	if err := s.Put(netdevClaim("a", "pod1", "dev-a", "net1")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(JournalPath(path)); err != nil {
		t.Fatal(err)
	}
	target, content := plant(t, JournalPath(path), "")
	b := netdevClaim("b", "pod2", "dev-b", "net1")
	if err := s.Put(b); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Put with a link at the journal = %v, want ErrNotRegular", err)
	}
	untouched(t, target, content)
	if _, ok := s.Get(b.Key()); ok {
		t.Error("the refused change is in the store")
	}
}

// The way between the versions: Fold writes version 2 and removes the
// journal; Convert writes any of them, and each reads back the same.
func TestJournalFoldAndConvert(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	for _, c := range []Claim{netdevClaim("a", "pod1", "dev-a", "net1"), cniClaim("b", "pod1", "cni-0", "net2")} {
		if err := s.Put(c); err != nil {
			t.Fatal(err)
		}
	}
	want := s.Claims()
	if err := s.Fold(); err != nil {
		t.Fatal(err)
	}
	check := func(version int, journal bool) {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if v := fileVersion(data); v != version {
			t.Errorf("version %d, want %d", v, version)
		}
		if _, err := os.Stat(JournalPath(path)); (err == nil) != journal {
			t.Errorf("journal there: %v, want %v", err == nil, journal)
		}
		if got := open(t, path).Claims(); !equalClaims(got, want) {
			t.Errorf("read back %+v, want %+v", got, want)
		}
	}
	check(2, false)
	// Folded, the store keeps writing version 2.
	if err := s.Put(want[0]); err != nil {
		t.Fatal(err)
	}
	check(2, false)
	if err := Convert(path, Legacy{}, 3); err != nil {
		t.Fatal(err)
	}
	check(3, true)
	if err := Convert(path, Legacy{}, 2); err != nil {
		t.Fatal(err)
	}
	check(2, false)
}

// FuzzJournal feeds journals to the replay of a checkpoint: it never
// panics, and what it replays is every record a valid entry left.
func FuzzJournal(f *testing.F) {
	f.Add([]byte(`{"generation":1,"key":"fastpath.dev/a","claim":{"driver":"fastpath.dev","uid":"a","namespace":"n","name":"a","pod":{"uid":"p"}}}` + "\n" +
		`{"generation":1,"key":"fastpath.dev/a"}` + "\n" + `{"gener`))
	f.Add([]byte("\n\n"))
	f.Add([]byte(`{"generation":0,"key":"/"}` + "\n"))
	f.Add([]byte(seal(`{"generation":1,"key":"fastpath.dev/a","claim":{"driver":"fastpath.dev","uid":"a","namespace":"n","name":"a","pod":{"uid":"p"}}}`) +
		seal(`{"generation":1,"key":"fastpath.dev/b"}`)[:20] + "\x00\x00\n"))
	path := filepath.Join(f.TempDir(), "checkpoint.json")
	// The journal follows a checkpoint without checksums, and one with
	// (whose lines must have theirs).
	checkpoints := [][]byte{[]byte(`{"version":3,"generation":1,"claims":{}}`), []byte(`{"version":3,"checksums":{},"generation":1,"claims":{}}`)}
	f.Fuzz(func(t *testing.T, journal []byte) {
		checkpoint := checkpoints[len(journal)%2]
		st, err := decodeState(path, checkpoint, journal)
		if err != nil {
			if !strings.Contains(err.Error(), JournalPath(path)) {
				t.Fatalf("an error not naming the journal: %v", err)
			}
			return
		}
		if st.tail > int64(len(journal)) || (st.tail > 0 && journal[st.tail-1] != '\n') {
			t.Fatalf("tail %d of %d bytes", st.tail, len(journal))
		}
		for k, c := range st.claims {
			if c.Key() != k || c.check(k.String()) != nil {
				t.Fatalf("a record replayed under %s: %+v", k, c)
			}
			if st.corrupt[k] != nil {
				t.Fatalf("claim %s both replayed and held aside", k)
			}
		}
		for k, e := range st.corrupt {
			if e.File != JournalPath(path) || e.Line < 1 || e.Claim != k.String() {
				t.Fatalf("held aside under %s: %+v", k, e)
			}
		}
	})
}

// A compaction that fails (a full disk on which the changes' appends still
// fit) is the store's fault until one succeeds, logged once, and tried
// again as the journal grows: not at every change.
func TestCompactionFault(t *testing.T) {
	defer func(n int64) { compactMin = n }(compactMin)
	compactMin = 1 << 10
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	var logged []string
	s.Logger = funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})
	if err := s.Put(netdevClaim("a", "pod1", "dev-a", "net1")); err != nil {
		t.Fatal(err)
	}
	write, wholes := s.WriteFile, 0
	s.WriteFile = func(string, []byte, bool) error {
		wholes++
		return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
	}
	change := func(i int) {
		t.Helper()
		c := netdevClaim("a", "pod1", "dev-a", "net1")
		c.Pod.Name = fmt.Sprint("change-", i)
		if err := s.Put(c); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	const changes = 200
	for i := range changes {
		change(i)
		if err := s.Fault(); wholes > 0 && !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("change %d, after a compaction failed: fault %v, want ENOSPC", i, err)
		}
	}
	if wholes < 2 || wholes > 12 {
		t.Errorf("%d changes on a full disk tried %d compactions; want a few, spaced by the journal's growth", changes, wholes)
	}
	if n := countContaining(logged, "cannot be written"); n != 1 {
		t.Errorf("the fault logged %d times, want once: %q", n, logged)
	}
	s.WriteFile = write
	for i := changes; s.Fault() != nil; i++ {
		if i > 4*changes {
			t.Fatalf("the journal not compacted after %d changes with room again: %v", i-changes, s.Fault())
		}
		change(i)
	}
	if fi, err := os.Stat(JournalPath(path)); err != nil || fi.Size() > compactMin {
		t.Errorf("the journal after the compaction: %v, %v", fi.Size(), err)
	}
	if n := countContaining(logged, "written again"); n != 1 {
		t.Errorf("the fault's end logged %d times, want once: %q", n, logged)
	}
	a := netdevClaim("a", "pod1", "dev-a", "net1")
	if got, _ := open(t, path).Get(a.Key()); got.Pod != s.Claims()[0].Pod {
		t.Errorf("reopened: %+v, want %+v", got.Pod, s.Claims()[0].Pod)
	}
}

func countContaining(lines []string, s string) (n int) {
	for _, l := range lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// A store that goes from version 2 to version 3 syncs the journal it
// empties, and its directory, before it writes a checkpoint of generation
// 1: a power cut must not bring back a journal of an earlier version 3,
// whose entries of a later generation would make Open refuse the store.
func TestJournalEmptiedSyncedBeforeGenerationOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := openWhole(t, path)
	if err := s.Put(netdevClaim("a", "pod1", "dev-a", "net1")); err != nil {
		t.Fatal(err)
	}
	var ops []string
	appendTo, write := s.Append, s.WriteFile
	s.Append = func(p string, data []byte, sync bool, at int64) error {
		ops = append(ops, fmt.Sprintf("append %s %d bytes at %d, sync %v", filepath.Base(p), len(data), at, sync))
		return appendTo(p, data, sync, at)
	}
	s.WriteFile = func(p string, data []byte, sync bool) error {
		ops = append(ops, fmt.Sprintf("write %s version %d", filepath.Base(p), fileVersion(data)))
		return write(p, data, sync)
	}
	s.SetJournal(true)
	if err := s.Put(netdevClaim("b", "pod2", "dev-b", "net1")); err != nil {
		t.Fatal(err)
	}
	want := []string{"append checkpoint.json.journal 0 bytes at 0, sync true", "write checkpoint.json version 3"}
	if len(ops) < 2 || !slices.Equal(ops[:2], want) {
		t.Errorf("the store's writes: %q; want first %q", ops, want)
	}
}
