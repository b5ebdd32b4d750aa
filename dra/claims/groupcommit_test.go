package claims

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gatedSync makes s's journal syncs wait for gate to close, counting them
// in calls and failing them with fail while it is set.
type gatedSync struct {
	gate  chan struct{}
	calls atomic.Int32
	fail  atomic.Pointer[error]
}

func gate(s *Store) *gatedSync {
	g := &gatedSync{gate: make(chan struct{})}
	s.Sync = func(path string) error {
		g.calls.Add(1)
		<-g.gate
		if err := g.fail.Load(); err != nil {
			return *err
		}
		return syncFile(path)
	}
	return g
}

// journalLines waits until the journal of the store at path holds n whole
// lines, and returns its content.
func journalLines(t *testing.T, path string, n int) []byte {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(JournalPath(path))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Count(data, []byte{'\n'}) >= n {
			return data
		}
		if time.Now().After(deadline) {
			t.Fatalf("the journal holds %d lines, want %d", bytes.Count(data, []byte{'\n'}), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// openJournal opens a new store at path that appends to its journal:
// its first change, which writes the checkpoint whole, made.
func openJournal(t *testing.T, path string) *Store {
	t.Helper()
	s := open(t, path)
	if err := s.Put(netdevClaim("base", "pod-base", "dev-base", "net1")); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(JournalPath(path)); err != nil || len(data) != 0 {
		t.Fatalf("the journal after the first change: %q, %v; want it empty", data, err)
	}
	return s
}

// putAll puts cs, each from a goroutine of its own, and returns their
// errors once all returned.
func putAll(s *Store, cs []Claim) <-chan []error {
	out := make(chan []error, 1)
	go func() {
		errs := make([]error, len(cs))
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Go(func() { errs[i] = s.Put(c) })
		}
		wg.Wait()
		out <- errs
	}()
	return out
}

// putBehindSync puts cs[0], then, once its line is in the journal of the
// store at path (which held lines before), the rest of cs while cs[0]'s
// sync waits at the gate; it returns the journal once every line is in
// it, and the Puts' errors as they all return.
func putBehindSync(t *testing.T, s *Store, path string, lines int, cs []Claim) (journal []byte, errs func() []error) {
	t.Helper()
	first := putAll(s, cs[:1])
	journalLines(t, path, lines+1)
	rest := putAll(s, cs[1:])
	journal = journalLines(t, path, lines+len(cs))
	select {
	case errs := <-rest:
		t.Fatalf("Puts returned before their sync: %v", errs)
	default:
	}
	return journal, func() []error { return append(<-first, <-rest...) }
}

func claimsN(prefix string, n int) []Claim {
	var cs []Claim
	for i := range n {
		cs = append(cs, netdevClaim(fmt.Sprintf("%s%d", prefix, i), fmt.Sprintf("pod-%s%d", prefix, i), fmt.Sprintf("dev-%s%d", prefix, i), "net1"))
	}
	return cs
}

// Writes that come while the journal is being synced share the next
// sync: 16 Puts behind a sync in progress cost one more sync, not 16, and
// none returns before its line is synced; every one is in the files after.
func TestGroupCommitSharesSyncs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := openJournal(t, path)
	g := gate(s)
	_, errs := putBehindSync(t, s, path, 0, claimsN("c", 17))
	close(g.gate)
	if err := errors.Join(errs()...); err != nil {
		t.Fatal(err)
	}
	if n := g.calls.Load(); n != 2 {
		t.Errorf("17 Puts made %d syncs, want 2 (one in progress, one for the 16 behind it)", n)
	}
	if got := len(open(t, path).Claims()); got != 18 {
		t.Errorf("reopened: %d claims, want 18", got)
	}
}

// A failed sync fails every write of its round, with the error, and is
// the store's fault until a sync succeeds. The records stay, as a sync's
// failure leaves them on the disk or not.
func TestGroupCommitSyncFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := openJournal(t, path)
	g := gate(s)
	eio := fmt.Errorf("injected: %w", errors.New("input/output error"))
	g.fail.Store(&eio)
	cs := claimsN("c", 8)
	_, errs := putBehindSync(t, s, path, 0, cs)
	close(g.gate)
	for i, err := range errs() {
		if !errors.Is(err, eio) {
			t.Errorf("write %d: %v, want the sync's error", i, err)
		}
	}
	if err := s.Fault(); !errors.Is(err, eio) {
		t.Errorf("Fault: %v, want the sync's error", err)
	}
	if _, ok := s.Get(cs[3].Key()); !ok {
		t.Error("a record whose sync failed is gone from memory; the journal holds it")
	}
	g.fail.Store(nil)
	if err := s.Put(netdevClaim("after", "pod-after", "dev-after", "net1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Fault(); err != nil {
		t.Errorf("Fault after a sync succeeded: %v", err)
	}
}

// zeroLine makes the n-th line (from 1) of data zeros but for its newline:
// a power cut that tore its append.
func zeroLine(t *testing.T, data []byte, n int) (start int64) {
	t.Helper()
	lines := bytes.SplitAfter(data, []byte{'\n'})
	for _, l := range lines[:n-1] {
		start += int64(len(l))
	}
	l := lines[n-1]
	for i := range len(l) - 1 {
		data[start+int64(i)] = 0
	}
	return start
}

// copyStore copies the store's files at path, with journal as its
// journal, into a new directory: the disk after a power cut.
func copyStore(t *testing.T, path string, journal []byte) string {
	t.Helper()
	to := filepath.Join(t.TempDir(), "checkpoint.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(JournalPath(to), journal, 0o600); err != nil {
		t.Fatal(err)
	}
	return to
}

// A power cut during a round's sync can tear any of its lines, and the
// lines after them: a torn line that no later line says was synced starts
// a batch no writer was told was written, dropped whole at Open, and the
// next change is appended in its place.
func TestJournalCutBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := openJournal(t, path)
	a := netdevClaim("a", "pod-a", "dev-a", "net1")
	if err := s.Put(a); err != nil {
		t.Fatal(err)
	}
	g := gate(s)
	cs := claimsN("c", 3)
	journal, errs := putBehindSync(t, s, path, 1, cs)
	cut := zeroLine(t, journal, 2)
	to := copyStore(t, path, journal)
	close(g.gate)
	if err := errors.Join(errs()...); err != nil {
		t.Fatal(err)
	}

	again := open(t, to)
	if _, ok := again.Get(a.Key()); !ok || len(again.Claims()) != 2 || len(again.Corrupt()) != 0 {
		t.Fatalf("a cut batch: %d claims, %v held aside; want the base and %s, nothing held", len(again.Claims()), again.Corrupt(), a.UID)
	}
	if err := again.Put(cs[2]); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(JournalPath(to))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data[cut:], []byte(cs[2].UID)) || bytes.IndexByte(data, 0) >= 0 {
		t.Errorf("the next change is not appended in place of the cut batch:\n%q", data)
	}
	if got := len(open(t, to).Claims()); got != 3 {
		t.Errorf("reopened: %d claims, want 3", got)
	}
}

