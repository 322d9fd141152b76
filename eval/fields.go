package eval

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/big"
	"os"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/extractq/extractq/pipeline"
)

// The normalisations a field may declare, applied in this order whatever
// the order declared. Each applies to a string value and to every string
// of an array; numbers are compared by value whatever is declared.
const (
	// NormCase lower-cases letters.
	NormCase = "case"
	// NormSpace trims white space and collapses each run of it to one
	// space.
	NormSpace = "space"
	// NormNumber reads a string that is a decimal number, after dropping a
	// leading "$" and thousands commas, as that number: "40", "40.00" and
	// "$40" are equal. A string that is not a number is left as it is.
	NormNumber = "number"
	// NormAlnum keeps lower-case letters and digits only, as the grounding
	// rule compares ("(720) 986-4183" equals "720-986-4183").
	NormAlnum = "alnum"
	// NormOrdered compares arrays in order; without it an array is
	// compared as a multiset (sorted after normalisation).
	NormOrdered = "ordered"
)

var normNames = []string{NormCase, NormSpace, NormNumber, NormAlnum, NormOrdered}

// Field is how one top-level property of the schema is scored.
type Field struct {
	Name string
	// Grounded is the property's "x-grounded": true.
	Grounded bool
	// Normalize lists the normalisations, from the schema's "x-eval"
	// {"normalize": [...]} on the property, replaced by the spec file's
	// when it names the field.
	Normalize []string

	// What the schema allows, for checking labels (checkLabel): the
	// property's "type" and "enum", and its "items"' for an array.
	types, itemTypes []string
	enum, itemEnum   []any
}

// Spec is an eval spec file (YAML or JSON): per-field normalisation that
// replaces what the schema declares.
//
//	fields:
//	  full_name: {normalize: [case, space]}
//	  refund_amount: {normalize: [number]}
type Spec struct {
	Fields map[string]struct {
		Normalize []string `yaml:"normalize" json:"normalize"`
	} `yaml:"fields" json:"fields"`

	// name is the file read ("eval spec" when unnamed) and lines each
	// field's line in it, for errors.
	name  string
	lines map[string]int
}

// ReadSpec reads an eval spec file. Unknown keys, values of the wrong
// type and unknown normalisations are errors naming their line, the key
// and what is expected.
func ReadSpec(r io.Reader) (Spec, error) {
	return readSpec(r, "eval spec")
}

// ReadSpecFile reads the eval spec file at path, as ReadSpec does, its
// errors (and those of Fields about it) naming the file.
func ReadSpecFile(path string) (Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return Spec{}, err
	}
	defer f.Close()
	return readSpec(f, path)
}

func readSpec(r io.Reader, name string) (Spec, error) {
	s := Spec{name: name, lines: map[string]int{}}
	var doc yaml.Node
	if err := yaml.NewDecoder(r).Decode(&doc); err != nil {
		if err == io.EOF {
			return s, nil // an empty file: no field replaced
		}
		return Spec{}, fmt.Errorf("%s: not valid YAML: %w", name, err)
	}
	at := func(n *yaml.Node, format string, a ...any) error {
		return fmt.Errorf("%s line %d: %s", name, n.Line, fmt.Sprintf(format, a...))
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return Spec{}, at(root, "the file is %s, want a mapping with the key fields", yamlKind(root))
	}
	for i := 0; i < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "fields" {
			return Spec{}, at(k, "unknown key %q: the only key is fields", k.Value)
		}
		if v.Tag == "!!null" {
			continue
		}
		if v.Kind != yaml.MappingNode {
			return Spec{}, at(v, "fields is %s, want a mapping of field names to {normalize: [...]}", yamlKind(v))
		}
		s.Fields = map[string]struct {
			Normalize []string `yaml:"normalize" json:"normalize"`
		}{}
		for j := 0; j < len(v.Content); j += 2 {
			fk, fv := v.Content[j], v.Content[j+1]
			field := fk.Value
			if prev, ok := s.lines[field]; ok {
				return Spec{}, at(fk, "fields.%s is given twice (line %d too)", field, prev)
			}
			if fv.Kind != yaml.MappingNode && fv.Tag != "!!null" {
				return Spec{}, at(fv, "fields.%s is %s, want a mapping with the key normalize", field, yamlKind(fv))
			}
			var norms []string
			for m := 0; m < len(fv.Content); m += 2 {
				nk, nv := fv.Content[m], fv.Content[m+1]
				if nk.Value != "normalize" {
					return Spec{}, at(nk, "fields.%s: unknown key %q: the only key is normalize", field, nk.Value)
				}
				if nv.Kind != yaml.SequenceNode {
					return Spec{}, at(nv, "fields.%s.normalize is %s, want a list of %s", field, yamlKind(nv), strings.Join(normNames, ", "))
				}
				for _, e := range nv.Content {
					if e.Kind != yaml.ScalarNode {
						return Spec{}, at(e, "fields.%s.normalize: an item is %s, want one of %s", field, yamlKind(e), strings.Join(normNames, ", "))
					}
					if err := checkNorms([]string{e.Value}); err != nil {
						return Spec{}, at(e, "fields.%s.normalize: %v", field, err)
					}
					norms = append(norms, e.Value)
				}
			}
			s.Fields[field] = struct {
				Normalize []string `yaml:"normalize" json:"normalize"`
			}{norms}
			s.lines[field] = fk.Line
		}
	}
	return s, nil
}

