//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// TestSeveralDevices: a request of count 2 gets the pod two netdevs, net0
// and net1, each with its share of the request's addresses, and both in
// the claim's status; a request of allocationMode All on a node of three
// matching devices gets all three, named after the request with their
// index, each in the containers' environment by its slot (NIC_0, ...).
// Deleting the pods returns every device.
func TestSeveralDevices(t *testing.T) {
	ctx := testContext(t)
	origs := dataplaneSetup(t, ctx, 90, 26290, 91, 92)

	pair := netdevClaim("e2e-pair", &v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{
		Name: "net", MTU: 1400, Addresses: []string{"10.91.0.2/24", "fd00:91::2/64", "10.91.1.2/24", "fd00:91:1::2/64"},
	}})
	pair.Spec.Devices.Requests[0].Exactly.Selectors = nil
	pair.Spec.Devices.Requests[0].Exactly.Count = 2
	podName := runSeveral(t, ctx, pair, "ifaces")
	logs, err := bed.WaitPodLog(ctx, "default", podName, "net1 ", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"net0": "10.91.0.2/24,fd00:91::2/64", "net1": "10.91.1.2/24,fd00:91:1::2/64"} {
		if line := interfaceLine(logs, name); !strings.HasSuffix(line, " "+want) {
			t.Errorf("the pod's %s: %q, want it with %s; it sees:\n%s", name, line, want, logs)
		}
	}
	statuses := waitDeviceStatuses(t, ctx, pair.Name, 2)
	var got []string
	for _, st := range statuses {
		if nd := st.NetworkData; nd != nil {
			got = append(got, nd.InterfaceName+" "+strings.Join(nd.IPs, ","))
		}
	}
	slices.Sort(got)
	if want := []string{"net0 10.91.0.2/24,fd00:91::2/64", "net1 10.91.1.2/24,fd00:91:1::2/64"}; !slices.Equal(got, want) {
		t.Errorf("the claim's devices say %q, want %q", got, want)
	}
	if err := bed.DeletePod(ctx, "default", podName); err != nil {
		t.Fatal(err)
	}
	for _, o := range origs {
		assertReturned(t, ctx, o)
	}

	all := netdevClaim("e2e-all", nil)
	all.Spec.Devices.Requests[0].Exactly.Selectors = nil
	all.Spec.Devices.Requests[0].Exactly.AllocationMode = resourceapi.DeviceAllocationModeAll
	podName = runSeveral(t, ctx, all, "env")
	logs, err = bed.WaitPodLog(ctx, "default", podName, "FASTPATH_INTERFACE_NIC_2=", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var devs []string
	for i := range 3 {
		if !strings.Contains(logs, fmt.Sprintf("FASTPATH_INTERFACE_NIC_%d=nic%d\n", i, i)) {
			t.Errorf("the containers' environment lacks FASTPATH_INTERFACE_NIC_%d=nic%d; it is:\n%s", i, i, logs)
		}
		for line := range strings.Lines(logs) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), fmt.Sprintf("FASTPATH_DEVICE_NIC_%d=", i)); ok {
				devs = append(devs, v)
			}
		}
	}
	slices.Sort(devs)
	var want []string
	for _, o := range origs {
		want = append(want, "netdev-"+o.Name)
	}
	if !slices.Equal(devs, want) {
		t.Errorf("the pod got devices %v, want all three, %v", devs, want)
	}
	statuses = waitDeviceStatuses(t, ctx, all.Name, 3)
	got = nil
	for _, st := range statuses {
		if nd := st.NetworkData; nd != nil {
			got = append(got, nd.InterfaceName)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"nic0", "nic1", "nic2"}) {
		t.Errorf("the claim's devices say interfaces %v, want nic0, nic1 and nic2", got)
	}
	if err := bed.DeletePod(ctx, "default", podName); err != nil {
		t.Fatal(err)
	}
	for _, o := range origs {
		assertReturned(t, ctx, o)
	}
}

// runSeveral creates the claim and a pod of it running cmd, and returns
// the pod's name once it runs.
func runSeveral(t *testing.T, ctx context.Context, claim *resourceapi.ResourceClaim, cmd string) string {
	t.Helper()
	if _, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceClaims("default").Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
	})
	pod := claimPod(claim.Name, cmd, &corev1.PodResourceClaim{Name: "fast", ResourceClaimName: &claim.Name})
	if _, err := bed.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	return pod.Name
}

// waitDeviceStatuses waits until the claim's status has n devices, each
// Ready, and returns them.
func waitDeviceStatuses(t *testing.T, ctx context.Context, claim string, n int) []resourceapi.AllocatedDeviceStatus {
	t.Helper()
	var last []resourceapi.AllocatedDeviceStatus
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = c.Status.Devices
		if len(last) != n {
			return false, nil
		}
		for _, st := range last {
			if !slices.ContainsFunc(st.Conditions, func(c metav1.Condition) bool { return c.Type == "Ready" && c.Status == metav1.ConditionTrue }) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("claim %s: its status never had %d Ready devices; it has %+v", claim, n, last)
	}
	return last
}
