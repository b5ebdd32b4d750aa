package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/images"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

const (
	demoNamespace = metav1.NamespaceDefault
	demoPod       = "fastpath-demo"
)

// demo starts a bed unless one runs, imports the fastpathd image, installs
// (or upgrades) the chart so that fastpathd runs as the DaemonSet pod on
// the node, runs a pod with a claim and shows what it sees. Running it
// again replaces the claim and the pod, and the daemon if its image
// changed.
func demo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	archive := fs.String("image", "bin/fastpathd-image.tar", "the fastpathd image (make image)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	idx, err := images.ReadOCIIndex(*archive)
	if err != nil {
		return fmt.Errorf("the fastpathd image (make image): %w", err)
	}
	img, digest := idx.Manifests[0].Annotations[images.AnnotationImageName], idx.Manifests[0].Digest
	tag, ok := strings.CutPrefix(img, testbed.FastpathdRepository+":")
	if !ok {
		return fmt.Errorf("%s holds %s, not an image of %s", *archive, img, testbed.FastpathdRepository)
	}
	cfg, err := testbed.Config{}.Defaults()
	if err != nil {
		return err
	}
	running, err := testbed.Running(cfg)
	if err != nil {
		return err
	}
	var bed *testbed.Bed
	if running {
		fmt.Printf("using the running test bed in %s\n", cfg.Dir)
		bed, err = testbed.Attach(cfg)
	} else {
		fmt.Printf("starting a test bed in %s (the first run builds Kubernetes: allow 20 minutes)\n", cfg.Dir)
		bed, err = testbed.Start(ctx, cfg)
	}
	if err != nil {
		return err
	}

	// The device: a veth standing in for a VF netdev (this machine has no
	// SR-IOV). Its name has the bed's prefix, so cluster-down removes it.
	if err := bed.DeletePod(ctx, demoNamespace, demoPod); err != nil {
		return err
	}
	if err := deleteClaim(ctx, bed); err != nil {
		return err
	}
	hostIf := cfg.LinkPrefix + "demo0"
	if err := ensureVeth(hostIf, cfg.LinkPrefix+"demo1"); err != nil {
		return err
	}

	if err := bed.ImportImage(ctx, *archive); err != nil {
		return err
	}
	if err := bed.InstallChart(ctx, map[string]any{
		"image":          map[string]any{"tag": tag},
		"podAnnotations": map[string]any{"fastpath.dev/image": digest},
		"filter":         fmt.Sprintf(`device.attributes["fastpath.dev"].ifName == %q`, hostIf),
		"logging":        map[string]any{"verbosity": 2},
	}); err != nil {
		return err
	}
	daemon, err := bed.WaitDaemon(ctx, "", 2*time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("chart %s installed: fastpathd runs as pod %s/%s (image %s) on node %s, registered with its kubelet\n",
		testbed.ChartRelease, daemon.Namespace, daemon.Name, img, bed.NodeName())
	if err := waitPublished(ctx, bed, devices.NetdevDeviceName(hostIf)); err != nil {
		return err
	}
	fmt.Printf("it publishes %s (the host veth %s) in a ResourceSlice\n", devices.NetdevDeviceName(hostIf), hostIf)

	params, err := json.Marshal(demoConfig)
	if err != nil {
		return err
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: demoClaim},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			// The device the daemon was just seen to publish: not another a
			// scheduler whose caches lag still holds (a device of an earlier
			// test's daemon, gone from the node).
			Requests: []resourceapi.DeviceRequest{{Name: "net1", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "netdev.fastpath.dev",
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf(`device.attributes["fastpath.dev"].ifName == %q`, hostIf)}}}}}},
			Config: []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: "fastpath.dev", Parameters: runtime.RawExtension{Raw: params},
			}}}},
		}},
	}
	if _, err := bed.Client().ResourceV1().ResourceClaims(demoNamespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create claim %s: %w", demoClaim, err)
	}
	pod := testbed.WorkloadPod(demoNamespace, demoPod, "ifaces")
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "fast", ResourceClaimName: new(demoClaim)}}
	pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "fast"}}
	if _, err := bed.RunPod(ctx, pod); err != nil {
		return err
	}
	logs, err := bed.WaitPodLog(ctx, demoNamespace, demoPod, "net1", 30*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("pod %s/%s is Running; inside it sees:\n%s\n", demoNamespace, demoPod, logs)
	status, err := waitClaimStatus(ctx, bed)
	if err != nil {
		return err
	}
	fmt.Printf("claim %s/%s status.devices:\n%s\n", demoNamespace, demoClaim, status)
	fmt.Println("What to look at next:")
	for _, step := range [][2]string{
		{"export KUBECONFIG=" + bed.Kubeconfig(), ""},
		{"alias kubectl=" + cfg.Kubectl(), "the kubectl of the bed's Kubernetes"},
		{"kubectl get nodes -o wide", "the node, Ready"},
		{"kubectl get resourceslices -o yaml", "the devices fastpathd publishes"},
		{"kubectl get resourceclaim " + demoClaim + " -o yaml", "the allocation and the status fastpathd wrote"},
		{"kubectl logs " + demoPod, "the interfaces the pod sees"},
		{"kubectl delete pod " + demoPod, "then: ip link show " + hostIf + " (back on the host)"},
		{"kubectl -n " + testbed.ChartNamespace + " logs ds/" + testbed.ChartRelease, "the daemon's log"},
		{"alias helm=" + cfg.Helm(), "the helm the bed uses"},
		{"helm -n " + testbed.ChartNamespace + " get values " + testbed.ChartRelease, "the values the demo installed the chart with"},
		{"make demo", "again: replaces the claim and the pod (and the daemon if its image changed)"},
		{"make cluster-down", "stop everything and clean up"},
	} {
		if step[1] == "" {
			fmt.Printf("  %s\n", step[0])
			continue
		}
		fmt.Printf("  %-52s # %s\n", step[0], step[1])
	}
	return nil
}

