package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"github.com/google/cel-go/parser"

	"github.com/extractq/extractq/extracttype"
)

// RuleCostLimit is the most a rule may cost, in CEL cost units, both as
// cel-go's checker estimates it at start (with the size bounds of
// [CompileOptions]) and as the interpreter counts it on a record. It is
// Kubernetes' per-call limit for CRD validation rules
// (k8s.io/apiserver/pkg/apis/cel PerCallLimit).
const RuleCostLimit = 1_000_000

// DefaultMaxTextBytes is the message-size bound rules are compiled with
// when the caller gives none: the default of ingest.max_text_bytes.
const DefaultMaxTextBytes = 32768

// CompileOptions are what compiling a schema's rules needs from the
// configuration.
type CompileOptions struct {
	// MaxTextBytes is ingest.max_text_bytes: the size bound of
	// message.text and of every string or array the schema leaves
	// unbounded (no maxLength, maxItems or enum), for the cost estimate.
	// 0 means DefaultMaxTextBytes.
	MaxTextBytes int
}

// Rule is one entry of an "x-rules" list: a CEL expression that must be
// true of the object the list sits on. The shape follows Kubernetes'
// x-kubernetes-validations (rule, message, fieldPath), with a name.
type Rule struct {
	// Name is the rule's keyword in the error list: lower-case letters,
	// digits and "_", unique in the schema.
	Name string `json:"name"`
	// Rule is the CEL expression; it must have type bool.
	Rule string `json:"rule"`
	// Message is the fixed text of the error; never built from values.
	Message string `json:"message"`
	// Field is a JSON Pointer, relative to the object, of the field the
	// error is reported at; "" is the object itself.
	Field string `json:"field,omitempty"`
}

// compiledRule is a Rule ready to run on the objects its schema node
// describes.
type compiledRule struct {
	Rule
	prog cel.Program
}

// ruleSite is an object schema with rules: where it is in the schema
// document, its compiled x-rules and its compiled x-review rules.
type ruleSite struct {
	node    uintptr // nodeKey of the object schema
	rules   []compiledRule
	reviews []compiledRule
}

// The schema keywords of rule lists: x-rules must hold for a record to be
// valid; x-review rules must hold for a valid record to count as a result
// without a person (one that does not is held for review).
const (
	KeywordRules  = "x-rules"
	KeywordReview = "x-review"
)

// nodeKey identifies a decoded schema object: the sites of a schema are
// found by the node the instance walk is at.
func nodeKey(sm map[string]any) uintptr { return reflect.ValueOf(sm).Pointer() }

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var ruleName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// reservedRuleNames are the keywords of the built-in rules, which a user
// rule may not take.
var reservedRuleNames = map[string]bool{"grounded": true, "nul": true, "surrogate": true}

// RuleError is a rule that stops the start: the schema file is named by
// the caller (LoadSchema), Rule by its name (or its index, #0 the first,
// when it has none; both when the entry cannot be read; empty when the
// list itself is wrong), Reason says what is wrong.
type RuleError struct {
	Pointer string // JSON Pointer of the "x-rules" or "x-review" list in the schema
	Rule    string
	Reason  string
}

func (e *RuleError) Error() string {
	kw := KeywordRules
	if strings.HasSuffix(e.Pointer, "/"+KeywordReview) {
		kw = KeywordReview
	}
	if e.Rule == "" {
		return fmt.Sprintf("%s at %s: %s", kw, cmpOr(e.Pointer, "/"), e.Reason)
	}
	return fmt.Sprintf("%s at %s: rule %s: %s", kw, cmpOr(e.Pointer, "/"), e.Rule, e.Reason)
}

func cmpOr(a, b string) string {
	if a == "" {
		return b
	}
	return a
}

// ruleCompiler compiles every "x-rules" list of a schema document.
type ruleCompiler struct {
	doc     map[string]any
	maxText uint64
	types   *ruleTypes
	sizes   map[string]uint64 // CEL cost path ("self.items.@items") → max size, per site
	names   map[string]bool
	sites   []*ruleSite
}

