package npwg

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// repeatList is n copies of item joined by sep.
func repeatList(item, sep string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+sep, n), sep)
}

// TestParseNetworksBounds: a selection over a bound is refused before any
// element is read, with one error naming the bound and the size; a
// selection at the bounds is read, and what it says is bounded.
func TestParseNetworksBounds(t *testing.T) {
	for _, tc := range []struct {
		name, value, want string
	}{
		{
			// 32,768 elements: each would be a problem of its own (an
			// uppercase name).
			name:  "A,A,A,... of 64 KB",
			value: repeatList("A", ",", bounds.AnnotationBytes/2),
			want:  "metadata.annotations[k8s.v1.cni.cncf.io/networks]: Too many: 32768: must have at most 256 items",
		},
		{
			name:  "a JSON list of 300",
			value: "[" + repeatList(`{"name": "A"}`, ",", 300) + "]",
			want:  "metadata.annotations[k8s.v1.cni.cncf.io/networks]: Too many: 300: must have at most 256 items",
		},
		{
			name:  "cni-args of 300 keys",
			value: `[{"name": "a"}, {"name": "b", "cni-args": {` + repeatList(`"k": 1`, ",", 300) + `}}]`,
			want:  "metadata.annotations[k8s.v1.cni.cncf.io/networks][1].cni-args: Too many: 300: must have at most 256 items",
		},
		{
			name:  "cni-args nested 40 deep",
			value: `[{"name": "a", "cni-args": {"k": ` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}}]`,
			want: "metadata.annotations[k8s.v1.cni.cncf.io/networks][0].cni-args.k" + strings.Repeat("[0]", bounds.Depth-3) +
				": Too many: 43: must have at most 32 levels of nested objects and lists",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			atts, errs := ParseNetworks("default", tc.value)
			if atts != nil || len(errs) != 1 || errs[0].Error() != tc.want {
				t.Errorf("errors %.300v\nwant [%s]", errs, tc.want)
			}
		})
	}
	// At the bound of elements, each wrong: every problem found, and
	// what is said of them bounded.
	value := repeatList("A", ",", bounds.Items)
	_, errs := ParseNetworks("default", value)
	if len(errs) < bounds.Items {
		t.Fatalf("%d errors, want one per element at least", len(errs))
	}
	msg := bounds.Join(errs)
	if n := strings.Count(msg, "Invalid value"); n != bounds.Problems || !strings.Contains(msg, fmt.Sprintf("and %d more", len(errs)-bounds.Problems)) {
		t.Errorf("%d problems said of %d: %.400s", n, len(errs), msg)
	}
}

// TestLoadConfigBounds: a spec.config over a bound is refused before it is
// decoded, with one error naming the bound and the size.
func TestLoadConfigBounds(t *testing.T) {
	plugin := `{"type": "macvlan", "master": "eth0"}`
	long := `{"cniVersion": "1.0.0", "type": "macvlan", "x": "` + strings.Repeat("/", bounds.NetworkConfigBytes) + `"}`
	for _, tc := range []struct {
		name, config, want string
	}{
		{name: "16 plugins", config: `{"cniVersion": "1.0.0", "plugins": [` + repeatList(plugin, ",", bounds.Plugins) + `]}`},
		{
			name:   "17 plugins",
			config: `{"cniVersion": "1.0.0", "plugins": [` + repeatList(plugin, ",", 17) + `]}`,
			want:   "NetworkAttachmentDefinition app/net-a: spec.config: plugins: Too many: 17: must have at most 16 items",
		},
		{
			name:   "too long",
			config: long,
			want:   fmt.Sprintf("NetworkAttachmentDefinition app/net-a: spec.config: Too long: is %d bytes, more than the 65536 a CNI configuration may have", len(long)),
		},
		{
			name:   "a list of 300 strings",
			config: `{"cniVersion": "1.0.0", "type": "macvlan", "ipam": {"routes": [` + repeatList(`"/a"`, ",", 300) + `]}}`,
			want:   "NetworkAttachmentDefinition app/net-a: spec.config: ipam.routes: Too many: 300: must have at most 256 items",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig(nad("app", "net-a", tc.config), "")
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("error %.300v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestHostObjectsBounded: a configuration naming thousands of host paths
// is refused with a bounded error: bounds.Problems faults, each cut, and
// the rest counted.
func TestHostObjectsBounded(t *testing.T) {
	path := `"/` + strings.Repeat("a", 2000) + `"`
	var lists []string
	for i := range 60 {
		lists = append(lists, fmt.Sprintf(`"l%d": [%s]`, i, repeatList(`"/a"`, ",", 150)))
	}
	config := `{"cniVersion": "1.0.0", "type": "macvlan", "master": "eth0", "long": ` + path + `, ` + strings.Join(lists, ", ") + `}`
	cfg, err := LoadConfig(nad("app", "net-a", config), "")
	if err != nil {
		t.Fatal(err)
	}
	err = Policy{}.HostObjects(cfg, false)
	if err == nil {
		t.Fatal("allowed")
	}
	msg := err.Error()
	faults := strings.Count(msg, "plugins[0] (macvlan)")
	if faults != bounds.Problems || !strings.Contains(msg, fmt.Sprintf("; and %d more", 60*150+2-bounds.Problems)) {
		t.Errorf("%d faults said: %.300s ... %s", faults, msg, msg[max(0, len(msg)-100):])
	}
	if most := bounds.Problems*(bounds.ProblemBytes+2) + 200; len(msg) > most {
		t.Errorf("%d bytes, more than %d", len(msg), most)
	}
}

// TestRefusedUnread: a selection or a spec.config of twice its bound is
// refused before it is read: the refusal allocates a handful of objects,
// the error's; the same within the bound is read.
func TestRefusedUnread(t *testing.T) {
	selection := func(n int) string {
		return "[" + repeatList(`{"name": "A"}`, ",", bounds.Items) + "]" + strings.Repeat(" ", n)
	}
	config := func(n int) string {
		return `{"cniVersion": "1.0.0", "type": "macvlan", "a": [` + repeatList(`"/a"`, ",", bounds.Items) + `]}` + strings.Repeat(" ", n)
	}
	for _, tc := range []struct {
		name  string
		doc   func(pad int) string
		most  int
		judge func(string) error
	}{
		{"selection", selection, bounds.AnnotationBytes, func(v string) error {
			if _, errs := ParseNetworks("default", v); len(errs) > 0 {
				return errs[0]
			}
			return nil
		}},
		{"spec.config", config, bounds.NetworkConfigBytes, func(v string) error { _, err := parseSpecConfig([]byte(v), "net-a"); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			within := tc.doc(tc.most - len(tc.doc(0)))
			twice := tc.doc(2*tc.most - len(tc.doc(0)))
			if allocs := testing.AllocsPerRun(10, func() { _ = tc.judge(within) }); allocs < 1000 {
				t.Fatalf("reading %d bytes allocates %v objects: not a measure of reading", len(within), allocs)
			}
			var err error
			if allocs := testing.AllocsPerRun(10, func() { err = tc.judge(twice) }); allocs > 50 {
				t.Errorf("refusing %d bytes allocates %v objects: it was read", len(twice), allocs)
			}
			if err == nil || !strings.Contains(err.Error(), "Too long") {
				t.Errorf("error %v", err)
			}
		})
	}
}
