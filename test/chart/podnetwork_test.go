package chart

import (
	"os"
	"strings"
	"testing"

	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// podNetworkCRDs renders the PodNetwork and PodNetworkAttachment CRDs,
// validators of each by kind.
func podNetworkCRDs(t *testing.T) map[string]crdValidator {
	t.Helper()
	out, err := helmTemplate(t, "--set", "podNetworks.enabled=true", "--show-only", "templates/podnetwork-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crds := map[string]crdValidator{}
	for _, doc := range strings.Split(out, "\n---\n") {
		var crd struct {
			Spec struct{ Names struct{ Kind string } }
		}
		if err := yaml.Unmarshal([]byte(doc), &crd); err != nil || crd.Spec.Names.Kind == "" {
			continue
		}
		crds[crd.Spec.Names.Kind] = crdValidatorOf(t, []byte(doc))
	}
	if len(crds) != 2 {
		t.Fatalf("CRDs %v, want PodNetwork and PodNetworkAttachment", crds)
	}
	return crds
}

// kepExample is one of the KEP's examples as the API server validates it
// on create: without its status, which a create drops (the status
// subresource), and whose conditions have neither reason nor message.
func kepExample(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile("../../dra/api/podnetwork/v1alpha1/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	return s[:strings.Index(s, "status:\n")]
}

func wantErrors(t *testing.T, what string, errs field.ErrorList, want string) {
	t.Helper()
	switch {
	case want == "" && len(errs) > 0:
		t.Errorf("%s: refused: %v", what, errs)
	case want != "" && (len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), want)):
		t.Errorf("%s: errors %v, want %q", what, errs, want)
	}
}

// The CRDs take the KEP's examples, default enabled to true, refuse what
// the KEP's validations refuse and keep spec immutable but for enabled.
func TestPodNetworkCRDRules(t *testing.T) {
	crds := podNetworkCRDs(t)
	pn, pna := crds["PodNetwork"], crds["PodNetworkAttachment"]

	for _, file := range []string{"kep-podnetwork.yaml", "kep-podnetwork-params.yaml"} {
		if _, errs := pn.validate(kepExample(t, file)); len(errs) > 0 {
			t.Errorf("%s: %v", file, errs)
		}
	}
	if _, errs := pna.validate(kepExample(t, "kep-podnetworkattachment.yaml")); len(errs) > 0 {
		t.Errorf("the KEP's PodNetworkAttachment: %v", errs)
	}
	defaulted, errs := pn.validate("apiVersion: network.fastpath.dev/v1alpha1\nkind: PodNetwork\nmetadata: {name: default}\nspec: {}")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	const head = "apiVersion: network.fastpath.dev/v1alpha1\nkind: PodNetwork\nmetadata: {name: a}\n"
	for name, tc := range map[string]struct{ doc, want string }{
		"no spec":               {"apiVersion: network.fastpath.dev/v1alpha1\nkind: PodNetwork\nmetadata: {name: a}", "spec: Required value"},
		"provider not a domain": {head + "spec: {provider: foo}", "spec.provider: Invalid value"},
		"provider a number":     {head + "spec: {provider: 5}", "spec.provider: Invalid value"},
		"enabled a string":      {head + "spec: {enabled: maybe}", "spec.enabled: Invalid value"},
		"ref without a name":    {head + "spec: {parametersRefs: [{group: g, kind: k}]}", "spec.parametersRefs[0].name: Required value"},
		"ref without a kind":    {head + "spec: {parametersRefs: [{group: g, name: n}]}", "spec.parametersRefs[0].kind: Required value"},
		"ref name not a string": {head + "spec: {parametersRefs: [{group: g, kind: k, name: [n]}]}", "spec.parametersRefs[0].name: Invalid value"},
		"ref of the core group": {head + "spec: {parametersRefs: [{group: '', kind: ConfigMap, name: cm, namespace: d}]}", ""},
	} {
		_, errs := pn.validate(tc.doc)
		wantErrors(t, name, errs, tc.want)
	}
	structuraldefaulting.Default(defaulted, pn.structural)
	if enabled := defaulted["spec"].(map[string]any)["enabled"]; enabled != true {
		t.Errorf("enabled defaults to %v, want true", enabled)
	}

	// Updates: spec immutable but for enabled.
	old, _ := pn.validate(kepExample(t, "kep-podnetwork-params.yaml"))
	params := kepExample(t, "kep-podnetwork-params.yaml")
	for name, tc := range map[string]struct{ doc, want string }{
		"enabled: false":   {strings.Replace(params, "enabled: true", "enabled: false", 1), ""},
		"provider changed": {strings.Replace(params, "k8s.cni.cncf.io/multus", "acme.io/foo", 1), "provider is immutable"},
		"provider removed": {strings.Replace(params, `  provider: "k8s.cni.cncf.io/multus"`+"\n", "", 1), "provider is immutable"},
		"a ref changed":    {strings.Replace(params, "name: parametersA", "name: parametersC", 1), "parametersRefs is immutable"},
		"the refs removed": {params[:strings.Index(params, "  parametersRefs:")] + "status: {}\n", "parametersRefs is immutable"},
		"status alone":     {strings.Replace(params, `status: "True"`, `status: "False"`, 1), ""},
	} {
		wantErrors(t, name, pn.validateUpdate(old, tc.doc), tc.want)
	}

	const pnaHead = "apiVersion: network.fastpath.dev/v1alpha1\nkind: PodNetworkAttachment\nmetadata: {name: a, namespace: d}\n"
	for name, tc := range map[string]struct{ doc, want string }{
		"no podNetworkName":    {pnaHead + "spec: {}", "spec.podNetworkName: Required value"},
		"empty podNetworkName": {pnaHead + "spec: {podNetworkName: ''}", "spec.podNetworkName: Invalid value"},
		"ref without a group":  {pnaHead + "spec: {podNetworkName: a, parametersRefs: [{kind: k, name: n}]}", "spec.parametersRefs[0].group: Required value"},
	} {
		_, errs := pna.validate(tc.doc)
		wantErrors(t, name, errs, tc.want)
	}
	oldPNA, _ := pna.validate(kepExample(t, "kep-podnetworkattachment.yaml"))
	att := kepExample(t, "kep-podnetworkattachment.yaml")
	for name, tc := range map[string]struct{ doc, want string }{
		"podNetworkName changed": {strings.Replace(att, `podNetworkName: "dataplane"`, `podNetworkName: "other"`, 1), "spec is immutable"},
		"a ref changed":          {strings.Replace(att, "name: attachparameters", "name: other", 1), "spec is immutable"},
		"status alone":           {att + statusReady, ""},
	} {
		wantErrors(t, name, pna.validateUpdate(oldPNA, tc.doc), tc.want)
	}
}

const statusReady = "status: {conditions: [{type: Ready, status: 'True', reason: Ready, message: '', lastTransitionTime: '2022-11-17T18:38:01Z'}]}\n"

// podNetworks off: no CRD, no controller rights over them, no flag.
func TestPodNetworksOff(t *testing.T) {
	out, err := helmTemplate(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"podnetworks", "--podnetworks", "network.fastpath.dev"} {
		if strings.Contains(out, s) {
			t.Errorf("the defaults render %q", s)
		}
	}
	// podNetworks alone runs the controller (without the CNI driver).
	out, err = helmTemplate(t, "--set", "podNetworks.enabled=true", "--set", "cni.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"kind: Deployment", "- --podnetworks", "- --podnetwork-params-recheck=30s", "resources: [podnetworks/status, podnetworkattachments/status]"} {
		if !strings.Contains(out, s) {
			t.Errorf("podNetworks.enabled renders no %q", s)
		}
	}
	if strings.Contains(out, "--disable-default-podnetwork-creation") {
		t.Error("the default PodNetwork is not created by default")
	}
	if strings.Contains(out, "--npwg-allowed-namespaces") {
		t.Error("no namespace is allowed by default, yet the flag is rendered")
	}
	// The controller judges PodNetworkAttachments' refs with the nodes'
	// allowed namespaces.
	out, err = helmTemplate(t, "--set", "podNetworks.enabled=true", "--set", "npwg.allowedNamespaces={net-shared,infra}",
		"--show-only", "templates/controller.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "- --npwg-allowed-namespaces=net-shared,infra") {
		t.Errorf("the controller is not given npwg.allowedNamespaces:\n%s", out)
	}
}
