package bounds

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Join is the text of the problems about one object, as the aggregate of
// a field.ErrorList writes it: one problem alone, more as "[a, b]", a
// problem said twice said once. It says at most Problems of them, each
// cut to ProblemBytes (its value first: a field.Error quotes its value,
// which may be as long as the input), and counts the rest: "[a, b, and 3
// more]". It reads at most twice Problems of the problems, whatever their
// number, and its text is at most about Problems times ProblemBytes.
func Join(errs field.ErrorList) string {
	if len(errs) == 0 {
		return ""
	}
	texts := make([]string, 0, min(len(errs), Problems))
	seen := make(map[string]bool, min(len(errs), Problems))
	read, more := 0, 0
	for _, e := range errs {
		if n, ok := counted(e); ok {
			more += n
			read++
			continue
		}
		if len(texts) == Problems || read == 2*Problems {
			break
		}
		read++
		if e == nil {
			continue
		}
		s := problem(e)
		if !seen[s] {
			seen[s] = true
			texts = append(texts, s)
		}
	}
	more += Count(errs[read:])
	if len(texts) == 1 && more == 0 {
		return texts[0]
	}
	n := 2 + len(", and  more") + 20
	for _, s := range texts {
		n += len(s) + 2
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('[')
	for i, s := range texts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s)
	}
	if more > 0 {
		if len(texts) > 0 {
			b.WriteString(", ")
		}
		b.WriteString("and ")
		b.WriteString(strconv.Itoa(more))
		b.WriteString(" more")
	}
	b.WriteByte(']')
	return b.String()
}

// moreOrigin marks the problem Keep puts in place of the problems it does
// not keep.
const moreOrigin = "fastpath.dev/bounds.Keep"

// Keep is errs with at most Problems of its problems kept, in their order,
// and the rest counted in one problem at its end, which Join says as "and
// N more": what the judgement of an object holds is bounded however many
// problems its input has. A list of Problems or fewer is errs itself.
func Keep(errs field.ErrorList) field.ErrorList {
	if len(errs) <= Problems {
		return errs
	}
	kept := make(field.ErrorList, 0, Problems+1)
	more := 0
	for _, e := range errs {
		switch n, ok := counted(e); {
		case ok:
			more += n
		case len(kept) < Problems:
			kept = append(kept, e)
		default:
			more++
		}
	}
	if more > 0 {
		kept = append(kept, &field.Error{Type: field.ErrorTypeTooMany, BadValue: more,
			Detail: "more problems, not each said", Origin: moreOrigin})
	}
	return kept
}

// Count is how many problems errs stands for: those Keep counted in one
// as many as it counted.
func Count(errs field.ErrorList) int {
	n := 0
	for _, e := range errs {
		if m, ok := counted(e); ok {
			n += m
		} else {
			n++
		}
	}
	return n
}

// Counted says whether e is the problem Keep puts in place of others, and
// how many it stands for.
func Counted(e *field.Error) (int, bool) { return counted(e) }

func counted(e *field.Error) (int, bool) {
	if e == nil || e.Origin != moreOrigin {
		return 0, false
	}
	n, _ := e.BadValue.(int)
	return n, true
}

// problem is the text of one problem, cut to ProblemBytes.
func problem(e *field.Error) string {
	c := *e
	if s, ok := c.BadValue.(string); ok && len(s) > ProblemBytes {
		c.BadValue = Cut(s, ProblemBytes)
	}
	c.Field, c.Detail = Cut(c.Field, ProblemBytes), Cut(c.Detail, ProblemBytes)
	return Cut(c.Error(), ProblemBytes)
}

// Errors is a list of problems about one object as one error: its text
// is Join's, made once. It unwraps to the problems.
type Errors struct {
	List field.ErrorList
	text string
}

// Aggregate is errs as one error (Errors), nil for none: what
// field.ErrorList.ToAggregate gives, in bounded time and space.
func Aggregate(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return &Errors{List: errs, text: Join(errs)}
}

func (e *Errors) Error() string { return e.text }

// Unwrap is the problems, for errors.Is and errors.As.
func (e *Errors) Unwrap() []error {
	out := make([]error, 0, len(e.List))
	for _, p := range e.List {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// cutMark ends a text that was cut.
const cutMark = "..."

// Cut is s cut to at most most bytes, at a character's boundary, ending
// in "..." when it was cut; s when it is short enough.
func Cut(s string, most int) string {
	if len(s) <= most {
		return s
	}
	if most < len(cutMark) {
		return cutMark[:max(most, 0)]
	}
	end := most - len(cutMark)
	// Back to the start of a character: at most utf8.UTFMax-1 bytes.
	for i := 0; i < utf8.UTFMax && end > 0 && !utf8.RuneStart(s[end]); i++ {
		end--
	}
	return s[:end] + cutMark
}

// Message is s cut to MessageBytes: a message to the kubelet or the
// runtime, a log line's error, a condition's message.
func Message(s string) string { return Cut(s, MessageBytes) }

// messageError is an error whose text was cut to MessageBytes.
type messageError struct {
	err  error
	text string
}

func (e *messageError) Error() string { return e.text }
func (e *messageError) Unwrap() error { return e.err }

// Err is err with its text cut to MessageBytes, read once: what fastpath
// answers the kubelet and the runtime, and logs. It unwraps to err; nil
// for nil, and err itself when its text is short enough.
func Err(err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	if len(text) <= MessageBytes {
		return err
	}
	return &messageError{err: err, text: Message(text)}
}
