package v1alpha1

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/bounds/boundstest"
)

// items is a JSON list of n items made by item.
func items(n int, item func(i int) string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(item(i))
	}
	b.WriteByte(']')
	return b.String()
}

func addresses(n int) string {
	return items(n, func(i int) string { return fmt.Sprintf(`"10.%d.%d.1/24"`, i/256%256, i%256) })
}

const interfaceHead = `"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig"`

// TestDecodeInterfaceConfigBounds: a config over a bound is refused with
// one error naming the field, the bound and the size, and nothing else
// of it is judged (its unknown field says nothing); one at each bound is
// decoded.
func TestDecodeInterfaceConfigBounds(t *testing.T) {
	tooLong := func(doc string) string {
		return fmt.Sprintf("p: Too long: is %d bytes, more than the 10240 a config may have", len(doc))
	}
	many := `{` + interfaceHead + `, "colour": 1, "interface": {"name": "net1", "addresses": ` + addresses(20000) + `}}`
	yamlLong := "apiVersion: fastpath.dev/v1alpha1\nkind: InterfaceConfig\n# " + strings.Repeat("x", bounds.ConfigBytes) + "\n"
	yamlAliased := "apiVersion: fastpath.dev/v1alpha1\nkind: InterfaceConfig\ncolour: &a [" + strings.Repeat("aaaaaaaaaaaaaaaaaaaa, ", 200) + "a]\nb: *a\nc: *a\nd: *a\n"
	aliasedJSON, err := yaml.YAMLToJSON([]byte(yamlAliased))
	if err != nil || len(yamlAliased) > bounds.ConfigBytes || len(aliasedJSON) <= bounds.ConfigBytes {
		t.Fatalf("YAML of %d bytes, JSON of %d: %v", len(yamlAliased), len(aliasedJSON), err)
	}
	for _, tc := range []struct {
		name, doc, want string
	}{
		{name: "32 addresses", doc: `{` + interfaceHead + `, "interface": {"name": "net1", "addresses": ` + addresses(bounds.Addresses) + `}}`},
		{name: "128 routes", doc: `{` + interfaceHead + `, "interface": {"name": "net1", "routes": ` +
			items(bounds.Routes, func(i int) string { return fmt.Sprintf(`{"destination": "10.%d.0.0/16"}`, i) }) + `}}`},
		{
			name: "20,000 addresses",
			doc:  many,
			want: tooLong(many),
		},
		{
			name: "33 addresses",
			doc:  `{` + interfaceHead + `, "colour": 1, "interface": {"name": "net1", "addresses": ` + addresses(33) + `}}`,
			want: "p.interface.addresses: Too many: 33: must have at most 32 items",
		},
		{
			name: "129 routes",
			doc: `{` + interfaceHead + `, "colour": 1, "interface": {"routes": ` +
				items(129, func(i int) string { return `{"destination": "x"}` }) + `}}`,
			want: "p.interface.routes: Too many: 129: must have at most 128 items",
		},
		{
			name: "257 pinned",
			doc:  `{` + interfaceHead + `, "pinned": ` + items(257, func(int) string { return `"mode"` }) + `}`,
			want: "p.pinned: Too many: 257: must have at most 256 items",
		},
		{
			name: "nested too deep in an unknown field",
			doc:  `{` + interfaceHead + `, "colour": ` + strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40) + `}`,
			want: "p.colour" + strings.Repeat(".a", bounds.Depth-1) + ": Too many: 41: must have at most 32 levels of nested objects and lists",
		},
		{
			name: "YAML over the bound, before it is converted",
			doc:  yamlLong,
			want: tooLong(yamlLong),
		},
		{
			name: "YAML whose JSON is over the bound",
			doc:  yamlAliased,
			want: tooLong(string(aliasedJSON)),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg InterfaceConfig
			errs := DecodeInterfaceConfig([]byte(tc.doc), &cfg, field.NewPath("p"))
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("refused: %v", errs)
			case tc.want != "" && (len(errs) != 1 || errs[0].Error() != tc.want):
				t.Errorf("errors %.300v\nwant [%s]", errs, tc.want)
			}
		})
	}
}

