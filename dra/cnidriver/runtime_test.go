package cnidriver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/nri"
	"github.com/fastpath-dra/fastpath/dra/status"
	"github.com/fastpath-dra/fastpath/test/fulldisk"
)

// flakyPlugin is a CNI plugin that succeeds ADD (logging it) and fails DEL
// while the file fail-del exists in its directory.
const flakyPlugin = `#!/bin/sh
dir=$(dirname "$0")
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}' ;;
ADD) cat >/dev/null; echo "ADD $CNI_IFNAME $CNI_CONTAINERID" >>"$dir/calls"
     echo '{"cniVersion":"1.0.0","interfaces":[{"name":"'"$CNI_IFNAME"'","mac":"02:00:00:00:00:0f","sandbox":"'"$CNI_NETNS"'"}],"ips":[{"address":"10.9.9.9/24","interface":0}]}' ;;
DEL) cat >/dev/null; echo "DEL $CNI_IFNAME $CNI_CONTAINERID" >>"$dir/calls"
     if [ -e "$dir/fail-del" ]; then echo '{"cniVersion":"1.0.0","code":11,"msg":"DEL refused"}'; exit 1; fi ;;
esac
`

// TestCNIDelRetried: a DEL that fails when the sandbox stops leaves the
// network recorded; Unprepare retries it, failing while DEL fails, and
// succeeds once DEL does. The claim's status follows ADD.
func TestCNIDelRetried(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "flaky"), []byte(flakyPlugin), 0o755); err != nil {
		t.Fatal(err)
	}
	claim := cniTestClaim([]string{"a"}, fromClaim(`{`+cniHead+`, "plugins": [{"type": "flaky"}]}`))
	client := fake.NewClientset(claim)
	store := testStore(t)
	writer := status.NewWriter(client)
	writer.Start(ctx)
	plugin := nri.New(nri.Options{Store: store, Status: writer, CNI: dataplane.NewCNI([]string{bin}, t.TempDir(), nil), DelBackoff: time.Millisecond})
	d, err := New(Options{NodeName: testNode, Client: client, PluginDir: t.TempDir(), Devices: 2, Store: store, Status: writer, Runtime: plugin,
		Policy: cnipolicy.Options{Plugins: []string{"flaky"}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	if err != nil || res[claim.UID].Err != nil {
		t.Fatalf("prepare: %v %v", err, res[claim.UID].Err)
	}
	pod := nri.Pod{UID: claim.Status.ReservedFor[0].UID, Namespace: "default", Name: "pod-net", SandboxID: "sandbox1", NetNS: "/run/netns/test"}
	if err := plugin.AttachPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	st := waitClaimStatus(t, ctx, client, claim.Name)
	if st.NetworkData == nil || st.NetworkData.HardwareAddress != "02:00:00:00:00:0f" || strings.Join(st.NetworkData.IPs, ",") != "10.9.9.9/24" {
		t.Errorf("networkData = %+v", st.NetworkData)
	}

	if err := os.WriteFile(filepath.Join(bin, "fail-del"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := plugin.DetachPod(ctx, pod); err == nil || !strings.Contains(err.Error(), "DEL refused") {
		t.Errorf("DetachPod with DEL failing: %v", err)
	}
	key := claims.Key{Driver: claims.DriverCNI, UID: claim.UID}
	if c, _ := store.Get(key); !c.Networks[0].Added {
		t.Error("a network whose DEL failed is no longer recorded as added")
	}
	ref := []kubeletplugin.NamespacedObject{{UID: claim.UID}}
	if out, _ := d.UnprepareResourceClaims(ctx, ref); out[claim.UID] == nil {
		t.Error("Unprepare succeeded while DEL fails")
	}
	if err := os.Remove(filepath.Join(bin, "fail-del")); err != nil {
		t.Fatal(err)
	}
	if out, _ := d.UnprepareResourceClaims(ctx, ref); out[claim.UID] != nil {
		t.Errorf("Unprepare once DEL works: %v", out[claim.UID])
	}
	if _, ok := store.Get(key); ok {
		t.Error("the claim is still in the store after Unprepare")
	}
	calls, _ := os.ReadFile(filepath.Join(bin, "calls"))
	if n := strings.Count(string(calls), "DEL net1 sandbox1"); n != 3+3+1 {
		t.Errorf("DEL ran %d times, want 3 at stop, 3 at the first Unprepare and 1 at the second:\n%s", n, calls)
	}
}

func waitClaimStatus(t *testing.T, ctx context.Context, client *fake.Clientset, name string) resourceapi.AllocatedDeviceStatus {
	t.Helper()
	var st resourceapi.AllocatedDeviceStatus
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := client.ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(c.Status.Devices) == 0 {
			return false, nil
		}
		st = c.Status.Devices[0]
		return true, nil
	})
	if err != nil {
		t.Fatal("the claim got no status")
	}
	return st
}

// TestCNIFullDisk: the CNI driver's Prepare records the claim (Admit) and
// Unprepare forgets it; with that write failing (ENOSPC) each fails, the
// store and its file hold what they held before, and the kubelet's retry
// succeeds.
func TestCNIFullDisk(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	claim := cniTestClaim([]string{"a"}, fromClaim(`{`+cniHead+`, "plugins": [{"type": "flaky"}]}`))
	client := fake.NewClientset(claim)
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	store, err := claims.Open(path, claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	var disk fulldisk.Disk
	disk.Wrap(store)
	full := func(on bool) {
		disk.Writes, disk.FailFrom = 0, 0
		if on {
			disk.FailFrom = 1
		}
	}
	writer := status.NewWriter(client)
	writer.Start(ctx)
	d, err := New(Options{NodeName: testNode, Client: client, PluginDir: t.TempDir(), Devices: 2, Store: store, Status: writer,
		Policy: cnipolicy.Options{Plugins: []string{"flaky"}}})
	if err != nil {
		t.Fatal(err)
	}
	onDisk := func() int {
		s, err := claims.Open(path, claims.Legacy{})
		if err != nil {
			t.Fatal(err)
		}
		return len(s.Claims())
	}
	key := claims.Key{Driver: claims.DriverCNI, UID: claim.UID}

	full(true)
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	if err != nil || res[claim.UID].Err == nil || !strings.Contains(res[claim.UID].Err.Error(), "no space left on device") {
		t.Fatalf("Prepare on a full disk: %v, %v", err, res[claim.UID].Err)
	}
	if _, ok := store.Get(key); ok || onDisk() != 0 {
		t.Fatalf("a failed Prepare left the claim recorded (file: %d claims)", onDisk())
	}
	full(false)
	if res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim}); err != nil || res[claim.UID].Err != nil {
		t.Fatalf("Prepare retried: %v, %v", err, res[claim.UID].Err)
	}
	if onDisk() != 1 {
		t.Fatal("the prepared claim is not on disk")
	}

	full(true)
	refs := []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}, UID: claim.UID}}
	out, err := d.UnprepareResourceClaims(ctx, refs)
	if err != nil || out[claim.UID] == nil {
		t.Fatalf("Unprepare on a full disk: %v, %v", err, out[claim.UID])
	}
	if _, ok := store.Get(key); !ok || onDisk() != 1 {
		t.Fatal("a failed Unprepare forgot the claim")
	}
	full(false)
	if out, err := d.UnprepareResourceClaims(ctx, refs); err != nil || out[claim.UID] != nil {
		t.Fatalf("Unprepare retried: %v, %v", err, out[claim.UID])
	}
	if _, ok := store.Get(key); ok || onDisk() != 0 {
		t.Fatal("the unprepared claim is still recorded")
	}
}
