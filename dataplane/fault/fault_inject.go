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
	fmt.Fprintf(os.Stderr, "fault: killed at %s (hit %d)\n", name, hit)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}
