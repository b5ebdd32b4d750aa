package boundstest

import (
	"strings"
	"testing"
	"time"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// A judgement that computes past the budget is refused; one that waits as
// long, as a judgement does on a busy machine, is not; nor is one that
// says too much let through.
func TestMeasure(t *testing.T) {
	spin := func() string {
		start := threadTime()
		for threadTime()-start < Budget+100*time.Millisecond {
		}
		return ""
	}
	if got := measure(spin); !strings.Contains(got, "of CPU time, more than the 1s") {
		t.Errorf("a judgement computing for 1.1s: %q, want it refused", got)
	}
	wait := func() string {
		time.Sleep(Budget + 100*time.Millisecond)
		return "refused"
	}
	if got := measure(wait); got != "" {
		t.Errorf("a judgement waiting 1.1s without computing: %q, want none", got)
	}
	long := func() string { return strings.Repeat("x", bounds.MessageBytes+1) }
	if got := measure(long); !strings.Contains(got, "more than the") {
		t.Errorf("a judgement saying %d bytes: %q", bounds.MessageBytes+1, got)
	}
}
