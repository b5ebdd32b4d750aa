package npwg

import (
	"errors"
	"strings"
	"testing"
)

func TestPolicy(t *testing.T) {
	for name, tc := range map[string]struct {
		policy  Policy
		podNS   string
		network Attachment
		err     string
	}{
		"the pod's own namespace":          {podNS: "app", network: att(0, "app", "net-a")},
		"the pod's own namespace, allowed": {policy: Policy{AllowedNamespaces: []string{"infra"}}, podNS: "app", network: att(0, "app", "net-a")},
		"another namespace, allowed":       {policy: Policy{AllowedNamespaces: []string{"infra", "shared"}}, podNS: "app", network: att(0, "shared", "net-a")},
		"every namespace allowed":          {policy: Policy{AllowedNamespaces: []string{AllNamespaces}}, podNS: "app", network: att(0, "anything", "net-a")},
		"another namespace, none allowed": {podNS: "app", network: att(0, "other", "net-c"),
			err: "network not allowed: network other/net-c: a pod of namespace app may use the networks of its own namespace and of those the operator allows (none)"},
		"another namespace, not among those allowed": {policy: Policy{AllowedNamespaces: []string{"infra", "shared"}}, podNS: "app", network: att(0, "other", "net-c"),
			err: "(infra, shared)"},
		// No namespace is special, the one called default included.
		"the default namespace, not allowed": {podNS: "app", network: att(0, "default", "net-a"), err: "network default/net-a"},
		"from the default namespace":         {podNS: "default", network: att(0, "kube-system", "net-a"), err: "network kube-system/net-a"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.policy.Check(tc.podNS, &tc.network)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrNotAllowed)):
				t.Errorf("error %v, want ErrNotAllowed and %q", err, tc.err)
			}
		})
	}
}

// An element that names no namespace is of the pod's (§4.1.1), so the
// policy lets it through.
func TestPolicyParsed(t *testing.T) {
	atts, errs := ParseNetworks("app", "net-a,app/net-b,other/net-c")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var p Policy
	for i, a := range atts {
		if err := p.Check("app", &a); (err != nil) != (i == 2) {
			t.Errorf("%s: %v", a.Network(), err)
		}
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := (Policy{AllowedNamespaces: []string{"infra", AllNamespaces}}).Validate(); err != nil {
		t.Error(err)
	}
	err := Policy{AllowedNamespaces: []string{"ok", "Not_OK", "a.b"}}.Validate()
	if err == nil || !strings.Contains(err.Error(), `allowed namespace "Not_OK"`) || !strings.Contains(err.Error(), `allowed namespace "a.b"`) {
		t.Errorf("error %v", err)
	}
}
