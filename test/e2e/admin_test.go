//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// adminNamespace is labelled for admin access.
const adminNamespace = "e2e-admin"

// TestAdminAccess: a claim with adminAccess is refused by the API server
// outside a namespace labelled resource.kubernetes.io/admin-access; in one,
// it is allocated the netdev a running pod holds, and its pod gets a
// read-only view of it: where it is (the holder's pod), who holds it, and
// its counters, which count the frames sent to the holder's interface. The
// holder is not disturbed: its pod keeps running with its device, and
// keeps it when the viewer goes, whose view goes with it.
func TestAdminAccess(t *testing.T) {
	ctx := testContext(t)
	adminClaim := func(namespace, name string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "view",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "netdev.fastpath.dev", AdminAccess: new(true),
					Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["fastpath.dev"].ifName == "fpv96a"`}}}}}}}}}
	}
	_, err := bed.Client().ResourceV1().ResourceClaims("default").Create(ctx, adminClaim("default", "e2e-admin-refused"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "admin-access") {
		deleteClaim(t, "e2e-admin-refused")
		t.Fatalf("an adminAccess claim in a namespace without the label: %v, want the API server's refusal", err)
	}

	dataplaneSetup(t, ctx, 96, 26295)
	d := lastDaemon
	holderClaim, holder := bindingClaimPod(t, ctx, "e2e-admin-holder", `device.attributes["fastpath.dev"].ifName == "fpv96a"`)
	before := interfaceLine(waitRunningWith(t, ctx, holder, "nic"), "nic")

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: adminNamespace, Labels: map[string]string{"resource.kubernetes.io/admin-access": "true"}}}
	if _, err := bed.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().CoreV1().Namespaces().Delete(context.Background(), adminNamespace, metav1.DeleteOptions{})
	})
	view, err := bed.Client().ResourceV1().ResourceClaims(adminNamespace).Create(ctx, adminClaim(adminNamespace, "e2e-admin-view"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the adminAccess claim in %s: %v", adminNamespace, err)
	}
	viewer := testbed.WorkloadPod(adminNamespace, "e2e-admin-view", "admin")
	viewer.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "view", ResourceClaimName: &view.Name}}
	viewer.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "view"}}
	if _, err := bed.RunPod(ctx, viewer); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), adminNamespace, viewer.Name) })
	if _, err := bed.WaitPodLog(ctx, adminNamespace, viewer.Name, "view-dir FASTPATH_ADMIN_VIEW_VIEW read-only", 30*time.Second); err != nil {
		t.Errorf("the view's directory is not read-only in the viewer: %v", err)
	}
	first := lastView(t, ctx, viewer.Name, func(v dra.AdminView) bool { return v.Netdev != nil })
	if len(first.Holders) != 1 || first.Holders[0].Pod != "default/e2e-admin-holder" || first.Holders[0].Claim != "default/e2e-admin-holder" ||
		first.Netdev.Name != "nic" || first.Netdev.Namespace != "pod default/e2e-admin-holder" {
		t.Errorf("the view %+v, want the holder's pod and its interface nic", first)
	}

	// Frames sent to the holder's interface show in the view's counters.
	const frames = 50
	setLink(t, "fpv96b", true)
	sendFrames(t, "fpv96b", frames)
	lastView(t, ctx, viewer.Name, func(v dra.AdminView) bool {
		return v.Netdev != nil && v.Netdev.Link.RxPackets >= first.Netdev.Link.RxPackets+frames
	})

	// The holder is undisturbed, and stays so when the viewer goes.
	check := func(when string) {
		t.Helper()
		if err := claimsReady(ctx, holder); err != nil {
			t.Errorf("%s: %v", when, err)
		}
		p, err := bed.Client().CoreV1().Pods("default").Get(ctx, holder.Name, metav1.GetOptions{})
		if err != nil || !isReady(p) || restartCount(p) != 0 {
			t.Errorf("%s: the holder is not running as it was (%v)", when, err)
		}
		if _, err := netlink.LinkByName("fpv96a"); err == nil {
			t.Errorf("%s: the holder's device is back on the host", when)
		}
	}
	check("while viewed")
	if err := bed.DeletePod(ctx, adminNamespace, viewer.Name); err != nil {
		t.Fatal(err)
	}
	if err := bed.Client().ResourceV1().ResourceClaims(adminNamespace).Delete(ctx, view.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	views := filepath.Join(d.stateDir, "admin", string(view.UID))
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(views)
		return os.IsNotExist(err), nil
	}); err != nil {
		t.Errorf("%s is left once the viewer went", views)
	}
	check("once the viewer went")
	if logs, err := bed.PodLogs(ctx, "default", holder.Name); err != nil || interfaceLine(logs, "nic") != before {
		t.Errorf("the holder's interface changed: %q, was %q (%v)", interfaceLine(logs, "nic"), before, err)
	}
	deletePodAndClaim(t, ctx, holder, holderClaim)
	waitNoClaims(t, ctx, d)
}

// lastView polls the viewer's log until its last view satisfies ok, and
// returns it.
func lastView(t *testing.T, ctx context.Context, pod string, ok func(dra.AdminView) bool) dra.AdminView {
	t.Helper()
	var v dra.AdminView
	var line string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		logs, err := bed.PodLogs(ctx, adminNamespace, pod)
		if err != nil {
			return false, nil
		}
		const prefix = "view FASTPATH_ADMIN_VIEW_VIEW "
		for _, l := range strings.Split(logs, "\n") {
			if strings.HasPrefix(l, prefix) {
				line = strings.TrimPrefix(l, prefix)
			}
		}
		v = dra.AdminView{}
		return json.Unmarshal([]byte(line), &v) == nil && ok(v), nil
	})
	if err != nil {
		t.Fatalf("the viewer's last view is not as awaited: %s", line)
	}
	return v
}

// sendFrames sends n broadcast Ethernet frames (a local experimental
// EtherType) out of the host link name.
func sendFrames(t *testing.T, name string, n int) {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(fd) }()
	frame := make([]byte, 60)
	copy(frame, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(frame[6:], l.Attrs().HardwareAddr)
	frame[12], frame[13] = 0x88, 0xb5
	addr := &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	for range n {
		if err := unix.Sendto(fd, frame, 0, addr); err != nil {
			t.Fatalf("send a frame out of %s: %v", name, err)
		}
	}
}
