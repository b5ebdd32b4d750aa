package nri

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// countingNADs counts the NetworkAttachmentDefinitions read.
type countingNADs struct {
	NADGetter
	reads atomic.Int64
}

func (c *countingNADs) GetNAD(ctx context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error) {
	c.reads.Add(1)
	return c.NADGetter.GetNAD(ctx, namespace, name)
}

// repeat is n references to network, comma-separated.
func repeat(network string, n int) string {
	return strings.TrimSuffix(strings.Repeat(network+",", n), ",")
}

// TestNPWGLimits: a pod selecting more networks than the node allows, or
// with them more interfaces, or with a selection annotation too long to
// read, fails its sandbox before any network is read, recorded or added,
// with an error naming the pod, the annotation, the count and the flag; a
// pod at the limits is attached.
func TestNPWGLimits(t *testing.T) {
	cniClaim := claims.Claim{Driver: claims.DriverCNI, UID: "uid-net", Namespace: "default", Name: "net", Prepared: true,
		Pod: claims.Pod{UID: npwgPodUID, Name: "web"},
		Networks: []claims.Network{{Request: "a", Pool: "node", Device: "cni-0", IfName: "data0",
			Conflist: []byte(`{"cniVersion":"1.1.0","name":"default-net-a","plugins":[{"type":"macvlan"}]}`)}}}
	pns := fakePodNetworks{networks: map[string]*pnv1.PodNetwork{"dataplane1": podNetwork("dataplane1", true), "dataplane2": podNetwork("dataplane2", true)}}
	for _, tc := range []struct {
		name        string
		limits      npwg.Limits
		claims      []claims.Claim
		networks    string
		podNetworks string
		want        []string // the error's parts; none: attached
		adds        int
	}{
		{name: "20000 networks: more than the annotation may list", networks: repeat("a", 20000), want: []string{
			"pod default/web, annotation k8s.v1.cni.cncf.io/networks: metadata.annotations[k8s.v1.cni.cncf.io/networks]: Too many: 20000: must have at most 256 items"}},
		{name: "200 networks", networks: repeat("a", 200), want: []string{
			"pod default/web: metadata.annotations[k8s.v1.cni.cncf.io/networks]: Too many: 200: the pod selects 200 networks (200 with k8s.v1.cni.cncf.io/networks, 0 with network.fastpath.dev/networks), " +
				"more than the 32 a pod may select on this node (fastpathd run --npwg-max-networks)"}},
		{name: "one network more than the default", networks: repeat("net-a", 33), want: []string{"Too many: 33", "more than the 32", "--npwg-max-networks"}},
		{name: "the default number of networks", networks: repeat("net-a", 32), adds: 32},
		{name: "PodNetworks counted too", limits: npwg.Limits{Networks: 2}, networks: "net-a",
			podNetworks: `[{"podNetworkName": "default"}, {"podNetworkName": "dataplane1"}, {"podNetworkName": "dataplane2"}]`,
			want:        []string{"pod default/web", "Too many: 3: the pod selects 3 networks (1 with k8s.v1.cni.cncf.io/networks, 2 with network.fastpath.dev/networks), more than the 2", "--npwg-max-networks"}},
		{name: "PodNetworks at the limit", limits: npwg.Limits{Networks: 3}, networks: "net-a",
			podNetworks: `[{"podNetworkName": "default"}, {"podNetworkName": "dataplane1"}, {"podNetworkName": "dataplane2"}]`, adds: 3},
		{name: "interfaces of the claims and the networks", limits: npwg.Limits{Interfaces: 3}, claims: []claims.Claim{cniClaim}, networks: "net-a,net-b,shared/net-c",
			want: []string{"pod default/web: metadata.annotations[k8s.v1.cni.cncf.io/networks]: Too many: 4: the pod would have 4 interfaces (3 of its networks, 1 of its DRA claims), " +
				"more than the 3 a pod may have on this node (fastpathd run --npwg-max-interfaces)"}},
		{name: "interfaces at the limit", limits: npwg.Limits{Interfaces: 3}, claims: []claims.Claim{cniClaim}, networks: "net-a,net-b", adds: 3},
		{name: "an annotation too long to read", networks: repeat("net-a", 11000), want: []string{
			"pod default/web", "metadata.annotations[k8s.v1.cni.cncf.io/networks]: Too long: is 65999 bytes, more than the 65536 a network selection may have"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newNPWGRig(t, tc.claims...)
			nads := &countingNADs{NADGetter: r.plugin.opts.NPWG.NADs}
			r.plugin.opts.NPWG.NADs, r.plugin.opts.NPWG.Limits = nads, tc.limits
			r.plugin.opts.PodNetworks = &PodNetworkOptions{Objects: pns,
				Networks: fakeConfigs{"dataplane1": fmt.Sprintf(macvlanConf, "dataplane1"), "dataplane2": fmt.Sprintf(macvlanConf, "dataplane2")}}
			pod := npwgPod(tc.networks)
			pod.PodNetworks = tc.podNetworks
			err := r.plugin.AttachPod(r.ctx, pod)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if len(r.cni.order) != tc.adds {
					t.Errorf("%d CNI calls, want %d ADDs: %v", len(r.cni.order), tc.adds, r.cni.order)
				}
				if err := r.plugin.DetachPod(r.ctx, pod); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("the pod started")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %.400q does not say %q", err, want)
				}
			}
			if len(r.cni.order) != 0 {
				t.Errorf("CNI ran for a refused pod: %d calls", len(r.cni.order))
			}
			if n := nads.reads.Load(); n != 0 {
				t.Errorf("%d NetworkAttachmentDefinitions read for a refused pod", n)
			}
			if _, ok := r.store.Get(npwgKey(npwgPodUID)); ok {
				t.Error("a record was written for a refused pod")
			}
		})
	}
}