const cniHead = `"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1"`

func TestDecodeCNIConfigBounds(t *testing.T) {
	long := `{` + cniHead + `, "plugins": [{"type": "macvlan", "config": {"a": "` + strings.Repeat("/", bounds.ConfigBytes) + `"}}]}`
	plugin := func(int) string { return `{"type": "macvlan"}` }
	argument := func(int) string { return `{"fieldPath": "a", "value": 1}` }
	upstream := `"apiVersion": "cni.dra.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1"`
	for _, tc := range []struct {
		name, doc, want string
	}{
		{name: "16 plugins", doc: `{` + cniHead + `, "plugins": ` + items(bounds.Plugins, plugin) + `}`},
		{name: "32 arguments", doc: `{` + cniHead + `, "plugins": [{"type": "macvlan", "arguments": ` + items(bounds.Arguments, argument) + `}]}`},
		{
			name: "17 plugins",
			doc:  `{` + cniHead + `, "Args": 1, "plugins": ` + items(17, plugin) + `}`,
			want: "p.plugins: Too many: 17: must have at most 16 items",
		},
		{
			name: "33 arguments",
			doc:  `{` + cniHead + `, "plugins": [{"type": "macvlan"}, {"type": "macvlan", "arguments": ` + items(33, argument) + `}]}`,
			want: "p.plugins[1].arguments: Too many: 33: must have at most 32 items",
		},
		{
			name: "upstream, 17 plugins",
			doc:  `{` + upstream + `, "config": {"cniVersion": "1.0.0", "extra": 1, "plugins": ` + items(17, plugin) + `}}`,
			want: "p.config.plugins: Too many: 17: must have at most 16 items",
		},
		{
			name: "a list of 300 in a plugin's config",
			doc:  `{` + cniHead + `, "plugins": [{"type": "macvlan", "config": {"ranges": ` + items(300, func(int) string { return `"/a"` }) + `}}]}`,
			want: "p.plugins[0].config.ranges: Too many: 300: must have at most 256 items",
		},
		{
			name: "too long",
			doc:  long,
			want: fmt.Sprintf("p: Too long: is %d bytes, more than the 10240 a config may have", len(long)),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := DecodeCNIConfig([]byte(tc.doc), field.NewPath("p"))
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("refused: %v", errs)
			case tc.want != "" && (len(errs) != 1 || errs[0].Error() != tc.want):
				t.Errorf("errors %.300v\nwant [%s]", errs, tc.want)
			}
		})
	}
}

// TestDecodeCNIConfigObjectBounds: an approved config's spec is bounded;
// its metadata is the API server's to bound.
func TestDecodeCNIConfigObjectBounds(t *testing.T) {
	head := `"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNIConfig"`
	big := `"metadata": {"name": "a", "annotations": {"x": "` + strings.Repeat("x", bounds.NetworkConfigBytes) + `"}}`
	if _, errs := DecodeCNIConfigObject([]byte(`{`+head+`, `+big+`, "spec": {"plugins": [{"type": "macvlan"}]}}`), nil); len(errs) > 0 {
		t.Errorf("large metadata: %.300v", errs)
	}
	spec := `{"plugins": [{"type": "macvlan", "config": {"a": "` + strings.Repeat("x", bounds.NetworkConfigBytes) + `"}}]}`
	_, errs := DecodeCNIConfigObject([]byte(`{`+head+`, "metadata": {"name": "a"}, "spec": `+spec+`}`), nil)
	if len(errs) != 1 || errs[0].Error() != fmt.Sprintf("spec: Too long: is %d bytes, more than the 65536 an approved config's spec may have", len(spec)) {
		t.Errorf("errors %.300v", errs)
	}
	many := `{` + head + `, "metadata": {"name": "a"}, "spec": {"plugins": ` + items(17, func(int) string { return `{"type": "macvlan"}` }) + `}}`
	_, errs = DecodeCNIConfigObject([]byte(many), nil)
	if len(errs) != 1 || errs[0].Error() != "spec.plugins: Too many: 17: must have at most 16 items" {
		t.Errorf("errors %.300v", errs)
	}
}