// compileRules finds and compiles every "x-rules" and "x-review" list of
// doc. Names are unique across both. The error is a *RuleError, or
// several joined.
func compileRules(doc map[string]any, opts CompileOptions) ([]*ruleSite, error) {
	maxText := opts.MaxTextBytes
	if maxText <= 0 {
		maxText = DefaultMaxTextBytes
	}
	rc := &ruleCompiler{doc: doc, maxText: uint64(maxText), names: map[string]bool{}}
	var errs []error
	rc.walk(doc, "", 0, &errs)
	return rc.sites, errors.Join(errs...)
}

// walk visits every schema node under node (at pointer ptr) that can
// describe an object, compiling the rules of those that have them.
func (rc *ruleCompiler) walk(node any, ptr string, depth int, errs *[]error) {
	sm, _ := node.(map[string]any)
	if sm == nil || depth > MaxJSONDepth {
		return
	}
	_, hasRules := sm[KeywordRules]
	_, hasReview := sm[KeywordReview]
	if hasRules || hasReview {
		site := &ruleSite{node: nodeKey(sm)}
		if hasRules {
			rules, err := rc.compileSite(sm, ptr, KeywordRules)
			site.rules, *errs = rules, append(*errs, err...)
		}
		if hasReview {
			rules, err := rc.compileSite(sm, ptr, KeywordReview)
			site.reviews, *errs = rules, append(*errs, err...)
		}
		rc.sites = append(rc.sites, site)
	}
	for _, kw := range []string{"properties", "$defs"} {
		m, _ := sm[kw].(map[string]any)
		for _, k := range sortedKeys(m) {
			rc.walk(m[k], ptr+"/"+kw+"/"+escapeToken(k), depth+1, errs)
		}
	}
	rc.walk(sm["items"], ptr+"/items", depth+1, errs)
	rc.walk(sm["additionalProperties"], ptr+"/additionalProperties", depth+1, errs)
}

// compileSite compiles the rule list under keyword kw (KeywordRules or
// KeywordReview) of the object schema sm, at pointer ptr.
func (rc *ruleCompiler) compileSite(sm map[string]any, ptr, kw string) ([]compiledRule, []error) {
	at := ptr + "/" + kw
	rules, errs := decodeRules(sm[kw], at, kw)
	if len(errs) > 0 {
		return nil, errs
	}
	// Each object with rules has its own types: self is a different
	// struct at each.
	reg, err := types.NewRegistry()
	if err != nil {
		return nil, []error{err}
	}
	rc.types = &ruleTypes{Registry: reg, structs: map[string]*structDecl{}}
	rc.sizes = map[string]uint64{}
	selfType := rc.celType(sm, "self", 0)
	if selfType.Kind() != types.StructKind {
		return nil, []error{&RuleError{Pointer: at, Reason: kw + " sits on a schema that is not an object with properties"}}
	}
	env, err := rc.env(selfType)
	if err != nil {
		return nil, []error{&RuleError{Pointer: at, Reason: err.Error()}}
	}
	out := []compiledRule{}
	for i, r := range rules {
		label := r.Name
		if label == "" {
			label = fmt.Sprintf("#%d", i)
		}
		cr, reason := rc.compileRule(env, sm, r)
		if reason != "" {
			errs = append(errs, &RuleError{Pointer: at, Rule: label, Reason: reason})
			continue
		}
		out = append(out, cr)
	}
	return out, errs
}

// ruleKeys are the keys of an "x-rules" entry, each a string.
var ruleKeys = []string{"name", "rule", "message", "field"}

