// Package netnstest creates named network namespaces for privileged tests
// and benchmarks. The calling goroutine stays in its own namespace.
package netnstest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// New creates the network namespace /run/netns/<name>, deleted when the
// test ends, and returns its path. It fails the test when not run as root.
func New(tb testing.TB, name string) string {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Fatal("this test creates network namespaces: run it as root")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = orig.Close() }()
	ns, err := netns.NewNamed(name)
	if err != nil {
		tb.Fatalf("create network namespace %s: %v", name, err)
	}
	_ = ns.Close()
	if err := netns.Set(orig); err != nil {
		// This thread is in the wrong namespace and must not run anything else.
		panic(fmt.Sprintf("cannot return to the original network namespace: %v", err))
	}
	tb.Cleanup(func() { _ = netns.DeleteNamed(name) })
	return filepath.Join("/run/netns", name)
}
