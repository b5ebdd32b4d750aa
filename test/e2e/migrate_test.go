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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/devices"
	ncv1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/migrate"
	"github.com/fastpath-dra/fastpath/dra/validate"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// operatorObjects are an SR-IOV Network Operator's objects for the
// fixture's E810 port ens1f0 and its 8 VFs: VFs 0-3 a netdevice resource
// with a network, VFs 4-7 a vfio-pci resource for DPDK.
const operatorObjects = `apiVersion: sriovnetwork.openshift.io/v1
kind: SriovNetworkNodePolicy
metadata: {name: e2e-netdev, namespace: sriov-network-operator}
spec:
  resourceName: e2e_netdev
  nodeSelector: {e2e.fastpath.dev/sriov: migrated}
  numVfs: 8
  nicSelector: {vendor: "8086", deviceID: "1592", pfNames: ["ens1f0#0-3"]}
---
apiVersion: sriovnetwork.openshift.io/v1
kind: SriovNetworkNodePolicy
metadata: {name: e2e-dpdk, namespace: sriov-network-operator}
spec:
  resourceName: e2e_dpdk
  nodeSelector: {e2e.fastpath.dev/sriov: migrated}
  numVfs: 8
  priority: 10
  nicSelector: {pfNames: ["ens1f0#4-7"]}
  deviceType: vfio-pci
---
apiVersion: sriovnetwork.openshift.io/v1
kind: SriovNetwork
metadata: {name: e2e-migrated, namespace: sriov-network-operator}
spec:
  resourceName: e2e_netdev
  networkNamespace: default
  vlan: 100
  spoofChk: "on"
  ipam: '{"type": "host-local", "subnet": "10.96.0.0/24"}'
`

