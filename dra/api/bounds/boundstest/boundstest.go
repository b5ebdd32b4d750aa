// Package boundstest checks, in fuzz targets, that judging an input costs
// what the bounds allow whatever the input: each execution finishes
// within Budget and says at most bounds.MessageBytes. Only tests import
// it.
package boundstest

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// Budget is the CPU time one judgement of one input may take. It is
// generous, so that a run with the race detector stays within it: judging
// the largest input the bounds allow takes milliseconds, and work that
// grows with the square of the input, at the bounds, takes seconds.
const Budget = time.Second

// Check runs judge, which judges one input and returns what fastpath says
// about it ("" for nothing), and fails t when it took more CPU time than
// Budget or said more than bounds.MessageBytes. The CPU time is the
// judging thread's (where the platform has it: Linux): a machine busy with
// other work, as a CI runner's two cores are, slows judging down without
// making it cost more.
func Check(t testing.TB, judge func() string) {
	t.Helper()
	if problem := measure(judge); problem != "" {
		t.Error(problem)
	}
}

// measure judges and says what exceeded the bounds, or "".
func measure(judge func() string) string {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadTime()
	said := judge()
	if took := threadTime() - start; took > Budget {
		return fmt.Sprintf("judged in %v of CPU time, more than the %v an input may take", took, Budget)
	}
	if len(said) > bounds.MessageBytes {
		return fmt.Sprintf("said %d bytes, more than the %d a message may have: %.200q...", len(said), bounds.MessageBytes, said)
	}
	return ""
}
