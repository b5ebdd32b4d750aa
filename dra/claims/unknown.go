package claims

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// A newer build may add fields to the records of this checkpoint version,
// which older builds must read (and so must not refuse). An older build
// that rewrites a record keeps the fields it does not know, so that the
// newer build finds them again after a rollback and a second upgrade.

// UnmarshalJSON decodes a record, and keeps it whole when it holds a field
// this build does not know.
func (c *Claim) UnmarshalJSON(data []byte) error {
	type plain Claim
	var p plain
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err == nil {
		*c = Claim(p)
		return nil
	}
	p = plain{}
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*c = Claim(p)
	c.unknown = bytes.Clone(data)
	return nil
}

// MarshalJSON encodes a record with the fields it was read with that this
// build does not know.
func (c Claim) MarshalJSON() ([]byte, error) {
	type plain Claim
	data, err := json.Marshal(plain(c))
	if err != nil || c.unknown == nil {
		return data, err
	}
	return keepUnknown(c.unknown, data, reflect.TypeFor[plain]())
}

// keepUnknown is next, an encoding of a value of type t, with the fields of
// old (an earlier encoding, by another build) that t does not have, at any
// depth: in objects, in the elements of lists of the same length, and in
// the values of maps under the same key.
func keepUnknown(old, next []byte, t reflect.Type) ([]byte, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		var o, n map[string]json.RawMessage
		if json.Unmarshal(old, &o) != nil || json.Unmarshal(next, &n) != nil || n == nil {
			return next, nil
		}
		fields := jsonFields(t)
		for k, ov := range o {
			// encoding/json matches names regardless of case.
			f, known := fields[strings.ToLower(k)]
			nv, there := n[k]
			switch {
			case !known && !there:
				n[k] = ov
			case known && there:
				merged, err := keepUnknown(ov, nv, f)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", k, err)
				}
				n[k] = merged
			}
		}
		return json.Marshal(n)
	case reflect.Slice, reflect.Array:
		var o, n []json.RawMessage
		if t.Elem().Kind() == reflect.Uint8 || json.Unmarshal(old, &o) != nil || json.Unmarshal(next, &n) != nil || len(o) != len(n) {
			return next, nil
		}
		for i := range n {
			merged, err := keepUnknown(o[i], n[i], t.Elem())
			if err != nil {
				return nil, err
			}
			n[i] = merged
		}
		return json.Marshal(n)
	case reflect.Map:
		var o, n map[string]json.RawMessage
		if json.Unmarshal(old, &o) != nil || json.Unmarshal(next, &n) != nil {
			return next, nil
		}
		for k, nv := range n {
			if ov, ok := o[k]; ok {
				merged, err := keepUnknown(ov, nv, t.Elem())
				if err != nil {
					return nil, err
				}
				n[k] = merged
			}
		}
		return json.Marshal(n)
	}
	return next, nil
}

// jsonFields are the types of a struct's fields by their JSON names in
// lower case, the fields of embedded structs included.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case name == "" && f.Anonymous && f.Type.Kind() == reflect.Struct:
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		case name == "":
			name = f.Name
		}
		out[strings.ToLower(name)] = f.Type
	}
	return out
}
