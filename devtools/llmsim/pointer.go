package llmsim

import (
	"errors"
	"strconv"
	"strings"
)

// JSON Pointer (RFC 6901) helpers over decoded JSON (map[string]any,
// []any, scalars).

// splitPointer splits p into unescaped tokens. root reports whether p means
// the whole document: "" or "/" (the product shows the root as "/").
func splitPointer(p string) (toks []string, root bool) {
	if p == "" || p == "/" {
		return nil, true
	}
	p = strings.TrimPrefix(p, "/")
	for _, t := range strings.Split(p, "/") {
		t = strings.ReplaceAll(t, "~1", "/")
		t = strings.ReplaceAll(t, "~0", "~")
		toks = append(toks, t)
	}
	return toks, false
}

// joinPointer is the inverse of splitPointer.
func joinPointer(toks []string) string {
	var b strings.Builder
	for _, t := range toks {
		b.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		b.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return b.String()
}

func getAt(doc any, toks []string) (any, bool) {
	cur := doc
	for _, t := range toks {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

var errNoPath = errors.New("path does not exist")

// apply performs one RFC 6902 add, replace or remove on doc and returns the
// new document. Maps are changed in place.
func apply(doc any, op patchOp) (any, error) {
	toks, root := splitPointer(op.Path)
	if root {
		return nil, errors.New("root operations are not used")
	}
	return applyAt(doc, toks, op)
}

func applyAt(cur any, toks []string, op patchOp) (any, error) {
	last := len(toks) == 1
	t := toks[0]
	switch c := cur.(type) {
	case map[string]any:
		if !last {
			child, ok := c[t]
			if !ok {
				return nil, errNoPath
			}
			nc, err := applyAt(child, toks[1:], op)
			if err != nil {
				return nil, err
			}
			c[t] = nc
			return c, nil
		}
		_, exists := c[t]
		switch op.Op {
		case "add":
			c[t] = op.Value
		case "replace":
			if !exists {
				return nil, errNoPath
			}
			c[t] = op.Value
		case "remove":
			if !exists {
				return nil, errNoPath
			}
			delete(c, t)
		}
		return c, nil
	case []any:
		i, err := strconv.Atoi(t)
		if t == "-" && last && op.Op == "add" {
			return append(c, op.Value), nil
		}
		if err != nil || i < 0 || i > len(c) || (i == len(c) && !(last && op.Op == "add")) {
			return nil, errNoPath
		}
		if !last {
			nc, err := applyAt(c[i], toks[1:], op)
			if err != nil {
				return nil, err
			}
			c[i] = nc
			return c, nil
		}
		switch op.Op {
		case "add":
			out := append(append(append([]any(nil), c[:i]...), op.Value), c[i:]...)
			return out, nil
		case "replace":
			c[i] = op.Value
			return c, nil
		default: // remove
			return append(append([]any(nil), c[:i]...), c[i+1:]...), nil
		}
	}
	return nil, errNoPath
}

// deepCopy copies decoded JSON.
func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, c := range t {
			out[k] = deepCopy(c)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, c := range t {
			out[i] = deepCopy(c)
		}
		return out
	}
	return v
}
