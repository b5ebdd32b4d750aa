//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/devicemetadata"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// TestDeviceMetadata: a pod's container reads its claims' device metadata
// (KEP-5304) at the standard paths of claims from templates, for a
// fastpath.dev netdev and a CNI claim: the device as published (its
// attributes) and, once in the pod, its network data (interface,
// addresses, MAC), also when the pod's container was made before its
// device was in the pod (the attach beside the runtime). Unprepare
// removes the files and their CDI specs. With --device-metadata=false the
// pod runs as before, with no file.
func TestDeviceMetadata(t *testing.T) {
	ctx := testContext(t)
	n := faultSetup(t, ctx, faultOptions{port: 26281, links: 1, up: true, cni: true})
	tmpl := netdevTemplate(t, ctx, "e2e-meta-nic", "net1", "10.77.9.2/24")
	cni := createTemplate(t, ctx, "e2e-meta-cni", cniClaimSpec(map[string]v1alpha1.CNIConfig{"net": macvlanConfig("net2", subnet("10.77.10.0/24"))}))

	pod := templatePod("e2e-meta", "env", tmpl, cni)
	if _, err := bed.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	ipam := ipamDir(t, ctx, pod.Name, cni.Name, "net")
	type metaCase struct {
		driver, podClaim, request string
		attrs                     map[string]string
		ifName, ip, mac           string
	}
	nic := metaCase{driver: devices.DriverName, podClaim: tmpl.Name, request: "nic", attrs: map[string]string{"kind": "netdev", "ifName": n.links[0].Name},
		ifName: "net1", ip: "10.77.9.2/24", mac: "02:00:00:fa:60:01"}
	// check reads what the pod's container printed of the claim's
	// metadata file and compares it with the claim; it returns the file's
	// directory and its CDI spec.
	check := func(pod *corev1.Pod, c metaCase) []string {
		running, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := metadata.ResourceClaimTemplateFilePath(c.driver, c.podClaim, c.request)
		logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "metadata "+want, 30*time.Second)
		if err != nil {
			t.Fatalf("%s never saw %s: %v", pod.Name, want, err)
		}
		var dm metadata.DeviceMetadata
		for line := range strings.Lines(logs) {
			if stream, ok := strings.CutPrefix(strings.TrimSpace(line), "metadata "+want+" "); ok {
				if err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(strings.NewReader(stream)), &dm); err != nil {
					t.Fatalf("%s: %v:\n%s", want, err, stream)
				}
			}
		}
		claimName := ""
		for _, st := range running.Status.ResourceClaimStatuses {
			if st.Name == c.podClaim && st.ResourceClaimName != nil {
				claimName = *st.ResourceClaimName
			}
		}
		claim, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, claimName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the claim of %s: %v", c.podClaim, err)
		}
		if dm.Name != claimName || dm.UID != claim.UID || dm.PodClaimName == nil || *dm.PodClaimName != c.podClaim || dm.Generation < 2 {
			t.Errorf("%s: claim %s (%s): name %s, uid %s, podClaimName %v, generation %d (want at least 2: Prepare, then the pod's interface)",
				want, claimName, claim.UID, dm.Name, dm.UID, dm.PodClaimName, dm.Generation)
		}
		if len(dm.Requests) != 1 || dm.Requests[0].Name != c.request || len(dm.Requests[0].Devices) != 1 {
			t.Fatalf("%s: requests %+v", want, dm.Requests)
		}
		dev := dm.Requests[0].Devices[0]
		allocated := claim.Status.Allocation.Devices.Results[0]
		if dev.Driver != c.driver || dev.Pool != allocated.Pool || dev.Name != allocated.Device {
			t.Errorf("%s: device %s/%s/%s, want the allocated %s/%s/%s", want, dev.Driver, dev.Pool, dev.Name, allocated.Driver, allocated.Pool, allocated.Device)
		}
		for name, v := range c.attrs {
			if a, ok := dev.Attributes[resourceapi.QualifiedName(name)]; !ok || a.StringValue == nil || *a.StringValue != v {
				t.Errorf("%s: attribute %s = %+v, want %q (all: %v)", want, name, a, v, dev.Attributes)
			}
		}
		nd := dev.NetworkData
		if nd == nil || nd.InterfaceName != c.ifName || len(nd.IPs) != 1 || !strings.HasPrefix(nd.IPs[0], c.ip) || nd.HardwareAddress == "" ||
			(c.mac != "" && nd.HardwareAddress != c.mac) {
			t.Errorf("%s: %s: networkData %+v, want %s, %s…, MAC %q", pod.Name, want, nd, c.ifName, c.ip, c.mac)
		} else {
			t.Logf("%s: %s: generation %d, %d attributes, networkData %s %v %s", pod.Name, want, dm.Generation, len(dev.Attributes), nd.InterfaceName, nd.IPs, nd.HardwareAddress)
		}
		return []string{filepath.Join(bed.PluginDir(c.driver), "dra-device-metadata", "default_"+claimName),
			filepath.Join(bed.CDIDir(), c.driver+"_metadata_"+string(claim.UID)+"_"+c.request+".json")}
	}
	var cleanup []string
	for _, c := range []metaCase{nic, {driver: cniDriver, podClaim: cni.Name, request: "net", attrs: map[string]string{cniDriver + "/name": faultPrefix + "26281m"},
		ifName: "net2", ip: "10.77.10."}} {
		cleanup = append(cleanup, check(pod, c)...)
	}
	for _, p := range cleanup {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("while the pod runs: %v", err)
		}
	}

	// Unprepare removes the files and their CDI specs.
	deleted := func(pod *corev1.Pod, files []string) {
		if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
			t.Fatal(err)
		}
		if err := podGone(ctx, pod, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := pollGone(ctx, files...); err != nil {
			t.Errorf("after the pod %s: %v", pod.Name, err)
		}
		n.assertRestoredOrLost(t, ctx)
	}
	deleted(pod, cleanup)
	n.assertClean(t, ctx, ipam)

	// A pod whose only claim is the netdev's is attached beside the
	// runtime (--attach-overlap): its container is made, with the
	// metadata file mounted, before the attach writes the network data
	// into the file, and starts after. It reads the network data.
	alone := templatePod("e2e-meta-alone", "env", tmpl)
	if _, err := bed.RunPod(ctx, alone); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", alone.Name) })
	deleted(alone, check(alone, nic))

	// Off: the pod runs with its devices, and no file.
	old := n.d.pod.UID
	n.d.values["deviceMetadata"] = false
	if err := n.d.install(ctx); err != nil {
		t.Fatal(err)
	}
	n.d.waitReady(t, ctx, old)
	off := templatePod("e2e-meta-off", "env", tmpl, cni)
	if _, err := bed.RunPod(ctx, off); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", off.Name) })
	ipam = ipamDir(t, ctx, off.Name, cni.Name, "net")
	logs, err := bed.WaitPodLog(ctx, "default", off.Name, "FASTPATH_INTERFACE_NIC=net1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs, "metadata ") {
		t.Errorf("with --device-metadata=false the pod sees metadata:\n%s", logs)
	}
	if err := bed.DeletePod(ctx, "default", off.Name); err != nil {
		t.Fatal(err)
	}
	if err := podGone(ctx, off, time.Minute); err != nil {
		t.Fatal(err)
	}
	n.assertRestoredOrLost(t, ctx)
	n.assertClean(t, ctx, ipam)
}

// pollGone waits until none of paths exists.
func pollGone(ctx context.Context, paths ...string) error {
	left := ""
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		left = ""
		for _, p := range paths {
			if _, err := os.Stat(p); err == nil {
				left = p
			}
		}
		return left == "", nil
	})
	if err != nil {
		return fmt.Errorf("%s is still there: %w", left, err)
	}
	return nil
}
