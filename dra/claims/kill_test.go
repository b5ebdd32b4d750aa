package claims

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// killWorkerEnv, set in a run of this test binary, makes
// TestPendingWriteKilled the process that is killed: it admits a claim to
// the shared store at the path the variable names, stops before the
// commit, says so and waits.
const killWorkerEnv = "FASTPATH_CLAIMS_KILL_WORKER"

// A daemon SIGKILLed after a pending write (AdmitPending) and before its
// commit, holding the shared store's file lock: the other daemon's next
// read is not blocked by the dead one's lock, and finds the record, as
// does a daemon started afterwards; the pending file is then the
// checkpoint, or the journal's entry is whole.
func TestPendingWriteKilled(t *testing.T) {
	if env := os.Getenv(killWorkerEnv); env != "" {
		mode, path, _ := strings.Cut(env, ":")
		s, err := Open(path, Legacy{})
		if err == nil {
			err = s.Share()
		}
		s.SetJournal(mode == "journal")
		if err == nil {
			err = writePending(s, cniClaim("k", "pod1", "cni-0", "net1"))
		}
		if err != nil {
			t.Fatal(err)
		}
		// Waits for a signal (never SIGKILL's): killed here.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		fmt.Println("pending")
		<-sig
		t.Fatal("the worker was not killed")
	}
	for _, mode := range []string{"whole", "journal"} {
		t.Run(mode, func(t *testing.T) { testPendingWriteKilled(t, mode) })
	}
}

func testPendingWriteKilled(t *testing.T, mode string) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	survivor := open(t, path)
	if err := survivor.Share(); err != nil {
		t.Fatal(err)
	}
	survivor.SetJournal(mode == "journal")
	if err := survivor.Put(netdevClaim("a", "pod2", "dev-a", "net1")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPendingWriteKilled$")
	cmd.Env = append(os.Environ(), killWorkerEnv+"="+mode+":"+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "pending\n" {
		_ = cmd.Process.Kill()
		t.Fatalf("the worker did not write: %q, %v (%v)", line, err, cmd.Wait())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the worker ended with %v, want killed", err)
	}
	killed := cniClaim("k", "pod1", "cni-0", "net1")
	k := killed.Key()
	read := make(chan bool, 1)
	go func() {
		_, ok := survivor.Get(k)
		read <- ok
	}()
	select {
	case ok := <-read:
		if !ok {
			t.Error("the surviving daemon does not find the killed daemon's record")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the surviving daemon's read waits on the killed daemon's lock")
	}
	if got := open(t, path).Claims(); len(got) != 2 {
		t.Errorf("a daemon started after the kill finds %+v, want both claims", got)
	}
	if _, err := os.Stat(PendingPath(path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pending file is left: %v", err)
	}
}
