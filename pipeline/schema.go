package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/extractq/extractq/extracttype"
)

// Schema is a compiled JSON Schema of what is extracted, with the product's
// annotations:
//
//   - "x-version" (string, at the root): the schema version recorded with
//     every call and result.
//   - "x-grounded": true on a property: its string values must appear in the
//     customer's message (see Ground).
//   - "x-rules" on an object: CEL rules its values must meet (see Rule and
//     docs/extraction.md, "Rules").
//   - "x-review" on an object: CEL rules of the same shape that a valid
//     record must meet to count as a result without a person; one that is
//     false holds it for review (see Review and docs/extraction.md,
//     "Review rules").
//
// Schemas are JSON Schema draft 2020-12; format assertions are on.
type Schema struct {
	// ID is the short name the configuration gives the schema.
	ID string
	// Version is the root "x-version" annotation.
	Version string
	// URL is the root "$id".
	URL string
	// Title is the root "title", or ID.
	Title string
	// Raw is the schema document as sent to the model.
	Raw json.RawMessage
	// Rendering is how ModelSchema renders the document for the model:
	// "" for the full document, else the rendering's version
	// (CompactRenderingVersion; see WithRendering).
	Rendering string

	doc      map[string]any
	compiled *jsonschema.Schema
	model    json.RawMessage // ModelSchema, computed once
	rules    []*ruleSite     // the compiled x-rules and x-review, per object schema
}

// LoadSchema reads the schema file name from fsys, or from disk when fsys
// has no such file, and compiles it. Errors name the file and, for a bad
// schema, the failing keyword.
func LoadSchema(fsys fs.FS, id, name string) (*Schema, error) {
	return LoadSchemaOptions(fsys, id, name, CompileOptions{})
}

// LoadSchemaOptions is LoadSchema with the configuration's bounds for
// compiling rules. A rule that stops the start is named with the file.
func LoadSchemaOptions(fsys fs.FS, id, name string, opts CompileOptions) (*Schema, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		var err2 error
		b, err2 = os.ReadFile(name)
		if err2 != nil {
			return nil, fmt.Errorf("schema %s: %s: %w", id, name, err)
		}
	}
	s, err := CompileSchemaOptions(id, b, opts)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %s: %w", id, name, err)
	}
	return s, nil
}

// CompileSchema compiles a schema document. The document must be an object
// with "$id" and "x-version".
func CompileSchema(id string, doc []byte) (*Schema, error) {
	return CompileSchemaOptions(id, doc, CompileOptions{})
}

