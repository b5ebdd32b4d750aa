package admission

import (
	"fmt"
	"hash/maphash"
	"strings"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/validate"
)

// How much the webhook says. A denial's message names at most
// bounds.Problems problems, each cut to bounds.ProblemBytes, and counts
// the rest ("... and N more"): it is at most bounds.MessageBytes however
// many problems an object has, and costs one pass over them. An answer
// has at most maxWarnings warnings, each cut to warningBytes.
const (
	maxWarnings = 4
	// warningBytes is what the API server passes on of a warning whole
	// (it cuts each to 256 characters once they total 4 KiB).
	warningBytes = 256
)

// A denial is a denial's message, built one problem at a time.
type denial struct {
	b           strings.Builder
	shown, more int
}

// newDenial is a denial whose message starts with prefix.
func newDenial(prefix string) *denial {
	d := &denial{}
	d.b.WriteString(prefix)
	return d
}

// add adds a problem: said, cut, while fewer than bounds.Problems are;
// counted after.
func (d *denial) add(problem string) {
	if d.full() {
		d.more++
		return
	}
	if d.shown > 0 {
		d.b.WriteString("; ")
	}
	d.b.WriteString(bounds.Cut(problem, bounds.ProblemBytes))
	d.shown++
}

// full says whether the denial says as many problems as it may: the
// next are counted.
func (d *denial) full() bool { return d.shown == bounds.Problems }

// problems says how many problems were added.
func (d *denial) problems() int { return d.shown + d.more }

// message is the denial's message.
func (d *denial) message() string {
	if d.more > 0 {
		fmt.Fprintf(&d.b, "; ... and %d more", d.more)
	}
	return bounds.Cut(d.b.String(), bounds.MessageBytes)
}

// addWarning adds a warning to warnings, cut, unless there are
// maxWarnings already.
func addWarning(warnings []string, w string) []string {
	if len(warnings) == maxWarnings {
		return warnings
	}
	return append(warnings, bounds.Cut(w, warningBytes))
}

// problemText is a problem as validate prints it: the request, if any,
// then the field and what is wrong with it.
func problemText(p validate.Problem) string {
	m := p.Err.Error()
	if p.Err.Field == "" || p.Err.Field == "<nil>" {
		// A problem of the whole object.
		m = p.Err.ErrorBody()
	}
	if p.Request != "" {
		m = fmt.Sprintf("request %q: %s", p.Request, m)
	}
	return m
}

// earlier are the problems an object had before an update, each as often
// as it had it, by a hash of its text: an update is refused for what it
// brings, not for what the object already was. Each problem is printed
// once and not kept, so that finding them costs a pass over them.
type earlier struct {
	seed maphash.Seed
	n    map[uint64]int
	// counted are the problems validate counted and did not keep
	// (bounds.Keep): an update is refused for those only as far as it has
	// more.
	counted int
}

// newEarlier are the problems of the object before the update.
func newEarlier(problems []validate.Problem) *earlier {
	e := &earlier{seed: maphash.MakeSeed(), n: make(map[uint64]int, len(problems))}
	for _, p := range problems {
		if n, ok := bounds.Counted(p.Err); ok {
			e.counted += n
			continue
		}
		e.add(problemText(p))
	}
	return e
}

// beyond is how many of n problems validate counted are more than the
// object had counted before, and counts those off. A nil earlier had none.
func (e *earlier) beyond(n int) int {
	if e == nil {
		return n
	}
	off := min(n, e.counted)
	e.counted -= off
	return n - off
}

// add counts a problem the object had.
func (e *earlier) add(problem string) { e.n[maphash.String(e.seed, problem)]++ }

// had says whether the object had the problem before, and counts it off:
// a problem the update has once more than the object had is the update's.
// A nil earlier had none.
func (e *earlier) had(problem string) bool {
	if e == nil {
		return false
	}
	h := maphash.String(e.seed, problem)
	if e.n[h] == 0 {
		return false
	}
	e.n[h]--
	return true
}
