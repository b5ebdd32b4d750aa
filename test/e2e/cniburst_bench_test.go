//go:build e2e && benche2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// burstPods is how many pods TestCNIBurst and TestPodStartup start at once.
const burstPods = 64

// TestCNIBurst starts 64 pods at once, each with a CNI claim (macvlan and
// host-local, run by the daemon at sandbox creation), with the plugins
// bounded to --cni-max-plugins 8 (the default) and unbounded, and reports
// for each the time until all are Running, the peak memory of the
// daemon's container (the daemon and the plugins it runs, as the memory
// limit counts them) and the most plugins seen running at once, which the
// bound must hold. `make bench-e2e` runs it.
func TestCNIBurst(t *testing.T) {
	type result struct {
		bound           int
		took            time.Duration
		peak, before    float64 // MiB
		maxRun, maxWait float64
	}
	var results []result
	for _, bound := range []int{8, 0} {
		t.Run(fmt.Sprintf("max-plugins=%d", bound), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
			defer cancel()
			master := hostVethNamed(t, cniMaster, vethPrefix+"m1")
			if err := netlink.LinkSetUp(master); err != nil {
				t.Fatal(err)
			}
			const port = 26192
			cniSetup(t, ctx, port, []string{"--cni-plugins", "macvlan,host-local", "--cni-interface", cniMaster,
				"--cni-devices", strconv.Itoa(burstPods), "--cni-max-plugins", strconv.Itoa(bound)})
			err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				list, err := bed.Client().ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + cniDriver})
				n := 0
				if err == nil {
					for _, s := range list.Items {
						n += len(s.Spec.Devices)
					}
				}
				return n == burstPods, nil
			})
			if err != nil {
				t.Fatalf("the CNI driver's %d devices were never published", burstPods)
			}
			tmpl := createTemplate(t, ctx, "e2e-cni-burst", cniClaimSpec(map[string]v1alpha1.CNIConfig{"macvlan0": macvlanConfig("net1", subnet("10.10.40.0/24"))}))
			before := containerPeak(t, lastDaemon.pid(t))

			// Sample the daemon's gauges while the burst runs.
			var maxRun, maxWait float64
			sampleCtx, stopSampling := context.WithCancel(ctx)
			sampled := make(chan int)
			go func() {
				n := 0
				defer func() { sampled <- n }()
				for sampleCtx.Err() == nil {
					m := scrapeMetricsCtx(sampleCtx, port)
					if m == "" {
						continue
					}
					n++
					maxRun = max(maxRun, gaugeValue(m, "fastpath_cni_plugins_running"))
					maxWait = max(maxWait, gaugeValue(m, "fastpath_cni_plugins_waiting"))
				}
			}()

			start := time.Now()
			pods := bed.Client().CoreV1().Pods("default")
			for i := range burstPods {
				pod := claimPod(fmt.Sprintf("e2e-cni-burst-%02d", i), "sleep", &corev1.PodResourceClaim{Name: "cni", ResourceClaimTemplateName: &tmpl.Name})
				if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { deleteBurst(t) })
			running := 0
			err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 8*time.Minute, true, func(ctx context.Context) (bool, error) {
				list, err := pods.List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, nil
				}
				running = 0
				for _, p := range list.Items {
					if strings.HasPrefix(p.Name, "e2e-cni-burst-") && p.Status.Phase == corev1.PodRunning {
						running++
					}
				}
				return running == burstPods, nil
			})
			took := time.Since(start)
			stopSampling()
			samples := <-sampled
			if err != nil {
				t.Fatalf("%d of %d pods Running after %s", running, burstPods, took.Round(time.Second))
			}
			peak := containerPeak(t, lastDaemon.pid(t))
			if samples == 0 {
				t.Fatal("no sample of the daemon's metrics during the burst")
			}
			if bound > 0 && maxRun > float64(bound) {
				t.Errorf("%v plugins running at once with --cni-max-plugins %d", maxRun, bound)
			}
			results = append(results, result{bound: bound, took: took, peak: peak, before: before, maxRun: maxRun, maxWait: maxWait})
			deleteBurst(t)
			if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
				return checkpointClaims(t, lastDaemon) == 0, nil
			}); err != nil {
				t.Errorf("the burst's claims were never released")
			}
		})
	}
	fmt.Printf("\n%d pods at once, each with a CNI claim (macvlan + host-local), created to all Running:\n\n", burstPods)
	fmt.Printf("| --cni-max-plugins | all Running | container peak memory (before the burst) | most plugins running at once | most waiting |\n|---|---|---|---|---|\n")
	for _, r := range results {
		bound := strconv.Itoa(r.bound)
		if r.bound == 0 {
			bound = "0 (no bound)"
		}
		fmt.Printf("| %s | %s | %.1f MiB (%.1f MiB) | %.0f | %.0f |\n", bound, r.took.Round(100*time.Millisecond), r.peak, r.before, r.maxRun, r.maxWait)
	}
	fmt.Println()
}

// deleteBurst deletes the burst's pods and waits until they are gone,
// while the daemon that prepared their claims runs.
func deleteBurst(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pods := bed.Client().CoreV1().Pods("default")
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		left := 0
		for _, p := range list.Items {
			if strings.HasPrefix(p.Name, "e2e-cni-burst-") {
				left++
				if p.DeletionTimestamp == nil {
					_ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{})
				}
			}
		}
		return left == 0, nil
	})
	if err != nil {
		t.Errorf("the burst's pods are still there after 3 minutes")
	}
}

// containerPeak is the peak memory of the cgroup of process pid (its
// container: the daemon and its children), in MiB: memory.peak on cgroup
// v2, memory.max_usage_in_bytes on v1.
func containerPeak(t *testing.T, pid int) float64 {
	t.Helper()
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var file string
	for s := bufio.NewScanner(f); s.Scan(); {
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			if file == "" {
				file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.peak")
			}
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.max_usage_in_bytes")
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the daemon's container's peak memory: %v", err)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return n / (1 << 20)
}
