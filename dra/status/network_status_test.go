package status

import (
	"context"
	"fmt"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// TestPatchNetworkStatus: fastpath's entries are merged into the pod's
// annotation, other writers' kept; another pod of the same name, or none,
// is left alone.
func TestPatchNetworkStatus(t *testing.T) {
	ctx := context.Background()
	other := `[{"name":"default/sriov","interface":"net9","dns":{}}]`
	client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-1",
		Annotations: map[string]string{nadv1.NetworkStatusAnnot: other}}})
	s := PodNetworkStatus{Client: client}
	entries := []nadv1.NetworkStatus{{Name: "default/cluster-network", Interface: "eth0", IPs: []string{"10.244.0.5"}, Default: true},
		{Name: "default/net-a", Interface: "net1", IPs: []string{"10.1.0.9"}}}
	if err := s.PatchNetworkStatus(ctx, "default", "web", "uid-1", entries); err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := npwg.DecodeNetworkStatus(pod.Annotations[nadv1.NetworkStatusAnnot])
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, st := range got {
		names = append(names, st.Name+"@"+st.Interface)
	}
	if want := "[default/sriov@net9 default/cluster-network@eth0 default/net-a@net1]"; fmt.Sprint(names) != want {
		t.Errorf("network-status %s, want %s", fmt.Sprint(names), want)
	}
	before := pod.Annotations[nadv1.NetworkStatusAnnot]
	if err := s.PatchNetworkStatus(ctx, "default", "web", "uid-2", entries[:1]); err != nil {
		t.Fatal(err)
	}
	if err := s.PatchNetworkStatus(ctx, "default", "gone", "uid-3", entries); err != nil {
		t.Errorf("a pod that is gone: %v", err)
	}
	pod, _ = client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if pod.Annotations[nadv1.NetworkStatusAnnot] != before {
		t.Errorf("another pod's status was written: %s", pod.Annotations[nadv1.NetworkStatusAnnot])
	}
}

// TestPatchPodNetworkStatus: the PodNetwork status replaces the pod's
// annotation and leaves its others; another pod of the same name is left
// alone.
func TestPatchPodNetworkStatus(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-1",
		Annotations: map[string]string{pnv1.AnnotationNetworkStatus: `[{"name":"stale"}]`, "other": "kept"}}})
	s := PodNetworkStatus{Client: client}
	entries := []pnv1.NetworkStatus{{Name: "default", InterfaceName: "eth0", IP: "10.244.0.5", IPs: []string{"10.244.0.5"}, IsDefaultGW: true}}
	if err := s.PatchPodNetworkStatus(ctx, "default", "web", "uid-1", entries); err != nil {
		t.Fatal(err)
	}
	if err := s.PatchPodNetworkStatus(ctx, "default", "web", "uid-other", []pnv1.NetworkStatus{{Name: "wrong"}}); err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"name":"default","interfaceName":"eth0","ip":"10.244.0.5","ips":["10.244.0.5"],"isDefaultGW":true}]`
	if got := pod.Annotations[pnv1.AnnotationNetworkStatus]; got != want || pod.Annotations["other"] != "kept" {
		t.Errorf("annotations %v, want %s = %s and the other kept", pod.Annotations, pnv1.AnnotationNetworkStatus, want)
	}
}