// A torn line that a later line says was synced was damaged after its
// sync: it is held aside, and the lines after it are kept. The lines of
// an earlier build carry no synced: it synced each before the next, so a
// torn line with one after it was synced too.
func TestJournalTornSyncedLine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines func(t *testing.T, journal []byte) []byte
	}{
		{"this build's lines", func(_ *testing.T, journal []byte) []byte { return journal }},
		{"an earlier build's lines", withoutSynced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			s := openJournal(t, path)
			cs := claimsN("c", 3)
			for _, c := range cs {
				if err := s.Put(c); err != nil {
					t.Fatal(err)
				}
			}
			journal := tc.lines(t, journalLines(t, path, 3))
			zeroLine(t, journal, 2)
			again := open(t, copyStore(t, path, journal))
			if got := len(again.Claims()); got != 3 || len(again.Corrupt()) != 1 {
				t.Fatalf("a synced line torn: %d claims, %d held aside; want 3 and 1", got, len(again.Corrupt()))
			}
			if _, ok := again.Get(cs[2].Key()); !ok {
				t.Error("the line after the torn one is lost")
			}
		})
	}
}

// withoutSynced is the journal's lines as an earlier build wrote them:
// without synced.
func withoutSynced(t *testing.T, journal []byte) []byte {
	var older bytes.Buffer
	synced := regexp.MustCompile(`,"synced":\d+`)
	for _, line := range bytes.SplitAfter(journal, []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		body := line[:bytes.LastIndex(line, []byte(crcField))]
		var buf bytes.Buffer
		buf.Write(synced.ReplaceAll(body, nil))
		sealLine(&buf)
		older.Write(buf.Bytes())
	}
	if bytes.Contains(older.Bytes(), []byte(`"synced"`)) {
		t.Fatal("the lines still say synced")
	}
	return older.Bytes()
}

