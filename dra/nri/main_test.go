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

// TestMain fails the run when tests leave links or network namespaces of
// theirs behind.
func TestMain(m *testing.M) {
	code := m.Run()
	var leaks []string
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, testPrefix) || strings.HasPrefix(l.Attrs().Name, sharedPrefix) {
			leaks = append(leaks, "link "+l.Attrs().Name)
		}
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), testPrefix) || strings.HasPrefix(e.Name(), sharedPrefix) {
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
