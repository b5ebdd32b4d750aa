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
// vf, vf.vlan, ipam.pool, ...). sharedParent, a class's alone, is not
// among them.
var PinnableFields = pinnableFields()

func pinnableFields() []string {
	var out []string
	t := reflect.TypeFor[InterfaceConfig]()
	for i := range t.NumField() {
		f := t.Field(i)
		name := jsonName(f)
		if name == "" || slices.Contains(classOnlyFields, name) || name == "apiVersion" || name == "kind" {
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

// classOnlyFields are the fields only a DeviceClass's config may set.
var classOnlyFields = []string{"pinned", "sharedParent"}

// Merge lays the InterfaceConfigs that apply to one device over each
// other as Prepare does: the DeviceClass's first (AddClass), then the
// claim's (AddClaim), a field set later winning, a list replaced whole.
// A claim's config may not set pinned or sharedParent, nor change a field
// the class's configs pin: Config refuses a claim whose configs leave
// such a field with another value than the class gave it (unset
// included), naming the field, the class and the value it is pinned to;
// and a config of a shared mode that asks of the shared device what the
// class's sharedParent does not allow. The zero Merge, with ClassName
// set, is ready to use.
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
	// setBy is the config that last changed each field a sharedParent
	// judges.
	setBy map[string]*field.Path
	// over: a config broke a bound, and nothing else of the device's
	// configs is judged.
	over bool
}

// AddClass lays a DeviceClass's config, decoded strictly at path, over
// what the earlier ones gave; every class config comes before the
// claim's. Its pinned fields add to theirs; its sharedParent is laid over
// theirs.
func (m *Merge) AddClass(data []byte, path *field.Path) field.ErrorList {
	before := fieldValues(&m.cfg, sharedParentFields)
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
	m.track(before, path)
	return errs
}

// AddClaim lays a claim's config, decoded strictly at path, over what
// the earlier ones gave. It may not set pinned or sharedParent.
func (m *Merge) AddClaim(data []byte, path *field.Path) field.ErrorList {
	if m.class == nil {
		m.class, m.changedBy = fieldValues(&m.cfg, m.pinned), map[string]*field.Path{}
	}
	before, beforeShared := fieldValues(&m.cfg, m.pinned), fieldValues(&m.cfg, sharedParentFields)
	// The claim's class-only fields are decoded into their own values
	// (the decoder would reuse the class's), then dropped.
	shared := m.cfg.SharedParent
	m.cfg.Pinned, m.cfg.SharedParent = nil, nil
	errs, over := decodeInterfaceConfig(data, &m.cfg, path)
	m.cfg.Pinned, m.cfg.SharedParent = m.pinned, shared
	if over {
		m.over = true
		return errs
	}
	for _, f := range classOnlyFields {
		if setsKey(data, f) {
			errs = append(errs, field.Forbidden(path.Child(f), classOnly[f]))
		}
	}
	for f, v := range fieldValues(&m.cfg, m.pinned) {
		if v != before[f] {
			m.changedBy[f] = path
		}
	}
	m.track(beforeShared, path)
	return errs
}

// classOnly says why a claim's config may not set each of classOnlyFields.
var classOnly = map[string]string{
	"pinned":       "only a DeviceClass's config pins fields: a claim's config may not set pinned",
	"sharedParent": "only a DeviceClass's config says what its claims may do to a shared device: a claim's config may not set sharedParent",
}

// track records path as where the fields a sharedParent judges that
// changed from before were set.
func (m *Merge) track(before map[string]string, path *field.Path) {
	if m.setBy == nil {
		m.setBy = map[string]*field.Path{}
	}
	for f, v := range fieldValues(&m.cfg, sharedParentFields) {
		if v != before[f] {
			m.setBy[f] = path
		}
	}
}

// Config is the merged config, or the errors of the pinned fields the
// claim's configs changed and of what the config asks of a shared device
// that the class's sharedParent does not allow; none when a config broke
// a bound (its error is the one said).
func (m *Merge) Config() (InterfaceConfig, field.ErrorList) {
	if m.over {
		return m.cfg, nil
	}
	var errs field.ErrorList
	if m.class != nil {
		got := fieldValues(&m.cfg, m.pinned)
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
	}
	return m.cfg, append(errs, checkSharedParent(&m.cfg, m.ClassName, m.setBy)...)
}

// shown is a pinned field's value for people.
func shown(v string) string {
	if v == "" {
		return "unset"
	}
	return v
}

// fieldValues are the values of the fields of c, as JSON; "" for a field
// that is not set.
func fieldValues(c *InterfaceConfig, fields []string) map[string]string {
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

// setsKey says whether a config document has the key (null included).
func setsKey(data []byte, key string) bool {
	js, errs, _ := boundedJSON(data, nil, bounds.ConfigBytes, "a config")
	if len(errs) > 0 {
		return false
	}
	// A key is the word as written, or with escapes (\u0070inned):
	// without either, there is none to decode.
	if !bytes.Contains(js, []byte(key)) && !bytes.Contains(js, []byte(`\u`)) {
		return false
	}
	var doc map[string]json.RawMessage
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &doc); err != nil {
		return false
	}
	v, ok := doc[key]
	return ok && len(v) > 0
}
