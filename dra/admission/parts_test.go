package admission

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// TestMembers: the members of an object and the items of a list, as
// slices of the document, whatever the white space, the escapes and the
// brackets in strings.
func TestMembers(t *testing.T) {
	doc := []byte(" {\"a\" : [1, \"]\\\"[\", {\"b\": {}}] ,\n\"c\\u0064\":null,\"e\":\"x,}\" } ")
	var keys, values []string
	for k, v := range members(doc) {
		keys, values = append(keys, keyString(k)), append(values, string(v))
	}
	if want := []string{"a", "cd", "e"}; !slices.Equal(keys, want) {
		t.Errorf("keys %q, want %q", keys, want)
	}
	if want := []string{`[1, "]\"[", {"b": {}}]`, `null`, `"x,}"`}; !slices.Equal(values, want) {
		t.Errorf("values %q, want %q", values, want)
	}
	var list []string
	for v := range items([]byte(`[ 1 ,"a]" , [2,3],{} ]`)) {
		list = append(list, string(v))
	}
	if want := []string{`1`, `"a]"`, `[2,3]`, `{}`}; !slices.Equal(list, want) {
		t.Errorf("items %q, want %q", list, want)
	}
	for doc, want := range map[string]int{`[]`: 0, `[ ]`: 0, `{}`: 0, `[[]]`: 1, `{"a":1,"b":[1,2]}`: 2, `"not a list"`: 0} {
		if n := count([]byte(doc)); n != want {
			t.Errorf("count(%s) = %d, want %d", doc, n, want)
		}
	}
}

// TestKeys: a field's key is matched as encoding/json matches it, letter
// case folded and escapes decoded; a map's key exactly.
func TestKeys(t *testing.T) {
	for key, want := range map[string]bool{`"spec"`: true, `"Spec"`: true, `"SPEC"`: true, `"ſpec"`: true, `"\u0073pec"`: true,
		`"specs"`: false, `"spe"`: false, `""`: false} {
		if got := fieldIs([]byte(key), "spec"); got != want {
			t.Errorf("fieldIs(%s, spec) = %v, want %v", key, got, want)
		}
	}
	for key, want := range map[string]bool{`"k8s.v1.cni.cncf.io/networks"`: true, `"k8s.v1.cni.cncf.io\/networks"`: true,
		`"K8s.v1.cni.cncf.io/networks"`: false, `"k8s.v1.cni.cncf.io/Networks"`: false} {
		if got := keyIs([]byte(key), "k8s.v1.cni.cncf.io/networks"); got != want {
			t.Errorf("keyIs(%s) = %v, want %v", key, got, want)
		}
	}
}

// TestSize: a string's size is its bytes once decoded; another value's,
// its bytes as written.
func TestSize(t *testing.T) {
	for doc, want := range map[string]int{`"abc"`: 3, `"a\"b"`: 3, `"\u00e9"`: 2, `"é"`: 2, "\"\xff\"": 3, ` {"a": 1} `: 8, `123`: 3} {
		if n := size([]byte(doc)); n != want {
			t.Errorf("size(%s) = %d, want %d", doc, n, want)
		}
	}
}

