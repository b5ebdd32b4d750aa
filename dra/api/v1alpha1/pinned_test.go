package v1alpha1

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/bounds/boundstest"
)

func TestPinnableFields(t *testing.T) {
	for _, f := range []string{"mode", "vf.vlan", "ipam.pool", "vf", "vlan.id", "interface.mtu", "resourceName"} {
		if !slices.Contains(PinnableFields, f) {
			t.Errorf("%s is not pinnable: %v", f, PinnableFields)
		}
	}
	for _, f := range []string{"apiVersion", "kind", "pinned", "vf.colour"} {
		if slices.Contains(PinnableFields, f) {
			t.Errorf("%s is pinnable", f)
		}
	}
}

// A DeviceClass's config pins fields: a claim's config that gives one
// another value (or none) is refused naming the field, the class and the
// values; one that gives it the class's value, or sets other fields, is
// merged as before; a claim's config may not set pinned at all.
func TestMergePinned(t *testing.T) {
	head := `"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig"`
	class := `{` + head + `, "mode": "netdev", "vf": {"vlan": 100, "trust": false}, "ipam": {"pool": "fast"}, "pinned": ["mode", "vf.vlan", "ipam.pool"]}`
	for _, tc := range []struct {
		name   string
		claims []string
		want   []string // errors, whole; none: merged
	}{
		{"the same values", []string{`{` + head + `, "mode": "netdev", "vf": {"vlan": 100, "trust": true}, "ipam": {"pool": "fast"}}`}, nil},
		{"other fields", []string{`{` + head + `, "vf": {"spoofChk": false}, "interface": {"mtu": 9000}}`}, nil},
		{"changed, then set back", []string{`{` + head + `, "vf": {"vlan": 200}}`, `{` + head + `, "vf": {"vlan": 100}}`}, nil},
		{"another VLAN", []string{`{` + head + `, "vf": {"vlan": 200}}`}, []string{
			`claim[0].vf.vlan: Forbidden: DeviceClass pinning.example.com pins vf.vlan to 100, and a claim's config may not change it (this one makes it 200): ` +
				`leave it out of the claim's config, or use another DeviceClass`}},
		{"another mode and pool, in two configs", []string{`{` + head + `, "mode": "vfio"}`, `{` + head + `, "ipam": {"pool": "slow"}}`}, []string{
			`claim[0].mode: Forbidden: DeviceClass pinning.example.com pins mode to "netdev", and a claim's config may not change it (this one makes it "vfio")`,
			`claim[1].ipam.pool: Forbidden: DeviceClass pinning.example.com pins ipam.pool to "fast", and a claim's config may not change it (this one makes it "slow")`}},
		{"the section unset", []string{`{` + head + `, "vf": null}`}, []string{
			`claim[0].vf.vlan: Forbidden: DeviceClass pinning.example.com pins vf.vlan to 100, and a claim's config may not change it (this one makes it unset)`}},
		{"pinned in a claim", []string{`{` + head + `, "pinned": []}`}, []string{
			`claim[0].pinned: Forbidden: only a DeviceClass's config pins fields: a claim's config may not set pinned`}},
		{"pins dropped by a claim", []string{`{` + head + `, "pinned": null, "vf": {"vlan": 200}}`}, []string{
			`claim[0].pinned: Forbidden: only a DeviceClass's config pins fields`,
			`claim[0].vf.vlan: Forbidden: DeviceClass pinning.example.com pins vf.vlan to 100`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Merge{ClassName: "pinning.example.com"}
			errs := m.AddClass([]byte(class), field.NewPath("class"))
			for i, c := range tc.claims {
				errs = append(errs, m.AddClaim([]byte(c), field.NewPath("claim").Index(i))...)
			}
			cfg, pinErrs := m.Config()
			errs = append(errs, pinErrs...)
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d: %q", errs, len(tc.want), tc.want)
			}
			for i, want := range tc.want {
				if !strings.HasPrefix(errs[i].Error(), want) {
					t.Errorf("error %d:\n%s\nwant\n%s", i, errs[i], want)
				}
			}
			if len(tc.want) > 0 {
				return
			}
			if cfg.Mode != ModeNetdev || cfg.VF == nil || *cfg.VF.VLAN != 100 || cfg.IPAM == nil || cfg.IPAM.Pool != "fast" ||
				!slices.Equal(cfg.Pinned, []string{"mode", "vf.vlan", "ipam.pool"}) {
				t.Errorf("merged config %+v, vf %+v", cfg, cfg.VF)
			}
		})
	}
}

