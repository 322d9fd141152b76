package pipeline

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// DroppedKeyword is a keyword StrictSchema left out of the schema sent,
// at Path, a JSON Pointer into the schema (as "/properties/name"). The
// validator still checks it: it validates against the full schema.
type DroppedKeyword struct {
	Path    string
	Keyword string
}

// String is "keyword at path" ("/" for the root).
func (d DroppedKeyword) String() string { return d.Keyword + " at " + cmp.Or(d.Path, "/") }

// strictKeywords are the keywords OpenAI's strict structured outputs
// accept, from https://platform.openai.com/docs/guides/structured-outputs
// ("Supported schemas": the types string, number, boolean, integer,
// object, array, enum and anyOf; "Supported properties": for strings
// pattern and format, for numbers multipleOf, maximum, exclusiveMaximum,
// minimum and exclusiveMinimum, for arrays minItems and maxItems;
// definitions ($defs) and recursion ($ref); "Some type-specific keywords
// are not yet supported": allOf, not, dependentRequired,
// dependentSchemas, if, then, else). Everything else (minLength,
// maxLength, uniqueItems, patternProperties, propertyNames,
// minProperties, maxProperties, contains, default, examples, ...) is
// dropped. title and description are annotations the API accepts.
var strictKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "const": true, "anyOf": true, "$ref": true, "$defs": true,
	"definitions": true, "description": true, "title": true,
	"pattern": true, "format": true,
	"multipleOf": true, "maximum": true, "exclusiveMaximum": true, "minimum": true, "exclusiveMinimum": true,
	"minItems": true, "maxItems": true,
}

// strictFormats are the string formats strict mode supports (same guide).
var strictFormats = map[string]bool{
	"date-time": true, "time": true, "date": true, "duration": true, "email": true,
	"hostname": true, "ipv4": true, "ipv6": true, "uuid": true,
}

// StrictSchema converts schema, a decoded JSON Schema as sent to the model
// (ModelSchema), to OpenAI's strict subset:
//
//   - every object lists all its properties in required, and a property
//     that was not required is made nullable (its type gains "null", its
//     enum gains null, or it becomes anyOf [it, {"type":"null"}]);
//   - every object has additionalProperties false;
//   - oneOf becomes anyOf;
//   - a keyword the subset lacks is dropped (see strictKeywords), as is a
//     format it does not know.
//
// It returns the converted copy (schema is not changed) and the dropped
// keywords, sorted by path. addedNull reports that some property was made
// nullable: the validator, which keeps the full schema, then reads a null
// there as the property's absence (see dropAddedNulls).
func StrictSchema(schema map[string]any) (out map[string]any, dropped []DroppedKeyword, addedNull bool) {
	c := strictConverter{}
	out, _ = c.node(schema, "").(map[string]any)
	sort.Slice(c.dropped, func(i, j int) bool {
		if c.dropped[i].Path != c.dropped[j].Path {
			return c.dropped[i].Path < c.dropped[j].Path
		}
		return c.dropped[i].Keyword < c.dropped[j].Keyword
	})
	return out, c.dropped, c.addedNull
}

type strictConverter struct {
	dropped   []DroppedKeyword
	addedNull bool
}

func (c *strictConverter) drop(path, kw string) {
	c.dropped = append(c.dropped, DroppedKeyword{Path: path, Keyword: kw})
}

// node converts one schema (a map, or a boolean schema left as it is).
func (c *strictConverter) node(v any, path string) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, val := range m {
		p := path + "/" + escapeToken(k)
		switch k {
		case "properties", "$defs", "definitions":
			sub, _ := val.(map[string]any)
			conv := make(map[string]any, len(sub))
			for name, s := range sub {
				conv[name] = c.node(s, p+"/"+escapeToken(name))
			}
			out[k] = conv
		case "items":
			if _, tuple := val.([]any); tuple { // draft 4 tuple form: not in the subset
				c.drop(path, k)
				continue
			}
			out[k] = c.node(val, p)
		case "anyOf", "oneOf":
			arr, _ := val.([]any)
			conv := make([]any, len(arr))
			for i, s := range arr {
				conv[i] = c.node(s, fmt.Sprintf("%s/%d", p, i))
			}
			if k == "oneOf" {
				c.drop(path, k) // sent as anyOf
				if _, has := m["anyOf"]; has {
					continue
				}
			}
			out["anyOf"] = conv
		case "format":
			if f, _ := val.(string); strictFormats[f] {
				out[k] = val
			} else {
				c.drop(path, k)
			}
		case "additionalProperties":
			if b, ok := val.(bool); !ok || b {
				c.drop(path, k) // set to false below
			}
		default:
			if strictKeywords[k] {
				out[k] = val
			} else {
				c.drop(path, k)
			}
		}
	}
	if props, ok := out["properties"].(map[string]any); ok || isObjectType(out) {
		out["additionalProperties"] = false
		req := map[string]bool{}
		if r, ok := m["required"].([]any); ok {
			for _, x := range r {
				if s, ok := x.(string); ok {
					req[s] = true
				}
			}
		}
		names := make([]string, 0, len(props))
		for name := range props {
			names = append(names, name)
			if !req[name] {
				props[name] = c.nullable(props[name])
			}
		}
		slices.Sort(names)
		all := make([]any, len(names))
		for i, n := range names {
			all[i] = n
		}
		out["required"] = all
		if props == nil {
			out["properties"] = map[string]any{}
		}
	}
	return out
}

