package npwg

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ipamClaim(network, iface string, ips ...string) *IPAMClaim {
	return &IPAMClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "vm-a"},
		Spec: IPAMClaimSpec{Network: network, Interface: iface}, Status: IPAMClaimStatus{IPs: ips}}
}

func claimList(t *testing.T, conf string) *libcni.NetworkConfigList {
	t.Helper()
	list, err := libcni.ConfListFromBytes([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func TestCheckIPAMClaim(t *testing.T) {
	list := claimList(t, `{"cniVersion":"1.0.0","name":"tenant-net","plugins":[{"type":"macvlan","capabilities":{"ips":true},"ipam":{"type":"static"}}]}`)
	att := &Attachment{Index: 1}
	att.Namespace, att.Name, att.InterfaceRequest, att.IPAMClaimReference = "tenant", "net-b", "net1", "vm-a"
	for name, tc := range map[string]struct {
		claim    *IPAMClaim
		want     string
		mismatch bool
	}{
		"the CNI network's name":             {claim: ipamClaim("tenant-net", "net1")},
		"the NetworkAttachmentDefinition":    {claim: ipamClaim("tenant/net-b", "")},
		"addresses of both families":         {claim: ipamClaim("tenant-net", "", "10.0.0.5/24", "fd00::5/64")},
		"another network":                    {claim: ipamClaim("other-net", "net1"), want: `spec.network "other-net"`, mismatch: true},
		"another namespace's network":        {claim: ipamClaim("other/net-b", "net1"), want: `spec.network "other/net-b"`, mismatch: true},
		"another interface":                  {claim: ipamClaim("tenant-net", "eth1"), want: `spec.interface "eth1"`, mismatch: true},
		"an address that is not a CIDR":      {claim: ipamClaim("tenant-net", "", "10.0.0.5"), want: `status.ips[0] "10.0.0.5" is not an address in CIDR form`},
		"two addresses of one family":        {claim: ipamClaim("tenant-net", "", "10.0.0.5/24", "10.0.0.6/24"), want: "two addresses of one family"},
		"a status address that is not an IP": {claim: ipamClaim("tenant-net", "", "vm"), want: "not an address"},
	} {
		t.Run(name, func(t *testing.T) {
			err := CheckIPAMClaim(tc.claim, att, list)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "tenant/vm-a") {
				t.Fatalf("error %v, want one naming the IPAMClaim and %q", err, tc.want)
			}
			if errors.Is(err, ErrIPAMClaimMismatch) != tc.mismatch {
				t.Errorf("errors.Is(%v, ErrIPAMClaimMismatch) = %v", err, !tc.mismatch)
			}
		})
	}
}

func TestNeedsIPsCapability(t *testing.T) {
	att := &Attachment{}
	att.Namespace, att.Name, att.IPAMClaimReference = "tenant", "net-b", "vm-a"
	if err := NeedsIPsCapability(att, claimList(t, `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"macvlan","capabilities":{"ips":true}}]}`)); err != nil {
		t.Fatal(err)
	}
	err := NeedsIPsCapability(att, claimList(t, `{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"macvlan","ipam":{"type":"dhcp"}},{"type":"tuning","capabilities":{"mac":true}}]}`))
	if !errors.Is(err, ErrCapability) {
		t.Fatalf("error %v, want ErrCapability", err)
	}
	for _, want := range []string{"ipam-claim-reference", "vm-a", `"ips"`, "macvlan, tuning", "tenant/net-b"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestWithOwner: status.ips are written once and never changed; the
// owner is the pod, the node holding it the pod's; an empty list, never
// null, for the CRD's schema.
func TestWithOwner(t *testing.T) {
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Given"}
	for name, tc := range map[string]struct {
		claim       *IPAMClaim
		ips         []string
		wantIPs     []string
		wantChanged bool
	}{
		"a new claim given addresses":   {claim: ipamClaim("n", ""), ips: []string{"10.0.0.5/24"}, wantIPs: []string{"10.0.0.5/24"}, wantChanged: true},
		"a new claim without addresses": {claim: ipamClaim("n", ""), wantIPs: []string{}, wantChanged: true},
		"addresses are never changed":   {claim: ipamClaim("n", "", "10.0.0.7/24"), ips: []string{"10.0.0.5/24"}, wantIPs: []string{"10.0.0.7/24"}, wantChanged: true},
	} {
		t.Run(name, func(t *testing.T) {
			tc.claim.Status.Conditions = []metav1.Condition{cond}
			st, changed := WithOwner(tc.claim, "virt-launcher-a", "node-a", tc.ips)
			if changed != tc.wantChanged || st.IPs == nil || !slices.Equal(st.IPs, tc.wantIPs) || st.OwnerPod == nil || st.OwnerPod.Name != "virt-launcher-a" {
				t.Errorf("status %+v changed %v, want ips %v, owner virt-launcher-a, changed %v", st, changed, tc.wantIPs, tc.wantChanged)
			}
			if len(st.Conditions) != 2 || st.Conditions[0] != cond {
				t.Errorf("conditions %v, want them kept", st.Conditions)
			}
			tc.claim.Status = st
			if HeldOn(tc.claim) != "node-a" {
				t.Errorf("held on %q, want node-a: %+v", HeldOn(tc.claim), st.Conditions)
			}
			if _, again := WithOwner(tc.claim, "virt-launcher-a", "node-a", tc.ips); again {
				t.Error("the same owner and addresses again are a change")
			}
		})
	}
}

// A node lets go of the IPAMClaim it holds, and only that: the condition
// says False, still naming it; another node's hold is not its to end.
func TestReleased(t *testing.T) {
	claim := ipamClaim("n", "", "10.0.0.7/24")
	if _, changed := Released(claim, "node-a", ReasonReleased); changed {
		t.Error("a claim no node holds let go")
	}
	claim.Status, _ = WithOwner(claim, "virt-launcher-a", "node-a", nil)
	if _, changed := Released(claim, "node-b", ReasonReleased); changed {
		t.Error("node-b let go of node-a's hold")
	}
	st, changed := Released(claim, "node-a", ReasonReleased)
	c := meta.FindStatusCondition(st.Conditions, IPAMClaimNodeCondition)
	if !changed || c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonReleased || c.Message != "node-a" ||
		!slices.Equal(st.IPs, []string{"10.0.0.7/24"}) || st.OwnerPod.Name != "virt-launcher-a" {
		t.Errorf("released: %+v (changed %v)", st, changed)
	}
	claim.Status = st
	if HeldOn(claim) != "" {
		t.Errorf("held on %q once let go", HeldOn(claim))
	}
	if _, again := Released(claim, "node-a", ReasonReleased); again {
		t.Error("let go twice")
	}
	// Taken again by a pod of another node.
	claim.Status, _ = WithOwner(claim, "virt-launcher-b", "node-b", nil)
	if HeldOn(claim) != "node-b" {
		t.Errorf("held on %q, want node-b", HeldOn(claim))
	}
}

// TestIPAMClaimOfAnotherNamespace: an element names an IPAMClaim of the
// pod's namespace only; a reference to another's is refused at parsing.
func TestIPAMClaimOfAnotherNamespace(t *testing.T) {
	_, errs := ParseNetworks("tenant", `[{"name": "net-b", "namespace": "shared", "ipam-claim-reference": "other/vm-a"}]`)
	if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), "ipam-claim-reference") {
		t.Fatalf("errors %v, want ipam-claim-reference refused", errs)
	}
}