// decodeRules reads an "x-rules" or "x-review" value (keyword kw, at
// pointer at) as a list of rules. Each error is a *RuleError naming the entry by its index and
// name, the key and what was expected: a list that is not one, an entry
// that is not an object, an unknown key, a value that is not a string.
func decodeRules(v any, at, kw string) ([]Rule, []error) {
	list, ok := v.([]any)
	if !ok {
		return nil, []error{&RuleError{Pointer: at, Reason: kw + " is " + ruleValueKind(v) +
			", want a list of rules, each an object {name, rule, message, field}"}}
	}
	var rules []Rule
	var errs []error
	for i, e := range list {
		obj, ok := e.(map[string]any)
		if !ok {
			errs = append(errs, &RuleError{Pointer: at, Rule: fmt.Sprintf("#%d", i),
				Reason: "is " + ruleValueKind(e) + ", want an object {name, rule, message, field}"})
			continue
		}
		label := fmt.Sprintf("#%d", i)
		if name, ok := obj["name"].(string); ok && name != "" {
			label += " (" + name + ")"
		}
		var r Rule
		fields := map[string]*string{"name": &r.Name, "rule": &r.Rule, "message": &r.Message, "field": &r.Field}
		bad := false
		for _, k := range sortedKeys(obj) {
			dst, known := fields[k]
			if !known {
				errs = append(errs, &RuleError{Pointer: at, Rule: label,
					Reason: fmt.Sprintf("unknown key %q: the keys of a rule are %s", k, strings.Join(ruleKeys, ", "))})
				bad = true
				continue
			}
			str, ok := obj[k].(string)
			if !ok {
				errs = append(errs, &RuleError{Pointer: at, Rule: label,
					Reason: fmt.Sprintf("%q is %s, want a string (%s)", k, ruleValueKind(obj[k]), ruleKeyMeaning[k])})
				bad = true
				continue
			}
			*dst = str
		}
		if !bad {
			rules = append(rules, r)
		}
	}
	return rules, errs
}

// ruleKeyMeaning says what each key of a rule holds, for errors.
var ruleKeyMeaning = map[string]string{
	"name":    "the rule's keyword in errors",
	"rule":    "the CEL expression",
	"message": "the error's fixed text",
	"field":   "a JSON Pointer to the field the error is at",
}

// ruleValueKind names the JSON type of a decoded value, with an article,
// for errors.
func ruleValueKind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number (" + v.String() + ")"
	case float64:
		return fmt.Sprintf("a number (%v)", v)
	case bool:
		return "true or false"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return "a value of another kind"
}

