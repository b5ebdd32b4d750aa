package nri

import (
	"fmt"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// TestNPWGAnnotationBounded: the selection annotation "A,A,A,..." of 64
// KB (32,768 elements, each a problem) fails the sandbox with one error
// naming the bound and the size; at the bound of elements, with at most
// bounds.Problems of their problems said. The hook's error is at most
// bounds.MessageBytes; nothing is recorded, no plugin runs.
func TestNPWGAnnotationBounded(t *testing.T) {
	for _, tc := range []struct {
		name, networks string
		want           []string
		problems       int
	}{
		{name: "64 KB", networks: strings.Repeat("A,", bounds.AnnotationBytes/2-1) + "A",
			want: []string{"pod default/web, annotation k8s.v1.cni.cncf.io/networks: metadata.annotations[k8s.v1.cni.cncf.io/networks]: Too many: 32768: must have at most 256 items"}},
		{name: "256 elements", networks: strings.Repeat("A,", bounds.Items-1) + "A", problems: bounds.Problems,
			want: []string{"pod default/web, annotation k8s.v1.cni.cncf.io/networks: [metadata.annotations[k8s.v1.cni.cncf.io/networks][0].name: Invalid value: \"A\"",
				fmt.Sprintf(", and %d more]", bounds.Items-bounds.Problems)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newNPWGRig(t)
			pod := npwgPod(tc.networks)
			sandbox := &api.PodSandbox{Uid: string(pod.UID), Id: pod.SandboxID, Name: pod.Name, Namespace: pod.Namespace,
				Annotations: map[string]string{nadv1.NetworkAttachmentAnnot: tc.networks},
				Linux:       &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: pod.NetNS}}}}
			err := (&hooks{p: r.plugin}).RunPodSandbox(r.ctx, sandbox)
			if err == nil {
				t.Fatal("the sandbox started")
			}
			msg := err.Error()
			if len(msg) > bounds.MessageBytes {
				t.Fatalf("an error of %d bytes, more than %d", len(msg), bounds.MessageBytes)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %.600q does not say %q", msg, w)
				}
			}
			if n := strings.Count(msg, "Invalid value"); n != tc.problems {
				t.Errorf("%d problems said, want %d", n, tc.problems)
			}
			if len(r.cni.order) != 0 {
				t.Errorf("CNI ran: %v", r.cni.order)
			}
			if _, ok := r.store.Get(npwgKey(npwgPodUID)); ok {
				t.Error("a record was written for a refused pod")
			}
		})
	}
}