// yamlKind names a YAML node's kind for errors.
func yamlKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	if n.Tag == "!!null" {
		return "empty"
	}
	return fmt.Sprintf("the value %q", n.Value)
}

func checkNorms(ns []string) error {
	for _, n := range ns {
		if !slices.Contains(normNames, n) {
			return fmt.Errorf("%q is not one of %s", n, strings.Join(normNames, ", "))
		}
	}
	return nil
}

// Fields returns the scored fields of schema: its root properties, sorted
// by name, with their grounding and normalisation (from "x-eval" in the
// schema, replaced per field by spec). A spec naming a field the schema
// lacks, or a bad "x-eval", is an error.
func Fields(schema *pipeline.Schema, spec Spec) ([]Field, error) {
	var doc struct {
		Properties map[string]struct {
			Grounded bool `json:"x-grounded"`
			Eval     *struct {
				Normalize []string `json:"normalize"`
			} `json:"x-eval"`
			Type  typeList `json:"type"`
			Enum  []any    `json:"enum"`
			Items *struct {
				Type typeList `json:"type"`
				Enum []any    `json:"enum"`
			} `json:"items"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(schema.Raw, &doc); err != nil {
		return nil, fmt.Errorf("eval: schema %s: %w", schema.ID, err)
	}
	var out []Field
	for name, p := range doc.Properties {
		f := Field{Name: name, Grounded: p.Grounded, types: p.Type, enum: p.Enum}
		if p.Items != nil {
			f.itemTypes, f.itemEnum = p.Items.Type, p.Items.Enum
		}
		if p.Eval != nil {
			if err := checkNorms(p.Eval.Normalize); err != nil {
				return nil, fmt.Errorf("eval: schema %s: properties.%s.x-eval.normalize: %w", schema.ID, name, err)
			}
			f.Normalize = p.Eval.Normalize
		}
		if sf, ok := spec.Fields[name]; ok {
			f.Normalize = sf.Normalize
		}
		out = append(out, f)
	}
	for name := range spec.Fields {
		if _, ok := doc.Properties[name]; !ok {
			where := cmp.Or(spec.name, "eval spec")
			if line := spec.lines[name]; line > 0 {
				where = fmt.Sprintf("%s line %d", where, line)
			}
			props := slices.Sorted(maps.Keys(doc.Properties))
			return nil, fmt.Errorf("%s: field %q is not a property of schema %s (its properties: %s)", where, name, schema.ID, strings.Join(props, ", "))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// canon returns v normalised as f declares, as a canonical JSON text, so
// two values are equal when their canonical texts are. null is "".
func (f Field) canon(v any) string {
	if v == nil {
		return ""
	}
	v = f.norm(v)
	b, _ := json.Marshal(v)
	return string(b)
}

func (f Field) has(n string) bool { return slices.Contains(f.Normalize, n) }

func (f Field) norm(v any) any {
	switch t := v.(type) {
	case string:
		return f.normString(t)
	case json.Number:
		return numberText(string(t))
	case float64:
		return numberText(fmt.Sprint(t))
	case []any:
		items := make([]string, len(t))
		for i, it := range t {
			b, _ := json.Marshal(f.norm(it))
			items[i] = string(b)
		}
		if !f.has(NormOrdered) {
			sort.Strings(items)
		}
		return items
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = f.norm(x)
		}
		return m
	}
	return v
}

func (f Field) normString(s string) any {
	if f.has(NormCase) {
		s = strings.ToLower(s)
	}
	if f.has(NormSpace) {
		s = strings.Join(strings.Fields(s), " ")
	}
	if f.has(NormNumber) {
		t := strings.TrimPrefix(strings.TrimSpace(s), "$")
		t = strings.ReplaceAll(t, ",", "")
		if n, ok := numberValue(t); ok {
			return n
		}
	}
	if f.has(NormAlnum) {
		s = pipeline.Normalize(s)
	}
	return s
}

// numberText is a JSON number's canonical text: its exact value as a
// rational ("40.00" and "40" give "#40").
func numberText(s string) string {
	if n, ok := numberValue(s); ok {
		return n
	}
	return s
}

func numberValue(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return "", false
	}
	return "#" + r.RatString(), true
}