// TestProject: the judged parts are the object's apiVersion, kind, name,
// namespace, the annotations fastpath reads and spec (a pod's
// hostNetwork), as written and as often as written; the rest is left
// out.
func TestProject(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  bool
		doc  string
		want string
	}{
		{"claim", false,
			`{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "a", "namespace": "n", "uid": "u", "labels": {"x": "y"}, "managedFields": [{}]}, "spec": {"devices": {}}, "status": {"x": 1}}`,
			`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"a","namespace":"n"},"spec":{"devices": {}}}`},
		{"pod", true,
			`{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {"k8s.v1.cni.cncf.io/networks": "a", "other": "b", "network.fastpath.dev/networks": "[]"}}, "spec": {"hostNetwork": false, "containers": [{"name": "c"}], "resourceClaims": []}}`,
			`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","annotations":{"k8s.v1.cni.cncf.io/networks":"a","network.fastpath.dev/networks":"[]"}},"spec":{"hostNetwork":false}}`},
		{"keys as the decoders read them, twice as written", false,
			`{"Kind": "X", "kind": "Y", "SPEC": 1, "spec": 2, "Metadata": 3}`,
			`{"Kind":"X","kind":"Y","SPEC":1,"spec":2,"Metadata":3}`},
		{"not objects", true, `{"metadata": [1], "spec": "s"}`, `{"metadata":[1],"spec":"s"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(project([]byte(tc.doc), tc.pod)); got != tc.want {
				t.Errorf("project:\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestScanParts: a list or object of more than bounds.Items items, or
// nesting deeper than nestingBound, is refused at its path; one at the
// bound is not.
func TestScanParts(t *testing.T) {
	nested := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"at the bounds", `{"spec": {"a": ` + list(bounds.Items, `"x"`) + `, "b": ` + nested(nestingBound-2) + `}}`, ""},
		{"brackets and commas in strings", `{"spec": "` + strings.Repeat(`[,`, 2*bounds.Items) + `"}`, ""},
		{"a list over", `{"spec": {"config": [{}, {"x": ` + list(bounds.Items+1, `1`) + `}]}}`,
			"spec.config[1].x: Too many: 257: must have at most 256 items"},
		{"an object over", `{"spec": {` + strings.TrimSuffix(strings.Repeat(`"k":1,`, bounds.Items+1), ",") + `}}`,
			"spec: Too many: 257: must have at most 256 items"},
		{"too deep", `{"spec": ` + nested(nestingBound) + `}`,
			"spec" + strings.Repeat("[0]", nestingBound-1) + ": Too many: 65: must have at most 64 levels of nested objects and lists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := scanParts([]byte(tc.doc))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("error %v, want %s", err, tc.want)
			}
		})
	}
}

// judgedView is what validate reads of an object, as sigs.k8s.io/json
// and encoding/json read it.
type judgedView struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec any `json:"spec"`
}

// views are an object's judgedView as both decoders read it, the
// annotations fastpath does not read left out and, for a pod, of its spec
// hostNetwork alone; ok is false when it does not decode.
func views(js []byte, pod bool) (views [2]judgedView, ok bool) {
	decoders := []func([]byte, any) error{json.Unmarshal, sigsjson.UnmarshalCaseSensitivePreserveInts}
	for i, decode := range decoders {
		if err := decode(js, &views[i]); err != nil {
			return views, false
		}
		v := &views[i]
		maps.DeleteFunc(v.Metadata.Annotations, func(k, _ string) bool { return !slices.Contains(judgedAnnotations, k) })
		if len(v.Metadata.Annotations) == 0 {
			v.Metadata.Annotations = nil
		}
		if spec, isMap := v.Spec.(map[string]any); pod && isMap {
			maps.DeleteFunc(spec, func(k string, _ any) bool { return !strings.EqualFold(k, "hostNetwork") })
		}
	}
	return views, true
}

// FuzzProject: whatever the object, its judged parts are JSON, and both
// decoders read in them what they read in the object: the same kind,
// name, namespace, annotations fastpath reads and spec.
func FuzzProject(f *testing.F) {
	for _, seed := range []string{lowMTU, goodPod, masterNAD, sameNetTwice} {
		js, err := yaml.YAMLToJSON([]byte(seed))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(js), strings.Contains(seed, `"kind": "Pod"`))
	}
	f.Add(`{"kind": "Pod", "metadata": {"annotations": {"k8s.v1.cni.cncf.io\/networks": "a", "x": "y"}}, "SPEC": {"hostNetwork": true, "HOSTNETWORK": false}}`, true)
	f.Add(`{"Spec": 1, "spec": {"a": [1, {"b": "}"}]}, "Kind": "X", "ſpec": null}`, false)
	f.Fuzz(func(t *testing.T, doc string, pod bool) {
		js := []byte(doc)
		if !json.Valid(js) || !isObject(js) {
			return
		}
		parts := project(js, pod)
		if !json.Valid(parts) {
			t.Fatalf("the parts of %s are not JSON: %s", js, parts)
		}
		want, ok := views(js, pod)
		if !ok {
			return
		}
		got, ok := views(parts, pod)
		if !ok {
			t.Fatalf("the parts %s of %s do not decode", parts, js)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("the parts %s of %s read\n%+v\nwant\n%+v", parts, js, got, want)
		}
	})
}
