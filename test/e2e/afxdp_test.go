//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

var framesLine = regexp.MustCompile(`xsk xsk0 queue 0: (\d+) frames`)

// TestDataplaneAFXDP: a pod claiming from afxdp.fastpath.dev gets the
// device with xsk-redirect attached in its namespace and the XSKMAP mounted;
// the example consumer registers an AF_XDP socket and receives the frames
// sent to the interface from the host side; the claim reports the program.
// Once the pod is gone the program is detached and its pins are gone.
func TestDataplaneAFXDP(t *testing.T) {
	ctx := testContext(t)
	orig := dataplaneSetup(t, ctx, 5, 26186)[0]
	peer := strings.TrimSuffix(orig.Name, "a") + "b"
	if err := netlink.LinkSetUp(mustLink(t, peer)); err != nil {
		t.Fatal(err)
	}
	const mac = "02:00:00:fa:58:01"
	tmpl := claimTemplate(t, ctx, "e2e-xsk", "xsk", "afxdp.fastpath.dev", `device.attributes["fastpath.dev"].kind == "netdev"`,
		&v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{Name: "xsk0", MAC: mac},
			XDP: &v1alpha1.XDPConfig{AttachMode: v1alpha1.AttachNative, Queues: 1, ZeroCopy: v1alpha1.ZeroCopyPrefer}})
	pod := claimPod("e2e-xsk", "xsk", &corev1.PodResourceClaim{Name: "fast", ResourceClaimTemplateName: &tmpl.Name})
	running, err := bed.RunPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	if _, err := bed.WaitPodLog(ctx, "default", pod.Name, "xsk xsk0 queue 0: registered", 30*time.Second); err != nil {
		t.Fatal(err)
	}

	const n = 20
	dst, _ := net.ParseMAC(mac)
	if err := netnstest.SendFrames(peer, dst, n); err != nil {
		t.Fatal(err)
	}
	var got int
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		logs, err := bed.PodLogs(ctx, "default", pod.Name)
		if err != nil {
			return false, nil
		}
		for _, m := range framesLine.FindAllStringSubmatch(logs, -1) {
			got, _ = strconv.Atoi(m[1])
		}
		return got >= n, nil
	})
	if err != nil {
		t.Fatalf("the consumer received %d frames, want %d", got, n)
	}

	st := podClaimStatus(t, ctx, running)
	var data struct {
		XDP struct {
			Program, AttachMode, MapPath, PinPath string
			Queues                                int
		} `json:"xdp"`
	}
	if err := json.Unmarshal(st.Data.Raw, &data); err != nil || data.XDP.Program != bpf.XSKRedirect || data.XDP.AttachMode != "native" ||
		data.XDP.Queues != 1 || data.XDP.MapPath != "/run/fastpath/xdp/xsk/xsks" {
		t.Errorf("status data = %s (%v)", st.Data.Raw, err)
	}
	if st.NetworkData == nil || st.NetworkData.InterfaceName != "xsk0" || st.NetworkData.HardwareAddress != mac {
		t.Errorf("networkData = %+v", st.NetworkData)
	}
	pinDir := data.XDP.PinPath
	if _, err := os.Stat(filepath.Join(pinDir, bpf.PinLink)); err != nil {
		t.Errorf("the attachment is not pinned in %s: %v", pinDir, err)
	}

	if err := bed.DeletePod(ctx, "default", running.Name); err != nil {
		t.Fatal(err)
	}
	assertReturned(t, ctx, orig)
	if id, err := bpf.Attached("", orig.Name); err != nil || id != 0 {
		t.Errorf("XDP program %d still on %s after the pod went (%v)", id, orig.Name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(pinDir)
		return os.IsNotExist(err), nil
	})
	if err != nil {
		t.Errorf("the pin directory %s outlived the claim", pinDir)
	}
}

func mustLink(t *testing.T, name string) netlink.Link {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(fmt.Errorf("link %s: %w", name, err))
	}
	return l
}
