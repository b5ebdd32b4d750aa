package v1alpha1

import (
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// wantErrors checks errs against want, substrings of the errors in order;
// none: no error.
func wantErrors(t *testing.T, errs field.ErrorList, want []string) {
	t.Helper()
	if len(errs) != len(want) {
		t.Fatalf("errors %v, want %d: %q", errs, len(want), want)
	}
	for i, w := range want {
		if !strings.Contains(errs[i].Error(), w) {
			t.Errorf("error %d %q, want %q in it", i, errs[i].Error(), w)
		}
	}
}

// readExample reads one of the KEP's examples (its status, which has
// fields a condition does not, left out).
func readExample(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if i := strings.Index(s, "status:\n"); i >= 0 {
		s = s[:i]
	}
	if err := yaml.UnmarshalStrict([]byte(s), v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func TestValidatePodNetwork(t *testing.T) {
	for _, file := range []string{"kep-podnetwork.yaml", "kep-podnetwork-params.yaml"} {
		var pn PodNetwork
		readExample(t, file, &pn)
		if errs := ValidatePodNetwork(&pn); len(errs) > 0 {
			t.Errorf("the KEP's %s: %v", file, errs)
		}
	}
	nad := func(ns string) ParametersRef {
		return ParametersRef{Group: "k8s.cni.cncf.io", Kind: "NetworkAttachmentDefinition", Name: "storage", Namespace: ns}
	}
	tooMany := make([]ParametersRef, maxParametersRefs+1)
	for i := range tooMany {
		tooMany[i] = nad("net-ops")
	}
	for name, tc := range map[string]struct {
		pn   PodNetwork
		want []string
	}{
		"fastpath's, a NAD of a namespace": {pn: PodNetwork{ObjectMeta: metav1.ObjectMeta{Name: "storage"}, Spec: PodNetworkSpec{ParametersRefs: []ParametersRef{nad("net-ops")}}}},
		"another kind without a namespace": {pn: PodNetwork{ObjectMeta: metav1.ObjectMeta{Name: "a"},
			Spec: PodNetworkSpec{ParametersRefs: []ParametersRef{{Group: "cni.networking.x-k8s.io", Kind: "CNIConfig", Name: "approved"}}}}},
		"no name":  {want: []string{"metadata.name: Required value"}},
		"bad name": {pn: PodNetwork{ObjectMeta: metav1.ObjectMeta{Name: "Data_Plane"}}, want: []string{`metadata.name: Invalid value: "Data_Plane"`}},
		"provider": {pn: PodNetwork{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: PodNetworkSpec{Provider: "foo"}}, want: []string{`spec.provider: Invalid value: "foo": must be a domain-prefixed identifier`}},
		"long provider": {pn: PodNetwork{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: PodNetworkSpec{Provider: "acme.io/" + strings.Repeat("x", 250)}},
			want: []string{"spec.provider: Too long: may not be more than 253"}},
		"a NAD without a namespace": {pn: PodNetwork{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: PodNetworkSpec{ParametersRefs: []ParametersRef{nad("")}}},
			want: []string{"spec.parametersRefs[0].namespace: Required value: a NetworkAttachmentDefinition is namespaced"}},
		"the KEP's spelling of a NAD without a namespace": {pn: PodNetwork{ObjectMeta: metav1.ObjectMeta{Name: "a"},
			Spec: PodNetworkSpec{ParametersRefs: []ParametersRef{{Group: "k8s.cni.cncf.io", Kind: "network-attachment-definitions", Name: "x"}}}},
			want: []string{"spec.parametersRefs[0].namespace: Required value"}},
		"a ref without kind and name": {pn: PodNetwork{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: PodNetworkSpec{ParametersRefs: []ParametersRef{{Group: "g"}}}},
			want: []string{"spec.parametersRefs[0].kind: Required value", "spec.parametersRefs[0].name: Required value"}},
		"a namespace no namespace has": {pn: PodNetwork{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: PodNetworkSpec{ParametersRefs: []ParametersRef{nad("Net_Ops")}}},
			want: []string{`spec.parametersRefs[0].namespace: Invalid value: "Net_Ops": no namespace can have this name`}},
		"too many refs": {pn: PodNetwork{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: PodNetworkSpec{ParametersRefs: tooMany}},
			want: []string{"spec.parametersRefs: Too many: 17: must have at most 16 items"}},
	} {
		t.Run(name, func(t *testing.T) { wantErrors(t, ValidatePodNetwork(&tc.pn), tc.want) })
	}
}

func TestValidatePodNetworkAttachment(t *testing.T) {
	var kep PodNetworkAttachment
	readExample(t, "kep-podnetworkattachment.yaml", &kep)
	if errs := ValidatePodNetworkAttachment(&kep); len(errs) > 0 {
		t.Errorf("the KEP's example: %v", errs)
	}
	meta := metav1.ObjectMeta{Name: "fast", Namespace: "app"}
	for name, tc := range map[string]struct {
		pna  PodNetworkAttachment
		want []string
	}{
		"a NAD of its own namespace": {pna: PodNetworkAttachment{ObjectMeta: meta, Spec: PodNetworkAttachmentSpec{PodNetworkName: "storage",
			ParametersRefs: []ParametersRef{{Group: "k8s.cni.cncf.io", Kind: "NetworkAttachmentDefinition", Name: "fast"}}}}},
		"no PodNetwork": {pna: PodNetworkAttachment{ObjectMeta: meta}, want: []string{"spec.podNetworkName: Required value"}},
		"a PodNetwork name no PodNetwork has": {pna: PodNetworkAttachment{ObjectMeta: meta, Spec: PodNetworkAttachmentSpec{PodNetworkName: "Storage"}},
			want: []string{`spec.podNetworkName: Invalid value: "Storage": no PodNetwork can have this name`}},
		"bad namespace": {pna: PodNetworkAttachment{ObjectMeta: metav1.ObjectMeta{Name: "fast", Namespace: "App"}, Spec: PodNetworkAttachmentSpec{PodNetworkName: "a"}},
			want: []string{`metadata.namespace: Invalid value: "App"`}},
		"a ref without a name": {pna: PodNetworkAttachment{ObjectMeta: meta, Spec: PodNetworkAttachmentSpec{PodNetworkName: "a",
			ParametersRefs: []ParametersRef{{Group: "g", Kind: "k"}}}}, want: []string{"spec.parametersRefs[0].name: Required value"}},
		"a long kind": {pna: PodNetworkAttachment{ObjectMeta: meta, Spec: PodNetworkAttachmentSpec{PodNetworkName: "a",
			ParametersRefs: []ParametersRef{{Group: "g", Kind: strings.Repeat("k", 64), Name: "n"}}}}, want: []string{"spec.parametersRefs[0].kind: Too long: may not be more than 63"}},
	} {
		t.Run(name, func(t *testing.T) { wantErrors(t, ValidatePodNetworkAttachment(&tc.pna), tc.want) })
	}
}
