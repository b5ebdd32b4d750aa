package chart

import (
	"context"
	"os"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// crdValidator validates CNIConfig objects as the API server does with the
// chart's CRD: pruning, the dropping of nulls, the OpenAPI schema and the
// CEL rules.
type crdValidator struct {
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

func newCRDValidator(t *testing.T) crdValidator {
	t.Helper()
	data, err := os.ReadFile(chartFile(t, "crds/cniconfigs.cni.networking.x-k8s.io.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return crdValidatorOf(t, data)
}

// crdValidatorOf validates objects with the CRD data, the API server's
// way.
func crdValidatorOf(t *testing.T, data []byte) crdValidator {
	t.Helper()
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := apiextensions.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var internal apiextensions.CustomResourceDefinition
	if err := scheme.Convert(&crd, &internal, nil); err != nil {
		t.Fatal(err)
	}
	internal.Status.StoredVersions = []string{"v1alpha1"}
	// The API server's own checks of a CRD: a structural schema, CEL rules
	// that compile within the cost budget.
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), &internal); len(errs) > 0 {
		t.Fatalf("the API server would refuse the CRD: %v", errs)
	}
	props := internal.Spec.Validation.OpenAPIV3Schema
	ss, err := structuralschema.NewStructural(props)
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		t.Fatal(err)
	}
	return crdValidator{structural: ss, schema: v, cel: cel.NewValidator(ss, true, celconfig.PerCallLimit)}
}

func (c crdValidator) validate(doc string) (map[string]any, field.ErrorList) {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		return nil, field.ErrorList{field.Invalid(nil, doc, err.Error())}
	}
	structuralpruning.Prune(obj, c.structural, true)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, c.structural)
	errs := apiservervalidation.ValidateCustomResource(nil, obj, c.schema)
	celErrs, _ := c.cel.Validate(context.Background(), nil, c.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return obj, append(errs, celErrs...)
}

// validateUpdate validates the update of old to doc: the transition rules
// (oldSelf) too.
func (c crdValidator) validateUpdate(old map[string]any, doc string) field.ErrorList {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		return field.ErrorList{field.Invalid(nil, doc, err.Error())}
	}
	structuralpruning.Prune(obj, c.structural, true)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, c.structural)
	errs := apiservervalidation.ValidateCustomResource(nil, obj, c.schema)
	celErrs, _ := c.cel.Validate(context.Background(), nil, c.structural, obj, old, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// designCNIConfig is the CNI DRA driver design's CNIConfig example, with
// the apiVersion line the API server needs.
func designCNIConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../dra/api/v1alpha1/testdata/design-cniconfig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// The CRD is one the API server takes; the design's example is a valid
// object (its attributeRef one level up kept, its empty valueFrom dropped);
// the rules refuse what fastpathd would.
func TestCNIConfigCRDRules(t *testing.T) {
	c := newCRDValidator(t)
	obj, errs := c.validate(designCNIConfig(t))
	if len(errs) > 0 {
		t.Fatalf("the design's CNIConfig: %v", errs)
	}
	arg := obj["spec"].(map[string]any)["plugins"].([]any)[0].(map[string]any)["arguments"].([]any)[0].(map[string]any)
	if arg["attributeRef"] != "name" || arg["fieldPath"] != "master" || len(arg) != 2 {
		t.Errorf("the design's argument as stored: %v", arg)
	}
	for name, tc := range map[string]struct{ spec, want string }{
		"two sources":    {"plugins: [{type: macvlan, arguments: [{fieldPath: master, value: x, attributeRef: name}]}]", "must validate one and only one schema (oneOf)"},
		"no source":      {"plugins: [{type: macvlan, arguments: [{fieldPath: master}]}]", "must validate one and only one schema (oneOf)"},
		"loopback":       {"ifName: lo\nplugins: [{type: macvlan}]", "must not be '.', '..', lo or eth0"},
		"invisible":      {"ifName: \"net\\u200b1\"\nplugins: [{type: macvlan}]", "spec.ifName"},
		"banana":         {"cniVersion: banana\nplugins: [{type: macvlan}]", `spec.cniVersion: Unsupported value: "banana"`},
		"type in config": {"plugins: [{type: macvlan, config: {type: bridge}}]", "the plugin's type is plugins[].type, not config.type"},
		"a path":         {"plugins: [{type: ../../bin/sh}]", "spec.plugins[0].type"},
		"slice field":    {"plugins: [{type: macvlan, arguments: [{fieldPath: x, valueFrom: {resourceSliceFieldRef: {fieldPath: spec.devices}}}]}]", `Unsupported value: "spec.devices"`},
		"two keys":       {"plugins: [{type: macvlan, arguments: [{fieldPath: x, valueFrom: {configMapKeyRef: {name: m, key: k, attribute: a}}}]}]", "give exactly one of key, attribute and resourceSliceFieldRef"},
		"two sources in valueFrom": {"plugins: [{type: macvlan, arguments: [{fieldPath: x, valueFrom: {attributeRef: a, configMapKeyRef: {name: m, key: k}}}]}]",
			"give exactly one of attributeRef, resourceSliceFieldRef and configMapKeyRef"},
		"type by argument": {"plugins: [{type: macvlan, arguments: [{fieldPath: type, value: bridge}]}]", "the plugin's type cannot be set by an argument"},
		"empty element":    {"plugins: [{type: macvlan, arguments: [{fieldPath: a..b, value: 1}]}]", "spec.plugins[0].arguments[0].fieldPath"},
		"no plugins":       {"ifName: net1", "spec.plugins: Required value"},
		"too many plugins": {"plugins: [" + strings.Repeat("{type: tuning}, ", 16) + "{type: tuning}]", "spec.plugins: Too many"},
	} {
		t.Run(name, func(t *testing.T) {
			doc := "apiVersion: cni.networking.x-k8s.io/v1alpha1\nkind: CNIConfig\nmetadata: {name: refused}\nspec:\n  " +
				strings.ReplaceAll(tc.spec, "\n", "\n  ") + "\n"
			_, errs := c.validate(doc)
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors %v, want %q", errs, tc.want)
			}
		})
	}
}
