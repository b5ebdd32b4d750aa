package bounds

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// problems are n problems of interface.addresses.
func problems(n int, value string) field.ErrorList {
	var errs field.ErrorList
	for i := range n {
		errs = append(errs, field.Invalid(field.NewPath("interface", "addresses").Index(i), value, "must be an address in CIDR form"))
	}
	return errs
}

// TestJoinAsAggregate: with few problems, the text is the aggregate's.
func TestJoinAsAggregate(t *testing.T) {
	dup := field.Required(field.NewPath("a"), "")
	for _, errs := range []field.ErrorList{
		problems(1, "x"),
		problems(3, "x"),
		problems(Problems, "x"),
		{dup, dup},
		{dup, field.Forbidden(field.NewPath("b"), "no"), dup},
	} {
		if got, want := Join(errs), errs.ToAggregate().Error(); got != want {
			t.Errorf("Join = %q\nwant %q", got, want)
		}
	}
	if Join(nil) != "" || Aggregate(nil) != nil {
		t.Errorf("no problems: %q, %v", Join(nil), Aggregate(nil))
	}
}

// TestJoinBounded: many problems are said up to the bound and counted,
// each cut, the whole within Problems of them.
func TestJoinBounded(t *testing.T) {
	long := strings.Repeat("é", 30000) // 60 KB
	got := Join(problems(20000, long))
	if n := strings.Count(got, "interface.addresses["); n != Problems {
		t.Errorf("%d problems said, want %d", n, Problems)
	}
	if !strings.HasSuffix(got, fmt.Sprintf(", and %d more]", 20000-Problems)) {
		t.Errorf("ends %q", got[len(got)-40:])
	}
	if most := Problems*(ProblemBytes+2) + 40; len(got) > most {
		t.Errorf("%d bytes, more than %d", len(got), most)
	}
	if !utf8.ValidString(got) {
		t.Errorf("cut within a character")
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(got, "["), ", interface")
	if len(first) > ProblemBytes || !strings.HasPrefix(first, `interface.addresses[0]: Invalid value: "éé`) || !strings.HasSuffix(first, "...") {
		t.Errorf("first problem (%d bytes): %.100q...%q", len(first), first, first[max(0, len(first)-40):])
	}
}

// TestJoinReadsFew: the problems past those said are counted, not read
// (a nil among them would panic if one were).
func TestJoinReadsFew(t *testing.T) {
	errs := problems(2*Problems, "x")
	errs = append(errs, make(field.ErrorList, 1000)...)
	if got := Join(errs); !strings.HasSuffix(got, ", and 1016 more]") {
		t.Errorf("Join = %q", got[len(got)-40:])
	}
	// Repeats are read and left out, up to twice the bound.
	same := make(field.ErrorList, 100)
	for i := range same {
		same[i] = field.Required(field.NewPath("a"), "")
	}
	if got := Join(same); got != "[a: Required value, and 68 more]" {
		t.Errorf("Join = %q", got)
	}
}

func TestAggregate(t *testing.T) {
	errs := problems(3, "x")
	err := Aggregate(errs)
	if err.Error() != Join(errs) {
		t.Errorf("text %q", err.Error())
	}
	var fe *field.Error
	if !errors.As(err, &fe) || fe != errs[0] {
		t.Errorf("does not unwrap to its problems: %v", fe)
	}
}

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		s    string
		most int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"a longer text", 8, "a lon..."},
		{"ééé", 6, "ééé"},
		{"éééé", 6, "é..."},
		{"aéé", 4, "a..."},
		{"aééé", 6, "aé..."},
		{"ééé", 5, "é..."},
		{"abcdef", 2, ".."},
	} {
		if got := Cut(tc.s, tc.most); got != tc.want || len(got) > tc.most {
			t.Errorf("Cut(%q, %d) = %q, want %q", tc.s, tc.most, got, tc.want)
		}
	}
}

func TestErr(t *testing.T) {
	short := errors.New("short")
	if got := Err(short); got.Error() != "short" || !errors.Is(got, short) || Err(nil) != nil {
		t.Errorf("a short error changed: %v", got)
	}
	base := errors.New(strings.Repeat("x", 3*MessageBytes))
	long := fmt.Errorf("claim a/b: %w", base)
	got := Err(long)
	if len(got.Error()) != MessageBytes || !strings.HasPrefix(got.Error(), "claim a/b: xxx") || !errors.Is(got, base) {
		t.Errorf("Err: %d bytes, %.20q, unwraps: %v", len(got.Error()), got.Error(), errors.Is(got, base))
	}
}

// TestKeep: a list of many problems is kept to Problems of them and one
// that counts the rest, which Join says as the rest; a list kept again, or
// joined with others, still counts them all.
func TestKeep(t *testing.T) {
	if errs := problems(Problems, "x"); len(Keep(errs)) != Problems {
		t.Errorf("a list within the bound changed: %d", len(Keep(errs)))
	}
	kept := Keep(problems(20000, "x"))
	if len(kept) != Problems+1 || Count(kept) != 20000 {
		t.Fatalf("kept %d, standing for %d", len(kept), Count(kept))
	}
	if n, ok := Counted(kept[Problems]); !ok || n != 20000-Problems {
		t.Errorf("the last counts %d (%v)", n, ok)
	}
	if got, want := Join(kept), Join(problems(20000, "x")); got != want {
		t.Errorf("Join of the kept list:\n%q\nwant\n%q", got, want)
	}
	again := Keep(append(append(field.ErrorList{}, kept...), Keep(problems(100, "y"))...))
	if len(again) != Problems+1 || Count(again) != 20100 {
		t.Errorf("kept again: %d, standing for %d", len(again), Count(again))
	}
	if got := Join(again); !strings.HasSuffix(got, fmt.Sprintf(", and %d more]", 20100-Problems)) {
		t.Errorf("Join of a list kept twice ends %q", got[max(0, len(got)-40):])
	}
}
