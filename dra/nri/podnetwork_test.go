package nri

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// fakePodNetworks serves PodNetworks and PodNetworkAttachments from maps.
type fakePodNetworks struct {
	networks    map[string]*pnv1.PodNetwork
	attachments map[string]*pnv1.PodNetworkAttachment // by namespace/name
}

func (f fakePodNetworks) GetPodNetwork(_ context.Context, name string) (*pnv1.PodNetwork, error) {
	if pn, ok := f.networks[name]; ok {
		return pn, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: pnv1.Group, Resource: "podnetworks"}, name)
}

func (f fakePodNetworks) GetPodNetworkAttachment(_ context.Context, namespace, name string) (*pnv1.PodNetworkAttachment, error) {
	if pna, ok := f.attachments[namespace+"/"+name]; ok {
		return pna, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: pnv1.Group, Resource: "podnetworkattachments"}, name)
}

// fakeConfigs are the node's networks of the CRI Network API.
type fakeConfigs map[string]string

func (f fakeConfigs) IPRanges(string) []string { return nil }

func (f fakeConfigs) Conflist(name string) ([]byte, bool) {
	c, ok := f[name]
	return []byte(c), ok
}

// fakePodNetworkStatus records the PodNetwork status written.
type fakePodNetworkStatus struct {
	mu      sync.Mutex
	entries [][]pnv1.NetworkStatus
}

func (f *fakePodNetworkStatus) PatchPodNetworkStatus(_ context.Context, _, _ string, _ types.UID, entries []pnv1.NetworkStatus) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, entries)
	return nil
}

func readyConds(ready bool, reason string) []metav1.Condition {
	st := metav1.ConditionTrue
	if !ready {
		st = metav1.ConditionFalse
	}
	return []metav1.Condition{{Type: pnv1.ConditionReady, Status: st, Reason: reason, Message: "said by the controller"}}
}

func podNetwork(name string, ready bool, refs ...pnv1.ParametersRef) *pnv1.PodNetwork {
	pn := &pnv1.PodNetwork{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: pnv1.PodNetworkSpec{ParametersRefs: refs}}
	reason := pnv1.ReasonReady
	if !ready {
		reason = pnv1.ReasonParamsNotReady
	}
	pn.Status.Conditions = readyConds(ready, reason)
	return pn
}

// TestPodNetworks: the PodNetworks a pod names are attached after the NPWG
// annotation's networks: one of the node's networks (CRI Network API) by
// its name, one through a PodNetworkAttachment whose PodNetwork's
// parametersRefs name a NetworkAttachmentDefinition; the default PodNetwork
// is the runtime's; isDefaultGW moves the default route; the pod's
// PodNetwork status lists the default first, not the gateway, then both.
// PodNetworks missing, not Ready, disabled fail the sandbox with the reason;
// one of another provider is left to it.
func TestPodNetworks(t *testing.T) {
	r := newNPWGRig(t)
	pns := fakePodNetworks{networks: map[string]*pnv1.PodNetwork{
		"dataplane1": podNetwork("dataplane1", true),
		"storage":    podNetwork("storage", true, pnv1.ParametersRef{Group: "k8s.cni.cncf.io", Kind: "NetworkAttachmentDefinition", Namespace: "default", Name: "net-a"}),
		"pending":    podNetwork("pending", false),
		"elsewhere":  podNetwork("elsewhere", true),
		"off":        podNetwork("off", true),
	}, attachments: map[string]*pnv1.PodNetworkAttachment{
		"default/att": {ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "att"}, Spec: pnv1.PodNetworkAttachmentSpec{PodNetworkName: "storage"},
			Status: pnv1.PodNetworkAttachmentStatus{Conditions: readyConds(true, pnv1.ReasonReady)}},
	}}
	pns.networks["elsewhere"].Spec.Provider = "example.com/other"
	pns.networks["off"].Spec.Enabled = new(false)
	status := &fakePodNetworkStatus{}
	r.plugin.opts.PodNetworks = &PodNetworkOptions{Objects: pns, Status: status,
		Networks: fakeConfigs{"dataplane1": fmt.Sprintf(macvlanConf, "dataplane1")}}

	pod := npwgPod("")
	// The KEP's names (name, attachmentName) and fastpath's aliases.
	pod.PodNetworks = `[{"podNetworkName": "default"}, {"name": "dataplane1", "interfaceName": "net1"},
		{"attachmentName": "att", "interfaceName": "net2", "isDefaultGW": true}, {"podNetworkName": "elsewhere"}]`
	if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	if want := []string{"ADD net1", "ADD net2"}; !slices.Equal(r.cni.order, want) {
		t.Errorf("CNI calls %v, want %v", r.cni.order, want)
	}
	rec, _ := r.store.Get(npwgKey(npwgPodUID))
	var got []string
	for _, n := range rec.Networks {
		got = append(got, n.PodNetwork+"@"+n.IfName)
	}
	if want := []string{"dataplane1@net1", "storage@net2"}; !slices.Equal(got, want) {
		t.Errorf("recorded %v, want %v", got, want)
	}
	if !strings.Contains(string(rec.Networks[1].Conflist), `"master":"eth9"`) {
		t.Errorf("storage's configuration %s is not net-a's", rec.Networks[1].Conflist)
	}
	if want := []string{"/var/run/netns/web net2 via [10.1.0.1]"}; !slices.Equal(r.routes, want) {
		t.Errorf("default routes %v, want %v", r.routes, want)
	}
	r.plugin.reports.Wait()
	if len(status.entries) != 1 {
		t.Fatalf("PodNetwork status written %d times, want 1", len(status.entries))
	}
	sts := status.entries[0]
	if len(sts) != 3 || sts[0].Name != "default" || sts[0].InterfaceName != "eth0" || sts[0].IsDefaultGW || sts[0].IP != "10.244.0.5" ||
		sts[1].Name != "dataplane1" || sts[1].InterfaceName != "net1" || sts[1].IP == "" || sts[1].IsDefaultGW ||
		sts[2].Name != "storage" || sts[2].InterfaceName != "net2" || !sts[2].IsDefaultGW {
		t.Errorf("PodNetwork status %+v", sts)
	}
	if err := r.plugin.DetachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ networks, want string }{
		{`[{"podNetworkName": "nowhere"}]`, `PodNetwork nowhere: podnetworks.network.fastpath.dev "nowhere" not found`},
		{`[{"podNetworkName": "pending"}]`, "PodNetwork pending: not Ready: ParamsNotReady"},
		{`[{"podNetworkName": "off"}]`, "PodNetwork off: AdministrativelyDisabled"},
		{`[{"podNetworkAttachmentName": "gone"}]`, "PodNetworkAttachment default/gone"},
		{`[{"podNetworkName": "dataplane1"}, {"podNetworkName": "dataplane1"}]`, "Duplicate value"},
		{`[{"name": "storage", "interfaceName": "net1"}, {"attachmentName": "att", "interfaceName": "net2"}]`,
			"elements 0 and 1 both attach PodNetwork storage (element 1 through PodNetworkAttachment att): a pod references a PodNetwork once"},
	} {
		pod := npwgPod("")
		pod.PodNetworks = tc.networks
		err := r.plugin.AttachPod(r.ctx, pod)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to say %q", tc.networks, err, tc.want)
		}
		if names := r.cni.addedNames(); len(names) != 0 {
			t.Errorf("%s: networks left added: %v", tc.networks, names)
		}
		if _, ok := r.store.Get(npwgKey(npwgPodUID)); ok {
			t.Errorf("%s: a record left", tc.networks)
		}
	}
}