func (rc *ruleCompiler) compileRule(env *cel.Env, sm map[string]any, r Rule) (compiledRule, string) {
	switch {
	case !ruleName.MatchString(r.Name):
		return compiledRule{}, "name must be lower-case letters, digits and _, starting with a letter"
	case reservedRuleNames[r.Name]:
		return compiledRule{}, "name " + r.Name + " is a built-in rule's"
	case rc.names[r.Name]:
		return compiledRule{}, "name is used by another rule of the schema"
	case strings.TrimSpace(r.Rule) == "":
		return compiledRule{}, "rule (the CEL expression) is empty"
	case strings.TrimSpace(r.Message) == "":
		return compiledRule{}, "message is empty"
	}
	rc.names[r.Name] = true
	if reason := rc.checkField(sm, r.Field); reason != "" {
		return compiledRule{}, reason
	}
	checked, iss := env.Compile(r.Rule)
	if iss.Err() != nil {
		return compiledRule{}, "does not compile: " + iss.Err().Error()
	}
	if !checked.OutputType().IsExactType(types.BoolType) {
		return compiledRule{}, "has type " + checked.OutputType().String() + ", want bool"
	}
	est, err := env.EstimateCost(checked, rc)
	if err != nil {
		return compiledRule{}, "cost cannot be estimated: " + err.Error()
	}
	if est.Max > RuleCostLimit {
		return compiledRule{}, fmt.Sprintf("estimated cost %s exceeds the limit %d (bound the strings and arrays it reads with maxLength and maxItems)",
			costString(est.Max), RuleCostLimit)
	}
	prog, err := env.Program(checked, cel.CostLimit(RuleCostLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return compiledRule{}, "cannot be planned: " + err.Error()
	}
	return compiledRule{Rule: r, prog: prog}, ""
}

func costString(c uint64) string {
	if c == ^uint64(0) {
		return "unbounded"
	}
	return fmt.Sprint(c)
}

// checkField checks that the rule's field pointer names a property of the
// schema below sm.
func (rc *ruleCompiler) checkField(sm map[string]any, field string) string {
	if field == "" {
		return ""
	}
	if !strings.HasPrefix(field, "/") {
		return "field " + field + " is not a JSON Pointer (it must start with /)"
	}
	cur := sm
	for _, tok := range strings.Split(field[1:], "/") {
		cur = rc.deref(cur)
		tok = unescapeToken(tok)
		if props, ok := cur["properties"].(map[string]any); ok {
			if next, ok := props[tok].(map[string]any); ok {
				cur = next
				continue
			}
		}
		if items, ok := cur["items"].(map[string]any); ok && isIndex(tok) {
			cur = items
			continue
		}
		return "field " + field + " is not in the schema"
	}
	return ""
}

func isIndex(tok string) bool {
	if tok == "" {
		return false
	}
	for _, c := range tok {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// deref follows local "$ref"s from sm.
func (rc *ruleCompiler) deref(sm map[string]any) map[string]any {
	for i := 0; i < 64; i++ {
		ref, ok := sm["$ref"].(string)
		if !ok || !strings.HasPrefix(ref, "#") {
			return sm
		}
		t, ok := resolvePointer(rc.doc, ref[1:])
		tm, _ := t.(map[string]any)
		if !ok || tm == nil {
			return sm
		}
		sm = tm
	}
	return sm
}

// env is the CEL environment of rules whose self has type self.
func (rc *ruleCompiler) env(self *types.Type) (*cel.Env, error) {
	msgType := rc.messageType()
	return cel.NewEnv(
		cel.CustomTypeProvider(rc.types),
		cel.CustomTypeAdapter(rc.types),
		cel.Variable("self", self),
		cel.Variable("message", msgType),
		cel.Macros(cel.GlobalMacro("grounded", 1, func(eh parser.ExprHelper, _ ast.Expr, args []ast.Expr) (ast.Expr, *common.Error) {
			return eh.NewCall(groundedFunc, eh.NewIdent("message"), args[0]), nil
		})),
		cel.Function(groundedFunc,
			cel.Overload(groundedFunc+"_message_dyn", []*types.Type{msgType, types.DynType}, types.BoolType,
				cel.BinaryBinding(groundedBinding))),
	)
}

// groundedFunc is what the grounded(value) macro expands to:
// grounded_in(message, value).
const groundedFunc = "grounded_in"

func groundedBinding(m, v ref.Val) ref.Val {
	mv, ok := m.(*messageVal)
	if !ok {
		return types.NewErr("grounded: no message")
	}
	var ok2 bool
	switch x := v.Value().(type) {
	case nil:
		return types.True // nothing to ground, as for x-grounded
	case string:
		_, _, ok2 = mv.text.normalized().find(x)
	case int64:
		_, _, ok2 = mv.text.normalized().find(fmt.Sprint(x))
	case float64:
		_, _, ok2 = mv.text.normalized().find(fmt.Sprint(x))
	default:
		if _, isNull := v.(types.Null); isNull {
			return types.True
		}
		return types.NewErr("grounded: not a string or number")
	}
	return types.Bool(ok2)
}

// celType is the CEL type of values that schema node sm describes, as
// Kubernetes types a structural schema: an object with properties is a
// struct type with those fields, an object with only
// additionalProperties a map, an array a list, a nullable string, number,
// integer or boolean its wrapper type (which admits null); anything else
// dyn. It records size bounds under the CEL cost path.
func (rc *ruleCompiler) celType(node any, path string, depth int) *types.Type {
	sm, _ := node.(map[string]any)
	if sm == nil || depth > MaxJSONDepth {
		return types.DynType
	}
	sm = rc.deref(sm)
	var names []string
	nullable := false
	switch t := sm["type"].(type) {
	case string:
		names = []string{t}
	case []any:
		for _, x := range t {
			if s, _ := x.(string); s == "null" {
				nullable = true
			} else if s != "" {
				names = append(names, s)
			}
		}
	}
	if len(names) != 1 {
		return types.DynType
	}
	wrap := func(t *types.Type) *types.Type {
		if nullable {
			return types.NewNullableType(t)
		}
		return t
	}
	switch names[0] {
	case "string":
		rc.sizes[path] = rc.stringBound(sm)
		return wrap(types.StringType)
	case "integer":
		return wrap(types.IntType)
	case "number":
		return wrap(types.DoubleType)
	case "boolean":
		return wrap(types.BoolType)
	case "array":
		rc.sizes[path] = boundOf(sm["maxItems"], rc.maxText)
		return types.NewListType(rc.celType(sm["items"], path+".@items", depth+1))
	case "object":
		if props, ok := sm["properties"].(map[string]any); ok {
			return rc.structType(sm, props, path, depth)
		}
		if ap, ok := sm["additionalProperties"].(map[string]any); ok {
			rc.sizes[path] = boundOf(sm["maxProperties"], rc.maxText)
			return types.NewMapType(types.StringType, rc.celType(ap, path+".@values", depth+1))
		}
	}
	return types.DynType
}

func (rc *ruleCompiler) stringBound(sm map[string]any) uint64 {
	if enum, ok := sm["enum"].([]any); ok {
		var m uint64
		for _, e := range enum {
			if s, ok := e.(string); ok && uint64(len([]rune(s))) > m {
				m = uint64(len([]rune(s)))
			}
		}
		return m
	}
	return boundOf(sm["maxLength"], rc.maxText)
}

func boundOf(v any, def uint64) uint64 {
	switch n := v.(type) {
	case float64:
		if n >= 0 {
			return uint64(n)
		}
	case json.Number:
		if i, err := n.Int64(); err == nil && i >= 0 {
			return uint64(i)
		}
	}
	return def
}

// structType declares the struct type of an object schema; its name is
// its CEL path ("self", "self.address"), which error messages show.
func (rc *ruleCompiler) structType(sm map[string]any, props map[string]any, path string, depth int) *types.Type {
	name := "object:" + path
	if d, ok := rc.types.structs[name]; ok {
		return d.t
	}
	d := &structDecl{t: types.NewObjectType(name), fields: map[string]*types.FieldType{}}
	rc.types.structs[name] = d
	for _, k := range sortedKeys(props) {
		c := props[k]
		d.names = append(d.names, k)
		d.fields[k] = &types.FieldType{
			Type:    rc.celType(c, path+"."+k, depth+1),
			IsSet:   func(obj any) bool { m, _ := obj.(map[string]any); v, ok := m[k]; return ok && v != nil },
			GetFrom: fieldGetter(k),
		}
	}
	return d.t
}

func fieldGetter(k string) ref.FieldGetter {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case map[string]any:
			v, ok := o[k]
			if !ok {
				return nil, fmt.Errorf("no such key: %s", k)
			}
			return v, nil
		case *messageVal:
			return o.fields[k], nil
		}
		return nil, fmt.Errorf("no such key: %s", k)
	}
}

// messageType declares the type of the message variable: text (string),
// source (string), metadata (map of string to dyn) and received_at
// (timestamp).
func (rc *ruleCompiler) messageType() *types.Type {
	const name = "message"
	if d, ok := rc.types.structs[name]; ok {
		return d.t
	}
	d := &structDecl{t: types.NewObjectType(name), fields: map[string]*types.FieldType{}}
	rc.types.structs[name] = d
	for k, t := range map[string]*types.Type{
		"text": types.StringType, "source": types.StringType,
		"metadata": types.NewMapType(types.StringType, types.DynType), "received_at": types.TimestampType,
	} {
		k := k
		d.names = append(d.names, k)
		d.fields[k] = &types.FieldType{Type: t, IsSet: func(obj any) bool { return true }, GetFrom: fieldGetter(k)}
	}
	rc.sizes["message.text"] = rc.maxText
	rc.sizes["message.source"] = 200
	rc.sizes["message.metadata"] = rc.maxText
	return d.t
}

// EstimateSize implements checker.CostEstimator with the schema's bounds.
func (rc *ruleCompiler) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	p := n.Path()
	if len(p) == 0 {
		return nil
	}
	if max, ok := rc.sizes[strings.Join(p, ".")]; ok {
		return &checker.SizeEstimate{Min: 0, Max: max}
	}
	return nil
}

