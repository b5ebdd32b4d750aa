package chart

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// schemaAt walks a CRD's openAPIV3Schema down properties (and items for
// "[]").
func schemaAt(t *testing.T, s map[string]any, path ...string) map[string]any {
	t.Helper()
	for _, p := range path {
		var next any
		if p == "[]" {
			next = s["items"]
		} else {
			props, _ := s["properties"].(map[string]any)
			next = props[p]
		}
		m, ok := next.(map[string]any)
		if !ok {
			t.Fatalf("no schema at %s", strings.Join(path, "."))
		}
		s = m
	}
	return s
}

func strings2(v any) []string {
	var out []string
	for _, e := range v.([]any) {
		out = append(out, e.(string))
	}
	return out
}

// The CRD of CNIConfig says what the API package says: libcni's cniVersions,
// the slice fields, plugin types as file names, the bounds.
func TestCNIConfigCRD(t *testing.T) {
	data, err := os.ReadFile(chartFile(t, "crds/cniconfigs.cni.networking.x-k8s.io.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Group, Scope string
			Names        struct{ Kind, Plural string }
			Versions     []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Group != v1alpha1.CNIGroup || crd.Spec.Scope != "Cluster" || crd.Spec.Names.Kind != v1alpha1.KindCNIConfig ||
		crd.Spec.Names.Plural != v1alpha1.CNIConfigResource || len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != v1alpha1.CNIVersion {
		t.Fatalf("CRD %+v", crd.Spec)
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	spec := schemaAt(t, root, "spec")
	if got := strings2(schemaAt(t, spec, "cniVersion")["enum"]); !slices.Equal(got, v1alpha1.SupportedCNIVersions()) {
		t.Errorf("cniVersion enum %q, want libcni's %q", got, v1alpha1.SupportedCNIVersions())
	}
	plugins := schemaAt(t, spec, "plugins")
	if plugins["maxItems"] != float64(bounds.Plugins) {
		t.Errorf("plugins maxItems %v, want %d", plugins["maxItems"], bounds.Plugins)
	}
	if args := schemaAt(t, spec, "plugins", "[]", "arguments"); args["maxItems"] != float64(bounds.Arguments) {
		t.Errorf("arguments maxItems %v, want %d", args["maxItems"], bounds.Arguments)
	}
	typ := schemaAt(t, spec, "plugins", "[]", "type")
	for _, p := range []string{"macvlan", "host-local", "a.b_c-1"} {
		if v1alpha1.ValidCNIPluginType(p) != nil || !strings.HasPrefix(typ["pattern"].(string), "^[A-Za-z0-9]") {
			t.Errorf("plugin type %q, pattern %v", p, typ["pattern"])
		}
	}
	for _, at := range [][]string{
		{"plugins", "[]", "arguments", "[]", "valueFrom", "resourceSliceFieldRef", "fieldPath"},
		{"plugins", "[]", "arguments", "[]", "valueFrom", "configMapKeyRef", "resourceSliceFieldRef", "fieldPath"},
	} {
		if got := strings2(schemaAt(t, spec, at...)["enum"]); !slices.Equal(got, v1alpha1.CNISliceFields) {
			t.Errorf("%s enum %q, want %q", strings.Join(at, "."), got, v1alpha1.CNISliceFields)
		}
	}
}

// The approved configs the chart renders are valid CNIConfig objects.
func TestApprovedConfigs(t *testing.T) {
	objs := render(t, "--values", chartFile(t, "ci/all-values.yaml"))
	n := 0
	for _, o := range objs {
		u, ok := o.(*runtime.Unknown)
		if !ok || !strings.Contains(string(u.Raw), "kind: CNIConfig") {
			continue
		}
		n++
		obj, errs := v1alpha1.DecodeCNIConfigObject(u.Raw, field.NewPath("rendered"))
		if len(errs) == 0 {
			errs = obj.Validate()
		}
		if len(errs) > 0 {
			t.Errorf("rendered CNIConfig: %v\n%s", errs, u.Raw)
		}
	}
	if n != 1 {
		t.Errorf("%d CNIConfigs rendered, want 1", n)
	}
}

// cni.configMapNamespaces ["*"]: one ClusterRoleBinding instead of a
// RoleBinding per namespace.
func TestConfigMapsEverywhere(t *testing.T) {
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte("cni: {enabled: true, configMapNamespaces: ['*']}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var bindings, roleBindings []string
	for _, o := range render(t, "--values", file) {
		switch b := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			bindings = append(bindings, b.Name)
		case *rbacv1.RoleBinding:
			roleBindings = append(roleBindings, b.Namespace+"/"+b.Name)
		}
	}
	slices.Sort(bindings)
	if !slices.Equal(bindings, []string{"fastpath", "fastpath-cni-configmaps", "fastpath-controller"}) ||
		!slices.Equal(roleBindings, []string{"fastpath-system/fastpath-controller"}) {
		t.Errorf("ClusterRoleBindings %q, RoleBindings %q", bindings, roleBindings)
	}
}
