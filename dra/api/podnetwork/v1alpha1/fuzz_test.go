package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/bounds/boundstest"
)

// FuzzPodNetworks: no annotation value makes the parser or the validation
// panic, they take at most boundstest.Budget and say at most
// bounds.MessageBytes, and a list they accept is one ValidateNetworks
// accepts again.
func FuzzPodNetworks(f *testing.F) {
	elems := func(n int) string {
		return "[" + strings.TrimSuffix(strings.Repeat(`{"podNetworkName": "A"},`, n), ",") + "]"
	}
	for _, n := range []int{0, 1} {
		f.Add(elems(bounds.Items+n), false)
		f.Add(`[{"podNetworkName": `+strings.Repeat("[", bounds.Depth-2+n)+strings.Repeat("]", bounds.Depth-2+n)+`}]`, false)
		f.Add(`[{"podNetworkName": "a"}]`+strings.Repeat(" ", bounds.AnnotationBytes-len(`[{"podNetworkName": "a"}]`)+n), false)
	}
	for _, seed := range []string{
		`[{"podNetworkName":"default","interfaceName":"eth0","isDefaultGW":true},{"podNetworkAttachmentName":"fast","interfaceName":"net2"}]`,
		`[]`, `null`, `[{}]`, `[{"podNetworkName":"a"},{"podNetworkName":"a"}]`, `[{"interfaceName":"a/b"}]`,
	} {
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, value string, hostNetwork bool) {
		var nets []Network
		var errs field.ErrorList
		boundstest.Check(t, func() string {
			nets, errs = PodNetworks(map[string]string{AnnotationNetworks: value}, hostNetwork)
			return bounds.Join(errs)
		})
		if len(errs) > 0 {
			return
		}
		if again := ValidateNetworks(field.NewPath("n"), nets, hostNetwork); len(again) > 0 {
			t.Fatalf("accepted %q, then refused it: %v", value, again)
		}
	})
}