// A claim's device that is the pod's attachment to a PodNetwork (its
// config named it) is in the pod's PodNetwork status, with the addresses
// its config gave, after the default PodNetwork.
func TestPodNetworkStatusOfClaims(t *testing.T) {
	c := claims.Claim{Driver: claims.DriverFastpath, UID: "uid-dev", Namespace: "default", Name: "fast", Prepared: true,
		Pod: claims.Pod{UID: npwgPodUID, Name: "web"}, Devices: []claims.Device{{Request: "nic", Device: "pci-0000-3b-02-0", Mode: "netdev",
			PodNetwork: "fast", Pod: &claims.PodInterface{Name: "fast0", Addresses: []string{"10.7.0.2/24", "fd00:7::2/64"}},
			Attached: &claims.Attachment{SandboxID: "sandbox-1", NetNS: "/var/run/netns/web"}}}}
	r := newNPWGRig(t, c)
	r.plugin.opts.PodNetworks = &PodNetworkOptions{Objects: fakePodNetworks{}}
	sts, err := r.plugin.PodNetworkStatus(r.ctx, npwgPod(""))
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 2 || sts[0].Name != "default" || !sts[0].IsDefaultGW || sts[1].Name != "fast" || sts[1].InterfaceName != "fast0" ||
		fmt.Sprint(sts[1].IPs) != "[10.7.0.2 fd00:7::2]" {
		t.Errorf("PodNetwork status %+v", sts)
	}
}

// The default PodNetwork is the runtime's network on eth0: a pod that
// lists only it gets its status; it cannot be put on another interface,
// and a disabled one holds new pods that list it.
func TestDefaultPodNetwork(t *testing.T) {
	r := newNPWGRig(t)
	pns := fakePodNetworks{networks: map[string]*pnv1.PodNetwork{"default": podNetwork("default", true)}}
	status := &fakePodNetworkStatus{}
	r.plugin.opts.PodNetworks = &PodNetworkOptions{Objects: pns, Status: status}
	pod := npwgPod("")
	pod.PodNetworks = `[{"name": "default", "interfaceName": "eth0", "isDefaultGW": true}]`
	if err := r.plugin.AttachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}
	r.plugin.reports.Wait()
	if len(status.entries) != 1 || len(status.entries[0]) != 1 {
		t.Fatalf("PodNetwork status %+v, want one write of the default's", status.entries)
	}
	if st := status.entries[0][0]; st.Name != "default" || st.InterfaceName != "eth0" || !st.IsDefaultGW || st.IP != "10.244.0.5" {
		t.Errorf("the default's status %+v", st)
	}
	if err := r.plugin.DetachPod(r.ctx, pod); err != nil {
		t.Fatal(err)
	}

	pod.PodNetworks = `[{"name": "default", "interfaceName": "net5"}]`
	if err := r.plugin.AttachPod(r.ctx, pod); err == nil || !strings.Contains(err.Error(), "element 0: PodNetwork default is the runtime's network, on the pod's eth0: interfaceName net5 cannot move it") {
		t.Errorf("default on net5: %v", err)
	}
	pns.networks["default"].Spec.Enabled = new(false)
	pod.PodNetworks = `[{"name": "default"}]`
	if err := r.plugin.AttachPod(r.ctx, pod); err == nil || !strings.Contains(err.Error(), "PodNetwork default: AdministrativelyDisabled") {
		t.Errorf("a disabled default: %v", err)
	}
}
