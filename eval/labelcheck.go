package eval

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strings"
)

// LabelError is a label line the schema makes impossible: a value of a
// type, or outside an enum, that no valid record can hold.
type LabelError struct {
	Line int    // 1-based line of the labels file
	ID   string // the line's id
	Msg  string // what is wrong, naming the key
}

func (e *LabelError) Error() string {
	return fmt.Sprintf("labels line %d (id %q): %s", e.Line, e.ID, e.Msg)
}

// typeList is a JSON Schema "type": one name or a list of names.
type typeList []string

func (t *typeList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*t = typeList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("\"type\" is neither a name nor a list of names")
	}
	*t = many
	return nil
}

// checkLabels checks each labelled value against what the schema allows
// its field: its type (null only when the type allows it; a string for a
// number when the field normalises numbers) and its enum, compared after
// the field's normalisation, and the same for each item of an array. A
// value's pattern, format and bounds are not checked: labels may be typed
// in another case or spacing than a record, which normalisation absorbs.
// Keys the schema lacks are not checked (they are not scored).
func checkLabels(fields []Field, labels []Label) error {
	for _, l := range labels {
		for _, f := range fields {
			v, ok := l.Expected[f.Name]
			if !ok {
				continue
			}
			if msg := f.checkValue(v, f.Name, f.types, f.enum); msg != "" {
				return &LabelError{Line: l.Line, ID: l.ID, Msg: fmt.Sprintf("expected %q is %s: %s", f.Name, kindOf(v), msg)}
			}
			items, ok := v.([]any)
			if !ok {
				continue
			}
			for i, it := range items {
				if msg := f.checkValue(it, "each item of "+f.Name, f.itemTypes, f.itemEnum); msg != "" {
					return &LabelError{Line: l.Line, ID: l.ID, Msg: fmt.Sprintf("expected %q item %d is %s: %s", f.Name, i, kindOf(it), msg)}
				}
			}
		}
	}
	return nil
}

// checkValue returns what is wrong with v, the value of what, for types
// and enum, or "".
func (f Field) checkValue(v any, what string, types []string, enum []any) string {
	if len(types) > 0 && !slices.ContainsFunc(types, func(t string) bool { return f.isType(v, t) }) {
		return fmt.Sprintf("the schema wants %s for %s", describe(types, enum), what)
	}
	if len(enum) == 0 || v == nil {
		return ""
	}
	c := f.canon(v)
	if slices.ContainsFunc(enum, func(e any) bool { return f.canon(e) == c }) {
		return ""
	}
	return fmt.Sprintf("the schema wants %s for %s", describe(types, enum), what)
}

// isType reports whether v (decoded with UseNumber) is of JSON Schema
// type t; a string that reads as a number is a number to a field that
// normalises numbers.
func (f Field) isType(v any, t string) bool {
	switch v := v.(type) {
	case nil:
		return t == "null"
	case string:
		if t == "string" {
			return true
		}
		n := strings.ReplaceAll(strings.TrimPrefix(strings.TrimSpace(v), "$"), ",", "")
		r, ok := new(big.Rat).SetString(n)
		return f.has(NormNumber) && ok && (t == "number" || t == "integer" && r.IsInt())
	case json.Number:
		r, ok := new(big.Rat).SetString(string(v))
		return t == "number" || t == "integer" && ok && r.IsInt()
	case bool:
		return t == "boolean"
	case []any:
		return t == "array"
	case map[string]any:
		return t == "object"
	}
	return false
}

// describe says what types and enum allow: "a string or null, one of
// a, b, c, d, e, … (12 values)".
func describe(types []string, enum []any) string {
	names := map[string]string{"string": "a string", "number": "a number", "integer": "an integer", "boolean": "true or false",
		"array": "an array", "object": "an object", "null": "null"}
	var ts []string
	for _, t := range types {
		ts = append(ts, cmp.Or(names[t], t))
	}
	out := strings.Join(ts, " or ")
	if len(enum) == 0 {
		return cmp.Or(out, "any value")
	}
	var es []string
	for _, e := range enum {
		if e == nil {
			continue // said by the type
		}
		b, _ := json.Marshal(e)
		es = append(es, string(b))
	}
	const shown = 5
	list := strings.Join(es[:min(len(es), shown)], ", ")
	if len(es) > shown {
		list += fmt.Sprintf(", … (%d values)", len(es))
	}
	if out == "" {
		return "one of " + list
	}
	return out + ", one of " + list
}
