package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The churner's report: a line per event, each written to the host (the
// VM's share, through to the host's file) in one write, a try before the
// store is called and an ack after it returned with no error, so that
// the host knows of every change acknowledged before the power went,
// and of every change that was in flight:
//
//	start <store format>
//	try <worker> <n> <claim key> <version, or - for a deletion>
//	ack <worker> <n>
//	cut
//
// A version names one record the churner wrote (in the record's Dir),
// never written twice.

// absent is the version of a claim the store does not hold.
const absent = "-"

// Versions of the DRA driver's claims: a claim the driver prepared, and
// one whose Prepare or Unprepare the power cut short (its record
// admitted, not prepared; the daemon's next Prepare finishes or redoes
// it). Their UIDs start with driverClaimPrefix.
const (
	versionPrepared   = "prepared"
	versionPreparing  = "preparing"
	driverClaimPrefix = "powercut-driver-"
)

// op is one change the churner tried.
type op struct {
	worker, n int
	key       string
	version   string // absent: deleted
	acked     bool
}

// report is what a churner's report says.
type report struct {
	started bool
	format  int
	ops     []op
	cut     bool
}

// parseReport reads a churner's report. A last line cut short (the power
// went while it was written) is left out.
func parseReport(r io.Reader) (report, error) {
	var rep report
	index := map[[2]int]int{} // worker, n: in ops
	br := bufio.NewReader(r)
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadString('\n')
		if errors.Is(err, io.EOF) {
			return rep, nil
		}
		if err != nil {
			return rep, err
		}
		f := strings.Fields(line)
		bad := func(why string) error {
			return fmt.Errorf("report line %d %q: %s", lineNo, strings.TrimSpace(line), why)
		}
		if len(f) == 0 {
			return rep, bad("empty")
		}
		switch f[0] {
		case "start":
			if len(f) != 2 {
				return rep, bad("want start FORMAT")
			}
			if rep.format, err = strconv.Atoi(f[1]); err != nil {
				return rep, bad("the format is not a number")
			}
			rep.started = true
		case "try":
			if len(f) != 5 {
				return rep, bad("want try WORKER N KEY VERSION")
			}
			w, err1 := strconv.Atoi(f[1])
			n, err2 := strconv.Atoi(f[2])
			if err1 != nil || err2 != nil {
				return rep, bad("worker and n are numbers")
			}
			if _, dup := index[[2]int{w, n}]; dup {
				return rep, bad("tried twice")
			}
			index[[2]int{w, n}] = len(rep.ops)
			rep.ops = append(rep.ops, op{worker: w, n: n, key: f[3], version: f[4]})
		case "ack":
			if len(f) != 3 {
				return rep, bad("want ack WORKER N")
			}
			w, err1 := strconv.Atoi(f[1])
			n, err2 := strconv.Atoi(f[2])
			i, tried := index[[2]int{w, n}]
			if err1 != nil || err2 != nil || !tried {
				return rep, bad("acknowledges no change tried")
			}
			rep.ops[i].acked = true
		case "cut":
			rep.cut = true
		default:
			return rep, bad("unknown event")
		}
	}
}

// verdict is what the check of one cycle found.
type verdict struct {
	// acked is the number of changes acknowledged in the cycle, driver
	// those of them the DRA driver made; claims the number of claims
	// whose record was checked.
	acked, driver, claims int
	// inFlight is how many claims held a change that was tried and not
	// acknowledged: the power went after the store wrote it and before
	// the churner reported its return.
	inFlight int
	problems []string
}

// verify checks after, the records the store holds after the power cut
// (claim key: version), against before, those it held when the cycle
// began, and the changes the churner tried meanwhile. A claim must hold
// its last acknowledged change (or, with none, its record of before), or
// a change tried after it that had not returned: one per claim at most,
// since a claim's changes are made one after the other. Nothing else may
// appear: no record never written, no record an acknowledged change
// replaced.
func verify(before map[string]string, ops []op, after map[string]string) verdict {
	var v verdict
	type claim struct {
		acked    string // the last acknowledged version
		inFlight string // a version tried after it, "" for none
		lastOp   string // the worker and n of the last change, for messages
	}
	claims := map[string]*claim{}
	get := func(k string) *claim {
		if c := claims[k]; c != nil {
			return c
		}
		c := &claim{acked: absent}
		if ver, ok := before[k]; ok {
			c.acked = ver
		}
		claims[k] = c
		return c
	}
	for k := range before {
		get(k)
	}
	for _, o := range ops {
		c := get(o.key)
		if c.inFlight != "" {
			v.problems = append(v.problems, fmt.Sprintf("claim %s: change %s was tried before change %s of it (%s) returned: the churner makes a claim's changes one after the other",
				o.key, fmt.Sprintf("%d.%d", o.worker, o.n), c.lastOp, c.inFlight))
		}
		c.lastOp = fmt.Sprintf("%d.%d", o.worker, o.n)
		if o.acked {
			c.acked, c.inFlight = o.version, ""
			v.acked++
			if strings.Contains(o.key, "/"+driverClaimPrefix) {
				v.driver++
			}
		} else {
			c.inFlight = o.version
		}
	}
	for k := range after {
		get(k)
	}
	keys := make([]string, 0, len(claims))
	for k := range claims {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		c := claims[k]
		got, ok := after[k]
		if !ok {
			got = absent
		}
		v.claims++
		switch {
		case got == c.acked:
		case c.inFlight != "" && (got == c.inFlight || got == versionPreparing):
			// A driver's Prepare or Unprepare cut short holds the
			// record admitted, not prepared: the next finishes it.
			v.inFlight++
		case c.inFlight != "":
			v.problems = append(v.problems, fmt.Sprintf("claim %s: the store holds %s, want %s (the last acknowledged change) or %s (change %s, in flight)",
				k, describe(got), describe(c.acked), describe(c.inFlight), c.lastOp))
		default:
			v.problems = append(v.problems, fmt.Sprintf("claim %s: the store holds %s, want %s (the last acknowledged change; none was in flight)",
				k, describe(got), describe(c.acked)))
		}
	}
	return v
}

func describe(version string) string {
	if version == absent {
		return "no record"
	}
	return "version " + version
}
