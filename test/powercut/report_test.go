package main

import (
	"slices"
	"strings"
	"testing"
)

func TestParseReport(t *testing.T) {
	rep, err := parseReport(strings.NewReader(`start 3
try 0 0 fastpath.dev/a 1.0.0
ack 0 0
try 1 0 fastpath.dev/b 1.1.0
try 0 1 fastpath.dev/a -
ack 0 1
cut
try 1 1 fastpath.dev/b 1.1`))
	if err != nil {
		t.Fatal(err)
	}
	want := []op{
		{worker: 0, n: 0, key: "fastpath.dev/a", version: "1.0.0", acked: true},
		{worker: 1, n: 0, key: "fastpath.dev/b", version: "1.1.0"},
		{worker: 0, n: 1, key: "fastpath.dev/a", version: absent, acked: true},
	}
	if !rep.started || rep.format != 3 || !rep.cut || !slices.Equal(rep.ops, want) {
		t.Errorf("parseReport = %+v, want started, format 3, cut and ops %+v (the last line, cut short by the power, left out)", rep, want)
	}

	for _, bad := range []string{
		"ack 0 0\n",
		"try 0 0 k 1\ntry 0 0 k 2\n",
		"try 0 x k 1\n",
		"start\n",
		"eject\n",
	} {
		if _, err := parseReport(strings.NewReader(bad)); err == nil {
			t.Errorf("parseReport(%q): no error", bad)
		}
	}
}

func TestVerify(t *testing.T) {
	for _, tc := range []struct {
		name     string
		before   map[string]string
		ops      []op
		after    map[string]string
		problems []string // each a problem's substring, in order
		acked    int
		inFlight int
	}{{
		name:   "every acknowledged change present",
		before: map[string]string{"a": "0.0.0", "gone": "0.0.1"},
		ops: []op{
			{n: 0, key: "a", version: "1.0.0", acked: true},
			{n: 1, key: "b", version: "1.0.1", acked: true},
			{n: 2, key: "gone", version: absent, acked: true},
			{n: 3, key: "a", version: "1.0.3", acked: true},
		},
		after: map[string]string{"a": "1.0.3", "b": "1.0.1"},
		acked: 4,
	}, {
		name:     "the change in flight present",
		ops:      []op{{n: 0, key: "a", version: "1.0.0", acked: true}, {n: 1, key: "a", version: "1.0.1"}},
		after:    map[string]string{"a": "1.0.1"},
		acked:    1,
		inFlight: 1,
	}, {
		name:  "the change in flight lost",
		ops:   []op{{n: 0, key: "a", version: "1.0.0", acked: true}, {n: 1, key: "a", version: absent}},
		after: map[string]string{"a": "1.0.0"},
		acked: 1,
	}, {
		name:     "an acknowledged change lost",
		before:   map[string]string{"a": "0.0.0"},
		ops:      []op{{n: 0, key: "a", version: "1.0.0", acked: true}},
		after:    map[string]string{"a": "0.0.0"},
		problems: []string{"claim a: the store holds version 0.0.0, want version 1.0.0"},
		acked:    1,
	}, {
		name:     "an acknowledged change lost behind the one in flight",
		ops:      []op{{n: 0, key: "a", version: "1.0.0", acked: true}, {n: 1, key: "a", version: "1.0.1"}},
		after:    map[string]string{},
		problems: []string{"claim a: the store holds no record, want version 1.0.0 (the last acknowledged change) or version 1.0.1 (change 0.1, in flight)"},
		acked:    1,
	}, {
		name:     "an acknowledged deletion undone",
		before:   map[string]string{"a": "0.0.0"},
		ops:      []op{{n: 0, key: "a", version: absent, acked: true}},
		after:    map[string]string{"a": "0.0.0"},
		problems: []string{"claim a: the store holds version 0.0.0, want no record"},
		acked:    1,
	}, {
		name:     "a claim untouched in the cycle lost",
		before:   map[string]string{"a": "0.0.0"},
		after:    map[string]string{},
		problems: []string{"claim a: the store holds no record, want version 0.0.0"},
	}, {
		name:     "a record never written",
		after:    map[string]string{"z": "9.9.9"},
		problems: []string{"claim z: the store holds version 9.9.9, want no record"},
	}, {
		name:     "an older change of the claim back",
		ops:      []op{{n: 0, key: "a", version: "1.0.0", acked: true}, {n: 1, key: "a", version: "1.0.1", acked: true}},
		after:    map[string]string{"a": "1.0.0"},
		problems: []string{"claim a: the store holds version 1.0.0, want version 1.0.1"},
		acked:    2,
	}, {
		name:     "a driver's Prepare cut short",
		ops:      []op{{n: 0, key: "d", version: versionPrepared}},
		after:    map[string]string{"d": versionPreparing},
		inFlight: 1,
	}, {
		name:     "a driver's acknowledged Prepare found unfinished",
		ops:      []op{{n: 0, key: "d", version: versionPrepared, acked: true}},
		after:    map[string]string{"d": versionPreparing},
		problems: []string{"claim d: the store holds version preparing, want version prepared"},
		acked:    1,
	}, {
		name:     "changes of a claim overlapping",
		ops:      []op{{n: 0, key: "a", version: "1.0.0"}, {worker: 1, n: 0, key: "a", version: "1.1.0", acked: true}},
		after:    map[string]string{"a": "1.1.0"},
		problems: []string{"claim a: change 1.0 was tried before change 0.0 of it"},
		acked:    1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			v := verify(tc.before, tc.ops, tc.after)
			if len(v.problems) != len(tc.problems) {
				t.Fatalf("problems %q, want %d: %q", v.problems, len(tc.problems), tc.problems)
			}
			for i, p := range tc.problems {
				if !strings.Contains(v.problems[i], p) {
					t.Errorf("problem %q, want it to say %q", v.problems[i], p)
				}
			}
			if v.acked != tc.acked || v.inFlight != tc.inFlight {
				t.Errorf("acked %d, in flight %d; want %d and %d", v.acked, v.inFlight, tc.acked, tc.inFlight)
			}
		})
	}
}
