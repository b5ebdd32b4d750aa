package v1alpha1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// PinnableFields are the fields a DeviceClass's config may pin (its
// pinned list), by their paths: every field of InterfaceConfig but
// apiVersion, kind and pinned, and every field of its sections (mode,
// vf, vf.vlan, ipam.pool, ...).
var PinnableFields = pinnableFields()

func pinnableFields() []string {
	var out []string
	t := reflect.TypeFor[InterfaceConfig]()
	for i := range t.NumField() {
		f := t.Field(i)
		name := jsonName(f)
		if name == "" || name == "apiVersion" || name == "kind" || name == "pinned" {
			continue
		}
		out = append(out, name)
		if f.Type.Kind() != reflect.Pointer || f.Type.Elem().Kind() != reflect.Struct {
			continue
		}
		for j := range f.Type.Elem().NumField() {
			if sub := jsonName(f.Type.Elem().Field(j)); sub != "" {
				out = append(out, name+"."+sub)
			}
		}
	}
	return out
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// validatePinned checks a pinned list: fields of PinnableFields, each
// once.
func validatePinned(path *field.Path, pinned []string) field.ErrorList {
	var errs field.ErrorList
	for i, f := range pinned {
		p := path.Index(i)
		switch {
		case !slices.Contains(PinnableFields, f):
			errs = append(errs, field.NotSupported(p, f, PinnableFields))
		case slices.Contains(pinned[:i], f):
			errs = append(errs, field.Duplicate(p, f))
		}
	}
	return errs
}

// Merge lays the InterfaceConfigs that apply to one device over each
// other as Prepare does: the DeviceClass's first (AddClass), then the
// claim's (AddClaim), a field set later winning, a list replaced whole.
// A claim's config may not set pinned, nor change a field the class's
// configs pin: Config refuses a claim whose configs leave such a field
// with another value than the class gave it (unset included), naming the
// field, the class and the value it is pinned to. The zero Merge, with
// ClassName set, is ready to use.
type Merge struct {
	// ClassName is the device's DeviceClass, for errors.
	ClassName string

	cfg    InterfaceConfig
	pinned []string
	// class are the values of the pinned fields once the class's configs
	// are laid, nil until a claim's config comes; changedBy is the
	// claim's config that last changed each.
	class     map[string]string
	changedBy map[string]*field.Path
	// over: a config broke a bound, and nothing else of the device's
	// configs is judged.
	over bool
}

// AddClass lays a DeviceClass's config, decoded strictly at path, over
// what the earlier ones gave; every class config comes before the
// claim's. Its pinned fields add to theirs.
func (m *Merge) AddClass(data []byte, path *field.Path) field.ErrorList {
	m.cfg.Pinned = nil
	errs, over := decodeInterfaceConfig(data, &m.cfg, path)
	m.over = m.over || over
	if len(errs) == 0 {
		errs = validatePinned(path.Child("pinned"), m.cfg.Pinned)
	}
	for _, f := range m.cfg.Pinned {
		if !slices.Contains(m.pinned, f) {
			m.pinned = append(m.pinned, f)
		}
	}
	m.cfg.Pinned = m.pinned
	return errs
}

// AddClaim lays a claim's config, decoded strictly at path, over what
// the earlier ones gave. It may not set pinned.
func (m *Merge) AddClaim(data []byte, path *field.Path) field.ErrorList {
	if m.class == nil {
		m.class, m.changedBy = pinnedValues(&m.cfg, m.pinned), map[string]*field.Path{}
	}
	before := pinnedValues(&m.cfg, m.pinned)
	errs, over := decodeInterfaceConfig(data, &m.cfg, path)
	if over {
		m.over = true
		return errs
	}
	if setsPinned(data) {
		errs = append(errs, field.Forbidden(path.Child("pinned"), "only a DeviceClass's config pins fields: a claim's config may not set pinned"))
	}
	m.cfg.Pinned = m.pinned
	for f, v := range pinnedValues(&m.cfg, m.pinned) {
		if v != before[f] {
			m.changedBy[f] = path
		}
	}
	return errs
}

// Config is the merged config, or the errors of the pinned fields the
// claim's configs changed; none when a config broke a bound (its error is
// the one said).
func (m *Merge) Config() (InterfaceConfig, field.ErrorList) {
	if m.class == nil || m.over {
		return m.cfg, nil
	}
	var errs field.ErrorList
	got := pinnedValues(&m.cfg, m.pinned)
	for _, f := range m.pinned {
		if got[f] == m.class[f] {
			continue
		}
		path := m.changedBy[f]
		if path == nil {
			path = field.NewPath("pinned")
		}
		parts := strings.Split(f, ".")
		errs = append(errs, field.Forbidden(path.Child(parts[0], parts[1:]...), fmt.Sprintf(
			"DeviceClass %s pins %s to %s, and a claim's config may not change it (this one makes it %s): leave it out of the claim's config, or use another DeviceClass",
			m.ClassName, f, shown(m.class[f]), shown(got[f]))))
	}
	return m.cfg, errs
}

// shown is a pinned field's value for people.
func shown(v string) string {
	if v == "" {
		return "unset"
	}
	return v
}

// pinnedValues are the values of the fields of c, as JSON; "" for a field
// that is not set.
func pinnedValues(c *InterfaceConfig, fields []string) map[string]string {
	out := make(map[string]string, len(fields))
	if len(fields) == 0 {
		return out
	}
	data, err := json.Marshal(c)
	if err != nil {
		return out // a config always marshals
	}
	for _, f := range fields {
		out[f] = jsonAt(data, strings.Split(f, "."))
	}
	return out
}

// jsonAt is the value at path in a JSON object, compacted; "" when it is
// not there.
func jsonAt(data []byte, path []string) string {
	for _, key := range path {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil {
			return ""
		}
		v, ok := obj[key]
		if !ok || string(v) == "null" {
			return ""
		}
		data = v
	}
	return string(data)
}

// setsPinned says whether a config document has the key pinned (null
// included).
func setsPinned(data []byte) bool {
	js, errs, _ := boundedJSON(data, nil, bounds.ConfigBytes, "a config")
	if len(errs) > 0 {
		return false
	}
	// A key is the word as written, or with escapes (\u0070inned):
	// without either, there is none to decode.
	if !bytes.Contains(js, []byte("pinned")) && !bytes.Contains(js, []byte(`\u`)) {
		return false
	}
	var doc struct {
		Pinned json.RawMessage `json:"pinned"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &doc); err != nil {
		return false
	}
	return len(doc.Pinned) > 0
}
