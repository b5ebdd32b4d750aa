//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/test/testbed"
)

// bed is the test bed every test uses.
var bed *testbed.Bed

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: the test bed runs a kubelet and containerd and needs root; run as root (make e2e)")
		return 1
	}
	ctx := klog.NewContext(context.Background(), klog.Background())
	cfg, err := testbed.Config{}.Defaults()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	running, err := testbed.Running(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if running {
		fmt.Fprintf(os.Stderr, "e2e: using the running test bed in %s and leaving it running\n", cfg.Dir)
		if bed, err = testbed.Attach(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		// A release of the chart on the bed (make demo's) would fight
		// the tests' own, and its DeviceClasses theirs: the tests start
		// without it. make demo installs it again.
		if pod, err := bed.DaemonPod(ctx); err == nil && pod != nil {
			fmt.Fprintln(os.Stderr, "e2e: uninstalling the chart's release the bed runs (make demo installs it again)")
		}
		if err := bed.UninstallChart(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		return runIn(m)
	}
	start := time.Now()
	if bed, err = testbed.Start(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: start the test bed:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: test bed up in %s\n", time.Since(start).Round(time.Millisecond))
	code := runIn(m)
	// Tearing down is part of what is tested: nothing may be left behind.
	if err := bed.Stop(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: stop the test bed:", err)
		code = 1
	}
	if left := testbed.Leftovers(cfg); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: the stopped test bed left %d things behind:\n", len(left))
		for _, l := range left {
			fmt.Fprintln(os.Stderr, "  ", l)
		}
		code = 1
	} else {
		fmt.Fprintln(os.Stderr, "e2e: test bed stopped; no process, mount, link, cgroup or netns left")
	}
	return code
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(klog.NewContext(t.Context(), klog.Background()), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// workDir is the run's working directory, on the bed's shared mount: the
// tests' temporary directories (fixtures, state, memif sockets, CNI IPAM
// state, bpffs mounts) are below it, and the daemon pods mount it whole.
var workDir string

// runIn runs the tests with their temporary directories in workDir.
func runIn(m *testing.M) int {
	dir, err := os.MkdirTemp(bed.Config().SharedDir(), "e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: the bed's shared directory (a bed started before it had one must be restarted):", err)
		return 1
	}
	workDir = dir
	defer func() { _ = os.RemoveAll(dir) }()
	if err := os.Setenv("TMPDIR", dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}
