package claimspec

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// TestClaimError: a claim's few problems read as their aggregate does;
// many are said up to bounds.Problems, each cut, the rest counted, and
// the whole is at most bounds.MessageBytes.
func TestClaimError(t *testing.T) {
	few := field.ErrorList{field.Invalid(field.NewPath("interface", "mtu"), 70000, "must be between 68 and 65535"), field.Required(field.NewPath("ifName"), "")}
	e := &ClaimError{Claim: "default/a", Request: "nic", Device: "vf-1", Errs: few}
	if want := `claim default/a, request "nic", device vf-1: ` + few.ToAggregate().Error(); e.Error() != want {
		t.Errorf("error %q\nwant %q", e.Error(), want)
	}
	var many field.ErrorList
	long := strings.Repeat("x", 60000)
	for i := range 20000 {
		many = append(many, field.Invalid(field.NewPath("interface", "addresses").Index(i), long, "must be an address in CIDR form"))
	}
	e = &ClaimError{Claim: "default/a", Request: "nic", Reason: strings.Repeat("r", 40000), Errs: many}
	msg := e.Error()
	if len(msg) > bounds.MessageBytes {
		t.Errorf("%d bytes, more than %d", len(msg), bounds.MessageBytes)
	}
	e.Reason = "bad config"
	msg = e.Error()
	if n := strings.Count(msg, "interface.addresses["); n != bounds.Problems || !strings.HasSuffix(msg, fmt.Sprintf(", and %d more]", 20000-bounds.Problems)) {
		t.Errorf("%d problems said: %.200q...%q", n, msg, msg[max(0, len(msg)-60):])
	}
	if most := bounds.Problems*(bounds.ProblemBytes+2) + 100; len(msg) > most {
		t.Errorf("%d bytes, more than %d", len(msg), most)
	}
}
