package triage

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
)

// The editor is generated from the item's JSON Schema: one form control
// per leaf, a fieldset per object, a list per array. Inputs are named by
// the field's JSON Pointer with a prefix telling how to read them back:
//
//	v:<path>    a text, number, enum or boolean control (enum and boolean
//	            options carry their JSON value)
//	j:<path>    a JSON text area, for what the form cannot show (several
//	            types, oneOf, keys that are not in the schema)
//	o:<path>    marks an object as present
//	n:<path>    an array's length
//	null:<path> the "null" check box of a nullable object or array
//	m:<path>    marks a text or number field the record leaves out: while
//	            its input stays empty the key stays out (the page's script
//	            drops the mark once the reviewer types in the field)
//
// An empty text or number input of a nullable field means null, unless
// the field is marked missing: a key the record left out is never turned
// into null behind the reviewer's back (it stays out, and a required one
// fails as missing). The
// server reads the form back (parseForm) and validates the record with
// the worker's validator; the page's script only shows the errors.

// Field is one control of the editor.
type Field struct {
	Path     string // JSON Pointer; "" for the root
	Key      string // property name, or "1", "2", ... for array elements
	Label    string
	Desc     string // the schema's description
	Kind     string // "text", "number", "integer", "boolean", "enum", "object", "array" or "json"
	Nullable bool
	Required bool
	Grounded bool   // "x-grounded": the value must occur in the message
	Extra    bool   // a key the schema does not have
	Value    string // the control's value (JSON text for kind json)
	IsNull   bool
	Missing  bool // the property is absent from the record
	Options  []Option
	Fields   []*Field // an object's properties or an array's elements
	MaxItems int      // an array's maxItems; 0 means none
	Errors   extracttype.ErrorList
	// Evidence is the id of the message highlight of the field's value
	// ("ev-2"), when it was found in the message.
	Evidence string
	Depth    int
}

// Option is one choice of an enum or boolean control.
type Option struct {
	Value    string // the JSON value
	Label    string
	Selected bool
}

// Name returns the form input name of the field's control.
func (f *Field) Name() string {
	switch f.Kind {
	case "json":
		return "j:" + f.Path
	case "object":
		return "o:" + f.Path
	case "array":
		return "n:" + f.Path
	}
	return "v:" + f.Path
}

// ID returns an HTML id for the field's control.
func (f *Field) ID() string { return "f:" + f.Path }

// Len returns the number of elements of an array field.
func (f *Field) Len() int { return len(f.Fields) }

// schemaNode is a JSON Schema object.
type schemaNode = map[string]any

// resolve follows a local "$ref" ("#/$defs/x") of n.
func resolve(root, n schemaNode) schemaNode {
	for range 16 {
		ref, ok := n["$ref"].(string)
		if !ok || !strings.HasPrefix(ref, "#") {
			return n
		}
		target, ok := pipeline.ResolvePointer(root, ref[1:])
		m, isMap := target.(map[string]any)
		if !ok || !isMap {
			return n
		}
		n = m
	}
	return n
}

