package bounds

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// list is a JSON list of n items.
func list(n int, item string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
}

// nested is a document of n lists one in another.
func nested(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }

func TestCheckJSON(t *testing.T) {
	root := field.NewPath("parameters")
	for _, tc := range []struct {
		name, doc string
		want      string // the error, "" for none
	}{
		{name: "empty object", doc: `{}`},
		{name: "a config", doc: `{"interface": {"name": "net1", "addresses": ["10.0.0.2/24"]}, "pinned": []}`},
		{name: "a list at the bound", doc: `{"a": ` + list(Items, `1`) + `}`},
		{name: "an object at the bound", doc: `{` + strings.TrimSuffix(strings.Repeat(`"k":1,`, Items), ",") + `}`},
		{name: "nested at the bound", doc: nested(Depth)},
		{name: "brackets in strings", doc: `{"a": "` + strings.Repeat(`[{,`, 2*Items) + `", "b\"[": "\\"}`},
		{
			name: "a list over the bound, counted to its end",
			doc:  `{"interface": {"addresses": ` + list(20000, `"1"`) + `}}`,
			want: "parameters.interface.addresses: Too many: 20000: must have at most 256 items",
		},
		{
			name: "an object over the bound",
			doc:  `{"cni-args": {` + strings.TrimSuffix(strings.Repeat(`"k":1,`, Items+1), ",") + `}}`,
			want: "parameters.cni-args: Too many: 257: must have at most 256 items",
		},
		{
			name: "a list in a list, keys escaped",
			doc:  `{"pl\u0075gins": [{}, {"x": [` + list(300, `[]`) + `]}]}`,
			want: "parameters.plugins[1].x[0]: Too many: 300: must have at most 256 items",
		},
		{
			name: "the document ends in the list",
			doc:  `[` + strings.Repeat(`1,`, 400),
			want: "parameters: Too many: 401: must have at most 256 items",
		},
		{
			name: "nested too deep: the deepest level",
			doc:  `{"a": ` + nested(40) + `}`,
			want: "parameters.a" + strings.Repeat("[0]", Depth-1) + ": Too many: 41: must have at most 32 levels of nested objects and lists",
		},
		{
			name: "the first bound broken is said",
			doc:  `[` + list(300, `1`) + `, ` + nested(40) + `]`,
			want: "parameters[0]: Too many: 300: must have at most 256 items",
		},
		{
			name: "too long, unread",
			doc:  `{"a": "` + strings.Repeat("x", 100) + `"}`,
			want: "parameters: Too long: is 109 bytes, more than the 64 a test document may have",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			most := 1 << 20
			if strings.HasPrefix(tc.name, "too long") {
				most = 64
			}
			err := CheckJSON([]byte(tc.doc), root, most, "a test document")
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("error %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestCheckJSONNilPath: a document of no path of its own names its
// fields from its top.
func TestCheckJSONNilPath(t *testing.T) {
	err := CheckJSON([]byte(`{"spec": {"plugins": `+list(257, `{}`)+`}}`), nil, 1<<20, "an object")
	if err == nil || err.Error() != "spec.plugins: Too many: 257: must have at most 256 items" {
		t.Errorf("error %v", err)
	}
}

func TestTooMany(t *testing.T) {
	p := field.NewPath("interface", "addresses")
	if err := TooMany(p, Addresses, Addresses); err != nil {
		t.Errorf("at the bound: %v", err)
	}
	if err := TooMany(p, 20000, Addresses); err == nil || err.Error() != "interface.addresses: Too many: 20000: must have at most 32 items" {
		t.Errorf("over the bound: %v", err)
	}
}
