package devices

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestMain fails the run when the tests leave links or network namespaces
// of theirs (prefix "fpd") or open file descriptors behind.
func TestMain(m *testing.M) {
	before := openFDs()
	code := m.Run()
	if leaks := leaked(before); len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the tests leaked: %s\n", strings.Join(leaks, "; "))
		code = 1
	}
	os.Exit(code)
}

func openFDs() int {
	entries, _ := os.ReadDir("/proc/self/fd")
	return len(entries)
}

func leaked(fdsBefore int) []string {
	var out []string
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "fpd") {
			out = append(out, "link "+l.Attrs().Name)
		}
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "fpd") {
				out = append(out, "netns "+e.Name())
			}
		}
	}
	// Watchers close their sockets as their goroutines end: give them a moment.
	deadline := time.Now().Add(5 * time.Second)
	for openFDs() > fdsBefore && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := openFDs(); n > fdsBefore {
		out = append(out, fmt.Sprintf("%d file descriptors", n-fdsBefore))
	}
	return out
}
