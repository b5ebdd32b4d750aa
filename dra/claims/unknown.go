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
	unknown, err := onlyUnknown(data, reflect.TypeFor[Claim]())
	if err != nil {
		return err
	}
	c.unknown = unknown
	return nil
}

// onlyUnknown is data, an encoding of a value of type t, pruned to the
// fields t does not have (at any depth, as keepUnknown finds them), in one
// form (compact, keys sorted) whichever way data was written; nil when
// there are none.
func onlyUnknown(data []byte, t reflect.Type) (json.RawMessage, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		var o map[string]json.RawMessage
		if json.Unmarshal(data, &o) != nil {
			return nil, nil
		}
		fields := jsonFields(t)
		out := map[string]json.RawMessage{}
		for k, v := range o {
			f, known := fields[strings.ToLower(k)]
			if !known {
				out[k] = v
				continue
			}
			inner, err := onlyUnknown(v, f)
			if err != nil {
				return nil, err
			}
			if inner != nil {
				out[k] = inner
			}
		}
		if len(out) == 0 {
			return nil, nil
		}
		return json.Marshal(out)
	case reflect.Slice, reflect.Array:
		var o []json.RawMessage
		if t.Elem().Kind() == reflect.Uint8 || json.Unmarshal(data, &o) != nil {
			return nil, nil
		}
		out, any := make([]json.RawMessage, len(o)), false
		for i, v := range o {
			inner, err := onlyUnknown(v, t.Elem())
			if err != nil {
				return nil, err
			}
			out[i], any = inner, any || inner != nil
			if inner == nil {
				out[i] = json.RawMessage("{}")
			}
		}
		if !any {
			return nil, nil
		}
		return json.Marshal(out)
	case reflect.Map:
		var o map[string]json.RawMessage
		if json.Unmarshal(data, &o) != nil {
			return nil, nil
		}
		out := map[string]json.RawMessage{}
		for k, v := range o {
			inner, err := onlyUnknown(v, t.Elem())
			if err != nil {
				return nil, err
			}
			if inner != nil {
				out[k] = inner
			}
		}
		if len(out) == 0 {
			return nil, nil
		}
		return json.Marshal(out)
	}
	return nil, nil
}

// encode is the record's encoding, with the fields it was read with that
// this build does not know. (Not a MarshalJSON method: encoding/json
// compacts what one returns, which doubled the cost of a checkpoint.)
func encode(c *Claim) ([]byte, error) {
	data, err := json.Marshal(c)
	if err != nil || c.unknown == nil {
		return data, err
	}
	return keepUnknown(c.unknown, data, reflect.TypeFor[Claim]())
}

// keepUnknown is next, an encoding of a value of type t, with the fields of
// old (an earlier encoding, by another build, or its onlyUnknown) that t
// does not have, at any depth: in objects, in the elements of lists of the
// same length, and in the values of maps under the same key.
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
