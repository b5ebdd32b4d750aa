package admission

import (
	"bytes"
	"encoding/json"
	"iter"
	"strings"
	"unicode/utf8"
)

// Reading the parts of a JSON document without decoding it: the members
// of an object and the items of a list, as slices of the document, each
// found in one pass over the bytes it spans and without allocating. The
// document must be valid JSON (json.Valid): what is not is left to the
// decoder, which says why.

// isSpace says whether c is white space between JSON tokens.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace is the index of the first byte from i on that is not white
// space.
func skipSpace(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

// stringEnd is the index just past the string whose opening quote is
// data[i].
func stringEnd(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(data)
}

// valueEnd is the index just past the value that starts at data[i].
func valueEnd(data []byte, i int) int {
	if i >= len(data) {
		return i
	}
	switch data[i] {
	case '"':
		return stringEnd(data, i)
	case '{', '[':
		depth := 0
		for ; i < len(data); i++ {
			switch data[i] {
			case '"':
				i = stringEnd(data, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(data)
	}
	for i < len(data) && !isSpace(data[i]) && data[i] != ',' && data[i] != '}' && data[i] != ']' {
		i++
	}
	return i
}

// trimValue is a value without the white space around it.
func trimValue(v []byte) []byte {
	return bytes.TrimFunc(v, func(r rune) bool { return r < utf8.RuneSelf && isSpace(byte(r)) })
}

// isObject says whether a value is an object.
func isObject(v []byte) bool { v = trimValue(v); return len(v) > 0 && v[0] == '{' }

// members are the members of an object: each key as written, quotes
// included, and its value. A value that is not an object has none.
func members(obj []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func(key, value []byte) bool) {
		i := skipSpace(obj, 0)
		if i >= len(obj) || obj[i] != '{' {
			return
		}
		for i++; ; i++ {
			i = skipSpace(obj, i)
			if i >= len(obj) || obj[i] != '"' {
				return
			}
			keyEnd := stringEnd(obj, i)
			key := obj[i:keyEnd]
			start := skipSpace(obj, skipSpace(obj, keyEnd)+1) // past the colon
			end := valueEnd(obj, start)
			if !yield(key, obj[start:end]) {
				return
			}
			if i = skipSpace(obj, end); i >= len(obj) || obj[i] != ',' {
				return
			}
		}
	}
}

// items are the items of a list. A value that is not a list has none.
func items(list []byte) iter.Seq[[]byte] {
	return func(yield func(item []byte) bool) {
		i := skipSpace(list, 0)
		if i >= len(list) || list[i] != '[' {
			return
		}
		for i++; ; i++ {
			start := skipSpace(list, i)
			if start >= len(list) || list[start] == ']' {
				return
			}
			end := valueEnd(list, start)
			if !yield(list[start:end]) {
				return
			}
			if i = skipSpace(list, end); i >= len(list) || list[i] != ',' {
				return
			}
		}
	}
}

// count is how many items a list, or members an object, has: one pass
// over its bytes.
func count(v []byte) int {
	n := 0
	if isObject(v) {
		for range members(v) {
			n++
		}
		return n
	}
	for range items(v) {
		n++
	}
	return n
}

// keyString is a key, as written with its quotes, as the decoder reads
// it: its escapes decoded.
func keyString(key []byte) string {
	if len(key) < 2 {
		return ""
	}
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key[1 : len(key)-1])
	}
	var s string
	if err := json.Unmarshal(key, &s); err != nil {
		return string(key[1 : len(key)-1])
	}
	return s
}

// fieldIs says whether a key, as written with its quotes, names the
// struct field name as encoding/json matches it: letter case folded
// ("Spec", "SPEC" and "ſpec" are spec). sigs.k8s.io/json, which decodes
// the objects validate judges, matches the exact name alone: a key either
// decoder reads as the field is the field's.
func fieldIs(key []byte, name string) bool {
	if len(key) < 2 {
		return false
	}
	if bytes.IndexByte(key, '\\') < 0 {
		raw := key[1 : len(key)-1]
		// Folding changes a key's length by at most a third (ſ, K).
		if len(raw) > 3*len(name) {
			return false
		}
		return strings.EqualFold(string(raw), name)
	}
	return strings.EqualFold(keyString(key), name)
}

// keyIs says whether a key, as written with its quotes, is a map's key
// name: map keys are matched exactly.
func keyIs(key []byte, name string) bool {
	if len(key) == len(name)+2 && string(key[1:len(key)-1]) == name {
		return true
	}
	return bytes.IndexByte(key, '\\') >= 0 && keyString(key) == name
}

// size is how large a value is as its decoder reads it: a string's bytes
// once decoded (escapes decoded, bytes that are not UTF-8 replaced), any
// other value's bytes as written.
func size(v []byte) int {
	v = trimValue(v)
	if len(v) < 2 || v[0] != '"' {
		return len(v)
	}
	if bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v) {
		return len(v) - 2
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return len(v)
	}
	return len(s)
}
