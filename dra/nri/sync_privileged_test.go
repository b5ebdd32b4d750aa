//go:build privileged

package nri

import (
	"os"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSynchronizeSaysStatusAgain: a daemon killed after attaching a pod's
// device and before its status write landed leaves the claim without a
// status; at the next Synchronize, with the pod running and its device in
// place, the claim is Ready again.
func TestSynchronizeSaysStatusAgain(t *testing.T) {
	podNS := newNetNS(t)
	a := netdevClaim("a", "pod-5", newVeth(t), "net1", "10.66.5.2/24")
	bed, ctx := newTestBed(t, a)
	if err := bed.hooks.RunPodSandbox(ctx, sandbox("pod-5", podNS)); err != nil {
		t.Fatal(err)
	}
	bed.condition(t, ctx, a, metav1.ConditionTrue)
	rc, err := bed.client.ResourceV1().ResourceClaims(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc.Status.Devices = nil
	if _, err := bed.client.ResourceV1().ResourceClaims(a.Namespace).UpdateStatus(ctx, rc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bed.hooks.Synchronize(ctx, []*api.PodSandbox{sandbox("pod-5", podNS)}, nil); err != nil {
		t.Fatal(err)
	}
	st := bed.condition(t, ctx, a, metav1.ConditionTrue)
	if st.NetworkData == nil || st.NetworkData.InterfaceName != "net1" {
		t.Errorf("networkData = %+v", st.NetworkData)
	}
	if podLink(t, podNS, "net1") == nil {
		t.Error("the pod lost net1")
	}
	if err := bed.hooks.StopPodSandbox(ctx, sandbox("pod-5", podNS)); err != nil {
		t.Fatal(err)
	}
	bed.assertRestored(t, a)
}

// TestCreateContainerWithoutDevice: a pod whose RunPodSandbox was missed
// and whose device cannot be attached (it vanished from the host) gets no
// container: CreateContainer fails naming the pod, claim and device, and
// the pod's namespace holds nothing of it.
func TestCreateContainerWithoutDevice(t *testing.T) {
	podNS := newNetNS(t)
	host := newVeth(t)
	a := netdevClaim("a", "pod-6", host, "net1", "10.66.6.2/24")
	bed, ctx := newTestBed(t, a)
	if err := netlink.LinkDel(host); err != nil {
		t.Fatal(err)
	}
	_, _, err := bed.hooks.CreateContainer(ctx, sandbox("pod-6", podNS), &api.Container{Name: "app"})
	if err == nil {
		t.Fatal("a container was let start without its pod's device")
	}
	for _, want := range []string{"pod-6", "cannot start without its devices", "claim default/a", "netdev-" + host.Attrs().Name} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if podLink(t, podNS, "net1") != nil {
		t.Error("net1 is in the pod")
	}
}

// TestRunPodSandboxReplacesSandbox: the runtime died while making a pod's
// sandbox, after the device went into its namespace, and the kubelet made
// a new sandbox without stopping the first (whose namespace is left
// behind): RunPodSandbox of the new one takes the device back from the old
// namespace and attaches it in the new one.
func TestRunPodSandboxReplacesSandbox(t *testing.T) {
	oldNS, newNS := newNetNS(t), newNetNS(t)
	a := netdevClaim("a", "pod-7", newVeth(t), "net1", "10.66.7.2/24")
	bed, ctx := newTestBed(t, a)
	if err := bed.hooks.RunPodSandbox(ctx, sandbox("pod-7", oldNS)); err != nil {
		t.Fatal(err)
	}
	second := sandbox("pod-7", newNS)
	second.Id = "sandbox-pod-7-again"
	if err := bed.hooks.RunPodSandbox(ctx, second); err != nil {
		t.Fatalf("RunPodSandbox of the new sandbox: %v", err)
	}
	if podLink(t, oldNS, "net1") != nil {
		t.Error("net1 is still in the old sandbox")
	}
	if podLink(t, newNS, "net1") == nil {
		t.Fatal("net1 is not in the new sandbox")
	}
	if rec, _ := bed.store.Get(a.Key()); rec.Devices[0].Attached == nil || rec.Devices[0].Attached.SandboxID != second.Id {
		t.Errorf("recorded attachment %+v, want the new sandbox", rec.Devices[0].Attached)
	}
	if err := bed.hooks.StopPodSandbox(ctx, second); err != nil {
		t.Fatal(err)
	}
	bed.assertRestored(t, a)
}

// TestSynchronizeTheSandboxThatRuns: a RunPodSandbox failed (fastpathd
// killed in it) and the kubelet's next try ran while no fastpathd was
// connected, so the runtime lists the pod twice at the next Synchronize:
// the stopped sandbox, its network namespace gone, and the one that runs.
// Whatever the order, the device goes to the one that runs.
func TestSynchronizeTheSandboxThatRuns(t *testing.T) {
	for _, stoppedFirst := range []bool{true, false} {
		podNS := newNetNS(t)
		a := netdevClaim("a", "pod-c", newVeth(t), "net1", "10.66.12.2/24")
		bed, ctx := newTestBed(t, a)
		stopped := sandbox("pod-c", podNS+"-gone")
		stopped.Id = "sandbox-pod-c-stopped"
		runs := sandbox("pod-c", podNS)
		runs.Pid = uint32(os.Getpid())
		listed := []*api.PodSandbox{stopped, runs}
		if !stoppedFirst {
			listed = []*api.PodSandbox{runs, stopped}
		}
		if _, err := bed.hooks.Synchronize(ctx, listed, nil); err != nil {
			t.Fatal(err)
		}
		bed.condition(t, ctx, a, metav1.ConditionTrue)
		if podLink(t, podNS, "net1") == nil {
			t.Errorf("stopped sandbox listed first %v: net1 is not in the sandbox that runs", stoppedFirst)
		}
		if err := bed.hooks.StopPodSandbox(ctx, runs); err != nil {
			t.Fatal(err)
		}
		bed.assertRestored(t, a)
	}
}