func nodeTypes(n schemaNode) []string {
	switch t := n["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func isNullable(n schemaNode) bool {
	if slices.Contains(nodeTypes(n), "null") {
		return true
	}
	if enum, ok := n["enum"].([]any); ok && slices.Contains(enum, nil) {
		return true
	}
	return false
}

// kindOf returns the control kind of schema node n (resolved).
func kindOf(n schemaNode) string {
	for _, k := range []string{"oneOf", "anyOf", "allOf", "not", "if", "const", "patternProperties"} {
		if _, ok := n[k]; ok {
			return "json"
		}
	}
	if enum, ok := n["enum"].([]any); ok {
		for _, v := range enum {
			switch v.(type) {
			case map[string]any, []any:
				return "json"
			}
		}
		return "enum"
	}
	var nonNull []string
	for _, t := range nodeTypes(n) {
		if t != "null" {
			nonNull = append(nonNull, t)
		}
	}
	if len(nonNull) != 1 {
		return "json"
	}
	switch nonNull[0] {
	case "string":
		return "text"
	case "number", "integer", "boolean":
		return nonNull[0]
	case "object":
		if _, ok := n["properties"].(map[string]any); ok {
			return "object"
		}
	case "array":
		if _, ok := n["items"].(map[string]any); ok {
			return "array"
		}
	}
	return "json"
}

// propertyOrder returns the properties of object node n: required ones in
// their order, then the others sorted.
func propertyOrder(n schemaNode) []string {
	props, _ := n["properties"].(map[string]any)
	var out []string
	seen := map[string]bool{}
	if req, ok := n["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok && props[s] != nil && !seen[s] {
				out = append(out, s)
				seen[s] = true
			}
		}
	}
	var rest []string
	for k := range props {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

func requiredSet(n schemaNode) map[string]bool {
	out := map[string]bool{}
	if req, ok := n["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok {
				out[s] = true
			}
		}
	}
	return out
}

// valueFits reports whether v can be shown by a control of kind.
func valueFits(kind string, v any) bool {
	if v == nil {
		return true
	}
	switch kind {
	case "text":
		_, ok := v.(string)
		return ok
	case "number", "integer":
		_, ok := v.(json.Number)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	}
	return true
}

// formBuilder builds the editor's fields for a record.
type formBuilder struct {
	root     schemaNode
	errs     map[string]extracttype.ErrorList // by path
	evidence map[string]string                // path -> highlight anchor
	used     map[string]bool                  // error paths shown beside a field
}

// BuildForm returns the editor's root field for record (decoded with
// numbers as json.Number) under schema root, with errs beside their
// fields and evidence anchors by path. The second result lists the errors
// no field shows (such as a parse error at the root).
func BuildForm(root schemaNode, record any, errs extracttype.ErrorList, evidence map[string]string) (*Field, extracttype.ErrorList) {
	b := &formBuilder{root: root, errs: map[string]extracttype.ErrorList{}, evidence: evidence, used: map[string]bool{}}
	for _, e := range errs {
		b.errs[e.Path] = append(b.errs[e.Path], e)
	}
	f := b.build(root, record, record != nil, "", "", "record", true, 0)
	var rest extracttype.ErrorList
	for _, e := range errs {
		if !b.used[e.Path] {
			rest = append(rest, e)
		}
	}
	return f, rest
}

func (b *formBuilder) build(n schemaNode, v any, present bool, path, key, label string, required bool, depth int) *Field {
	n = resolve(b.root, n)
	kind := kindOf(n)
	if present && !valueFits(kind, v) {
		kind = "json" // keep a value of the wrong type exactly as it is
	}
	f := &Field{
		Path: path, Key: key, Label: label, Kind: kind, Nullable: isNullable(n), Required: required,
		Grounded: n["x-grounded"] == true, IsNull: present && v == nil, Missing: !present, Depth: depth,
		Evidence: b.evidence[path],
	}
	f.Desc, _ = n["description"].(string)
	if es, ok := b.errs[path]; ok {
		f.Errors = es
		b.used[path] = true
	}
	switch kind {
	case "text", "number", "integer":
		switch t := v.(type) {
		case string:
			f.Value = t
		case json.Number:
			f.Value = t.String()
		}
	case "enum", "boolean":
		f.Options = b.options(n, kind, v, present)
	case "json":
		if present {
			f.Value = prettyJSON(v)
		}
	case "object":
		props, _ := n["properties"].(map[string]any)
		obj, _ := v.(map[string]any)
		req := requiredSet(n)
		for _, name := range propertyOrder(n) {
			child, ok := obj[name]
			pn, _ := props[name].(map[string]any)
			f.Fields = append(f.Fields, b.build(pn, child, ok, path+"/"+pipeline.EscapeToken(name), name, name, req[name], depth+1))
		}
		var extra []string
		for k := range obj {
			if _, ok := props[k]; !ok {
				extra = append(extra, k)
			}
		}
		sort.Strings(extra)
		for _, k := range extra {
			p := path + "/" + pipeline.EscapeToken(k)
			ef := &Field{Path: p, Key: k, Label: k, Kind: "json", Extra: true, Value: prettyJSON(obj[k]), Depth: depth + 1,
				Desc: "not in the schema: empty this box to remove the key"}
			if es, ok := b.errs[p]; ok {
				ef.Errors = es
				b.used[p] = true
			}
			f.Fields = append(f.Fields, ef)
		}
	case "array":
		items, _ := n["items"].(map[string]any)
		arr, _ := v.([]any)
		if mx, ok := n["maxItems"].(float64); ok {
			f.MaxItems = int(mx)
		}
		for i, el := range arr {
			f.Fields = append(f.Fields, b.build(items, el, true, path+"/"+strconv.Itoa(i), strconv.Itoa(i+1), fmt.Sprintf("%s #%d", label, i+1), true, depth+1))
		}
	}
	return f
}

