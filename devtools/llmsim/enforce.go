package llmsim

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// conforms reports whether content is JSON whose structure the schema d
// allows: types, required properties, additionalProperties: false, enum,
// const and items, through $ref and anyOf / oneOf / allOf as the filler
// folds them. It is the check of a server that enforces the schema (see
// Schema enforcement); pattern, format and length keywords are not
// checked.
func conforms(d *schemaDoc, content string) bool {
	var v any
	dec := json.NewDecoder(strings.NewReader(content))
	if err := dec.Decode(&v); err != nil || dec.More() {
		return false
	}
	if d == nil {
		return true
	}
	return conformsNode(d, v, d.node(d.root), 0)
}

func conformsNode(d *schemaDoc, v any, n node, depth int) bool {
	if depth > maxSchemaDepth {
		return true
	}
	if c, ok := n.m["const"]; ok {
		return reflect.DeepEqual(c, v)
	}
	if v == nil {
		return n.nullable || len(n.types) == 0 && len(n.enum()) == 0
	}
	if enum := n.enum(); len(enum) > 0 {
		found := false
		for _, e := range enum {
			if reflect.DeepEqual(e, v) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if !n.allows(v) {
		return false
	}
	switch t := v.(type) {
	case map[string]any:
		_, props, req := n.properties()
		for name := range req {
			if _, ok := t[name]; !ok {
				return false
			}
		}
		closed := false
		if ap, ok := n.m["additionalProperties"].(bool); ok && !ap {
			closed = true
		}
		for k, cv := range t {
			ps, ok := props[k]
			if !ok {
				if closed {
					return false
				}
				continue
			}
			if !conformsNode(d, cv, d.node(ps), depth+1) {
				return false
			}
		}
	case []any:
		if items, ok := n.m["items"]; ok {
			in := d.node(items)
			for _, e := range t {
				if !conformsNode(d, e, in, depth+1) {
					return false
				}
			}
		}
	}
	return true
}

// strictSchemaError returns the message of OpenAI's 400 for a strict
// schema outside the strict subset, or "" when raw is inside it. what
// names the schema as OpenAI does: "response_format 'name'" or "function
// 'name'". The subset asks every object for additionalProperties: false
// and a required list naming every property; the message for a missing
// required key is the API's (fixture openai/strict_schema_refused.json),
// the one for additionalProperties follows it.
func strictSchemaError(raw []byte, what string) string {
	var root any
	if err := json.Unmarshal(raw, &root); err != nil {
		return ""
	}
	var walk func(s any, ctx []string, depth int) string
	walk = func(s any, ctx []string, depth int) string {
		m, ok := s.(map[string]any)
		if !ok || depth > maxSchemaDepth {
			return ""
		}
		props, hasProps := m["properties"].(map[string]any)
		isObject := hasProps || m["type"] == "object"
		if t, ok := m["type"].([]any); ok {
			for _, x := range t {
				isObject = isObject || x == "object"
			}
		}
		if isObject {
			if ap, ok := m["additionalProperties"].(bool); !ok || ap {
				return fmt.Sprintf("Invalid schema for %s: In context=%s, 'additionalProperties' is required to be supplied and to be false.", what, pyTuple(ctx))
			}
			req := map[string]bool{}
			if r, ok := m["required"].([]any); ok {
				for _, x := range r {
					if s, ok := x.(string); ok {
						req[s] = true
					}
				}
			}
			names := make([]string, 0, len(props))
			for k := range props {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				if !req[k] {
					return fmt.Sprintf("Invalid schema for %s: In context=%s, 'required' is required to be supplied and to be an array including every key in properties. Missing '%s'.", what, pyTuple(ctx), k)
				}
			}
			for _, k := range names {
				if msg := walk(props[k], append(append([]string(nil), ctx...), "properties", k), depth+1); msg != "" {
					return msg
				}
			}
		}
		if items, ok := m["items"]; ok {
			if msg := walk(items, append(append([]string(nil), ctx...), "items"), depth+1); msg != "" {
				return msg
			}
		}
		for _, k := range []string{"anyOf", "oneOf", "allOf"} {
			branches, _ := m[k].([]any)
			for i, b := range branches {
				if msg := walk(b, append(append([]string(nil), ctx...), k, fmt.Sprint(i)), depth+1); msg != "" {
					return msg
				}
			}
		}
		for _, k := range []string{"$defs", "definitions"} {
			defs, _ := m[k].(map[string]any)
			names := make([]string, 0, len(defs))
			for n := range defs {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				if msg := walk(defs[n], append(append([]string(nil), ctx...), k, n), depth+1); msg != "" {
					return msg
				}
			}
		}
		return ""
	}
	return walk(root, nil, 0)
}

// pyTuple renders ctx as a Python tuple of strings, as OpenAI's messages
// name a schema location: (), ('items',), ('properties', 'address').
func pyTuple(ctx []string) string {
	if len(ctx) == 0 {
		return "()"
	}
	q := make([]string, len(ctx))
	for i, c := range ctx {
		q[i] = "'" + c + "'"
	}
	if len(q) == 1 {
		return "(" + q[0] + ",)"
	}
	return "(" + strings.Join(q, ", ") + ")"
}
