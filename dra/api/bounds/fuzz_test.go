package bounds_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/bounds/boundstest"
)

// reference reads a JSON document with encoding/json's tokens: its
// deepest nesting and the most items of an object or list (every key
// counted, repeats too). ok is false for what is not one JSON value.
func reference(data []byte) (depth, most int, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	type level struct {
		object bool
		items  int
		key    bool // an object's next token is a key
	}
	var stack []level
	value := func() {
		if n := len(stack); n > 0 {
			top := &stack[n-1]
			if top.object {
				top.key = true
			} else {
				top.items++
				most = max(most, top.items)
			}
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return depth, most, len(stack) == 0
		}
		if err != nil {
			return 0, 0, false
		}
		n := len(stack)
		if n > 0 && stack[n-1].object && stack[n-1].key {
			if _, isKey := tok.(string); isKey {
				stack[n-1].key = false
				stack[n-1].items++
				most = max(most, stack[n-1].items)
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if n > 0 && !stack[n-1].object {
				value()
			}
			stack = append(stack, level{object: tok == json.Delim('{'), key: tok == json.Delim('{')})
			depth = max(depth, len(stack))
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:n-1]
			if n > 1 && stack[n-2].object {
				stack[n-2].key = true
			}
		default:
			value()
		}
	}
}

// FuzzCheckJSON: CheckJSON's pass over the bytes refuses a JSON document
// exactly when encoding/json reads it nested deeper than bounds.Depth or
// with an object or list of more than bounds.Items; on any input it takes at most
// boundstest.Budget.
func FuzzCheckJSON(f *testing.F) {
	for _, seed := range []string{
		`{}`, `[]`, `{"a": [1, {"b": "c,d]"}], "e\"": "\\"}`, `[[[]]]`, `"x"`, `1`, `{"a":1,"a":2}`,
		"[" + strings.Repeat("1,", bounds.Items-1) + "1]", "[" + strings.Repeat("1,", bounds.Items) + "1]",
		strings.Repeat("[", bounds.Depth) + strings.Repeat("]", bounds.Depth), strings.Repeat("[", bounds.Depth+1) + strings.Repeat("]", bounds.Depth+1),
		`{` + strings.TrimSuffix(strings.Repeat(`"k":1,`, bounds.Items+1), ",") + `}`,
		`{"a": [`, `]]]`, `,,,`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		var err *field.Error
		boundstest.Check(t, func() string {
			if err = bounds.CheckJSON([]byte(doc), field.NewPath("p"), 1<<20, "a document"); err != nil {
				return err.Error()
			}
			return ""
		})
		depth, most, ok := reference([]byte(doc))
		if !ok {
			return
		}
		if over := depth > bounds.Depth || most > bounds.Items; over != (err != nil) {
			t.Errorf("%q: nested %d deep, %d items at most; CheckJSON says %v", doc, depth, most, err)
		}
	})
}