// EstimateCallCost implements checker.CostEstimator: grounded costs a scan
// of the message text; the rest as cel-go estimates them.
func (rc *ruleCompiler) EstimateCallCost(function, _ string, _ *checker.AstNode, _ []checker.AstNode) *checker.CallEstimate {
	if function == groundedFunc {
		return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: rc.maxText/10 + 1}}
	}
	return nil
}

// ruleTypes is the CEL type provider of a schema's rules: cel-go's
// registry plus the struct types declared from the schema.
type ruleTypes struct {
	*types.Registry
	structs map[string]*structDecl
}

type structDecl struct {
	t      *types.Type
	names  []string
	fields map[string]*types.FieldType
}

func (p *ruleTypes) FindStructType(name string) (*types.Type, bool) {
	if d, ok := p.structs[name]; ok {
		return types.NewTypeTypeWithParam(d.t), true
	}
	return p.Registry.FindStructType(name)
}

func (p *ruleTypes) FindStructFieldNames(name string) ([]string, bool) {
	if d, ok := p.structs[name]; ok {
		return d.names, true
	}
	return p.Registry.FindStructFieldNames(name)
}

func (p *ruleTypes) FindStructFieldType(name, field string) (*types.FieldType, bool) {
	if d, ok := p.structs[name]; ok {
		f, ok := d.fields[field]
		return f, ok
	}
	return p.Registry.FindStructFieldType(name, field)
}