// isObjectType reports whether a schema's type is or includes "object".
func isObjectType(m map[string]any) bool {
	switch t := m["type"].(type) {
	case string:
		return t == "object"
	case []any:
		for _, x := range t {
			if x == "object" {
				return true
			}
		}
	}
	return false
}

// nullable returns s allowing null too.
func (c *strictConverter) nullable(v any) any {
	m, ok := v.(map[string]any)
	if !ok || allowsNull(m) {
		return v
	}
	c.addedNull = true
	_, hasRef := m["$ref"]
	_, hasConst := m["const"]
	t, hasType := m["type"]
	if hasRef || hasConst || !hasType {
		return map[string]any{"anyOf": []any{m, map[string]any{"type": "null"}}}
	}
	out := make(map[string]any, len(m))
	for k, val := range m {
		out[k] = val
	}
	switch t := t.(type) {
	case string:
		out["type"] = []any{t, "null"}
	case []any:
		out["type"] = append(slices.Clone(t), "null")
	}
	if e, ok := m["enum"].([]any); ok {
		out["enum"] = append(slices.Clone(e), nil)
	}
	return out
}

// allowsNull reports whether a schema's type or enum admits null as it
// stands, as far as the strict subset can tell (type and enum).
func allowsNull(m map[string]any) bool {
	typeOK := false
	switch t := m["type"].(type) {
	case string:
		typeOK = t == "null"
	case []any:
		typeOK = slices.Contains(t, any("null"))
	default:
		return false
	}
	if !typeOK {
		return false
	}
	if e, ok := m["enum"].([]any); ok {
		return slices.Contains(e, nil)
	}
	return true
}

// dropAddedNulls removes from inst the null properties that the strict
// form of schema allows and schema does not: a property that is not
// required and whose schema does not admit null. A strict reply writes
// such a property as null where the full schema means it to be absent.
// It changes inst in place; schema is the full document (for $ref).
func dropAddedNulls(doc map[string]any, schema any, inst any, depth int) {
	sm, _ := schema.(map[string]any)
	if sm == nil || depth > MaxJSONDepth {
		return
	}
	if ref, ok := sm["$ref"].(string); ok && strings.HasPrefix(ref, "#") {
		if target, ok := resolvePointer(doc, ref[1:]); ok {
			dropAddedNulls(doc, target, inst, depth+1)
		}
		return
	}
	switch v := inst.(type) {
	case map[string]any:
		props, _ := sm["properties"].(map[string]any)
		req := map[string]bool{}
		if r, ok := sm["required"].([]any); ok {
			for _, x := range r {
				if s, ok := x.(string); ok {
					req[s] = true
				}
			}
		}
		for k, child := range v {
			ps, ok := props[k].(map[string]any)
			if !ok {
				continue
			}
			if child == nil && !req[k] && !admitsNull(doc, ps, depth) {
				delete(v, k)
				continue
			}
			dropAddedNulls(doc, ps, child, depth+1)
		}
	case []any:
		for _, child := range v {
			dropAddedNulls(doc, sm["items"], child, depth+1)
		}
	}
}

// admitsNull reports whether schema s may validate null: its type or enum
// admit it, or it has no type at all (following a local $ref).
func admitsNull(doc map[string]any, s map[string]any, depth int) bool {
	if ref, ok := s["$ref"].(string); ok && strings.HasPrefix(ref, "#") && depth < MaxJSONDepth {
		if target, ok := resolvePointer(doc, ref[1:]); ok {
			if tm, ok := target.(map[string]any); ok {
				return admitsNull(doc, tm, depth+1)
			}
		}
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		if branches, ok := s[kw].([]any); ok {
			for _, b := range branches {
				if bm, ok := b.(map[string]any); ok && admitsNull(doc, bm, depth+1) {
					return true
				}
			}
			return false
		}
	}
	if _, ok := s["type"]; !ok {
		if e, ok := s["enum"].([]any); ok {
			return slices.Contains(e, nil)
		}
		return true
	}
	return allowsNull(s)
}
