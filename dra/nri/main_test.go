package nri

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// testPrefix starts the names of the links and namespaces these tests make;
// sharedPrefix those of the tests of shared devices.
const (
	testPrefix   = "fpn"
	sharedPrefix = "fpsh"
)

// ours says whether a link or namespace name is one these tests make:
// each carries this process's ID (packages' tests run at once, and the
// dataplane's use the same prefixes), but for the links renamed with
// testPrefix+"ret".
func ours(name string) bool {
	pid := os.Getpid()
	for _, p := range []string{testPrefix, sharedPrefix} {
		if strings.HasPrefix(name, fmt.Sprintf("%s-%d-", p, pid)) || strings.HasPrefix(name, fmt.Sprintf("%s%d-", p, pid%100000)) {
			return true
		}
	}
	return strings.HasPrefix(name, testPrefix+"ret")
}

// TestMain fails the run when tests leave links or network namespaces of
// theirs behind.
func TestMain(m *testing.M) {
	code := m.Run()
	var leaks []string
	links, _ := netlink.LinkList()
	for _, l := range links {
		if ours(l.Attrs().Name) {
			leaks = append(leaks, "link "+l.Attrs().Name)
		}
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if ours(e.Name()) {
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