// NativeToValue adapts a *messageVal as itself; everything else as
// cel-go's registry does.
func (p *ruleTypes) NativeToValue(v any) ref.Val {
	if m, ok := v.(*messageVal); ok {
		return m
	}
	return p.Registry.NativeToValue(v)
}

// MessageMeta is what rules see of the message besides its text (the
// message variable): where it came from, its metadata, when it was
// received (the zero time means now).
type MessageMeta struct {
	Source     string
	Metadata   json.RawMessage // a JSON object, or empty
	ReceivedAt time.Time
}

// messageVal is the message variable's value: its fields and the run's
// text, which grounded reads.
type messageVal struct {
	fields map[string]any
	text   *runText
}

var messageObjType = types.NewObjectType("message")

func (m *messageVal) ConvertToNative(reflect.Type) (any, error) {
	return nil, errors.New("message cannot be converted")
}
func (m *messageVal) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return messageObjType
	}
	return types.NewErr("message cannot be converted")
}
func (m *messageVal) Equal(other ref.Val) ref.Val {
	o, ok := other.(*messageVal)
	return types.Bool(ok && m == o)
}
func (m *messageVal) Type() ref.Type { return messageObjType }
func (m *messageVal) Value() any     { return m }

func newMessageVal(text *runText, msg MessageMeta) *messageVal {
	meta := map[string]any{}
	if len(msg.Metadata) > 0 {
		var v any
		if d := json.NewDecoder(strings.NewReader(string(msg.Metadata))); d != nil {
			d.UseNumber()
			if d.Decode(&v) == nil {
				if mm, ok := v.(map[string]any); ok {
					meta = celJSON(mm).(map[string]any)
				}
			}
		}
	}
	received := msg.ReceivedAt
	if received.IsZero() {
		received = time.Now() // a caller that does not know, such as a test of Validate
	}
	return &messageVal{text: text, fields: map[string]any{
		"text": text.text, "source": msg.Source, "metadata": meta, "received_at": received.UTC(),
	}}
}

