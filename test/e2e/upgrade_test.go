//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vishvananda/netlink"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// TestRollingUpgrade: the chart's release is upgraded to a new image tag
// while pods with claims are created and deleted. The new daemon's pod starts
// beside the old one (maxSurge 1), the old one goes once the new one is
// Ready; every pod created before, during and after gets its device, and
// the new daemon releases, when their pods go, the claims the old one
// prepared.
func TestRollingUpgrade(t *testing.T) {
	ctx := testContext(t)
	const pods = 5
	nums := make([]int, pods)
	for i := range nums {
		nums[i] = 50 + i
	}
	origs := dataplaneSetupArgs(t, ctx, 26233, nil, nums...)
	d := lastDaemon
	spec := netdevClaim("", &v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "net1"}}).Spec
	spec.Devices.Requests[0].Exactly.Selectors = nil
	tmpl := createTemplate(t, ctx, "e2e-upgrade", spec)
	podNamed := func(i int) *corev1.Pod {
		p := claimPod(fmt.Sprintf("e2e-upgrade-%d", i), "ifaces", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &tmpl.Name})
		// Required throughout: both daemons are the runtime's "fastpath".
		p.Annotations = map[string]string{requiredPlugins: `["fastpath"]`}
		return p
	}
	t.Cleanup(func() {
		for i := range pods {
			_ = bed.DeletePod(context.Background(), "default", podNamed(i).Name)
		}
	})
	if _, err := bed.RunPod(ctx, podNamed(0)); err != nil {
		t.Fatal(err)
	}

	img, _ := fastpathdImage(t)
	next := strings.TrimPrefix(img, testbed.FastpathdRepository+":") + "-next"
	if err := bed.TagImage(ctx, img, testbed.FastpathdRepository+":"+next); err != nil {
		t.Fatal(err)
	}
	// Pods keep coming, and the first one goes, while the release is
	// upgraded.
	started := make(chan error, 1)
	go func() {
		for i := 1; i < pods; i++ {
			if _, err := bed.RunPod(ctx, podNamed(i)); err != nil {
				started <- err
				return
			}
			if i == 2 {
				if err := bed.DeletePod(ctx, "default", podNamed(0).Name); err != nil {
					started <- err
					return
				}
			}
		}
		started <- nil
	}()
	old := d.pod
	d.keepLog(t)
	d.values["image"] = map[string]any{"tag": next}
	if err := bed.InstallChart(ctx, d.values); err != nil {
		t.Fatal(err)
	}
	// Both daemons run at once for a while: the new one is Ready before the
	// old one is asked to stop.
	var oldDeleted *metav1.Time
	var newPod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := bed.Client().CoreV1().Pods(testbed.ChartNamespace).List(ctx, metav1.ListOptions{LabelSelector: testbed.DaemonSelector})
		if err != nil {
			return false, nil
		}
		oldGone := true
		for i, p := range list.Items {
			switch {
			case p.UID == old.UID:
				oldGone = false
				if p.DeletionTimestamp != nil {
					oldDeleted = p.DeletionTimestamp
				}
			case readyPod(&p):
				newPod = &list.Items[i]
			}
		}
		return newPod != nil && (oldGone || oldDeleted != nil), nil
	})
	if err != nil {
		t.Fatalf("the upgraded daemon never replaced pod %s", old.Name)
	}
	if ready := readySince(newPod); oldDeleted != nil && ready.After(oldDeleted.Time) {
		t.Errorf("the new daemon was Ready at %s, after the old one was deleted at %s: the upgrade left a gap", ready, oldDeleted)
	}
	d.waitReady(t, ctx, old.UID)
	if d.pod.Spec.Containers[0].Image != testbed.FastpathdRepository+":"+next {
		t.Errorf("the new daemon runs %s, want tag %s", d.pod.Spec.Containers[0].Image, next)
	}
	if err := <-started; err != nil {
		t.Fatalf("a pod created during the upgrade did not run: %v", err)
	}
	// The pod deleted during the upgrade gave its device back: one veth
	// is in the host, the others are in the four pods.
	var inHost []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		inHost = inHost[:0]
		for _, o := range origs {
			if _, err := netlink.LinkByName(o.Name); err == nil {
				inHost = append(inHost, o.Name)
			}
		}
		return len(inHost) == 1, nil
	})
	if err != nil {
		t.Errorf("with %d pods running, the host has veths %v, want the one of the deleted pod", pods-1, inHost)
	}
	for i := 1; i < pods; i++ {
		logs, err := bed.WaitPodLog(ctx, "default", podNamed(i).Name, "net1 ", 30*time.Second)
		if err != nil {
			t.Errorf("pod %d: %v", i, err)
			continue
		}
		if strings.Count(logs, "net1 ") != 1 {
			t.Errorf("pod %d sees:\n%s", i, logs)
		}
	}

	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := bed.Client().CoreV1().Pods(testbed.ChartNamespace).Get(ctx, old.Name, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Errorf("the old daemon's pod %s is still there", old.Name)
	}
	for i := range pods {
		if err := bed.DeletePod(ctx, "default", podNamed(i).Name); err != nil {
			t.Fatal(err)
		}
	}
	for _, orig := range origs {
		assertReturned(t, ctx, orig)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return checkpointClaims(t, d) == 0, nil
	})
	if err != nil {
		t.Errorf("the checkpoint holds %d claims after every pod went", checkpointClaims(t, d))
	}
}

// readySince is when the pod became Ready.
func readySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// readyPod reports whether the pod is Ready.
func readyPod(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