// A class pinning a field it leaves unset keeps claims from setting it;
// the pins of the class's configs add up; a class may pin only fields
// that are.
func TestMergePinnedClasses(t *testing.T) {
	head := `"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig"`
	m := Merge{ClassName: "c"}
	errs := m.AddClass([]byte(`{`+head+`, "pinned": ["vf.vlan"]}`), field.NewPath("class").Index(0))
	errs = append(errs, m.AddClass([]byte(`{`+head+`, "mode": "netdev", "pinned": ["mode"]}`), field.NewPath("class").Index(1))...)
	errs = append(errs, m.AddClaim([]byte(`{`+head+`, "vf": {"vlan": 7}}`), field.NewPath("claim"))...)
	cfg, pinErrs := m.Config()
	if len(errs) > 0 || len(pinErrs) != 1 || !strings.HasPrefix(pinErrs[0].Error(), "claim.vf.vlan: Forbidden: DeviceClass c pins vf.vlan to unset") ||
		!slices.Equal(cfg.Pinned, []string{"vf.vlan", "mode"}) {
		t.Errorf("errors %v, %v; pinned %v", errs, pinErrs, cfg.Pinned)
	}

	bad := Merge{ClassName: "c"}
	errs = bad.AddClass([]byte(`{`+head+`, "pinned": ["vf.colour", "mode", "mode"]}`), field.NewPath("class"))
	if len(errs) != 2 || !strings.HasPrefix(errs[0].Error(), `class.pinned[0]: Unsupported value: "vf.colour"`) ||
		!strings.HasPrefix(errs[1].Error(), `class.pinned[2]: Duplicate value: "mode"`) {
		t.Errorf("errors %v", errs)
	}
	c := InterfaceConfig{Pinned: []string{"colour"}}
	c.Default("net1")
	if errs := c.Validate(); len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), `pinned[0]: Unsupported value: "colour"`) {
		t.Errorf("Validate: %v", errs)
	}
}

// FuzzMergePinned: Merge lays configs over each other as decoding them in
// turn does, the fields of the class's alone (pinned, sharedParent) aside,
// within boundstest.Budget and saying at most bounds.MessageBytes; a claim
// it accepts leaves every pinned field as the class has it, and one that
// changes a pinned field, or sets a field of the class's alone, is refused.
func FuzzMergePinned(f *testing.F) {
	head := `"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig"`
	f.Add(`{`+head+`, "vf": {"vlan": 100}, "pinned": ["vf.vlan", "mode"]}`, `{`+head+`, "vf": {"vlan": 200}}`)
	f.Add(`{`+head+`, "mode": "netdev", "pinned": ["mode"]}`, `{`+head+`, "mode": "netdev", "interface": {"mtu": 9000}}`)
	f.Add(`{`+head+`, "ipam": {"pool": "fast"}, "pinned": ["ipam"]}`, `{`+head+`, "ipam": null}`)
	f.Add(`{`+head+`, "pinned": ["vf"]}`, "apiVersion: fastpath.dev/v1alpha1\nkind: InterfaceConfig\npinned: null\n")
	f.Add(`{`+head+`, "mode": "macvlan", "sharedParent": {"vlanIDs": ["5"]}, "pinned": ["mode"]}`, `{`+head+`, "sharedParent": {"macvlanModes": ["passthru"]}, "macvlan": {"mode": "passthru"}}`)
	for _, seed := range boundSeeds() {
		f.Add(`{`+head+`, "interface": {"name": "net1"}, "pinned": ["interface"]}`, seed)
	}
	f.Fuzz(func(t *testing.T, class, claim string) {
		m := Merge{ClassName: "c"}
		if errs := m.AddClass([]byte(class), field.NewPath("class")); len(errs) > 0 {
			return
		}
		var claimErrs, pinErrs field.ErrorList
		var got InterfaceConfig
		boundstest.Check(t, func() string {
			claimErrs = m.AddClaim([]byte(claim), field.NewPath("claim"))
			got, pinErrs = m.Config()
			return bounds.Join(append(slices.Clone(claimErrs), pinErrs...))
		})
		var want InterfaceConfig
		if errs := DecodeInterfaceConfig([]byte(class), &want, field.NewPath("class")); len(errs) > 0 {
			t.Fatalf("the class decodes in Merge, not alone: %v", errs)
		}
		pinned := want.Pinned
		classValues := fieldValues(&want, pinned)
		var classCfg InterfaceConfig
		DecodeInterfaceConfig([]byte(class), &classCfg, field.NewPath("class"))
		if errs := DecodeInterfaceConfig([]byte(claim), &want, field.NewPath("claim")); len(errs) > 0 {
			if len(claimErrs) == 0 {
				t.Fatalf("Merge accepted a claim that does not decode: %v", errs)
			}
			return
		}
		if (setsKey([]byte(claim), "pinned") || setsKey([]byte(claim), "sharedParent")) && len(claimErrs) == 0 {
			t.Fatalf("Merge accepted a claim setting a field of the class's alone")
		}
		want.Pinned, want.SharedParent = got.Pinned, classCfg.SharedParent
		if !reflect.DeepEqual(got, want) {
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(want)
			t.Fatalf("merged %s, decoded in turn %s", a, b)
		}
		changed := false
		for f, v := range fieldValues(&got, pinned) {
			changed = changed || v != classValues[f]
		}
		pinErrs = slices.DeleteFunc(pinErrs, func(e *field.Error) bool { return !strings.Contains(e.Detail, " pins ") })
		if changed != (len(pinErrs) > 0) {
			t.Fatalf("pinned fields changed %v, errors %v", changed, pinErrs)
		}
	})
}