// celJSON turns json.Numbers in a decoded JSON value into int64 (when
// integral) or float64, which CEL can compare.
func celJSON(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, c := range t {
			out[k] = celJSON(c)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, c := range t {
			out[i] = celJSON(c)
		}
		return out
	}
	return v
}

// celValue converts a decoded instance for a rule whose schema is sm: a
// json.Number becomes int64 where the schema says integer, float64
// elsewhere.
func (s *Schema) celValue(node any, v any, depth int) any {
	sm, _ := node.(map[string]any)
	if sm != nil && depth < MaxJSONDepth {
		sm = s.derefNode(sm)
	}
	switch t := v.(type) {
	case json.Number:
		if schemaAllows(sm, "integer") {
			if i, err := t.Int64(); err == nil {
				return i
			}
			if f, err := t.Float64(); err == nil && f == float64(int64(f)) {
				return int64(f)
			}
		}
		f, _ := t.Float64()
		return f
	case map[string]any:
		props, _ := sm["properties"].(map[string]any)
		out := make(map[string]any, len(t))
		for k, c := range t {
			var cs any
			if props != nil {
				cs = props[k]
			}
			if cs == nil {
				cs = sm["additionalProperties"]
			}
			out[k] = s.celValue(cs, c, depth+1)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, c := range t {
			out[i] = s.celValue(sm["items"], c, depth+1)
		}
		return out
	}
	return v
}

func schemaAllows(sm map[string]any, typ string) bool {
	switch t := sm["type"].(type) {
	case string:
		return t == typ
	case []any:
		for _, x := range t {
			if x == typ {
				return true
			}
		}
	}
	return false
}

func (s *Schema) derefNode(sm map[string]any) map[string]any {
	for i := 0; i < 64; i++ {
		ref, ok := sm["$ref"].(string)
		if !ok || !strings.HasPrefix(ref, "#") {
			return sm
		}
		t, ok := resolvePointer(s.doc, ref[1:])
		tm, _ := t.(map[string]any)
		if !ok || tm == nil {
			return sm
		}
		sm = tm
	}
	return sm
}

// checkRules runs the schema's rules on instance. A rule that is false
// gives one KindRule error with its name as keyword, its fixed message, at
// the object's path plus its field. A rule that cannot be evaluated (a
// runtime error, or the cost limit) gives the same error with a note,
// unless schemaFailed: a record that breaks the schema breaks the types
// the rules were checked against, and the schema errors say why.
func (s *Schema) checkRules(instance any, text *runText, schemaFailed bool) extracttype.ErrorList {
	return s.runRules(instance, text, extracttype.KindRule, schemaFailed, func(site *ruleSite) []compiledRule { return site.rules })
}

// Review runs the schema's review rules ("x-review") on a record that
// validated (Validate or ValidateMessage returned no error; the record as
// they left it, its grounded strings cut). Each review rule is an
// assertion, as an x-rules rule is: one that is true lets the record
// count as a result; one that is false (or cannot be evaluated) holds
// it for a person. It returns one KindHeld entry per rule that holds the
// record, with the rule's name as keyword and its fixed message, at the
// object's path plus its field, sorted; nil when nothing holds it. Review
// never makes a record invalid, and gives nothing meaningful for a record
// that did not validate.
func (s *Schema) Review(instance any, text string, meta MessageMeta) extracttype.ErrorList {
	return s.review(instance, &runText{text: text, meta: meta})
}

func (s *Schema) review(instance any, text *runText) extracttype.ErrorList {
	out := s.runRules(instance, text, extracttype.KindHeld, false, func(site *ruleSite) []compiledRule { return site.reviews })
	out.Sort()
	return dedupe(out)
}

// HasReview reports whether the schema has any review rule.
func (s *Schema) HasReview() bool {
	for _, site := range s.rules {
		if len(site.reviews) > 0 {
			return true
		}
	}
	return false
}

// runRules walks instance and evaluates, on each object whose schema has
// a site, the rules list picks of it, giving entries of kind.
func (s *Schema) runRules(instance any, text *runText, kind extracttype.Kind, schemaFailed bool, list func(*ruleSite) []compiledRule) extracttype.ErrorList {
	if len(s.rules) == 0 {
		return nil
	}
	mv := newMessageVal(text, text.meta)
	var out extracttype.ErrorList
	var walk func(node any, inst any, path string, depth int)
	walk = func(node any, inst any, path string, depth int) {
		sm, _ := node.(map[string]any)
		if sm == nil || depth > MaxJSONDepth {
			return
		}
		sm = s.derefNode(sm)
		switch v := inst.(type) {
		case map[string]any:
			if site := s.ruleSiteOf(sm); site != nil && len(list(site)) > 0 {
				vars := &ruleVars{self: s.celValue(sm, v, depth), message: mv}
				for _, r := range list(site) {
					out = append(out, r.eval(vars, path, kind, schemaFailed)...)
				}
			}
			props, _ := sm["properties"].(map[string]any)
			for k, c := range v {
				if isContainer(c) && props != nil {
					walk(props[k], c, path+"/"+escapeToken(k), depth+1)
				}
			}
		case []any:
			for i, c := range v {
				if isContainer(c) {
					walk(sm["items"], c, path+"/"+itoa(i), depth+1)
				}
			}
		}
	}
	walk(s.doc, instance, "", 0)
	return out
}

func (s *Schema) ruleSiteOf(sm map[string]any) *ruleSite {
	k := nodeKey(sm)
	for _, site := range s.rules {
		if site.node == k {
			return site
		}
	}
	return nil
}

// ruleVars are a rule's variables, self and message: one per object,
// shared by its rules. It is the activation a map of the two would make
// (neither is a lazy function), without building a map per rule.
type ruleVars struct {
	self    any
	message *messageVal
}

var _ interpreter.Activation = (*ruleVars)(nil)

// ResolveName returns self or message.
func (a *ruleVars) ResolveName(name string) (any, bool) {
	switch name {
	case "self":
		return a.self, true
	case "message":
		return a.message, true
	}
	return nil, false
}

// Parent returns nil: no other variables.
func (a *ruleVars) Parent() interpreter.Activation { return nil }

func (r compiledRule) eval(vars *ruleVars, path string, kind extracttype.Kind, schemaFailed bool) extracttype.ErrorList {
	at := path + r.Field
	out, _, err := r.prog.Eval(vars)
	if err != nil {
		if schemaFailed {
			return nil
		}
		return extracttype.ErrorList{{Kind: kind, Path: at, Keyword: r.Name,
			Message: r.Message + " (the rule could not be evaluated on this record)"}}
	}
	if b, ok := out.(types.Bool); ok && bool(b) {
		return nil
	}
	return extracttype.ErrorList{{Kind: kind, Path: at, Keyword: r.Name, Message: r.Message}}
}

// Rules returns the schema's rules (x-rules), in schema order per object.
func (s *Schema) Rules() []Rule {
	var out []Rule
	for _, site := range s.rules {
		for _, r := range site.rules {
			out = append(out, r.Rule)
		}
	}
	return out
}

// ReviewRules returns the schema's review rules (x-review), in schema
// order per object.
func (s *Schema) ReviewRules() []Rule {
	var out []Rule
	for _, site := range s.rules {
		for _, r := range site.reviews {
			out = append(out, r.Rule)
		}
	}
	return out
}
