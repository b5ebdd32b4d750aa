package cnipolicy

import (
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Fold is s as encoding/json matches object keys to struct fields: two
// keys set the same field exactly when their Folds are equal (which is
// strings.EqualFold). Each rune becomes the smallest rune of its simple
// folding orbit: "master", "MASTER" and "maſter" all fold to "MASTER".
func Fold(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		b.WriteRune(foldRune(r))
	}
	return b.String()
}

func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'a' <= r && r <= 'z' {
			return r - 'a' + 'A'
		}
		return r
	}
	min := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < min {
			min = f
		}
	}
	return min
}

// Keys are the keys of obj that a plugin reads as its field name, in
// sorted order: none, one, or, when the configuration spells one field
// several ways, several (encoding/json then keeps the last in the
// document, which a decoded map no longer knows).
func Keys[V any](obj map[string]V, name string) []string {
	var out []string
	want := Fold(name)
	for k := range obj {
		if k == name || Fold(k) == want {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Get is the value a plugin reads into its field name from obj, and the
// key it is written under; ok is false when no key sets the field. When
// several keys set it (see Keys), the first in sorted order is returned:
// callers refuse such configurations (Inspect reports them).
func Get[V any](obj map[string]V, name string) (key string, v V, ok bool) {
	keys := Keys(obj, name)
	if len(keys) == 0 {
		return "", v, false
	}
	return keys[0], obj[keys[0]], true
}

// Object is the object a plugin reads into its field name, or nil.
func Object(obj map[string]any, name string) map[string]any {
	_, v, _ := Get(obj, name)
	m, _ := v.(map[string]any)
	return m
}

// String is the string a plugin reads into its field name, or "".
func String(obj map[string]any, name string) string {
	_, v, _ := Get(obj, name)
	s, _ := v.(string)
	return s
}

// Delete removes every key of obj that sets the field name.
func Delete[V any](obj map[string]V, name string) {
	for _, k := range Keys(obj, name) {
		delete(obj, k)
	}
}

// Set sets the field name of obj to v, removing every other spelling of
// it first, so that the plugin reads v.
func Set(obj map[string]any, name string, v any) {
	Delete(obj, name)
	obj[name] = v
}

// ambiguous are the groups of keys of obj that set one field, each
// sorted, in sorted order.
func ambiguous[V any](obj map[string]V) [][]string {
	byFold := map[string][]string{}
	for k := range obj {
		f := Fold(k)
		byFold[f] = append(byFold[f], k)
	}
	var out [][]string
	for _, f := range slices.Sorted(maps.Keys(byFold)) {
		if keys := byFold[f]; len(keys) > 1 {
			slices.Sort(keys)
			out = append(out, keys)
		}
	}
	return out
}

// MentionsFold says whether data may hold a key that folds to word:
// false only when it certainly does not (no spelling of word in ASCII
// letters of any case, no escape, no non-ASCII byte). A fast test before
// decoding.
func MentionsFold(data []byte, word string) bool {
	lw := strings.ToLower(word)
	n := len(lw)
	for i := 0; i < len(data); i++ {
		c := data[i]
		if c == '\\' || c >= utf8.RuneSelf {
			return true
		}
		if i+n <= len(data) && lower(c) == lw[0] {
			match := true
			for j := 1; j < n; j++ {
				if lower(data[i+j]) != lw[j] {
					match = false
					break
				}
			}
			if match {
				return true
			}
		}
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
