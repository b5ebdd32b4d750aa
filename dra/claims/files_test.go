package claims

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// plant makes a file of the node that the store must never write: its
// content, and a symbolic link and a hard link to it at the given names.
func plant(t *testing.T, link, hardLink string) (target string, content []byte) {
	t.Helper()
	target = filepath.Join(t.TempDir(), "node-file")
	content = []byte("root:secret\n")
	if err := os.WriteFile(target, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if link != "" {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	if hardLink != "" {
		if err := os.Link(target, hardLink); err != nil {
			t.Fatal(err)
		}
	}
	return target, content
}

func untouched(t *testing.T, target string, content []byte) {
	t.Helper()
	if got, err := os.ReadFile(target); err != nil || string(got) != string(content) {
		t.Errorf("the file the link points to was changed: %q, %v", got, err)
	}
}

// A symbolic link or a hard link planted at the pending file's name is not
// written through: the pending write fails saying so, the file it points
// to is untouched, the link is gone, and the next write succeeds.
func TestPendingWriteRefusesLinks(t *testing.T) {
	for _, kind := range []string{"symbolic", "hard"} {
		t.Run(kind, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			s := openWhole(t, path)
			var target string
			var content []byte
			if kind == "symbolic" {
				target, content = plant(t, PendingPath(path), "")
			} else {
				// A hard link needs the same file system: the target
				// beside the checkpoint.
				target = filepath.Join(filepath.Dir(path), "node-file")
				content = []byte("root:secret\n")
				if err := os.WriteFile(target, content, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Link(target, PendingPath(path)); err != nil {
					t.Fatal(err)
				}
			}
			a := cniClaim("a", "pod1", "cni-0", "net1")
			if _, err := s.AdmitPending(a); !errors.Is(err, ErrNotRegular) {
				t.Errorf("AdmitPending with a %s link at %s: %v, want ErrNotRegular", kind, PendingPath(path), err)
			}
			untouched(t, target, content)
			if _, ok := s.Get(a.Key()); ok {
				t.Error("the refused write is in the store")
			}
			if _, err := os.Lstat(PendingPath(path)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the planted link is left: %v", err)
			}
			wait, err := s.AdmitPending(a)
			if err != nil {
				t.Fatalf("the next write: %v", err)
			}
			if err := wait(); err != nil {
				t.Fatal(err)
			}
			if got := open(t, path).Claims(); len(got) != 1 {
				t.Errorf("the checkpoint holds %+v, want the claim", got)
			}
			untouched(t, target, content)
		})
	}
}

// Open neither follows nor adopts a symbolic link planted at the pending
// file's name, even one to a valid checkpoint: it drops the link and loads
// the checkpoint as it was. A link at the checkpoint's own name is refused,
// naming it; a write replaces such a link, never writing through it.
func TestOpenRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.json")
	s := open(t, path)
	if err := s.Put(netdevClaim("a", "pod1", "dev-a", "net1")); err != nil {
		t.Fatal(err)
	}
	// Another store's file, a valid checkpoint, linked at the pending name.
	other := filepath.Join(t.TempDir(), "checkpoint.json")
	if err := open(t, other).Put(cniClaim("b", "pod1", "cni-0", "net2")); err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, PendingPath(path)); err != nil {
		t.Fatal(err)
	}
	if got := open(t, path).Claims(); len(got) != 1 || got[0].UID != "a" {
		t.Errorf("Open with a link at the pending name: %+v, want the checkpoint's own claim", got)
	}
	if _, err := os.Lstat(PendingPath(path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the planted link is left: %v", err)
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the checkpoint is no longer a regular file: %v, %v", fi, err)
	}
	untouched(t, other, content)

	// The checkpoint itself a link: refused, left as it is.
	linked := filepath.Join(t.TempDir(), "checkpoint.json")
	if err := os.Symlink(other, linked); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(linked, Legacy{}); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Open of a link: %v, want ErrNotRegular", err)
	}
	// A write replaces the link with a file of its own.
	if err := WriteFileAtomic(linked, []byte(`{"version":2,"claims":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(linked); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("after a write, %s is %v, %v; want a regular file", linked, fi, err)
	}
	untouched(t, other, content)
}

// The lock file is not opened through a symbolic link.
func TestFileLockRefusesLinks(t *testing.T) {
	lock := filepath.Join(t.TempDir(), "nri.lock")
	target, content := plant(t, lock, "")
	if _, err := FileLock(lock).Lock(t.Context()); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Lock through a link: %v, want ErrNotRegular", err)
	}
	untouched(t, target, content)
}

// A FIFO at the pending file's name does not block the write.
func TestPendingWriteRefusesFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	if err := mkfifo(PendingPath(path)); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileUnsynced(PendingPath(path), []byte("{}"), 0o600); err == nil {
		t.Error("a write to a FIFO succeeded")
	}
}

func mkfifo(path string) error { return unix.Mkfifo(path, 0o600) }

// A state directory that others may write in is made private to its owner
// by Open: nothing can be planted in it from then on.
func TestOpenFixesStateDirMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	open(t, filepath.Join(dir, "checkpoint.json"))
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		t.Errorf("the state directory is mode %s after Open, want no write bit for group or others", fi.Mode())
	}
}

// The temporary files of killed atomic writes in a directory of their
// own (the CDI specs') are removed; a live write's, the written files and
// anything else are left.
func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"fastpath.dev-claim-a.json", ".fastpath.dev-claim-a.json.k1lled", ".fastpath.dev-claim-b.json.2x9", ".other.json.k1lled", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	live, err := createTemp(dir, ".fastpath.dev-claim-c.json.")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := RemoveTemps(dir, "fastpath.dev-claim-"); err != nil {
		t.Fatal(err)
	}
	var got []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{filepath.Base(live.Name()), ".other.json.k1lled", "fastpath.dev-claim-a.json", "notes.txt"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("after RemoveTemps: %q, want %q", got, want)
	}
}

// ReplaceFileUnsynced replaces what is at its path (a link planted there
// too, never written through) with the whole new content, and leaves no
// temporary file.
func TestReplaceFileUnsynced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fastpath.dev-claim-a.json")
	target, content := plant(t, path, "")
	if err := ReplaceFileUnsynced(path, []byte(`{"cdiVersion":"0.6.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	untouched(t, target, content)
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("after the write, %s is %v, %v; want a regular file of mode 0644", path, fi, err)
	}
	if got, _ := os.ReadFile(path); string(got) != `{"cdiVersion":"0.6.0"}` {
		t.Errorf("content %q", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the directory holds %d files after the write, want 1", len(entries))
	}
}

// TestOverwriteFile: the file is written in place, so that an open of it
// from before (a bind mount's stand-in) reads the new content; the same
// content is not written again; a missing file is made; a symbolic link
// is refused, not written through; and a write a kill interrupted (the
// new content beside the file, the file still old, or partly rewritten)
// is completed by FinishOverwrite.
func TestOverwriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "metadata.json")
	if err := OverwriteFile(path, []byte(`{"generation":1,"requests":[{"name":"nic"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	newer := []byte(`{"generation":2}`)
	if err := OverwriteFile(path, newer, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(before)
	if err != nil || string(got) != string(newer) {
		t.Fatalf("an open from before the write reads %q, %v; want %q (the same inode)", got, err, newer)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the directory holds %d files after the write, want 1: %v", len(entries), entries)
	}
	fi, _ := os.Stat(path)
	if err := OverwriteFile(path, newer, 0o644); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.Stat(path); !again.ModTime().Equal(fi.ModTime()) {
		t.Error("the same content was written again")
	}

	// Killed after the new content was kept beside the file: the file
	// holds the old content, cut short.
	if err := WriteFileAtomic(nextOf(path), []byte(`{"generation":3,"requests":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"gener`), 0o644); err != nil {
		t.Fatal(err)
	}
	if done, err := FinishOverwrite(path); !done || err != nil {
		t.Fatalf("FinishOverwrite = %v, %v; want the interrupted write completed", done, err)
	}
	if got, _ := os.ReadFile(path); string(got) != `{"generation":3,"requests":[]}` {
		t.Errorf("after FinishOverwrite the file holds %q", got)
	}
	if _, err := os.Stat(nextOf(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the copy beside the file is still there: %v", err)
	}
	if done, err := FinishOverwrite(path); done || err != nil {
		t.Errorf("FinishOverwrite with nothing interrupted = %v, %v", done, err)
	}

	link := filepath.Join(dir, "linked.json")
	target, content := plant(t, link, "")
	if err := OverwriteFile(link, []byte(`{}`), 0o644); !errors.Is(err, ErrNotRegular) {
		t.Errorf("OverwriteFile through a symbolic link = %v, want ErrNotRegular", err)
	}
	untouched(t, target, content)
}