// CompileSchemaOptions is CompileSchema with opts for its rules. A rule
// that does not compile, names a field the schema lacks, is not of type
// bool or whose estimated cost exceeds RuleCostLimit is an error
// (*RuleError, several joined) naming the rule and the reason.
func CompileSchemaOptions(id string, doc []byte, opts CompileOptions) (*Schema, error) {
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	url, _ := m["$id"].(string)
	if url == "" {
		return nil, fmt.Errorf(`missing "$id"`)
	}
	version, _ := m["x-version"].(string)
	if version == "" {
		return nil, fmt.Errorf(`missing "x-version"`)
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	c.AssertFormat = true
	if err := c.AddResource(url, bytes.NewReader(doc)); err != nil {
		return nil, err
	}
	compiled, err := c.Compile(url)
	if err != nil {
		return nil, err
	}
	rules, err := compileRules(m, opts)
	if err != nil {
		return nil, err
	}
	title, _ := m["title"].(string)
	if title == "" {
		title = id
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, doc); err != nil {
		return nil, err
	}
	model, err := json.Marshal(stripAnnotations(m))
	if err != nil {
		return nil, err
	}
	return &Schema{ID: id, Version: version, URL: url, Title: title, Raw: compact.Bytes(), doc: m, compiled: compiled, model: model, rules: rules}, nil
}

// ModelSchema returns the schema as sent to the model: the document without
// the product's "x-" annotations, which providers may reject.
func (s *Schema) ModelSchema() json.RawMessage {
	if s.model == nil {
		b, _ := json.Marshal(stripAnnotations(s.doc))
		return b
	}
	return s.model
}

func stripAnnotations(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, c := range t {
			if strings.HasPrefix(k, "x-") || k == "$id" || k == "$schema" {
				continue
			}
			out[k] = stripAnnotations(c)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, c := range t {
			out[i] = stripAnnotations(c)
		}
		return out
	}
	return v
}

// Validate checks instance (decoded with json.Decoder.UseNumber, as
// DecodeStrict does) against the schema, its rules and the grounding rule
// over text. It first cuts punctuation and quotes from the ends of
// grounded strings, in place (see Ground): the record validated and
// stored is the cut one. An instance with errors gets its values back as
// they were, for triage.
// It returns the sorted error list (empty when valid) and, for a valid
// instance, the evidence span of every grounded value.
func (s *Schema) Validate(instance any, text string) (extracttype.ErrorList, []extracttype.Evidence) {
	return s.validate(instance, &runText{text: text})
}

// ValidateMessage is Validate with what rules see of the message besides
// its text.
func (s *Schema) ValidateMessage(instance any, text string, meta MessageMeta) (extracttype.ErrorList, []extracttype.Evidence) {
	return s.validate(instance, &runText{text: text, meta: meta})
}

// validate is Validate over a text normalised for grounding on first use.
func (s *Schema) validate(instance any, text *runText) (extracttype.ErrorList, []extracttype.Evidence) {
	trimmed := s.trimGrounded(instance)
	errs := s.validateSchema(instance)
	errs = append(errs, s.checkKeyCase(s.doc, instance, "", 0)...)
	errs = append(errs, s.checkRules(instance, text, len(errs) > 0)...)
	gerrs, evidence := s.ground(instance, text, trimmed)
	errs = append(errs, gerrs...)
	if len(errs) > 0 {
		untrim(instance, trimmed)
	}
	errs.Sort()
	return dedupe(errs), evidence
}

func dedupe(l extracttype.ErrorList) extracttype.ErrorList {
	out := l[:0]
	for i, e := range l {
		if i > 0 && e == l[i-1] {
			continue
		}
		out = append(out, e)
	}
	return out
}

// ValidateField checks value (decoded with json.Decoder.UseNumber) as
// the top-level property name of record (a decoded object, nil for an
// empty one) against the JSON Schema alone: no key case, grounding or
// rules. It returns the errors at the property or under it, paths from
// the record's root, messages without instance values; nil when the value
// fits. A reviewer's fix of one field is checked so (triage's QA review).
func (s *Schema) ValidateField(record map[string]any, name string, value any) extracttype.ErrorList {
	inst := make(map[string]any, len(record)+1)
	for k, v := range record {
		inst[k] = v
	}
	inst[name] = value
	at := "/" + escapeToken(name)
	var out extracttype.ErrorList
	for _, e := range s.validateSchema(inst) {
		if e.Path == at || strings.HasPrefix(e.Path, at+"/") {
			out = append(out, e)
		}
	}
	return out
}

// validateSchema runs the JSON Schema validator and turns its leaf errors
// into Errors whose messages carry no instance values.
func (s *Schema) validateSchema(instance any) extracttype.ErrorList {
	err := s.compiled.Validate(instance)
	if err == nil {
		return nil
	}
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: "", Keyword: "", Message: "validator failed: " + err.Error()}}
	}
	var out extracttype.ErrorList
	var walk func(*jsonschema.ValidationError)
	walk = func(v *jsonschema.ValidationError) {
		if len(v.Causes) > 0 {
			for _, c := range v.Causes {
				walk(c)
			}
			return
		}
		out = append(out, s.leafErrors(v, instance)...)
	}
	walk(ve)
	return out
}

