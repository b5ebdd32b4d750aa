//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/fastpath-dra/fastpath/test/testbed"
)

// sriovResource is the extended resource of TestExtendedResource: a name
// a pod written for the SR-IOV device plugin asks for.
const sriovResource = "e2e.fastpath.dev/sriov_netdevice"

// TestExtendedResource: the netdev DeviceClass as the chart renders it with
// deviceClasses.extendedResourceNames.netdev set serves a pod that only
// asks for that extended resource in resources.limits, as pods written for
// the SR-IOV device plugin do, with no ResourceClaim of its own: the
// scheduler makes its claim, fastpathd prepares it, and the pod finds the
// device as net1, as Multus would name it; after the pod, the device is
// back in the host as it was.
func TestExtendedResource(t *testing.T) {
	ctx := testContext(t)
	orig := dataplaneSetup(t, ctx, 79, 26277)[0]

	// The class as the chart renders it, over the one of deploy/.
	v, err := bed.Config().Versions()
	if err != nil {
		t.Fatal(err)
	}
	out, err := bed.Helm(ctx, "template", "fastpath", bed.Config().Chart(), "--kube-version", strings.TrimPrefix(v.Kubernetes, "v"),
		"--show-only", "templates/deviceclasses.yaml", "--set", "deviceClasses.extendedResourceNames.netdev="+sriovResource)
	if err != nil {
		t.Fatal(err)
	}
	var class *resourceapi.DeviceClass
	for doc := range strings.SplitSeq(string(out), "\n---\n") {
		c := &resourceapi.DeviceClass{}
		if err := yaml.Unmarshal([]byte(doc), c); err != nil {
			t.Fatal(err)
		}
		if c.Name == "netdev.fastpath.dev" {
			class = c
		}
	}
	if class == nil || class.Spec.ExtendedResourceName == nil || *class.Spec.ExtendedResourceName != sriovResource {
		t.Fatalf("the chart rendered netdev.fastpath.dev as %+v", class)
	}
	classes := bed.Client().ResourceV1().DeviceClasses()
	old, err := classes.Get(ctx, class.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	class.ResourceVersion = old.ResourceVersion
	if _, err := classes.Update(ctx, class, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the netdev class with extendedResourceName %s: %v", sriovResource, err)
	}

	pod := testbed.WorkloadPod("default", "e2e-extended", "ifaces")
	one := resource.MustParse("1")
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{sriovResource: one}
	if _, err := bed.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
	logs, err := bed.WaitPodLog(ctx, "default", pod.Name, orig.HardwareAddr.String(), 30*time.Second)
	if err != nil {
		t.Fatalf("the pod never saw the device (MAC %s): %v", orig.HardwareAddr, err)
	}
	if line := interfaceLine(logs, "net1"); !strings.Contains(line, orig.HardwareAddr.String()) {
		t.Errorf("the pod's net1 is %q, want the device (MAC %s); it sees:\n%s", line, orig.HardwareAddr, logs)
	}

	// The claim the scheduler made for the pod, named in its status.
	running, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := running.Status.ExtendedResourceClaimStatus
	if st == nil || st.ResourceClaimName == "" {
		t.Fatalf("pod %s: no extendedResourceClaimStatus", pod.Name)
	}
	claim, err := bed.Client().ResourceV1().ResourceClaims("default").Get(ctx, st.ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 || claim.Status.Allocation.Devices.Results[0].Driver != driverName {
		t.Errorf("claim %s: allocation %+v, want one device of %s", claim.Name, claim.Status.Allocation, driverName)
	}

	if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
		t.Fatal(err)
	}
	assertReturned(t, ctx, orig)
}
