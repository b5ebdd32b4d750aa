// Command crio-runc is the runc the test bed's CRI-O node runs: it takes
// out of a container's bundle what this host cannot give, then runs runc
// (its first argument) with the rest of its arguments.
//
//   - A negative oom_score_adj is raised to 0, the runtime's own, as
//     containerd's restrict_oom_score_adj does (the containerd node is
//     configured so): where the bed runs without CAP_SYS_RESOURCE, runc
//     cannot lower it, and the kubelet asks -997 for a
//     system-node-critical pod such as fastpathd's.
//   - Capabilities this process's bounding set lacks are dropped, as
//     containerd gives a privileged container only the capabilities it
//     has itself (CRI-O gives every capability it knows).
//   - Hugepage limits are dropped: on a cgroup v1 + v2 hybrid host the
//     hugetlb controller is on the v2 hierarchy, which runc in v1 mode does
//     not use, but CRI-O sees it in /proc/cgroups and sets limits.
//
// CRI-O has no settings for either. The bed starts it; it is not for
// anything else.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "crio-runc: usage: crio-runc RUNC [ARG...]")
		os.Exit(2)
	}
	var err error
	if bundle := flagOf(os.Args[2:], "--bundle", "-b"); bundle != "" {
		err = rewrite(filepath.Join(bundle, "config.json"), restrictSpec)
	}
	// An exec's process (a probe's, kubectl exec's), in a file of its own.
	if process := flagOf(os.Args[2:], "--process", "-p"); err == nil && process != "" {
		err = rewrite(process, restrictProcess)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "crio-runc:", err)
		os.Exit(1)
	}
	err = syscall.Exec(os.Args[1], append([]string{"runc"}, os.Args[2:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "crio-runc:", err)
	os.Exit(1)
}

// flagOf is the value of a flag of runc's, by its names.
func flagOf(args []string, names ...string) string {
	for i, a := range args {
		for _, n := range names {
			if v, ok := strings.CutPrefix(a, n+"="); ok {
				return v
			}
			if a == n && i+1 < len(args) {
				return args[i+1]
			}
		}
	}
	return ""
}

// rewrite changes a JSON document in place, kept generic so that no field
// this program does not know is lost.
func rewrite(path string, change func(map[string]any) error) error {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := change(doc); err != nil {
		return err
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	tmp := path + ".crio-runc"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func restrictSpec(spec map[string]any) error {
	if p, ok := spec["process"].(map[string]any); ok {
		if err := restrictProcess(p); err != nil {
			return err
		}
	}
	if l, ok := spec["linux"].(map[string]any); ok {
		if r, ok := l["resources"].(map[string]any); ok {
			delete(r, "hugepageLimits")
		}
	}
	return nil
}

func restrictProcess(p map[string]any) error {
	if adj, ok := p["oomScoreAdj"].(float64); ok && adj < 0 {
		p["oomScoreAdj"] = 0
	}
	caps, ok := p["capabilities"].(map[string]any)
	if !ok {
		return nil
	}
	bounding, err := boundingSet()
	if err != nil {
		return err
	}
	for set, names := range caps {
		list, _ := names.([]any)
		kept := []any{}
		for _, n := range list {
			if name, _ := n.(string); bounding[name] {
				kept = append(kept, n)
			}
		}
		caps[set] = kept
	}
	return nil
}

// capNames are Linux's capabilities by number.
var capNames = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
	"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP",
	"CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
	"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE"}

// boundingSet is the names of the capabilities in this process's
// bounding set.
func boundingSet() (map[string]bool, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	for line := range strings.Lines(string(status)) {
		hex, ok := strings.CutPrefix(line, "CapBnd:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("CapBnd %q: %w", hex, err)
		}
		out := map[string]bool{}
		for i, name := range capNames {
			if mask&(1<<i) != 0 {
				out[name] = true
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("/proc/self/status has no CapBnd")
}
