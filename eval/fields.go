package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"math/big"
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
}

// ReadSpec reads an eval spec file. Unknown keys and unknown
// normalisations are errors naming them.
func ReadSpec(r io.Reader) (Spec, error) {
	var s Spec
	d := yaml.NewDecoder(r)
	d.KnownFields(true)
	if err := d.Decode(&s); err != nil && err != io.EOF {
		return Spec{}, fmt.Errorf("eval spec: %w", err)
	}
	for name, f := range s.Fields {
		if err := checkNorms(f.Normalize); err != nil {
			return Spec{}, fmt.Errorf("eval spec: fields.%s.normalize: %w", name, err)
		}
	}
	return s, nil
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
		} `json:"properties"`
	}
	if err := json.Unmarshal(schema.Raw, &doc); err != nil {
		return nil, fmt.Errorf("eval: schema %s: %w", schema.ID, err)
	}
	var out []Field
	for name, p := range doc.Properties {
		f := Field{Name: name, Grounded: p.Grounded}
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
			return nil, fmt.Errorf("eval spec: field %q is not a property of schema %s", name, schema.ID)
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
