// Command summary reads `go test -bench` output (several -count runs) and
// prints the medians and the ratios fastpath's speed claims rest on:
// attach and detach against the raw-netlink floor, and the CNI path against
// fastpath's attach; with -set datapath, the data path's (BenchmarkDatapath:
// each path fastpath hands a pod against the same path built by hand, and
// AF_XDP against the kernel's UDP socket). With -results it also rewrites
// the set's section of that file, with the machine and the command.
//
//	go test -run '^$' -bench . -count 5 ./bench/ | go run ./bench/summary -results bench/RESULTS.md -command "..."
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	beginMarker = "<!-- summary:begin -->"
	endMarker   = "<!-- summary:end -->"
)

// set is a group of benchmarks summarized together: its ratios, the
// metrics shown beside each median, and its section of the results file.
type set struct {
	ratios     []ratio
	metrics    []string
	begin, end string
	heading    string
}

// ratio is one claim: numerator / denominator, and the target it must meet.
// Each is a benchmark's median ns/op, or of another of its metrics:
// name@unit. Without a denominator, the ratio is the numerator's median: a
// metric that is a ratio already, of two sides measured in turns.
type ratio struct {
	name, num, den, target string
	ok                     func(float64) bool
}

var ratios = []ratio{
	{"attach / floor", "Attach", "Floor/attach", "<= 1.05", func(r float64) bool { return r <= 1.05 }},
	{"detach / floor", "Detach", "Floor/detach", "<= 1.05", func(r float64) bool { return r <= 1.05 }},
	{"CNI host-device / attach", "CNI/host-device", "Attach", ">= 3", func(r float64) bool { return r >= 3 }},
	{"CNI macvlan / attach", "CNI/macvlan", "Attach", "-", nil},
	{"attach with XDP / attach", "AttachXDP", "Attach", "-", nil},
	{"move floor / attach shared", "Floor/attach", "AttachShared", ">= 15", func(r float64) bool { return r >= 15 }},
	{"CNI macvlan / attach shared", "CNI/macvlan", "AttachShared", ">= 15", func(r float64) bool { return r >= 15 }},
	{"prepare of 8 devices / of 1", "PrepareCount/count=8", "PrepareCount/count=1", "<= 8.5", func(r float64) bool { return r <= 8.5 }},
	{"64 claims' records written at once / one after another", "StoreBurst/burst", "StoreBurst/serial", "<= 0.5", func(r float64) bool { return r <= 0.5 }},
	{"64 Prepares at once / one after another", "PrepareBurst/burst", "PrepareBurst/serial", "-", nil},
}

// Data-path ratios are of packets per second. Fastpath's side against the
// hand-built one is x-hand, the two measured in turns in each run; AF_XDP
// against the kernel's UDP socket is the inverse ratio of the times per
// packet, ns/op fastpath's side, hand-ns/pkt the side built by hand.
var datapathRatios = []ratio{
	{"AF_XDP: fastpath / by hand (pkt/s)", "Datapath/afxdp@x-hand", "", ">= 0.95", func(r float64) bool { return r >= 0.95 }},
	{"netdev, kernel UDP: fastpath / by hand (pkt/s)", "Datapath/udp@x-hand", "", ">= 0.95", func(r float64) bool { return r >= 0.95 }},
	{"macvlan, kernel UDP: fastpath / by hand (pkt/s)", "Datapath/macvlan@x-hand", "", ">= 0.95", func(r float64) bool { return r >= 0.95 }},
	{"memif, testpmd: fastpath / by hand (pkt/s)", "Datapath/memif@x-hand", "", ">= 0.95", func(r float64) bool { return r >= 0.95 }},
	{"AF_XDP (fastpath) / kernel UDP (by hand) (pkt/s)", "Datapath/udp@hand-ns/pkt", "Datapath/afxdp", ">= 1.5", func(r float64) bool { return r >= 1.5 }},
}

var sets = map[string]set{
	"":         {ratios: ratios, begin: beginMarker, end: endMarker, heading: "Summary (written by `make bench`)"},
	"datapath": {ratios: datapathRatios, metrics: []string{"pkt/s", "hand-pkt/s", "x-hand", "p99-µs", "hand-p99-µs"}, begin: "<!-- datapath:begin -->", end: "<!-- datapath:end -->", heading: "Data path summary (written by `make bench-datapath`)"},
}

