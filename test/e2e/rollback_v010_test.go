//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/cnidriver"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// TestRollbackToV010: this tree's chart and image serve pods alone on the
// node (the checkpoint is of version 3, its journal); then the release
// goes back to v0.1.0's chart and image and forward again, each hand-over
// with nothing done by hand (no checkpointJournal false, no checkpoint
// migrate), pods starting and going during it, and the daemon it replaces
// killed (SIGKILL) once the other's process runs. Whenever a daemon of
// v0.1.0 runs, the checkpoint is of version 2 (which it reads; a version
// 3 would be refused at its start, or its journal unseen while it runs);
// v0.1.0's daemon starts without a restart; every pod gets its devices,
// and the claims of the pods that went are unprepared (their devices
// back, the checkpoint holding the running pods' claims alone). Forward
// again and alone, the daemon writes its journal again. At the end
// nothing of any claim is left on the node.
func TestRollbackToV010(t *testing.T) {
	// Two hand-overs after the install: more than testContext's.
	ctx, cancel := context.WithTimeout(klog.NewContext(t.Context(), klog.Background()), 8*time.Minute)
	defer cancel()
	chart := v010Release(t, ctx)
	img, _ := fastpathdImage(t)
	n := faultSetup(t, ctx, faultOptions{port: 26246, links: 4, up: true, cni: true})
	d := n.d
	netdev := netdevTemplate(t, ctx, "e2e-rb-netdev", "net1", "10.86.0.2/24")
	cni := createTemplate(t, ctx, "e2e-rb-cni", cniClaimSpec(map[string]v1alpha1.CNIConfig{"net": macvlanConfig("net2", subnet("10.86.2.0/24"))}))
	var ipam []string
	pods := func(name string) []podWant {
		return []podWant{
			{pod: templatePod(name+"-nic", "ifaces", netdev), ifName: "net1", addr: "10.86.0.2/24", mtu: 1400},
			{pod: templatePod(name+"-cni", "ifaces", cni), ifName: "net2", addr: "10.86.2.", mtu: 1500},
		}
	}
	create := func(ps []podWant) {
		for _, p := range ps {
			createPod(t, ctx, p.pod)
		}
	}
	check := func(ps []podWant) {
		for _, p := range ps {
			checkPodDevice(t, ctx, p)
		}
		ipam = append(ipam, ipamDir(t, ctx, ps[1].pod.Name, cni.Name, "net"))
		if t.Failed() {
			t.FailNow()
		}
	}
	deletePods := func(ps []podWant) {
		for _, p := range ps {
			if err := bed.DeletePod(ctx, p.pod.Namespace, p.pod.Name); err != nil {
				t.Error(err)
			}
		}
	}
	gone := func(ps []podWant) {
		for _, p := range ps {
			if err := podGone(ctx, p.pod, 2*time.Minute); err != nil {
				t.Fatalf("pod %s is stuck: %v", p.pod.Name, err)
			}
		}
	}
	// handOver installs chart (this tree's: "") with image tag, and
	// meanwhile starts the pods of in, deletes those of out, and kills the
	// daemon it replaces once the new one's process runs; it returns
	// once the new daemon is alone on the node and Ready.
	handOver := func(chart, tag, image string, in, out []podWant) {
		t.Helper()
		d.keepLog(t)
		old := d.pod
		d.chart = chart
		d.values["image"] = map[string]any{"tag": tag}
		var wg sync.WaitGroup
		wg.Go(func() {
			create(in)
			deletePods(out)
		})
		wg.Go(func() { killReplaced(t, ctx, old) })
		if err := d.install(ctx); err != nil {
			t.Error(err)
		}
		wg.Wait()
		rollout(t, ctx, d, old, image)
	}

	// This tree alone: the journal while changes come, version 2 at rest.
	versions := watchVersions(ctx, d)
	first := pods("e2e-rb-1")
	create(first)
	check(first)
	assertJournalThenRest(t, ctx, d, versions)

	// Back to v0.1.0, with nothing done by hand.
	older := watchOlderReads(t, ctx, d)
	second := pods("e2e-rb-2")
	handOver(chart, "v0.1.0", v010Image, second, first)
	gone(first)
	check(second)
	n.assertInPods(t, ctx, 1)
	assertCheckpointClaims(t, ctx, d, 2)
	if got := d.restarts(t, ctx); got != 0 {
		t.Errorf("v0.1.0's daemon restarted %d times after the rollback", got)
	}
	third := pods("e2e-rb-3")
	create(third)
	check(third)
	check(second)

	// Forward again.
	fourth := pods("e2e-rb-4")
	handOver("", img[len(testbed.FastpathdRepository)+1:], img, fourth, second)
	if _, err := bed.WaitPodLog(ctx, d.pod.Namespace, d.pod.Name, "Alone on the node", 30*time.Second); err != nil {
		t.Error(err)
	}
	gone(second)
	older()
	check(third)
	check(fourth)
	// Alone again, it writes its journal, and version 2 at rest.
	versions = watchVersions(ctx, d)
	deletePods(third)
	gone(third)
	n.assertInPods(t, ctx, 1)
	assertCheckpointClaims(t, ctx, d, 2)
	assertJournalThenRest(t, ctx, d, versions)

	deletePods(fourth)
	gone(fourth)
	if lost := n.assertRestoredOrLost(t, ctx); lost > 0 {
		t.Errorf("%d stand-ins died instead of coming back to the host", lost)
	}
	n.assertClean(t, ctx, ipam...)
	// v0.1.0, which knows nothing of device metadata, left that of the
	// claims it unprepared: this build removes it.
	assertNoMetadata(t, ctx, "e2e-rb-")
}

