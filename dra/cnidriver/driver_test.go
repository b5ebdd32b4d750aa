package cnidriver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// testDriver is a driver not serving, with the tests' device attributes.
func testDriver(t *testing.T, opts Options) *Driver {
	t.Helper()
	opts.Attributes, opts.PluginDir, opts.Store = testAttributes, t.TempDir(), testStore(t)
	if opts.Devices == 0 {
		opts.Devices = 1
	}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func macvlan(ifName string) string {
	return `{` + strings.Replace(cniHead, `"net1"`, `"`+ifName+`"`, 1) + `, "plugins": [{"type": "macvlan", "config": {"mode": "bridge"}, "arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`
}

func TestCNIPlan(t *testing.T) {
	d := testDriver(t, Options{NodeName: testNode, Policy: testPolicy})
	st, err := d.plan(t.Context(), cniTestClaim([]string{"a", "b"}, fromClaimFor("a", macvlan("net1")), fromClaimFor("b", macvlan("net2"))))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Networks) != 2 || st.Networks[0].IfName != "net1" || st.Networks[1].IfName != "net2" ||
		!strings.Contains(string(st.Networks[1].Conflist), `"name":"default_net_b"`) {
		t.Errorf("planned networks = %+v", st.Networks)
	}

	for name, tc := range map[string]struct {
		claim *resourceapi.ResourceClaim
		want  []string
	}{
		"no config":   {cniTestClaim([]string{"a"}), []string{`request "a"`, "has 0 CNI configs"}},
		"two configs": {cniTestClaim([]string{"a"}, fromClaim(macvlan("net1")), fromClaimFor("a", macvlan("net2"))), []string{"has 2 CNI configs"}},
		"same ifName": {cniTestClaim([]string{"a", "b"}, fromClaimFor("a", macvlan("net1")), fromClaimFor("b", macvlan("net1"))),
			[]string{`request "b"`, "ifName: Duplicate value", `request \"a\"`}},
		"count 2": {func() *resourceapi.ResourceClaim {
			c := cniTestClaim([]string{"a"}, fromClaim(macvlan("net1")))
			c.Spec.Devices.Requests[0].Exactly.Count = 2
			return c
		}(), []string{"exactly one device"}},
		"two pods": {func() *resourceapi.ResourceClaim {
			c := cniTestClaim([]string{"a"}, fromClaim(macvlan("net1")))
			c.Status.ReservedFor = append(c.Status.ReservedFor, c.Status.ReservedFor[0])
			return c
		}(), []string{"exactly one pod"}},
		"not allowed": {cniTestClaim([]string{"a"}, fromClaim(strings.Replace(macvlan("net1"), "macvlan", "ptp", 1))),
			[]string{"claim default/net", `request "a"`, "device cni-0", "allowlist"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := d.plan(t.Context(), tc.claim)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestCNIPrepareStopsWhenContextEnds: a Prepare or Unprepare of a CNI
// claim waiting for the claim's lock returns when its context ends, with
// an error naming the claim and wrapping the context's.
func TestCNIPrepareStopsWhenContextEnds(t *testing.T) {
	d := testDriver(t, Options{NodeName: testNode, Policy: testPolicy})
	claim := cniTestClaim([]string{"a"}, fromClaim(macvlan("net1")))
	key := claims.Key{Driver: claims.DriverCNI, UID: claim.UID}
	unlock := d.opts.Store.Lock(key)
	defer unlock()
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	done := make(chan error, 2)
	go func() {
		out, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
		done <- out[claim.UID].Err
		errs, _ := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: claim.Namespace, Name: claim.Name}, UID: claim.UID}})
		done <- errs[claim.UID]
	}()
	for _, call := range []string{"prepare", "unprepare"} {
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "claim default/net") {
				t.Errorf("%s: %v, want the claim named and the context's end", call, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not return after its context ended", call)
		}
	}
	if _, ok := d.opts.Store.Get(key); ok {
		t.Error("the claim was recorded")
	}
}

// TestCNIBoundedConfig: a CNI claim whose config holds many host paths
// ("/...", each a problem) is refused with at most bounds.Problems of them
// said and the rest counted; one over the config's bound with one error
// naming the bound and the size; every answer is at most
// bounds.MessageBytes, and nothing is recorded.
func TestCNIBoundedConfig(t *testing.T) {
	paths := func(lists, each int) string {
		var fields []string
		for i := range lists {
			fields = append(fields, fmt.Sprintf(`"l%d": [%s]`, i, strings.TrimSuffix(strings.Repeat(`"/a",`, each), ",")))
		}
		return `{` + cniHead + `, "plugins": [{"type": "macvlan", "config": {` + strings.Join(fields, ", ") +
			`}, "arguments": [{"fieldPath": "master", "attributeRef": "name"}]}]}`
	}
	within, over := paths(7, 250), paths(160, 250)
	if len(within) > bounds.ConfigBytes || len(over) < 200_000 {
		t.Fatalf("configs of %d and %d bytes", len(within), len(over))
	}
	for _, tc := range []struct {
		name, config string
		want         []string
		problems     int
	}{
		{name: "1,750 host paths", config: within, problems: bounds.Problems,
			want: []string{`claim default/net, request "a", device cni-0: [config[0][FromClaim].parameters.plugins[0].config.l0[0]: Forbidden: names an object of the host`,
				fmt.Sprintf(", and %d more]", 7*250-bounds.Problems)}},
		{name: "200 KB of host paths", config: over, problems: 0,
			want: []string{fmt.Sprintf(`claim default/net, request "a", device cni-0: config[0][FromClaim].parameters: Too long: is %d bytes, more than the 10240 a config may have`, len(over))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testDriver(t, Options{NodeName: testNode, Policy: testPolicy})
			claim := cniTestClaim([]string{"a"}, fromClaim(tc.config))
			out, err := d.PrepareResourceClaims(t.Context(), []*resourceapi.ResourceClaim{claim})
			if err != nil {
				t.Fatal(err)
			}
			msg := out[claim.UID].Err.Error()
			if len(msg) > bounds.MessageBytes {
				t.Fatalf("an answer of %d bytes, more than %d", len(msg), bounds.MessageBytes)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("answer %.600q does not say %q", msg, w)
				}
			}
			if n := strings.Count(msg, "Forbidden"); n != tc.problems {
				t.Errorf("%d problems said, want %d", n, tc.problems)
			}
			if _, ok := d.opts.Store.Get(claims.Key{Driver: claims.DriverCNI, UID: claim.UID}); ok {
				t.Error("the claim was recorded")
			}
		})
	}
}