// padded is doc with spaces before its closing brace to n bytes.
func padded(doc string, n int) string {
	return doc[:len(doc)-1] + strings.Repeat(" ", n-len(doc)) + "}"
}

// boundSeeds are InterfaceConfigs at and just over each bound, for the
// fuzz targets.
func boundSeeds() []string {
	cfg := func(body string) string { return `{` + interfaceHead + `, ` + body + `}` }
	wrong := func(i int) string { return fmt.Sprintf(`"%d/%s"`, i, strings.Repeat("x", 250)) }
	route := func(i int) string { return fmt.Sprintf(`{"destination": "10.%d.0.0/16"}`, i%256) }
	small := cfg(`"mode": "netdev"`)
	var seeds []string
	for _, n := range []int{0, 1} {
		seeds = append(seeds,
			cfg(`"interface": {"name": "net1", "addresses": `+addresses(bounds.Addresses+n)+`}`),
			cfg(`"interface": {"name": "net1", "routes": `+items(bounds.Routes+n, route)+`}`),
			cfg(`"pinned": `+items(bounds.Items+n, func(int) string { return `"mode"` })),
			cfg(`"colour": `+strings.Repeat("[", bounds.Depth-1+n)+strings.Repeat("]", bounds.Depth-1+n)),
			padded(small, bounds.ConfigBytes+n),
		)
	}
	return append(seeds, cfg(`"interface": {"name": "net1", "addresses": `+items(bounds.Addresses, wrong)+`}`))
}

// FuzzDecodeCNIConfigObject: any approved config decodes without
// panicking, within boundstest.Budget and saying at most
// bounds.MessageBytes; one that decodes and validates has at most
// bounds.Plugins plugins of at most bounds.Arguments arguments.
func FuzzDecodeCNIConfigObject(f *testing.F) {
	head := `"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNIConfig", "metadata": {"name": "a"}`
	plugin := func(int) string { return `{"type": "macvlan"}` }
	argument := func(int) string { return `{"fieldPath": "a", "value": 1}` }
	f.Add(`{` + head + `, "spec": {"ifName": "net1", "plugins": [{"type": "macvlan", "config": {"mode": "bridge"}}]}}`)
	f.Add("apiVersion: cni.networking.x-k8s.io/v1alpha1\nkind: CNIConfig\nmetadata: {name: a}\nspec: {plugins: [{type: macvlan}]}\n")
	for _, n := range []int{0, 1} {
		f.Add(`{` + head + `, "spec": {"plugins": ` + items(bounds.Plugins+n, plugin) + `}}`)
		f.Add(`{` + head + `, "spec": {"plugins": [{"type": "macvlan", "arguments": ` + items(bounds.Arguments+n, argument) + `}]}}`)
		f.Add(`{` + head + `, "spec": ` + padded(`{"plugins": [{"type": "macvlan"}]}`, bounds.NetworkConfigBytes+n) + `}`)
		f.Add(`{` + head + `, "spec": {"plugins": [{"type": "macvlan", "config": {"a": ` +
			strings.Repeat("[", bounds.Depth-4+n) + strings.Repeat("]", bounds.Depth-4+n) + `}}]}}`)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		var o CNIConfigObject
		var errs field.ErrorList
		boundstest.Check(t, func() string {
			if o, errs = DecodeCNIConfigObject([]byte(doc), field.NewPath("f")); len(errs) == 0 {
				errs = o.Validate()
			}
			return bounds.Join(errs)
		})
		if len(errs) > 0 {
			return
		}
		if len(o.Spec.Plugins) > bounds.Plugins {
			t.Errorf("accepted %d plugins", len(o.Spec.Plugins))
		}
		for _, p := range o.Spec.Plugins {
			if len(p.Arguments) > bounds.Arguments {
				t.Errorf("accepted %d arguments", len(p.Arguments))
			}
		}
	})
}