// assertNoMetadata waits until no device metadata of a claim of the
// default namespace whose name starts with prefix is left: neither its
// CDI spec nor its files in a driver's plugin directory.
func assertNoMetadata(t *testing.T, ctx context.Context, prefix string) {
	t.Helper()
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		left = nil
		specs, _ := filepath.Glob(filepath.Join(bed.CDIDir(), "*_metadata_*.json"))
		for _, spec := range specs {
			data, _ := os.ReadFile(spec)
			if bytes.Contains(data, []byte("/dra-device-metadata/default_"+prefix)) {
				left = append(left, spec)
			}
		}
		for _, driver := range []string{devices.DriverName, cnidriver.DriverName} {
			dirs, _ := filepath.Glob(filepath.Join(bed.PluginDir(driver), "dra-device-metadata", "default_"+prefix+"*"))
			left = append(left, dirs...)
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("the device metadata of claims no longer prepared is left:\n  %s", strings.Join(left, "\n  "))
	}
}

// killReplaced kills, with SIGKILL, the fastpathd process of the daemon
// pod old once another daemon pod's process runs beside it: a rollback's
// new pod killed, the kubelet starting it again while the other serves.
func killReplaced(t *testing.T, ctx context.Context, old *corev1.Pod) {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p := newDaemonPod(ctx, old.UID)
		return p != nil && daemonProcess(p) != 0, nil
	})
	if err != nil {
		t.Errorf("no daemon started beside %s: %v", old.Name, err)
		return
	}
	pid, err := (&daemon{pod: old}).killProcess()
	if err != nil {
		t.Errorf("kill the daemon being replaced: %v", err)
		return
	}
	t.Logf("killed the daemon being replaced (pid %d of pod %s) with SIGKILL", pid, old.Name)
}

// watchOlderReads checks, until the returned func is called, that the
// checkpoint is never of version 3 while a fastpathd process of v0.1.0 runs
// on the node: at its start v0.1.0 would refuse it, and running it reads
// the checkpoint alone, not the journal. It fails the test at its end with
// the times it was.
func watchOlderReads(t *testing.T, ctx context.Context, d *daemon) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var seen []string
	var looks, olderRan int
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			looks++
			// Version 3 read while one process of v0.1.0 ran, before and
			// after the read.
			pid := olderProcess(ctx)
			if pid == 0 {
				continue
			}
			olderRan++
			_, version, err := claims.Read(d.checkpoint())
			if err == nil && version == claims.Version && olderProcess(ctx) == pid {
				seen = append(seen, fmt.Sprintf("%s: version %d while v0.1.0 runs (pid %d)", time.Now().Format(time.TimeOnly), version, pid))
			}
		}
	}()
	return func() {
		cancel()
		<-done
		t.Logf("the checkpoint looked at %d times, %d of them with a v0.1.0 daemon running", looks, olderRan)
		if olderRan == 0 {
			t.Error("no v0.1.0 daemon was seen running")
		}
		for _, s := range seen {
			t.Errorf("the checkpoint was of a version v0.1.0 does not read: %s", s)
		}
	}
}

// olderProcess is the PID of a fastpathd process of a v0.1.0 daemon pod,
// or 0.
func olderProcess(ctx context.Context) int {
	list, err := bed.Client().CoreV1().Pods(testbed.ChartNamespace).List(ctx, metav1.ListOptions{LabelSelector: testbed.DaemonSelector})
	if err != nil {
		return 0
	}
	for i := range list.Items {
		if p := &list.Items[i]; p.Spec.Containers[0].Image == v010Image {
			if pid := daemonProcess(p); pid != 0 {
				return pid
			}
		}
	}
	return 0
}
