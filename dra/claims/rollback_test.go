package claims

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// v010Commit is the commit release v0.1.0 is built from (CHANGELOG.md).
const v010Commit = "ad69fce09cca8e0d7c58484156c75e5c66aae3f0"

// v010Reader is a program of release v0.1.0's claim store: it opens and
// shares the store at its argument as v0.1.0's daemon does, then at each
// line of its input prints the keys of the claims it holds (Claims, which
// reads the checkpoint again if it changed, and ignores an error as the
// daemon's hooks do), as a JSON list.
const v010Reader = `package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

func main() {
	s, err := claims.Open(os.Args[1], claims.Legacy{})
	if err == nil {
		err = s.Share()
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		keys := []string{}
		for _, c := range s.Claims() {
			keys = append(keys, c.Key().String())
		}
		data, _ := json.Marshal(keys)
		fmt.Println(string(data))
	}
}
`

// buildV010Reader builds v010Reader from release v0.1.0's sources, taken
// from the repository's history, and returns the binary's path. It skips
// the test where the commit is not there (a shallow clone).
func buildV010Reader(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git to take release v0.1.0's sources from")
	}
	if out, err := exec.Command("git", "cat-file", "-e", v010Commit+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("release v0.1.0's commit %s is not in the repository (a shallow clone?): %v %s", v010Commit, err, out)
	}
	src := filepath.Join(t.TempDir(), "v0.1.0")
	if err := os.MkdirAll(filepath.Join(src, "cmd", "reader"), 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("sh", "-c", `cd "$(git rev-parse --show-toplevel)" && git archive "$1" go.mod go.sum dra/claims dataplane/hostdir | tar -x -C "$2"`, "sh", v010Commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("release v0.1.0's claim store: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(src, "cmd", "reader", "main.go"), []byte(v010Reader), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "reader")
	build := exec.Command("go", "build", "-mod=mod", "-o", bin, "./cmd/reader")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build release v0.1.0's reader: %v\n%s", err, out)
	}
	return bin
}

// olderDaemon is a running v010Reader.
type olderDaemon struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startOlder starts the reader on the checkpoint at path; it fails the
// test if the reader cannot open it.
func startOlder(t *testing.T, bin, path string) *olderDaemon {
	t.Helper()
	cmd := exec.Command(bin, path)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := &olderDaemon{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(o.stop)
	return o
}

// claims are the keys of the claims the older daemon holds now.
func (o *olderDaemon) claims(t *testing.T) []string {
	t.Helper()
	if _, err := io.WriteString(o.in, "claims\n"); err != nil {
		t.Fatalf("the daemon of v0.1.0 is gone: %v", err)
	}
	line, err := o.out.ReadString('\n')
	var keys []string
	if err == nil {
		err = json.Unmarshal([]byte(line), &keys)
	}
	if err != nil {
		t.Fatalf("the daemon of v0.1.0 answers %q: %v", strings.TrimSpace(line), err)
	}
	return keys
}

func (o *olderDaemon) stop() {
	_ = o.in.Close()
	done := make(chan struct{})
	go func() { _ = o.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = o.cmd.Process.Kill()
		<-done
	}
}

// keysOf are the keys of the store's claims, as the reader prints them.
func keysOf(s *Store) []string {
	keys := []string{}
	for _, c := range s.Claims() {
		keys = append(keys, c.Key().String())
	}
	return keys
}

// A rollback: this build, alone, writes version 3; then a daemon of
// release v0.1.0 (its claim store, built from its commit) is about to
// start beside it. Told so (the peer check, then Settle), the store folds
// its journal into a version-2 checkpoint, which v0.1.0 opens, and every
// change it makes while v0.1.0 runs (admitted, pending, changed, deleted)
// is one v0.1.0 reads at once: version 2, current. Once v0.1.0 is gone
// the store writes its journal again.
func TestPreviousReleaseReadsEveryChange(t *testing.T) {
	bin := buildV010Reader(t)
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	if err := s.Share(); err != nil {
		t.Fatal(err)
	}
	var older atomic.Bool
	s.SetPeerCheck(older.Load)
	s.SetJournal(true)
	for i := range 3 {
		if err := s.Admit(netdevClaim(fmt.Sprint("alone-", i), fmt.Sprint("pod-alone-", i), fmt.Sprint("dev-alone-", i), "net1")); err != nil {
			t.Fatal(err)
		}
	}
	if v := readVersion(t, path); v != Version {
		t.Fatalf("alone, the store writes version %d, want its journal (%d)", v, Version)
	}

	older.Store(true)
	if err := s.Settle(); err != nil {
		t.Fatal(err)
	}
	o := startOlder(t, bin, path)
	if got, want := o.claims(t), keysOf(s); !slices.Equal(got, want) {
		t.Fatalf("v0.1.0 starts with claims %v, want %v", got, want)
	}
	for i := range 40 {
		var name string
		var err error
		x := netdevClaim(fmt.Sprint("x", i/4), fmt.Sprint("pod", i/4), fmt.Sprint("dev", i/4), "net1")
		switch i % 4 {
		case 0:
			name, err = "admit", s.Admit(x)
		case 1:
			name = "admit pending"
			var wait func() error
			if wait, err = s.AdmitPending(cniClaim(fmt.Sprint("y", i/4), fmt.Sprint("pod", i/4), fmt.Sprint("cni", i/4), "net2")); err == nil {
				err = wait()
			}
		case 2:
			x.Prepared = true
			name, err = "change", s.Put(x)
		case 3:
			name, err = "delete", s.Delete(x.Key())
		}
		if i == 6 {
			name, err = "delete a claim of before", s.Delete(Key{Driver: DriverFastpath, UID: "alone-0"})
		}
		if err != nil {
			t.Fatalf("change %d (%s): %v", i, name, err)
		}
		if v := readVersion(t, path); v != versionWhole {
			t.Errorf("change %d (%s): with v0.1.0 beside it the store wrote version %d, want %d", i, name, v, versionWhole)
		}
		if got, want := o.claims(t), keysOf(s); !slices.Equal(got, want) {
			t.Fatalf("change %d (%s): v0.1.0 holds claims %v, want %v", i, name, got, want)
		}
	}

	o.stop()
	older.Store(false)
	if err := s.Admit(netdevClaim("after", "pod-after", "dev-after", "net1")); err != nil {
		t.Fatal(err)
	}
	if v := readVersion(t, path); v != Version {
		t.Errorf("alone again, the store writes version %d, want its journal (%d)", v, Version)
	}
}
