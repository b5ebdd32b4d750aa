package bounds

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// CheckJSON checks a JSON document against the bounds in one pass over
// its bytes, before anything decodes it: at most most bytes (what names
// the document in the error: "a config"), objects and lists nested at most
// Depth deep, and every object and list holding at most Items members or
// items. The error, nil when the document is within them, is the first
// bound broken, at the path of the object or list that breaks it below
// path, and says the size: a list's items counted to its end, a
// document's deepest nesting. A document over most bytes is not read.
//
// It does not check that the document is JSON: its decoder does, and with
// invalid JSON the counts are those of its commas and brackets, which the
// decoder refuses anyway.
func CheckJSON(data []byte, path *field.Path, most int, what string) *field.Error {
	if len(data) > most {
		return TooLong(path, len(data), most, what)
	}
	return scanJSON(data, path)
}

// TooLong is the error of a value of n bytes, more than the most a what
// may have.
func TooLong(path *field.Path, n, most int, what string) *field.Error {
	return &field.Error{Type: field.ErrorTypeTooLong, Field: path.String(), BadValue: field.OmitValueType{},
		Detail: fmt.Sprintf("is %d bytes, more than the %d %s may have", n, most, what)}
}

// TooMany is the error of a list of n items, more than most; nil when n is
// at most most.
func TooMany(path *field.Path, n, most int) *field.Error {
	if n <= most {
		return nil
	}
	return field.TooMany(path, n, most)
}

// tooDeep is the error of objects and lists nested n deep.
func tooDeep(path *field.Path, n int) *field.Error {
	return &field.Error{Type: field.ErrorTypeTooMany, Field: path.String(), BadValue: n,
		Detail: fmt.Sprintf("must have at most %d levels of nested objects and lists", Depth)}
}

// frame is an object or list the scan is in.
type frame struct {
	object bool
	// commas at its own level: its items are one more, if any.
	commas int
	// wantKey: an object's next string is a key; key is the last one,
	// as written between its quotes.
	wantKey bool
	key     []byte
	// Where the frame sits in its parent, for the path of an error: at
	// index of a list, or at the parent's key keyIn.
	inList bool
	index  int
	keyIn  []byte
}

// scanJSON is CheckJSON's pass over a document within its bytes. The
// first bound broken is the one reported; the scan goes on to its size:
// to the end of a list with too many items, or of the document for its
// deepest nesting.
func scanJSON(data []byte, root *field.Path) *field.Error {
	var (
		stack    []frame
		inString bool
		keyStart = -1
		// over is the level of the first list with too many items,
		// counted on until it closes; deepAt the path of the first
		// frame nested too deep, deep the deepest level.
		over, deep     int
		overAt, deepAt *field.Path
	)
	tooMany := func(f frame) *field.Error { return field.TooMany(overAt, f.commas+1, Items) }
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
				if keyStart >= 0 {
					stack[len(stack)-1].key = data[keyStart:i]
					keyStart = -1
				}
			}
			continue
		}
		switch c {
		case '"':
			inString = true
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
				stack[n-1].wantKey, keyStart = false, i+1
			}
		case '{', '[':
			f := frame{object: c == '{', wantKey: c == '{'}
			if n := len(stack); n > 0 {
				parent := stack[n-1]
				f.inList, f.index, f.keyIn = !parent.object, parent.commas, parent.key
			}
			stack = append(stack, f)
			deep = max(deep, len(stack))
			if len(stack) > Depth && overAt == nil && deepAt == nil {
				deepAt = pathOf(root, stack)
			}
		case '}', ']':
			n := len(stack)
			if n == 0 {
				continue
			}
			if overAt != nil && over == n {
				return tooMany(stack[n-1])
			}
			stack = stack[:n-1]
		case ',':
			n := len(stack)
			if n == 0 {
				continue
			}
			top := &stack[n-1]
			top.commas++
			if top.object {
				top.wantKey = true
			}
			if top.commas+1 > Items && overAt == nil && deepAt == nil {
				over, overAt = n, pathOf(root, stack)
			}
		}
	}
	switch {
	case overAt != nil:
		// The document ends inside the list.
		return tooMany(stack[over-1])
	case deepAt != nil:
		return tooDeep(deepAt, deep)
	}
	return nil
}

// pathOf is the path, below root, of the innermost frame of stack.
func pathOf(root *field.Path, stack []frame) *field.Path {
	p := root
	for i := 1; i < len(stack); i++ {
		f := stack[i]
		if f.inList {
			p = p.Index(f.index)
		} else {
			p = p.Child(keyString(f.keyIn))
		}
	}
	return p
}

// keyString is a key as written between its quotes, decoded as JSON
// decodes it (escapes included).
func keyString(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	var s string
	if err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s); err != nil {
		return string(raw)
	}
	return s
}