// TestMigrate: fastpathd migrate's objects for an operator's policies and
// network, applied on the bed, give pods written for the device plugin
// (asking for the operator's resources in resources.limits) the same VFs:
// a VF of 0-3 for the netdevice resource, left as it is and named in
// PCIDEVICE_OPENSHIFT_IO_E2E_NETDEV, and one of 4-7 for the vfio-pci
// resource, on vfio-pci; the node bound VFs 4-7 to vfio-pci as the policy
// asked; the example claim gives the same as the extended resource; the
// network's NetworkAttachmentDefinition is served as written.
func TestMigrate(t *testing.T) {
	ctx := testContext(t)
	const port = 26297
	tree := sysfsfixture.Generated(8)
	root, devRoot, kernel := fixtureTree(t, tree)
	vfs := tree.Functions[1].VFs

	docs, err := validate.SplitManifests("operator.yaml", []byte(operatorObjects))
	if err != nil {
		t.Fatal(err)
	}
	res := migrate.Convert(migrate.InputOf(docs), migrate.Options{})
	for _, item := range res.Report {
		t.Logf("report: %s", item)
	}
	if len(res.NodeConfigs) != 1 || len(res.DeviceClasses) != 2 || len(res.NetworkAttachmentDefinitions) != 1 || len(res.ResourceClaimTemplates) != 1 {
		t.Fatalf("migrate gave %d FastpathNodeConfigs, %d DeviceClasses, %d NetworkAttachmentDefinitions, %d ResourceClaimTemplates; want 1, 2, 1, 1",
			len(res.NodeConfigs), len(res.DeviceClasses), len(res.NetworkAttachmentDefinitions), len(res.ResourceClaimTemplates))
	}

	d := newDaemon(t, port, "--sysfs-root", root, "--dev-root", devRoot, "--npwg")
	d.values["nodeConfig"] = map[string]any{"enabled": true, "installCRD": true}
	d.start(t, ctx)
	t.Cleanup(func() { d.stop(t) })

	// What migrate wrote, applied.
	dyn, err := dynamic.NewForConfig(bed.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	configs := dyn.Resource(ncv1.GroupVersionResource)
	cfg := res.NodeConfigs[0]
	createNodeConfig(t, ctx, configs, cfg.Name, cfg.Spec)
	for _, c := range res.DeviceClasses {
		c.APIVersion, c.Kind = "", ""
		if _, err := bed.Client().ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = bed.Client().ResourceV1().DeviceClasses().Delete(context.Background(), c.Name, metav1.DeleteOptions{})
		})
	}
	nad, err := yaml.Marshal(res.NetworkAttachmentDefinitions[0])
	if err != nil {
		t.Fatal(err)
	}
	createServed(t, ctx, nads, string(nad))
	tmpl := res.ResourceClaimTemplates[0]
	tmpl.APIVersion, tmpl.Kind = "", ""
	if _, err := bed.Client().ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = bed.Client().ResourceV1().ResourceClaimTemplates(tmpl.Namespace).Delete(context.Background(), tmpl.Name, metav1.DeleteOptions{})
	})

	// The node joins the policies' pool: VFs 4-7 go to vfio-pci, and the
	// VFs are published under the policies' resource names.
	setNodeLabel(t, ctx, "e2e.fastpath.dev/sriov", "migrated")
	waitApplied(t, ctx, configs, cfg.Name, 1, ncv1.ReasonApplied, "applied")
	want := map[string]string{}
	for i, vf := range vfs {
		want[devices.PCIDeviceName(vf.Address)] = map[bool]string{true: "openshift.io/e2e_netdev", false: "openshift.io/e2e_dpdk"}[i < 4]
	}
	var got map[string]string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := nodeSlices(ctx)
		if err != nil {
			return false, nil
		}
		got = map[string]string{}
		for _, slice := range s {
			for _, dev := range slice.Spec.Devices {
				if rn := dev.Attributes[devices.AttributeMultusResourceName].StringValue; rn != nil && want[dev.Name] != "" {
					got[dev.Name] = *rn
				}
			}
		}
		return fmt.Sprint(got) == fmt.Sprint(want), nil
	}); err != nil {
		t.Fatalf("the VFs' resource names: %v, want %v", got, want)
	}
	for i, vf := range vfs[4:] {
		if drv := kernel.Driver(vf.Address); drv != "vfio-pci" {
			t.Errorf("VF %d (%s) is on %q, want vfio-pci (the dpdk policy's)", 4+i, vf.Address, drv)
		}
	}

	// Pods written for the device plugin, and one of the example claim,
	// started together.
	one := resource.MustParse("1")
	type podCase struct {
		name   string
		limits corev1.ResourceList
		claim  *corev1.PodResourceClaim
		env    string
		of     []sysfsfixture.Function
	}
	cases := []podCase{
		{"e2e-migrate-netdev", corev1.ResourceList{"openshift.io/e2e_netdev": one}, nil, "PCIDEVICE_OPENSHIFT_IO_E2E_NETDEV", vfs[:4]},
		{"e2e-migrate-dpdk", corev1.ResourceList{"openshift.io/e2e_dpdk": one}, nil, "PCIDEVICE_OPENSHIFT_IO_E2E_DPDK", vfs[4:]},
		{"e2e-migrate-claim", nil, &corev1.PodResourceClaim{Name: "vf", ResourceClaimTemplateName: &tmpl.Name}, "PCIDEVICE_OPENSHIFT_IO_E2E_NETDEV", vfs[:4]},
	}
	pods := bed.Client().CoreV1().Pods("default")
	t.Cleanup(func() {
		// Deleted together; each waited for after.
		for _, c := range cases {
			_ = pods.Delete(context.Background(), c.name, metav1.DeleteOptions{})
		}
		for _, c := range cases {
			_ = bed.DeletePod(context.Background(), "default", c.name)
		}
	})
	for _, c := range cases {
		pod := testbed.WorkloadPod("default", c.name, "env")
		pod.Spec.Containers[0].Resources.Limits = c.limits
		if c.claim != nil {
			pod.Spec.ResourceClaims = []corev1.PodResourceClaim{*c.claim}
			pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: c.claim.Name}}
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		logs, err := bed.WaitPodLog(ctx, "default", c.name, c.env+"=", 60*time.Second)
		if err != nil {
			logs, _ = bed.PodLogs(ctx, "default", c.name)
			t.Errorf("pod %s has no %s: %v; it sees:\n%s", c.name, c.env, err, logs)
			continue
		}
		for line := range strings.Lines(logs) {
			v, ok := strings.CutPrefix(strings.TrimSpace(line), c.env+"=")
			if !ok {
				continue
			}
			if slices.ContainsFunc(c.of, func(vf sysfsfixture.Function) bool { return vf.Address == v }) {
				t.Logf("pod %s: %s=%s", c.name, c.env, v)
			} else {
				t.Errorf("pod %s: %s=%s, not one of the policy's VFs", c.name, c.env, v)
			}
		}
	}
}
