//go:build e2e && benche2e

package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTick is the kernel's USER_HZ, the unit of /proc's CPU times; it is
// 100 on every architecture Linux runs Kubernetes nodes on.
const clockTick = 10 * time.Millisecond

// cpuSnapshot is the CPU time the machine's processes had used, summed by
// the process's name (its comm, a kernel thread's without its instance):
// each process's own time and that of the children it has waited for, so
// that a runc or a CNI plugin that ran and exited between two snapshots
// counts in its parent's name (containerd's, a shim's).
type cpuSnapshot struct {
	byName map[string]time.Duration
	// busy is the machine's whole CPU time but idle and iowait, from
	// /proc/stat, every CPU.
	busy time.Duration
}

// takeCPU reads every process's times from /proc.
func takeCPU() (cpuSnapshot, error) {
	s := cpuSnapshot{byName: map[string]time.Duration{}}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return s, err
	}
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile: its times are its parent's now
		}
		name, ticks, ok := parseStat(string(data))
		if ok {
			s.byName[name] += time.Duration(ticks) * clockTick
		}
	}
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	for i, f := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest times are in user already
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return s, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
		s.busy += time.Duration(n) * clockTick
	}
	return s, nil
}

// parseStat reads a /proc/PID/stat line: the process's name and its
// utime + stime + cutime + cstime, in ticks.
func parseStat(line string) (string, int64, bool) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return "", 0, false
	}
	name := line[open+1 : end]
	if i := strings.IndexAny(name, "/:"); i > 0 && (strings.HasPrefix(name, "kworker") || strings.HasPrefix(name, "ksoftirqd") ||
		strings.HasPrefix(name, "rcu") || strings.HasPrefix(name, "migration") || strings.HasPrefix(name, "cpuhp")) {
		name = name[:i]
	}
	// After ")": state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime.
	f := strings.Fields(line[end+1:])
	if len(f) < 15 {
		return "", 0, false
	}
	var sum int64
	for _, v := range f[11:15] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "", 0, false
		}
		sum += n
	}
	return name, sum, true
}

// printCPU prints what each name used between two snapshots, the largest
// first, per pod of the stretch and as a share of the machine's busy time.
func printCPU(before, after cpuSnapshot, pods int, wall time.Duration) {
	used := map[string]time.Duration{}
	for name, d := range after.byName {
		used[name] = d - before.byName[name]
	}
	busy := after.busy - before.busy
	fmt.Printf("CPU meanwhile (%s wall, the machine busy %s of it, every CPU; per process name, with its reaped children):\n", wall.Round(time.Millisecond), busy.Round(10*time.Millisecond))
	names := slices.SortedFunc(maps.Keys(used), func(a, b string) int { return int(used[b] - used[a]) })
	var rest time.Duration
	for i, name := range names {
		d := used[name]
		if i >= 12 || d < 50*time.Millisecond {
			if d > 0 {
				rest += d
			}
			continue
		}
		fmt.Printf("  %s: %s (%.1f ms a pod, %.0f%%)\n", name, d.Round(10*time.Millisecond), float64(d)/float64(time.Millisecond)/float64(pods), 100*float64(d)/float64(busy))
	}
	fmt.Printf("  the rest: %s\n\n", rest.Round(10*time.Millisecond))
}