func (b *formBuilder) options(n schemaNode, kind string, v any, present bool) []Option {
	var values []any
	if kind == "boolean" {
		values = []any{true, false}
		if isNullable(n) {
			values = append(values, nil)
		}
	} else {
		values, _ = n["enum"].([]any)
	}
	cur := ""
	if present {
		cur = jsonText(v)
	}
	var out []Option
	if !present {
		out = append(out, Option{Value: "", Label: "— choose —", Selected: true})
	}
	found := false
	for _, x := range values {
		val := jsonText(normalizeNumber(x))
		o := Option{Value: val, Label: optionLabel(x), Selected: present && val == cur}
		found = found || o.Selected
		out = append(out, o)
	}
	if present && !found {
		out = append(out, Option{Value: cur, Label: "(not allowed) " + optionLabel(v), Selected: true})
	}
	return out
}

// normalizeNumber turns a float64 from the schema document into the
// json.Number a record decoded with UseNumber would hold.
func normalizeNumber(v any) any {
	if f, ok := v.(float64); ok {
		return json.Number(strconv.FormatFloat(f, 'f', -1, 64))
	}
	return v
}

func optionLabel(v any) string {
	switch t := v.(type) {
	case nil:
		return "— null —"
	case string:
		return t
	}
	return jsonText(v)
}