// TestRefusedUnread: a config of twice its bound is refused before it is
// decoded: the refusal allocates a handful of objects, the error's,
// whatever the config holds; the same config within the bound is decoded.
func TestRefusedUnread(t *testing.T) {
	fields := func(n int) string {
		keys := items(n, func(i int) string { return fmt.Sprintf(`"k%d": 1`, i) })
		return `{` + interfaceHead + `, "interface": {` + keys[1:len(keys)-1] + `}}`
	}
	cni := func(n int) string {
		return `{` + cniHead + `, "plugins": [{"type": "macvlan", "config": {"a": ` + items(n, func(int) string { return `"/a"` }) + `}}]}`
	}
	for _, tc := range []struct {
		name   string
		doc    string
		decode func([]byte) field.ErrorList
	}{
		{"InterfaceConfig", fields(bounds.Items), func(d []byte) field.ErrorList {
			var cfg InterfaceConfig
			return DecodeInterfaceConfig(d, &cfg, field.NewPath("p"))
		}},
		{"CNIConfig", cni(bounds.Items), func(d []byte) field.ErrorList { _, errs := DecodeCNIConfig(d, field.NewPath("p")); return errs }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			within := []byte(padded(tc.doc, bounds.ConfigBytes))
			twice := []byte(padded(tc.doc, 2*bounds.ConfigBytes))
			eightfold := []byte(padded(tc.doc, 8*bounds.ConfigBytes))
			decoding := testing.AllocsPerRun(10, func() { tc.decode(within) })
			if decoding < 100 {
				t.Fatalf("decoding %d bytes allocates %v objects: not a measure of decoding", len(within), decoding)
			}
			// The refusal's allocations are the error's: about as many for
			// eight times the bound as for twice it (the race detector adds
			// or takes one or two of its own), and a small part of a
			// decoding's.
			var errs field.ErrorList
			refusing := testing.AllocsPerRun(10, func() { errs = tc.decode(twice) })
			if refusing*5 > decoding {
				t.Errorf("refusing %d bytes allocates %v objects, decoding %d bytes %v: it was read", len(twice), refusing, len(within), decoding)
			}
			if more := testing.AllocsPerRun(10, func() { tc.decode(eightfold) }); more > refusing+5 {
				t.Errorf("refusing %d bytes allocates %v objects, %d bytes %v: it was read", len(twice), refusing, len(eightfold), more)
			}
			if len(errs) != 1 || errs[0].Type != field.ErrorTypeTooLong {
				t.Errorf("errors %v", errs)
			}
		})
	}
}

// TestMergeOverBound: a claim's config over a bound is refused with its
// one error; what else it changes (a pinned field) is not judged.
func TestMergeOverBound(t *testing.T) {
	m := Merge{ClassName: "c"}
	if errs := m.AddClass([]byte(`{`+interfaceHead+`, "vf": {"vlan": 100}, "pinned": ["vf.vlan"]}`), field.NewPath("class")); len(errs) > 0 {
		t.Fatal(errs)
	}
	errs := m.AddClaim([]byte(`{`+interfaceHead+`, "vf": {"vlan": 200}, "interface": {"addresses": `+addresses(33)+`}}`), field.NewPath("claim"))
	_, pinErrs := m.Config()
	if len(errs) != 1 || errs[0].Error() != "claim.interface.addresses: Too many: 33: must have at most 32 items" || len(pinErrs) > 0 {
		t.Errorf("errors %v, pinned %v", errs, pinErrs)
	}
}
