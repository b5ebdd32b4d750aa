package dataplane

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestMain fails the run when tests leave links or network namespaces of
// theirs (prefix "fpa", and "fpsh" for the shared ones) behind.
func TestMain(m *testing.M) {
	code := m.Run()
	var leaks []string
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "fpa") || strings.HasPrefix(l.Attrs().Name, "fpsh") {
			leaks = append(leaks, "link "+l.Attrs().Name)
		}
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "fpa") || strings.HasPrefix(e.Name(), "fpsh") {
				leaks = append(leaks, "netns "+e.Name())
			}
		}
	}
	if len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the tests leaked: %s\n", strings.Join(leaks, ", "))
		code = 1
	}
	os.Exit(code)
}
