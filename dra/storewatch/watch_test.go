package storewatch

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/test/fulldisk"
)

// TestWatcher: a write of the store that fails is its fault until a write
// succeeds; the watcher reports it once on the Node, and once the disk has
// room again writes the store itself, which clears it, with no claim to
// write.
func TestWatcher(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s, err := claims.Open(path, claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	var disk fulldisk.Disk
	disk.Wrap(s)
	events := record.NewFakeRecorder(10)
	// Next to no floor: the temporary directory's filesystem has what
	// room it has.
	w := New(Options{Store: s, NodeName: "node-a", Events: events, MinFree: 1})
	w.Check(ctx)
	if err := w.Err(); err != nil {
		t.Fatalf("a store that writes: %v", err)
	}

	disk.FailFrom = 1
	c := claims.Claim{Driver: claims.DriverFastpath, UID: "u", Namespace: "ns", Name: "c", Pod: claims.Pod{UID: "p", Name: "pod"}}
	if err := s.Put(c); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("put on a full disk: %v", err)
	}
	err = w.Err()
	if !errors.Is(err, ErrNotWritable) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "free space on the filesystem of "+filepath.Dir(path)) {
		t.Errorf("after a failed write: %v, want the store's file, its error and what to do", err)
	}
	for range 3 {
		w.Check(ctx) // the disk is still full: the write it tries fails too
	}
	if got := drain(events); len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+ReasonNotWritable+" the claim store cannot be written: ") {
		t.Errorf("events while the disk is full: %q, want one", got)
	}

	disk.FailFrom = 0
	if w.Err() == nil {
		t.Fatal("the fault went before any write")
	}
	w.Check(ctx)
	if err := w.Err(); err != nil {
		t.Errorf("after a look with room again: %v", err)
	}
	if got := drain(events); len(got) != 1 || !strings.HasPrefix(got[0], "Normal "+ReasonWritable+" ") {
		t.Errorf("events once written again: %q", got)
	}
	if got, _, err := claims.Read(path); err != nil || len(got) != 0 {
		t.Errorf("the store after the watcher's write: %v, %v; want no claim", got, err)
	}
}

// TestFloor: less free space than MinFree beyond the store's files is a
// fault that names the directory and the figures.
func TestFloor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s, err := claims.Open(path, claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	w := New(Options{Store: s, MinFree: 1 << 62})
	err = w.Err()
	if !errors.Is(err, ErrNotWritable) || !strings.Contains(err.Error(), fmt.Sprintf("the filesystem of %s has ", filepath.Dir(path))) {
		t.Errorf("below the floor: %v", err)
	}
}

func drain(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestWatcherCompaction: a compaction that failed while the journal's
// appends still fit is the store's fault too, and with new claims refused
// no change would make the store compact again: once the disk has room the
// watcher's own write clears it.
func TestWatcherCompaction(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s, err := claims.Open(path, claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	// The first change writes the checkpoint (version 3); the next ones
	// go to its journal.
	full := false
	write := s.WriteFile
	s.WriteFile = func(path string, data []byte, sync bool) error {
		if full {
			return fmt.Errorf("write %s: %w", path, syscall.ENOSPC)
		}
		return write(path, data, sync)
	}
	w := New(Options{Store: s, NodeName: "node-a", MinFree: 1})
	for i := 0; s.Fault() == nil; i++ {
		full = i > 0
		if i == 10_000 {
			t.Fatal("no compaction was tried in 10,000 changes")
		}
		c := claims.Claim{Driver: claims.DriverFastpath, UID: "u", Namespace: "ns", Name: "c", Pod: claims.Pod{UID: "p", Name: fmt.Sprintf("pod-%d", i)}}
		if err := s.Put(c); err != nil {
			t.Fatalf("change %d, appended to the journal: %v", i, err)
		}
	}
	if err := w.Err(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("after a failed compaction: %v", err)
	}
	full = false
	w.Check(ctx)
	if err := w.Err(); err != nil {
		t.Errorf("after a look with room again: %v", err)
	}
}
