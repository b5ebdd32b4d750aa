package filter

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
)

func TestCompile(t *testing.T) {
	for expr, want := range map[string]string{
		"": "empty CEL expression",
		`device.attributes["fastpath.dev"].kind ==`: `filter "device.attributes[\"fastpath.dev\"].kind ==":`,
		`"sriov-vf"`: `filter "\"sriov-vf\"":`,
	} {
		if _, err := Compile(expr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile(%q) = %v, want an error containing %q", expr, err, want)
		}
	}
}

func TestAdmits(t *testing.T) {
	kind := "sriov-vf"
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"fastpath.dev/kind": {StringValue: &kind}}
	for expr, want := range map[string]bool{
		`device.attributes["fastpath.dev"].kind == "sriov-vf"`: true,
		`device.attributes["fastpath.dev"].kind == "nic"`:      false,
		`device.driver == "fastpath.dev"`:                      true,
		`device.driver == "other.dev"`:                         false,
	} {
		e, err := Compile(expr)
		if err != nil {
			t.Fatal(err)
		}
		if e.String() != expr {
			t.Errorf("String() = %q, want %q", e.String(), expr)
		}
		got, err := e.Admits(t.Context(), "fastpath.dev", attrs)
		if err != nil || got != want {
			t.Errorf("%s: Admits = %v, %v; want %v", expr, got, err, want)
		}
	}
	// pfName is not an attribute of this device: an error, not admitted.
	e, err := Compile(`device.attributes["fastpath.dev"].pfName == "ens1f0"`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := e.Admits(t.Context(), "fastpath.dev", attrs); ok || err == nil || !strings.Contains(err.Error(), "pfName") {
		t.Errorf("Admits of a missing attribute = %v, %v; want false and an error naming it", ok, err)
	}
}