func jsonText(v any) string {
	b, err := compactJSON(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// parseForm reads a record back from the editor's form values under
// schema root. Values that are not valid JSON in a JSON box are reported
// as parse errors at their path and left out.
func parseForm(root schemaNode, form url.Values) (any, extracttype.ErrorList) {
	p := &formParser{root: root, form: form}
	v, ok := p.value(root, "")
	if !ok {
		return map[string]any{}, p.errs
	}
	return v, p.errs
}

type formParser struct {
	root schemaNode
	form url.Values
	errs extracttype.ErrorList
}

func (p *formParser) get(key string) (string, bool) {
	vs, ok := p.form[key]
	if !ok || len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

func (p *formParser) decodeJSON(path, s string) (any, bool) {
	v, err := pipeline.DecodeStrict([]byte(s))
	if err != nil {
		p.errs = append(p.errs, extracttype.Error{Kind: extracttype.KindParse, Path: path, Keyword: "json", Message: "is not valid JSON"})
		return nil, false
	}
	return v, true
}

// value reads the field at path of schema node n; ok is false when the
// form leaves the property out.
func (p *formParser) value(n schemaNode, path string) (any, bool) {
	n = resolve(p.root, n)
	// A JSON box wins: the builder shows wrongly typed values in one.
	if s, ok := p.get("j:" + path); ok {
		if strings.TrimSpace(s) == "" {
			return nil, false
		}
		return p.decodeJSON(path, s)
	}
	nullable := isNullable(n)
	switch kindOf(n) {
	case "text":
		s, ok := p.get("v:" + path)
		if !ok {
			return nil, false
		}
		if _, missing := p.get("m:" + path); missing && s == "" {
			return nil, false
		}
		if s == "" && nullable {
			return nil, true
		}
		return s, true
	case "number", "integer":
		s, ok := p.get("v:" + path)
		if !ok {
			return nil, false
		}
		s = strings.TrimSpace(s)
		if _, missing := p.get("m:" + path); missing && s == "" {
			return nil, false
		}
		if s == "" {
			return nil, nullable
		}
		if v, err := pipeline.DecodeStrict([]byte(s)); err == nil {
			if num, ok := v.(json.Number); ok {
				return num, true
			}
		}
		return s, true // not a number: the validator names the type
	case "enum", "boolean":
		s, ok := p.get("v:" + path)
		if !ok || s == "" {
			return nil, false
		}
		return p.decodeJSON(path, s)
	case "object":
		if _, ok := p.get("o:" + path); !ok {
			return nil, false
		}
		if _, isNull := p.get("null:" + path); isNull && nullable {
			return nil, true
		}
		props, _ := n["properties"].(map[string]any)
		obj := map[string]any{}
		for name, pn := range props {
			child, _ := pn.(map[string]any)
			if v, ok := p.value(child, path+"/"+pipeline.EscapeToken(name)); ok {
				obj[name] = v
			}
		}
		// Keys that are not in the schema come back from JSON boxes.
		prefix := "j:" + path + "/"
		for key := range p.form {
			rest, ok := strings.CutPrefix(key, prefix)
			if !ok || strings.Contains(rest, "/") {
				continue
			}
			name := strings.ReplaceAll(strings.ReplaceAll(rest, "~1", "/"), "~0", "~")
			if _, inSchema := props[name]; inSchema {
				continue
			}
			if v, ok := p.value(schemaNode{}, path+"/"+rest); ok {
				obj[name] = v
			}
		}
		return obj, true
	case "array":
		s, ok := p.get("n:" + path)
		if !ok {
			return nil, false
		}
		if _, isNull := p.get("null:" + path); isNull && nullable {
			return nil, true
		}
		count, err := strconv.Atoi(s)
		if err != nil || count < 0 || count > 1000 {
			p.errs = append(p.errs, extracttype.Error{Kind: extracttype.KindParse, Path: path, Keyword: "form", Message: "bad array length in the form"})
			return nil, false
		}
		items, _ := n["items"].(map[string]any)
		arr := make([]any, 0, count)
		for i := range count {
			v, _ := p.value(items, path+"/"+strconv.Itoa(i))
			arr = append(arr, v)
		}
		return arr, true
	}
	return nil, false
}

// formValues returns the form f posts as it is rendered, before any
// edit: what a browser sends for its controls (an enum or boolean sends
// its selected option, the first when none is). parseForm of it is the
// record the page's Approve sends, which the page validates.
func formValues(f *Field) url.Values {
	out := url.Values{}
	var walk func(f *Field)
	walk = func(f *Field) {
		switch f.Kind {
		case "object":
			out.Set(f.Name(), "1")
		case "array":
			out.Set(f.Name(), strconv.Itoa(len(f.Fields)))
		case "enum", "boolean":
			v := ""
			if len(f.Options) > 0 {
				v = f.Options[0].Value
			}
			for _, o := range f.Options {
				if o.Selected {
					v = o.Value
					break
				}
			}
			out.Set(f.Name(), v)
		default:
			out.Set(f.Name(), f.Value)
			if f.Missing && f.Kind != "json" {
				out.Set("m:"+f.Path, "1")
			}
		}
		if f.IsNull && (f.Kind == "object" || f.Kind == "array") && f.Nullable {
			out.Set("null:"+f.Path, "on")
		}
		for _, c := range f.Fields {
			walk(c)
		}
	}
	walk(f)
	return out
}

// recordDigest is the SHA-256 of record's JSON (keys sorted, numbers as
// written), hex: the page carries the digest of the record it last
// validated, and Approve refuses a record of another digest.
func recordDigest(record any) string {
	b, err := json.Marshal(record)
	if err != nil {
		return ""
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// skeleton returns an empty value of schema node n: null where null is
// allowed, else an object of skeletons, an empty array or an empty string.
func skeleton(root, n schemaNode) any {
	n = resolve(root, n)
	if isNullable(n) && kindOf(n) != "object" {
		return nil
	}
	switch kindOf(n) {
	case "object":
		if isNullable(n) {
			return nil
		}
		props, _ := n["properties"].(map[string]any)
		obj := map[string]any{}
		for name, pn := range props {
			child, _ := pn.(map[string]any)
			obj[name] = skeleton(root, child)
		}
		return obj
	case "array":
		return []any{}
	case "text":
		return ""
	}
	return nil
}

// applyArrayOp applies an editor button to record: "add:<path>" appends
// an empty element to the array at path, "del:<path>/<i>" removes
// element i. It returns the changed record.
func applyArrayOp(root schemaNode, record any, op string) (any, error) {
	verb, path, ok := strings.Cut(op, ":")
	if !ok {
		return nil, invalidf("array operation %q", op)
	}
	switch verb {
	case "add":
		n, ok := schemaAt(root, path)
		if !ok {
			return nil, invalidf("no array at %s", path)
		}
		items, _ := resolve(root, n)["items"].(map[string]any)
		return updateAt(record, path, func(v any) (any, error) {
			arr, _ := v.([]any)
			return append(arr, skeleton(root, items)), nil
		})
	case "del":
		i := strings.LastIndexByte(path, '/')
		if i < 0 {
			return nil, invalidf("array operation %q", op)
		}
		idx, err := strconv.Atoi(path[i+1:])
		if err != nil {
			return nil, invalidf("array operation %q", op)
		}
		return updateAt(record, path[:i], func(v any) (any, error) {
			arr, ok := v.([]any)
			if !ok || idx < 0 || idx >= len(arr) {
				return nil, invalidf("no element %d at %s", idx, path[:i])
			}
			return append(arr[:idx:idx], arr[idx+1:]...), nil
		})
	}
	return nil, invalidf("array operation %q", op)
}

// schemaAt returns the schema node describing the value at path.
func schemaAt(root schemaNode, path string) (schemaNode, bool) {
	n := root
	if path == "" {
		return n, true
	}
	for _, tok := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		n = resolve(root, n)
		switch kindOf(n) {
		case "object":
			props, _ := n["properties"].(map[string]any)
			name := strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			child, ok := props[name].(map[string]any)
			if !ok {
				return nil, false
			}
			n = child
		case "array":
			n, _ = n["items"].(map[string]any)
		default:
			return nil, false
		}
	}
	return resolve(root, n), true
}

// updateAt replaces the value at path of doc with fn's result.
func updateAt(doc any, path string, fn func(any) (any, error)) (any, error) {
	if path == "" {
		return fn(doc)
	}
	tok, rest, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if rest != "" {
		rest = "/" + rest
	}
	switch c := doc.(type) {
	case map[string]any:
		name := strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		v, err := updateAt(c[name], rest, fn)
		if err != nil {
			return nil, err
		}
		c[name] = v
		return c, nil
	case []any:
		i, err := strconv.Atoi(tok)
		if err != nil || i < 0 || i >= len(c) {
			return nil, invalidf("no element %s", tok)
		}
		v, err := updateAt(c[i], rest, fn)
		if err != nil {
			return nil, err
		}
		c[i] = v
		return c, nil
	}
	return nil, invalidf("no value at %s", path)
}
