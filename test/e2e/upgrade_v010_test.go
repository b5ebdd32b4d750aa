//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// v010Commit is the commit release v0.1.0 is built from (CHANGELOG.md).
const v010Commit = "ad69fce09cca8e0d7c58484156c75e5c66aae3f0"

// v010Image is the name the test gives v0.1.0's image.
const v010Image = testbed.FastpathdRepository + ":v0.1.0"

// TestUpgradeFromV010: the chart of release v0.1.0 with its image, both
// built from its commit, runs pods with netdev and CNI claims; the release
// is upgraded to this tree's chart and image: the pods keep their devices,
// new pods start, and the new daemon unprepares the old one's claims when
// their pods go. Then helm rollback to v0.1.0, with nothing done before
// (TestRollbackToV010 goes back and forth under kills), which starts
// (does not refuse the checkpoint and crash-loop), keeps the pods' devices, prepares and
// unprepares claims; once every pod is gone, nothing of any claim is left.
func TestUpgradeFromV010(t *testing.T) {
	ctx := testContext(t)
	chart := v010Release(t, ctx)
	img, _ := fastpathdImage(t)
	n := faultSetup(t, ctx, faultOptions{port: 26245, links: 3, up: true, cni: true, before: func(d *daemon) {
		d.chart = chart
		d.values["image"] = map[string]any{"tag": "v0.1.0"}
	}})
	d := n.d
	if got := d.pod.Spec.Containers[0].Image; got != v010Image {
		t.Fatalf("the daemon runs %s, want %s", got, v010Image)
	}
	v010Revision := releaseRevision(t, ctx)
	netdev := netdevTemplate(t, ctx, "e2e-v010-netdev", "net1", "10.84.0.2/24")
	cni := createTemplate(t, ctx, "e2e-v010-cni", cniClaimSpec(map[string]v1alpha1.CNIConfig{"net": macvlanConfig("net2", subnet("10.84.2.0/24"))}))
	var ipam []string
	run := func(name string) []podWant {
		pods := []podWant{
			{pod: templatePod(name+"-nic", "ifaces", netdev), ifName: "net1", addr: "10.84.0.2/24", mtu: 1400},
			{pod: templatePod(name+"-cni", "ifaces", cni), ifName: "net2", addr: "10.84.2.", mtu: 1500},
		}
		for _, p := range pods {
			createPod(t, ctx, p.pod)
		}
		for _, p := range pods {
			checkPodDevice(t, ctx, p)
		}
		ipam = append(ipam, ipamDir(t, ctx, pods[1].pod.Name, cni.Name, "net"))
		if t.Failed() {
			t.FailNow()
		}
		return pods
	}
	remove := func(pods []podWant) {
		for _, p := range pods {
			if err := bed.DeletePod(ctx, p.pod.Namespace, p.pod.Name); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range pods {
			if err := podGone(ctx, p.pod, 2*time.Minute); err != nil {
				t.Fatalf("pod %s is stuck: %v", p.pod.Name, err)
			}
		}
	}
	check := func(pods ...[]podWant) {
		for _, ps := range pods {
			for _, p := range ps {
				checkPodDevice(t, ctx, p)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	first := run("e2e-v010-1")

	// Up to this tree's chart and image.
	d.keepLog(t)
	old := d.pod
	d.chart = ""
	d.values["image"] = map[string]any{"tag": img[len(testbed.FastpathdRepository)+1:]}
	if err := d.install(ctx); err != nil {
		t.Fatal(err)
	}
	rollout(t, ctx, d, old, img)
	check(first)
	// Alone on the node (the old daemon's socket gone), the new daemon
	// writes its journal, version 3, while changes come, and version 2 at
	// rest.
	if _, err := bed.WaitPodLog(ctx, d.pod.Namespace, d.pod.Name, "Alone on the node", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	versions := watchVersions(ctx, d)
	second := run("e2e-v010-2")
	// It unprepares the old one's claims.
	remove(first)
	n.assertInPods(t, ctx, 1)
	assertCheckpointClaims(t, ctx, d, 2)
	assertJournalThenRest(t, ctx, d, versions)

	// Back to v0.1.0, with nothing done before.
	d.keepLog(t)
	old = d.pod
	if _, err := bed.Helm(ctx, "rollback", testbed.ChartRelease, fmt.Sprint(v010Revision), "--namespace", testbed.ChartNamespace); err != nil {
		t.Fatal(err)
	}
	d.chart = chart
	d.values["image"] = map[string]any{"tag": "v0.1.0"}
	rollout(t, ctx, d, old, v010Image)
	waitCheckpointVersion(t, ctx, d, 2)
	if _, err := os.Stat(d.checkpoint() + ".journal"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after the rollback, the journal is still there (%v)", err)
	}
	check(second)
	third := run("e2e-v010-3")
	if got := d.restarts(t, ctx); got != 0 {
		t.Errorf("v0.1.0's daemon restarted %d times after the rollback", got)
	}
	remove(second)
	remove(third)
	if lost := n.assertRestoredOrLost(t, ctx); lost > 0 {
		t.Errorf("%d stand-ins died instead of coming back to the host", lost)
	}
	n.assertClean(t, ctx, ipam...)
	if got := d.restarts(t, ctx); got != 0 {
		t.Errorf("v0.1.0's daemon restarted %d times after the rollback", got)
	}
}

// rollout waits until the release's daemon is a pod other than old,
// running image, alone on the node and Ready.
func rollout(t *testing.T, ctx context.Context, d *daemon, old *corev1.Pod, image string) {
	t.Helper()
	p, err := waitRolledOut(ctx, old.UID, image)
	if err != nil {
		d.keepLog(t)
		t.Fatal(err)
	}
	d.pod = p
}

// v010Release imports v0.1.0's image, built from its commit (once: the
// archive is cached in the bed's cache directory under the commit's name),
// and returns the directory of its chart.
func v010Release(t *testing.T, ctx context.Context) string {
	t.Helper()
	repo := bed.Config().RepoDir
	if out, err := exec.CommandContext(ctx, "git", "-C", repo, "cat-file", "-e", v010Commit+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("release v0.1.0's commit %s is not in %s, which the test builds it from (a shallow clone? git fetch --unshallow): %v %s",
			v010Commit, repo, err, out)
	}
	archive := filepath.Join(bed.Config().CacheDir, "images", "fastpathd-"+v010Commit+".tar")
	if _, err := os.Stat(archive); err != nil {
		t.Logf("building v0.1.0's image from %s into %s", v010Commit[:7], archive)
		src := filepath.Join(t.TempDir(), "v0.1.0")
		git := func(args ...string) {
			t.Helper()
			if out, err := exec.CommandContext(ctx, "git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
		git("worktree", "add", "--detach", src, v010Commit)
		defer git("worktree", "remove", "--force", src)
		if err := os.MkdirAll(filepath.Dir(archive), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "-C", src, "image", "IMAGE="+v010Image, "IMAGE_ARCHIVE="+archive+".tmp")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make image of v0.1.0: %v\n%s", err, out)
		}
		if err := os.Rename(archive+".tmp", archive); err != nil {
			t.Fatal(err)
		}
	}
	if err := bed.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" deploy/helm/fastpath | tar -x -C "$3"`, "sh", repo, v010Commit, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("v0.1.0's chart: %v\n%s", err, out)
	}
	return filepath.Join(dir, "deploy", "helm", "fastpath")
}

// releaseRevision is the revision of the chart's release now.
func releaseRevision(t *testing.T, ctx context.Context) int {
	t.Helper()
	out, err := bed.Helm(ctx, "status", testbed.ChartRelease, "--namespace", testbed.ChartNamespace, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Version == 0 {
		t.Fatalf("helm status: %v\n%s", err, out)
	}
	return st.Version
}

// watchVersions notes, until the returned func is called, each version
// the daemon's checkpoint is seen in, looking every 50 ms; the func
// returns them.
func watchVersions(ctx context.Context, d *daemon) (stop func() map[int]bool) {
	ctx, cancel := context.WithCancel(ctx)
	seen := map[int]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
			if _, v, err := claims.Read(d.checkpoint()); err == nil {
				seen[v] = true
			}
			return false, nil
		})
	}()
	return func() map[int]bool {
		cancel()
		<-done
		return seen
	}
}

// assertJournalThenRest checks that the daemon, alone, wrote its changes
// in version 3 (seen by a watchVersions whose stop is given) and that, at
// rest, the checkpoint is of version 2 (--checkpoint-rest), which v0.1.0
// reads.
func assertJournalThenRest(t *testing.T, ctx context.Context, d *daemon, stop func() map[int]bool) {
	t.Helper()
	waitCheckpointVersion(t, ctx, d, 2)
	if seen := stop(); !seen[claims.Version] {
		t.Errorf("alone, the daemon wrote its changes in versions %v, want %d (its journal) among them", slices.Sorted(maps.Keys(seen)), claims.Version)
	}
	if _, err := os.Stat(d.checkpoint() + ".journal"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("at rest, the journal is still there (%v)", err)
	}
}

// waitCheckpointVersion waits until the daemon's checkpoint is of version.
func waitCheckpointVersion(t *testing.T, ctx context.Context, d *daemon, version int) {
	t.Helper()
	var got int
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		_, got, lastErr = claims.Read(d.checkpoint())
		return lastErr == nil && got == version, nil
	})
	if err != nil {
		t.Errorf("the checkpoint is of version %d (%v), want %d", got, lastErr, version)
	}
}
