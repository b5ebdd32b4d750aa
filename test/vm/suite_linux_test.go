package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A suite's output is counted line by line; a binary that the guest could
// not end is the guest's fault (Frozen) only when it never reported its
// own timeout.
func TestResultCountAndFrozen(t *testing.T) {
	var r Result
	for _, line := range []string{
		"=== RUN   TestSRIOVSetNumVFs",
		"--- PASS: TestSRIOVAttachDetach (0.50s)",
		"    --- PASS: TestSRIOVPodNetnsDeleted/name_free_in_the_host (0.22s)",
		"--- FAIL: TestSRIOVBroken (1.00s)",
		"--- SKIP: TestSRIOVSkipped (0.00s)",
		"BenchmarkSRIOVAttach-2   	      20	  17500000 ns/op",
	} {
		r.count(line)
	}
	if fmt.Sprint(r.Passed, r.Failed, r.Skipped) != "[TestSRIOVAttachDetach BenchmarkSRIOVAttach-2] [TestSRIOVBroken] [TestSRIOVSkipped]" {
		t.Errorf("counted passed %q, failed %q, skipped %q", r.Passed, r.Failed, r.Skipped)
	}
	if r.Frozen() {
		t.Error("a suite that ended is frozen")
	}
	r.Err = fmt.Errorf("%q %w after it was cancelled", "dataplane.test", ErrStillRuns)
	if !r.Frozen() {
		t.Error("a binary the guest did not end, without its own timeout reported, is not frozen")
	}
	r.count("panic: test timed out after 10m0s")
	if r.Frozen() {
		t.Error("a binary that reported its own timeout and then hung (a task stuck in the kernel: the code's fault) is frozen")
	}
	r = Result{Err: fmt.Errorf("while running: %w", ErrStalled)}
	if r.Frozen() {
		t.Error("a stall is also counted as frozen")
	}
}

func TestConsoleTail(t *testing.T) {
	console := filepath.Join(t.TempDir(), "console.log")
	var lines []string
	for i := range 50 {
		lines = append(lines, fmt.Sprintf("[ %3d.000000] line %d\r", i, i))
	}
	if err := os.WriteFile(console, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(ConsoleTail(console, 3), "\n")
	if len(got) != 3 || got[0] != "[  47.000000] line 47" || got[2] != "[  49.000000] line 49" {
		t.Errorf("ConsoleTail(3) = %q", got)
	}
	if got := ConsoleTail(console, 100); strings.Count(got, "\n") != 49 {
		t.Errorf("ConsoleTail(100) of 50 lines has %d lines", strings.Count(got, "\n")+1)
	}
	if got := ConsoleTail(filepath.Join(t.TempDir(), "none.log"), 3); !strings.Contains(got, "not readable") {
		t.Errorf("ConsoleTail of a missing file = %q", got)
	}
}
