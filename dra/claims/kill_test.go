package claims

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
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

// churnWorkerEnv, set in a run of this test binary, makes
// TestKilledWhileWriting the process that is killed: it changes the store
// at the path the variable names, from the change numbered after the
// colon on, and prints each change's number once it is written.
const churnWorkerEnv = "FASTPATH_CLAIMS_CHURN_WORKER"

// churnChange is change i of TestKilledWhileWriting: a Put of claim i%7's
// record naming i, or every third a Delete of it.
func churnChange(i int) (k Key, c *Claim) {
	cl := netdevClaim(fmt.Sprint("churn-", i%7), fmt.Sprint("pod-", i%7), fmt.Sprint("dev-", i%7), "net1")
	if i%3 == 2 {
		return cl.Key(), nil
	}
	cl.Pod.Name = fmt.Sprint("change-", i)
	return cl.Key(), &cl
}

// A process SIGKILLed at random moments while it changes the store, in
// version 3 and compacting often: every restart opens the files, finds
// every change it reported written (and at most the one it was writing
// when killed), and leaves no temporary file.
func TestKilledWhileWriting(t *testing.T) {
	if env := os.Getenv(churnWorkerEnv); env != "" {
		from, path, _ := strings.Cut(env, ":")
		compactMin = 2 << 10
		s, err := Open(path, Legacy{})
		if err != nil {
			t.Fatal(err)
		}
		first, _ := strconv.Atoi(from)
		for i := first; ; i++ {
			k, c := churnChange(i)
			if c == nil {
				err = s.Delete(k)
			} else {
				err = s.Put(*c)
			}
			if err != nil {
				t.Fatal(err)
			}
			fmt.Println(i)
		}
	}
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	rng := rand.New(rand.NewPCG(1, 2))
	next := 0
	for cycle := range 10 {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestKilledWhileWriting$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%s", churnWorkerEnv, next, path))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		last := next - 1
		for n := 20 + rng.IntN(120); n > 0 && lines.Scan(); n-- {
			last, _ = strconv.Atoi(lines.Text())
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		for lines.Scan() { // what it wrote before it died
			if i, err := strconv.Atoi(lines.Text()); err == nil {
				last = i
			}
		}
		var exit *exec.ExitError
		if err := cmd.Wait(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("cycle %d: the worker ended with %v, want killed", cycle, err)
		}
		s, err := Open(path, Legacy{})
		if err != nil {
			t.Fatalf("cycle %d, after change %d: %v", cycle, last, err)
		}
		// Each claim is as the last change reported made it, or as the
		// one after (written, not yet reported).
		for key := range 7 {
			want := map[string]bool{}
			for _, i := range []int{last, last + 1} {
				for j := i; j >= 0; j-- {
					if j%7 == key {
						_, c := churnChange(j)
						if c == nil {
							want["none"] = true
						} else {
							want[c.Pod.Name] = true
						}
						break
					}
				}
			}
			k, _ := churnChange(key)
			got := "none"
			if c, ok := s.Get(k); ok {
				got = c.Pod.Name
			}
			if len(want) > 0 && !want[got] {
				t.Errorf("cycle %d, after change %d: claim %d is %s, want one of %v", cycle, last, key, got, want)
			}
		}
		if temps, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".checkpoint.json.*")); len(temps) > 0 {
			t.Errorf("cycle %d: temporary files left after Open: %v", cycle, temps)
		}
		next = last + 1
	}
}

// A store opened while another process changes it and compacts its
// journal often (a daemon starting beside the one it replaces) reads a
// checkpoint and a journal of one generation: never a journal of the next
// generation after the checkpoint it replaced.
func TestOpenWhileCompacting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	open(t, path) // made before the worker, which then finds it
	cmd := exec.Command(os.Args[0], "-test.run", "^TestKilledWhileWriting$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=0:%s", churnWorkerEnv, path))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(out)
	changes := make(chan int, 1)
	go func() {
		for lines.Scan() {
			i, err := strconv.Atoi(lines.Text())
			if err != nil {
				stderr.WriteString(lines.Text() + "\n")
				continue
			}
			select {
			case changes <- i:
			default:
			}
		}
		close(changes)
	}()
	// Its first change made the files.
	last, ok := <-changes
	if !ok {
		t.Fatalf("the process changing the store ended: %s", stderr.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	opens := 0
	for ; (opens < 1000 || last < 300) && time.Now().Before(deadline); opens++ {
		if _, err := Open(path, Legacy{}); err != nil {
			t.Fatalf("Open %d, the other process at change %d: %v", opens, last, err)
		}
		select {
		case i, ok := <-changes:
			if !ok {
				t.Fatalf("the process changing the store ended: %s", stderr.String())
			}
			last = i
		default:
		}
	}
	if last < 300 {
		t.Errorf("the other process made %d changes during %d Opens; want the journal compacted many times", last, opens)
	}
}
