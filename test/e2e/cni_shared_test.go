//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/cnidriver"
)

// TestCNISharedDevice: with --cni-shared-device the CNI driver publishes
// one device allocated many times, of capacity "networks" = --cni-devices
// (2); two pods get their network from it, a third waits until one goes.
func TestCNISharedDevice(t *testing.T) {
	ctx := testContext(t)
	master := hostVethNamed(t, "fpshc0a", "fpshc0b")
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	cniSetup(t, ctx, 26301, []string{"--cni-plugins", "macvlan,host-local", "--cni-interface", master.Attrs().Name,
		"--cni-devices", "2", "--cni-shared-device"})
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := bed.Client().ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + cniDriver})
		if err != nil || len(list.Items) != 1 || len(list.Items[0].Spec.Devices) != 1 {
			return false, nil
		}
		d := list.Items[0].Spec.Devices[0]
		c := d.Capacity[cnidriver.CapacityNetworks]
		return d.Name == cnidriver.SharedDevice && d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations && c.Value.Value() == 2, nil
	})
	if err != nil {
		t.Fatal("the CNI driver's shared device was never published")
	}
	tmpl := createTemplate(t, ctx, "e2e-cni-shared", cniClaimSpec(map[string]v1alpha1.CNIConfig{"macvlan0": macvlanConfig("net1", subnet("10.10.9.0/24"))}))
	pod := func(i int) *corev1.Pod {
		return claimPod(fmt.Sprintf("e2e-cni-shared-%d", i), "ifaces", &corev1.PodResourceClaim{Name: "cni", ResourceClaimTemplateName: &tmpl.Name})
	}
	for i := range 3 {
		if _, err := bed.Client().CoreV1().Pods("default").Create(ctx, pod(i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		name := pod(i).Name
		t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", name) })
		ipamDir(t, ctx, name, "cni", "macvlan0")
	}
	// Two run, in some order; the third waits.
	running := map[string]bool{}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 150*time.Second, true, func(ctx context.Context) (bool, error) {
		for i := range 3 {
			if logs, err := bed.PodLogs(ctx, "default", pod(i).Name); err == nil && strings.Contains(logs, "net1 ") {
				running[pod(i).Name] = true
			}
		}
		return len(running) == 2, nil
	})
	if err != nil {
		t.Fatalf("two pods never got their networks: %v", running)
	}
	var waiting string
	for i := range 3 {
		if !running[pod(i).Name] {
			waiting = pod(i).Name
		}
	}
	if p := mustPod(t, ctx, waiting); p.Spec.NodeName != "" {
		t.Fatalf("%s was placed beyond the device's capacity", waiting)
	}
	for name := range running {
		p := mustPod(t, ctx, name)
		st := claimStatus(t, ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, func(s resourceapi.AllocatedDeviceStatus) bool {
			return s.Driver == cniDriver && s.ShareID != nil
		})
		if st.Device != cnidriver.SharedDevice {
			t.Errorf("%s: status of device %s", name, st.Device)
		}
		// One goes: the one waiting gets its network.
		if err := bed.DeletePod(ctx, "default", name); err != nil {
			t.Fatal(err)
		}
		break
	}
	if _, err := bed.WaitPodLog(ctx, "default", waiting, "net1 ", 150*time.Second); err != nil {
		t.Fatalf("%s never got its network after a pod went: %v", waiting, err)
	}
}
