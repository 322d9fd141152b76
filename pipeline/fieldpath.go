package pipeline

import (
	"strconv"
	"strings"
)

// UnknownKey stands in a field path for an object key the schema does
// not name (FieldPath). It is not a key any schema here declares.
const UnknownKey = "(unknown)"

// FieldPath returns path (a JSON Pointer into a record of s, as in an
// extracttype.Error) with every key the schema does not name replaced by
// UnknownKey, and the path cut after it: "/contact/Chloe Zhang" becomes
// "/contact/(unknown)" when contact's properties do not include that key.
// Array indices under a schema's items are kept (PathPattern folds them);
// a token of digits that cannot be one (a leading zero, at or above the
// array's maxItems or MaxReplyBytes/2) is a key.
//
// A key the model invents, or a key of an object whose properties are
// free (additionalProperties or patternProperties schemas), may hold the
// customer's words, so what outlives an erasure stores the field path,
// never the raw one: failure analytics (failure_events, read by the
// analyst role), the triage item's error list and its announcement. The
// repair prompt, which must name the key, keeps Path. Local references ("#/..."), allOf, anyOf and oneOf are
// followed to find a key's name.
func (s *Schema) FieldPath(path string) string {
	if path == "" || !strings.HasPrefix(path, "/") {
		return path
	}
	nodes := s.expand([]any{s.doc}, 0)
	var b strings.Builder
	for _, tok := range strings.Split(path[1:], "/") {
		next := s.step(nodes, unescapeToken(tok))
		if next == nil {
			b.WriteString("/" + UnknownKey)
			return b.String()
		}
		b.WriteString("/" + tok)
		nodes = next
	}
	return b.String()
}

// arrayIndex returns tok as an array index: decimal without leading
// zeros (RFC 6901, section 4) and below MaxReplyBytes/2, the most elements
// a reply's array can hold. Any other token of digits is an object key:
// the NUL and surrogate checks walk the reply, so an object the model gave
// where the schema has an array puts its keys (a card or order number) in
// the path.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 7 || strings.Trim(tok, "0123456789") != "" || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	n, err := strconv.Atoi(tok)
	if err != nil || n >= MaxReplyBytes/2 {
		return 0, false
	}
	return n, true
}

// step returns the subschemas (expanded) that key tok leads to from any of
// nodes: a property of that name, or, for an array index, the items; nil
// when none names it.
func (s *Schema) step(nodes []any, tok string) []any {
	var next []any
	idx, index := arrayIndex(tok)
	for _, n := range nodes {
		m, _ := n.(map[string]any)
		if props, ok := m["properties"].(map[string]any); ok {
			if p, ok := props[tok]; ok {
				next = append(next, p)
			}
		}
		if index {
			if it, ok := m["items"].(map[string]any); ok {
				if max, ok := m["maxItems"].(float64); !ok || float64(idx) < max {
					next = append(next, it)
				}
			}
		}
	}
	if len(next) == 0 {
		return nil
	}
	return s.expand(next, 0)
}

// expand adds to nodes the schemas their local $ref, allOf, anyOf and
// oneOf lead to, to a depth of 8 (a reference cycle ends there).
func (s *Schema) expand(nodes []any, depth int) []any {
	if depth >= 8 {
		return nodes
	}
	var more []any
	for _, n := range nodes {
		m, _ := n.(map[string]any)
		if ref, ok := m["$ref"].(string); ok && strings.HasPrefix(ref, "#") {
			if t, ok := resolvePointer(s.doc, ref[1:]); ok {
				more = append(more, t)
			}
		}
		for _, k := range []string{"allOf", "anyOf", "oneOf"} {
			if l, ok := m[k].([]any); ok {
				more = append(more, l...)
			}
		}
	}
	if len(more) == 0 {
		return nodes
	}
	return append(nodes, s.expand(more, depth+1)...)
}
