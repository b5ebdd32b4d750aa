// Package boundstest checks, in fuzz targets, that judging an input costs
// what the bounds allow whatever the input: each execution finishes
// within Budget and says at most bounds.MessageBytes. Only tests import
// it.
package boundstest

import (
	"testing"
	"time"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// Budget is the time one judgement of one input may take. It is generous,
// so that a run with the race detector on a busy machine of two cores
// stays within it: judging the largest input the bounds allow takes
// milliseconds, and work that grows with the square of the input, at the
// bounds, takes seconds.
const Budget = time.Second

// Check runs judge, which judges one input and returns what fastpath says
// about it ("" for nothing), and fails t when it took longer than Budget
// or said more than bounds.MessageBytes.
func Check(t testing.TB, judge func() string) {
	t.Helper()
	start := time.Now()
	said := judge()
	if took := time.Since(start); took > Budget {
		t.Errorf("judged in %v, more than the %v an input may take", took, Budget)
	}
	if len(said) > bounds.MessageBytes {
		t.Errorf("said %d bytes, more than the %d a message may have: %.200q...", len(said), bounds.MessageBytes, said)
	}
}