// Compactions while other writes wait for their syncs: every write
// acknowledged is in the files, over generations.
func TestGroupCommitCompaction(t *testing.T) {
	defer func(n int64) { compactMin = n }(compactMin)
	compactMin = 4 << 10
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := openJournal(t, path)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for n := range 40 {
				c := netdevClaim(fmt.Sprintf("w%d-%d", w, n%5), fmt.Sprintf("pod-%d", w), fmt.Sprintf("dev-%d-%d", w, n), "net1")
				if err := s.Put(c); err != nil {
					errs <- err
					return
				}
				if n%7 == 6 {
					if err := s.Delete(c.Key()); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s.mu.RLock()
	gen := s.gen
	s.mu.RUnlock()
	if gen < 3 {
		t.Errorf("generation %d: the journal was not compacted during the writes", gen)
	}
	want := s.Claims()
	got := open(t, path).Claims()
	if len(got) != len(want) {
		t.Fatalf("reopened: %d claims, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].UID != want[i].UID || got[i].Devices[0].Device != want[i].Devices[0].Device {
			t.Errorf("reopened: claim %s holds %s, want %s of %s", got[i].UID, got[i].Devices[0].Device, want[i].Devices[0].Device, want[i].UID)
		}
	}
}

// Two daemons sharing the files, each with writes waiting for their
// syncs, the journal compacted meanwhile: every acknowledged write is in
// the files, and each daemon sees the other's.
func TestGroupCommitShared(t *testing.T) {
	defer func(n int64) { compactMin = n }(compactMin)
	compactMin = 4 << 10
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	stores := []*Store{open(t, path), open(t, path)}
	for _, s := range stores {
		if err := s.Share(); err != nil {
			t.Fatal(err)
		}
		s.SetJournal(true)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	last := make([]map[string]string, 8)
	for w := range 8 {
		s := stores[w%2]
		last[w] = map[string]string{}
		wg.Go(func() {
			for n := range 30 {
				uid := fmt.Sprintf("w%d-%d", w, n%4)
				c := netdevClaim(uid, fmt.Sprintf("pod-%d", w), fmt.Sprintf("dev-%d-%d", w, n), "net1")
				if err := s.Put(c); err != nil {
					errs <- err
					return
				}
				last[w][uid] = c.Devices[0].Device
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	reopened := open(t, path)
	if reopened.gen < 3 {
		t.Errorf("generation %d: the journal was not compacted during the writes", reopened.gen)
	}
	for i, s := range append(stores, reopened) {
		if i < 2 {
			// A shared store reads the files again under their lock.
			if err := s.Hold(func([]*Claim, []*CorruptError) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if len(s.Corrupt()) != 0 {
			t.Errorf("store %d holds %v aside", i, s.Corrupt())
		}
		n := 0
		for w := range last {
			for uid, dev := range last[w] {
				n++
				c, ok := s.Get(Key{Driver: DriverFastpath, UID: typesUID(uid)})
				if !ok || c.Devices[0].Device != dev {
					t.Errorf("store %d: claim %s holds %+v, want %s", i, uid, c.Devices, dev)
				}
			}
		}
		if got := len(s.Claims()); got != n {
			t.Errorf("store %d: %d claims, want %d", i, got, n)
		}
	}
}