func (s *Schema) leafErrors(v *jsonschema.ValidationError, instance any) extracttype.ErrorList {
	kwPtr := v.AbsoluteKeywordLocation
	if i := strings.IndexByte(kwPtr, '#'); i >= 0 {
		kwPtr = kwPtr[i+1:]
	}
	keyword := kwPtr
	if i := strings.LastIndexByte(kwPtr, '/'); i >= 0 {
		keyword = kwPtr[i+1:]
	}
	parentPtr := strings.TrimSuffix(kwPtr, "/"+keyword)
	kwValue, _ := resolvePointer(s.doc, kwPtr)
	path := v.InstanceLocation

	switch keyword {
	case "required":
		obj, _ := resolvePointer(instance, path)
		m, _ := obj.(map[string]any)
		req, _ := kwValue.([]any)
		var out extracttype.ErrorList
		for _, r := range req {
			name, _ := r.(string)
			if _, ok := m[name]; !ok {
				out = append(out, extracttype.Error{Kind: extracttype.KindSchema, Path: path + "/" + escapeToken(name), Keyword: "required",
					Message: "required property is missing (use null if unknown)"})
			}
		}
		return out
	case "additionalProperties":
		obj, _ := resolvePointer(instance, path)
		m, _ := obj.(map[string]any)
		parent, _ := resolvePointer(s.doc, parentPtr)
		props, _ := parent.(map[string]any)["properties"].(map[string]any)
		var out extracttype.ErrorList
		for k := range m {
			if _, ok := props[k]; !ok && caseTwin(props, k) == "" {
				out = append(out, extracttype.Error{Kind: extracttype.KindSchema, Path: path + "/" + escapeToken(k), Keyword: keyword,
					Message: "property is not in the schema"})
			}
		}
		return out
	case "type":
		return extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: path, Keyword: keyword, Message: v.Message}}
	case "pattern":
		return extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: path, Keyword: keyword, Message: fmt.Sprintf("does not match pattern %v", kwValue)}}
	case "format":
		return extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: path, Keyword: keyword, Message: fmt.Sprintf("is not a valid %v", kwValue)}}
	case "enum":
		return extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: path, Keyword: keyword, Message: "is not one of the allowed values" + enumHint(kwValue)}}
	case "const":
		return extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: path, Keyword: keyword, Message: "is not the allowed constant"}}
	case "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
		"minItems", "maxItems", "minProperties", "maxProperties", "multipleOf", "uniqueItems":
		return extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: path, Keyword: keyword, Message: fmt.Sprintf("violates %s %v", keyword, compactJSON(kwValue))}}
	}
	return extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: path, Keyword: keyword, Message: "fails " + keyword}}
}

// enumHint lists a short enum so the repair prompt can name the choices.
// Enum values come from the schema, never from the customer.
func enumHint(v any) string {
	vals, _ := v.([]any)
	if len(vals) == 0 || len(vals) > 12 {
		return ""
	}
	parts := make([]string, len(vals))
	for i, x := range vals {
		parts[i] = compactJSON(x)
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// ResolvePointer returns the value at JSON Pointer ptr (RFC 6901) in doc,
// a decoded JSON value; false when there is none. "" is doc itself.
func ResolvePointer(doc any, ptr string) (any, bool) { return resolvePointer(doc, ptr) }

// EscapeToken escapes one JSON Pointer reference token: "~" as "~0" and
// "/" as "~1".
func EscapeToken(s string) string { return escapeToken(s) }

func resolvePointer(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, false
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = unescapeToken(tok)
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			var i int
			if _, err := fmt.Sscanf(tok, "%d", &i); err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func escapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

// PropertyNames returns the names of the root object's properties.
func (s *Schema) PropertyNames() []string {
	props, _ := s.doc["properties"].(map[string]any)
	out := make([]string, 0, len(props))
	for k := range props {
		out = append(out, k)
	}
	return out
}

// caseTwin returns the property of props that k matches only when case is
// ignored, or "".
func caseTwin(props map[string]any, k string) string {
	for p := range props {
		if p != k && strings.EqualFold(p, k) {
			return p
		}
	}
	return ""
}

// checkKeyCase reports keys that differ from a schema property only by
// case ("Order_ID" for "order_id"), wherever the schema describes the
// object: such keys are never merged into the property.
func (s *Schema) checkKeyCase(schema any, inst any, path string, depth int) extracttype.ErrorList {
	sm, _ := schema.(map[string]any)
	if sm == nil || depth > MaxJSONDepth {
		return nil
	}
	if ref, ok := sm["$ref"].(string); ok && strings.HasPrefix(ref, "#") {
		if target, ok := resolvePointer(s.doc, ref[1:]); ok {
			return s.checkKeyCase(target, inst, path, depth+1)
		}
	}
	var out extracttype.ErrorList
	switch v := inst.(type) {
	case map[string]any:
		props, _ := sm["properties"].(map[string]any)
		for k, child := range v {
			if _, ok := props[k]; ok {
				if isContainer(child) { // nothing else has keys to check
					out = append(out, s.checkKeyCase(props[k], child, path+"/"+escapeToken(k), depth+1)...)
				}
			} else if twin := caseTwin(props, k); twin != "" {
				out = append(out, extracttype.Error{Kind: extracttype.KindSchema, Path: path + "/" + escapeToken(k), Keyword: "property_case",
					Message: "key differs from property " + twin + " only by case; use " + twin})
			}
		}
	case []any:
		for i, child := range v {
			if isContainer(child) {
				out = append(out, s.checkKeyCase(sm["items"], child, path+"/"+itoa(i), depth+1)...)
			}
		}
	}
	return out
}

// isContainer reports whether v is a decoded JSON object or array.
func isContainer(v any) bool {
	switch v.(type) {
	case map[string]any, []any:
		return true
	}
	return false
}
