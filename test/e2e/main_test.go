//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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
			// Its pods with claims go first, while their daemon is
			// there to release the devices.
			if err := deleteClaimingPods(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "e2e:", err)
				return 1
			}
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
	rt, err := bed.RuntimeVersion(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: the node's runtime:", err)
		return 1
	}
	vers, err := bed.Config().Versions()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: Kubernetes %s, runtime %s\n", vers.Kubernetes, rt)
	dir, err := os.MkdirTemp(bed.Config().SharedDir(), "e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: the bed's shared directory (a bed started before it had one must be restarted):", err)
		return 1
	}
	workDir = dir
	defer func() { _ = os.RemoveAll(dir) }()
	removeStaleVeths()
	if err := os.Setenv("TMPDIR", dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

// removeStaleVeths deletes the veths of the suite's prefix that a run
// killed before its cleanup left behind: the tests create them by name.
func removeStaleVeths() {
	links, err := netlink.LinkList()
	if err != nil {
		return
	}
	for _, l := range links {
		if name := l.Attrs().Name; l.Type() == "veth" && strings.HasPrefix(name, vethPrefix) {
			fmt.Fprintf(os.Stderr, "e2e: deleting veth %s, left by an earlier run\n", name)
			_ = netlink.LinkDel(l)
		}
	}
}

// deleteClaimingPods deletes the pods of the default namespace that have
// resource claims, and waits until they are gone.
func deleteClaimingPods(ctx context.Context) error {
	pods, err := bed.Client().CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if len(p.Spec.ResourceClaims) == 0 {
			continue
		}
		fmt.Fprintf(os.Stderr, "e2e: deleting pod %s/%s\n", p.Namespace, p.Name)
		if err := bed.DeletePod(ctx, p.Namespace, p.Name); err != nil {
			return err
		}
	}
	// The kubelet releases the claims after the pods are gone.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		specs, err := filepath.Glob(filepath.Join(bed.CDIDir(), "*.json"))
		return err == nil && len(specs) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the claims of the deleted pods were not released: CDI specs remain in %s", bed.CDIDir())
	}
	return nil
}