func main() {
	results := flag.String("results", "", "rewrite the set's section of this file")
	command := flag.String("command", "", "the command that produced the input, recorded with the summary")
	name := flag.String("set", "", "the benchmarks summarized: \"\" (attach, detach, CNI, prepare) or \"datapath\"")
	flag.Parse()
	st, ok := sets[*name]
	if !ok {
		fmt.Fprintf(os.Stderr, "summary: no set %q\n", *name)
		os.Exit(2)
	}
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
	// What is not a result (a failure and its message, a log line) goes
	// on to stderr: the input is go test's whole output.
	fmt.Fprint(os.Stderr, notResults(string(input)))
	runs, err := parseUnit(strings.NewReader(string(input)), "ns/op")
	if err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
	if len(runs) == 0 {
		fmt.Fprintln(os.Stderr, "summary: no benchmark results in the input")
		os.Exit(1)
	}
	metrics := map[string]map[string][]float64{}
	for _, unit := range st.metrics {
		if metrics[unit], err = parseUnit(strings.NewReader(string(input)), unit); err != nil {
			fmt.Fprintln(os.Stderr, "summary:", err)
			os.Exit(1)
		}
	}
	for _, r := range st.ratios {
		for _, side := range []string{r.num, r.den} {
			if side == "" {
				continue
			}
			if _, unit, ok := strings.Cut(side, "@"); ok && metrics[unit] == nil {
				if metrics[unit], err = parseUnit(strings.NewReader(string(input)), unit); err != nil {
					fmt.Fprintln(os.Stderr, "summary:", err)
					os.Exit(1)
				}
			}
		}
	}
	table := renderSet(runs, st, metrics)
	fmt.Print(table)
	if *results == "" {
		return
	}
	section := fmt.Sprintf("%s\n## %s\n\n%s, %s.\n\n```\n%s\n```\n\n%s%s\n",
		st.begin, st.heading, time.Now().UTC().Format("2006-01-02"), machine(), *command, table, st.end)
	if err := rewriteSection(*results, section, st.begin, st.end); err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
}

// notResults are the lines of go test's output that are neither a
// benchmark's result nor its header (goos, goarch, pkg, cpu, PASS, ok).
func notResults(out string) string {
	var b strings.Builder
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case strings.HasPrefix(f[0], "Benchmark") && len(f) >= 4:
		case slices.Contains([]string{"goos:", "goarch:", "pkg:", "cpu:", "PASS", "ok"}, f[0]):
		default:
			b.WriteString(line)
		}
	}
	return b.String()
}

// parse collects ns/op of every benchmark line, by name without the
// GOMAXPROCS suffix.
func parse(r io.Reader) (map[string][]float64, error) { return parseUnit(r, "ns/op") }

// parseUnit collects the values of unit of every benchmark line, by name
// without the GOMAXPROCS suffix.
func parseUnit(r io.Reader, unit string) (map[string][]float64, error) {
	out := map[string][]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndex(name, "-"); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			if f[i+1] == unit {
				v, err := strconv.ParseFloat(f[i], 64)
				if err != nil {
					return nil, fmt.Errorf("%q: %w", sc.Text(), err)
				}
				out[name] = append(out[name], v)
			}
		}
	}
	return out, sc.Err()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func render(runs map[string][]float64) string { return renderSet(runs, sets[""], nil) }

// renderSet is the table of medians, each with the medians of the set's
// metrics, and the set's ratios.
func renderSet(runs map[string][]float64, st set, metrics map[string]map[string][]float64) string {
	var b strings.Builder
	b.WriteString("| benchmark | runs | median |")
	for _, unit := range st.metrics {
		fmt.Fprintf(&b, " %s |", unit)
	}
	b.WriteString("\n|---|---|---|" + strings.Repeat("---|", len(st.metrics)) + "\n")
	names := make([]string, 0, len(runs))
	for n := range runs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		d := time.Duration(median(runs[n]))
		if d >= time.Millisecond {
			d = d.Round(time.Microsecond)
		}
		fmt.Fprintf(&b, "| %s | %d | %s |", n, len(runs[n]), d)
		for _, unit := range st.metrics {
			if v, ok := metrics[unit][n]; ok {
				fmt.Fprintf(&b, " %s |", humanize(median(v)))
			} else {
				b.WriteString(" - |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| ratio | value | target | met |\n|---|---|---|---|\n")
	values := func(side string) ([]float64, bool) {
		name, unit, ok := strings.Cut(side, "@")
		if !ok {
			v, ok := runs[name]
			return v, ok
		}
		v, ok := metrics[unit][name]
		return v, ok
	}
	for _, r := range st.ratios {
		num, okN := values(r.num)
		den, okD := []float64{1}, true
		if r.den != "" {
			den, okD = values(r.den)
		}
		if !okN || !okD {
			fmt.Fprintf(&b, "| %s | not measured | %s | - |\n", r.name, r.target)
			continue
		}
		v := median(num) / median(den)
		met := "-"
		if r.ok != nil {
			met = "no"
			if r.ok(v) {
				met = "yes"
			}
		}
		fmt.Fprintf(&b, "| %s | %.2fx | %s | %s |\n", r.name, v, r.target, met)
	}
	return b.String()
}

func machine() string {
	cpu := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	kernel := "unknown kernel"
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = "kernel " + strings.TrimSpace(string(data))
	}
	return fmt.Sprintf("%d CPUs (%s), %s, %s", runtime.NumCPU(), cpu, kernel, runtime.Version())
}

// humanize writes a metric's value with thousands separated.
func humanize(v float64) string {
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	digits := strconv.FormatFloat(v, 'f', 0, 64)
	var out []byte
	for i, c := range []byte(digits) {
		if i > 0 && (len(digits)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, c)
	}
	return string(out)
}

// rewrite replaces the summary section of path (or appends one).
func rewrite(path, section string) error {
	return rewriteSection(path, section, beginMarker, endMarker)
}

// rewriteSection replaces the section between begin and end of path (or
// appends one).
func rewriteSection(path, section, beginMarker, endMarker string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(data)
	begin, end := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if begin >= 0 && end > begin {
		s = s[:begin] + section + s[end+len(endMarker)+1:]
	} else {
		s = strings.TrimRight(s, "\n") + "\n\n" + section
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
