package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupMounts lists the mount points of every cgroup hierarchy (v1
// controllers, the named systemd hierarchy and the unified cgroup2 mount).
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if fstype := fields[sep+1]; fstype == "cgroup" || fstype == "cgroup2" {
			out = append(out, fields[4])
		}
	}
	return out, sc.Err()
}

// createCgroups makes the kubelet's cgroup root in every hierarchy, so that
// all of the bed's pods live below a name of its own.
func createCgroups(name string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return fmt.Errorf("list cgroup hierarchies: %w", err)
	}
	for _, m := range mounts {
		dir := filepath.Join(m, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		// A new v1 cpuset starts with no CPUs and no memory nodes: inherit.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if parent, err := os.ReadFile(filepath.Join(m, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
					return fmt.Errorf("set %s: %w", filepath.Join(dir, f), err)
				}
			}
		}
		// On cgroup v2 the children need the parent's controllers delegated.
		if ctrls, err := os.ReadFile(filepath.Join(m, "cgroup.subtree_control")); err == nil && len(strings.TrimSpace(string(ctrls))) > 0 {
			var enable []string
			for _, c := range strings.Fields(string(ctrls)) {
				enable = append(enable, "+"+c)
			}
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644); err != nil {
				return fmt.Errorf("delegate controllers to %s: %w", dir, err)
			}
		}
	}
	return nil
}

// cgroupDirs lists the bed's cgroup directories, deepest first.
func cgroupDirs(name string) []string {
	mounts, _ := cgroupMounts()
	var dirs []string
	for _, m := range mounts {
		root := filepath.Join(m, name)
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

// cgroupPIDs lists the processes in the bed's cgroups: its containers.
func cgroupPIDs(name string) []int {
	seen := map[int]bool{}
	var pids []int
	for _, dir := range cgroupDirs(name) {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// removeCgroups kills what still runs in the bed's cgroups and removes them.
func removeCgroups(name string) error {
	var victims []process
	for _, pid := range cgroupPIDs(name) {
		if st, err := procStartTime(pid); err == nil {
			victims = append(victims, process{Name: "container process", PID: pid, StartTime: st})
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	var errs []error
	for _, p := range victims {
		if !waitGone(p.alive, 10*time.Second) {
			errs = append(errs, fmt.Errorf("container process %d survived SIGKILL", p.PID))
		}
	}
	for _, dir := range cgroupDirs(name) {
		// The kernel frees a cgroup a moment after its last task exits.
		busy := func() bool {
			err := os.Remove(dir)
			return err != nil && !errors.Is(err, fs.ErrNotExist)
		}
		if !waitGone(busy, 10*time.Second) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: still busy", dir))
		}
	}
	return errors.Join(errs...)
}
