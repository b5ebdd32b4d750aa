package dra

import (
	"fmt"
	"strings"
	"testing"

	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// addressList is a JSON list of n addresses, each made by addr.
func addressList(n int, addr func(i int) string) string {
	items := make([]string, n)
	for i := range items {
		items[i] = `"` + addr(i) + `"`
	}
	return "[" + strings.Join(items, ",") + "]"
}

// TestKubeletBoundedConfig: a claim's config over a bound, sent through
// the kubelet's NodePrepareResources, is refused with one error naming
// the field, the bound and the size; one within the bounds with many
// problems is refused with at most bounds.Problems of them said; every
// answer is at most bounds.MessageBytes; nothing of the claims is left.
func TestKubeletBoundedConfig(t *testing.T) {
	v4 := func(i int) string { return fmt.Sprintf("10.%d.%d.1/24", i/256%256, i%256) }
	wrong := func(i int) string { return fmt.Sprintf("%d/%s", i, strings.Repeat("x", 280)) }
	for _, tc := range []struct {
		name, config string
		want         []string // in the answer
		problems     int      // problems said
	}{
		{
			// 80 KB: each entry a problem.
			name:   "20,000 addresses",
			config: config(`"interface": {"name": "net1", "addresses": ` + addressList(20000, func(int) string { return "x" }) + `}`),
			want:   []string{"claim default/c, request \"nic\"", "config[0][FromClaim].parameters: Too long: is ", " bytes, more than the 10240 a config may have"},
		},
		{
			name:   "33 addresses",
			config: config(`"interface": {"name": "net1", "addresses": ` + addressList(33, v4) + `}`),
			want:   []string{"config[0][FromClaim].parameters.interface.addresses: Too many: 33: must have at most 32 items"},
		},
		{
			name:     "32 wrong addresses",
			config:   config(`"interface": {"name": "net1", "addresses": ` + addressList(32, wrong) + `}`),
			want:     []string{`claim default/c, request "nic", device ` + vfNetdev + `: [interface.addresses[0]: Invalid value:`, ", and 16 more]"},
			problems: bounds.Problems,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim := testClaim("c", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(tc.config))
			d, k, ctx := startTestDriver(t, &fakeObject{claim})
			resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: "default", Name: "c", Uid: string(claim.UID)}}})
			if err != nil {
				t.Fatal(err)
			}
			msg := resp.Claims[string(claim.UID)].Error
			if len(msg) > bounds.MessageBytes {
				t.Fatalf("an answer of %d bytes, more than %d", len(msg), bounds.MessageBytes)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("answer %.600q does not say %q", msg, w)
				}
			}
			if n := strings.Count(msg, "interface.addresses"); tc.problems > 0 && n != tc.problems || tc.problems == 0 && n > 1 {
				t.Errorf("%d problems said, want %d: %.600q", n, max(tc.problems, 1), msg)
			}
			assertNothingLeft(t, d)
		})
	}
}
