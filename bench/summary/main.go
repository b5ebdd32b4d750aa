// Command summary reads `go test -bench` output (several -count runs) and
// prints the medians and the ratios fastpath's speed claims rest on:
// attach and detach against the raw-netlink floor, and the CNI path against
// fastpath's attach. With -results it also rewrites the summary section of
// that file, with the machine and the command.
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

// ratio is one claim: numerator / denominator, and the target it must meet.
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
}

func main() {
	results := flag.String("results", "", "rewrite the summary section of this file")
	command := flag.String("command", "", "the command that produced the input, recorded with the summary")
	flag.Parse()
	runs, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
	if len(runs) == 0 {
		fmt.Fprintln(os.Stderr, "summary: no benchmark results in the input")
		os.Exit(1)
	}
	table := render(runs)
	fmt.Print(table)
	if *results == "" {
		return
	}
	section := fmt.Sprintf("%s\n## Summary (written by `make bench`)\n\n%s, %s.\n\n```\n%s\n```\n\n%s%s\n",
		beginMarker, time.Now().UTC().Format("2006-01-02"), machine(), *command, table, endMarker)
	if err := rewrite(*results, section); err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
}

// parse collects ns/op of every benchmark line, by name without the
// GOMAXPROCS suffix.
func parse(r io.Reader) (map[string][]float64, error) {
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
			if f[i+1] == "ns/op" {
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

func render(runs map[string][]float64) string {
	var b strings.Builder
	b.WriteString("| benchmark | runs | median |\n|---|---|---|\n")
	names := make([]string, 0, len(runs))
	for n := range runs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "| %s | %d | %s |\n", n, len(runs[n]), time.Duration(median(runs[n])).Round(time.Microsecond))
	}
	b.WriteString("\n| ratio | value | target | met |\n|---|---|---|---|\n")
	for _, r := range ratios {
		num, okN := runs[r.num]
		den, okD := runs[r.den]
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

// rewrite replaces the summary section of path (or appends one).
func rewrite(path, section string) error {
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
