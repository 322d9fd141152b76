package pipeline

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Schema renderings: how a schema is written into the request (its
// output schema, whose tokens are most of the prompt: 1,426 of 1,646 per
// message for customer_message).
const (
	// RenderingFull sends ModelSchema as it is: every description.
	RenderingFull = "full"
	// RenderingCompact sends ModelSchema with the root description left
	// out and every other description cut to its first sentence (see
	// CompactSchema). Validation is unchanged: the same schema checks
	// the reply.
	RenderingCompact = "compact"
)

// CompactRenderingVersion names the rules of RenderingCompact. It is
// added to the prompt version of every call that sends the compact
// rendering ("extract.v1+schema.compact.v1", Prompt.WithRendering), so
// cohorts tell the renderings apart; changing CompactSchema's rules
// means a new version here.
const CompactRenderingVersion = "schema.compact.v1"

// Renderings lists the schema renderings, RenderingFull first.
var Renderings = []string{RenderingFull, RenderingCompact}

// compactMinClause is the shortest first clause CompactSchema keeps on
// its own; shorter ones ("Account id") keep the sentence they start.
const compactMinClause = 24

// WithRendering returns s rendered as r for the model: s itself for
// RenderingFull (or ""), else a Schema sharing s's validation, rules and
// version whose ModelSchema is the rendering. It returns an error naming
// r when it is no rendering.
func (s *Schema) WithRendering(r string) (*Schema, error) {
	switch r {
	case "", RenderingFull:
		return s, nil
	case RenderingCompact:
		var m map[string]any
		if err := json.Unmarshal(s.ModelSchema(), &m); err != nil {
			return nil, fmt.Errorf("schema %s: rendering %s: %w", s.ID, r, err)
		}
		b, err := json.Marshal(CompactSchema(m))
		if err != nil {
			return nil, fmt.Errorf("schema %s: rendering %s: %w", s.ID, r, err)
		}
		c := *s
		c.model = b
		c.Rendering = CompactRenderingVersion
		return &c, nil
	}
	return nil, fmt.Errorf("schema %s: rendering %q is not one of %s", s.ID, r, strings.Join(Renderings, ", "))
}

// CompactSchema returns a copy of doc, a decoded JSON Schema, in the
// compact rendering (CompactRenderingVersion): the root "description"
// left out (it documents the schema for people: its origin and its
// annotations), every other "description" cut to its first clause (up to
// ": ", "; " or ". ") when that clause holds at least compactMinClause
// characters, else to its first sentence (up to ". "). Keywords that
// constrain values (type, enum, pattern, format, required...) are kept
// whole, so the model sees every constraint the validator checks.
// Properties named "description" are kept: only the annotation is cut.
func CompactSchema(doc map[string]any) map[string]any {
	out := compactNode(doc).(map[string]any)
	delete(out, "description")
	return out
}

func compactNode(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, c := range t {
			switch k {
			case "properties", "$defs", "definitions", "patternProperties", "dependentSchemas":
				// Maps of names to subschemas: a name is not a keyword.
				if m, ok := c.(map[string]any); ok {
					sub := make(map[string]any, len(m))
					for name, s := range m {
						sub[name] = compactNode(s)
					}
					out[k] = sub
					continue
				}
			case "description":
				if d, ok := c.(string); ok {
					out[k] = firstClause(d)
					continue
				}
			case "enum", "const", "default", "examples", "required":
				out[k] = c // values, not subschemas
				continue
			}
			out[k] = compactNode(c)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, c := range t {
			out[i] = compactNode(c)
		}
		return out
	}
	return v
}

// firstClause is d cut as CompactSchema says. Only separators outside
// parentheses count, and a sentence ends at ". " before a capital letter,
// so "(brand then item, e.g. calvin klein jacket)" stays whole.
func firstClause(d string) string {
	clause, sentence, depth := -1, -1, 0
	for i := 0; i+1 < len(d) && sentence < 0; i++ {
		switch c := d[i]; {
		case c == '(':
			depth++
		case c == ')':
			depth = max(depth-1, 0)
		case depth > 0 || d[i+1] != ' ':
		case c == '.' && i+2 < len(d) && d[i+2] >= 'A' && d[i+2] <= 'Z':
			sentence = i
		case (c == ':' || c == ';') && clause < 0:
			clause = i
		}
	}
	switch {
	case clause >= compactMinClause:
		return d[:clause]
	case sentence >= 0:
		return d[:sentence]
	}
	return strings.TrimSuffix(d, ".")
}