const demoClaim = "fastpath-demo"

// demoConfig is the demo claim's config: the interface as the pod sees it.
var demoConfig = v1alpha1.InterfaceConfig{Interface: &v1alpha1.InterfaceSpec{
	Name: "net1", MTU: 9000, MAC: "02:fa:57:00:00:01", Addresses: []string{"10.100.0.2/24", "fd00:100::2/64"},
	Routes: []v1alpha1.Route{{Destination: "10.101.0.0/16", Gateway: "10.100.0.1"}},
}}

func deleteClaim(ctx context.Context, bed *testbed.Bed) error {
	claims := bed.Client().ResourceV1().ResourceClaims(demoNamespace)
	err := claims.Delete(ctx, demoClaim, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := claims.Get(ctx, demoClaim, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

func ensureVeth(name, peer string) error {
	if _, err := netlink.LinkByName(name); err == nil {
		return nil
	}
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: 1500}, PeerName: peer}); err != nil {
		return fmt.Errorf("create veth %s: %w", name, err)
	}
	return nil
}

func waitPublished(ctx context.Context, bed *testbed.Bed, device string) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		slices, err := bed.Client().ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=fastpath.dev"})
		if err != nil {
			return false, nil
		}
		for _, s := range slices.Items {
			for _, d := range s.Spec.Devices {
				if d.Name == device {
					return true, nil
				}
			}
		}
		return false, nil
	})
}

func waitClaimStatus(ctx context.Context, bed *testbed.Bed) (string, error) {
	var out []byte
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := bed.Client().ResourceV1().ResourceClaims(demoNamespace).Get(ctx, demoClaim, metav1.GetOptions{})
		if err != nil || len(c.Status.Devices) == 0 {
			return false, nil
		}
		out, err = yaml.Marshal(c.Status.Devices)
		return err == nil, nil
	})
	return string(out), err
}
