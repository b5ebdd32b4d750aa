//go:build faultinject

package fault

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

var (
	mu   sync.Mutex
	hits = map[string]int{}
)

// Point kills the process with SIGKILL if $FASTPATH_FAULT names this point
// (and this hit of it).
func Point(name string) {
	armed := os.Getenv(Env)
	if armed == "" {
		return
	}
	want, nth := armed, 1
	if p, n, ok := strings.Cut(armed, "#"); ok {
		want = p
		if v, err := strconv.Atoi(n); err == nil && v > 0 {
			nth = v
		}
	}
	if want != name {
		return
	}
	mu.Lock()
	hits[name]++
	hit := hits[name]
	mu.Unlock()
	if hit != nth {
		return
	}
	if once := os.Getenv(OnceEnv); once != "" {
		f, err := os.OpenFile(once, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return // killed before, or cannot say so: not again
		}
		// The point, for whoever checks where the process died when its
		// output is gone with it.
		_, _ = f.WriteString(name)
		_ = f.Sync()
		_ = f.Close()
	}
	fmt.Fprintf(os.Stderr, "fault: killed at %s (hit %d)\n", name, hit)
	if os.Getpid() == 1 {
		// The init process of a PID namespace (the daemon in its
		// container) is immune to a SIGKILL sent from inside it: it ends
		// the same way, at once and running nothing more, with the status
		// of a killed process.
		os.Exit(128 + int(syscall.SIGKILL))
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
