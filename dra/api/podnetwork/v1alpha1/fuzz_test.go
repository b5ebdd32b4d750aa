package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FuzzPodNetworks: no annotation value makes the parser or the validation
// panic, and a list they accept is one ValidateNetworks accepts again.
func FuzzPodNetworks(f *testing.F) {
	for _, seed := range []string{
		`[{"podNetworkName":"default","interfaceName":"eth0","isDefaultGW":true},{"podNetworkAttachmentName":"fast","interfaceName":"net2"}]`,
		`[]`, `null`, `[{}]`, `[{"podNetworkName":"a"},{"podNetworkName":"a"}]`, `[{"interfaceName":"a/b"}]`,
	} {
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, value string, hostNetwork bool) {
		nets, errs := PodNetworks(map[string]string{AnnotationNetworks: value}, hostNetwork)
		if len(errs) > 0 {
			return
		}
		if again := ValidateNetworks(field.NewPath("n"), nets, hostNetwork); len(again) > 0 {
			t.Fatalf("accepted %q, then refused it: %v", value, again)
		}
	})
}
