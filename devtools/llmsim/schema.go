package llmsim

import (
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"
)

// maxSchemaDepth bounds $ref chains and nesting, so a cyclic schema cannot
// loop.
const maxSchemaDepth = 32

// schemaDoc is one JSON Schema document, decoded. $ref is followed only
// within the document ("#/$defs/item", "#/definitions/item").
type schemaDoc struct {
	root  any
	runes int // code points of the document's text

	// nodes keeps the node of each subschema (a map of the document)
	// once folded, with what the filler derives from it: every request
	// with the same schema walks the same subschemas.
	nodes     sync.Map // unsafe.Pointer of the map -> *nodeEntry
	nodeCount atomic.Int64

	// fills keeps the honest record of each recent message text (filler.fill
	// depends on the schema and the text only): a message is extracted, then
	// repaired or redelivered, and a benchmark repeats texts. The records
	// are shared: whoever changes one copies it first (deepCopy).
	fills clearingCache[any]
}

// maxCachedFills bounds schemaDoc.fills, in message texts.
const maxCachedFills = 4096

// maxCachedNodes bounds schemaDoc.nodes; the subschemas past it are
// folded on every use.
const maxCachedNodes = 4096

// nodeEntry is a cached node with the map it was folded from, which it
// keeps alive so the map's address names only it.
type nodeEntry struct {
	src map[string]any
	n   node
}

// schemaCache keeps parsed schemas: clients send the same schema with every
// request. A schemaDoc is never changed after parsing.
var schemaCache = clearingCache[*schemaDoc]{max: 256}

// parseSchemaCached is parseSchema with the cache.
func parseSchemaCached(raw []byte) (*schemaDoc, error) {
	return schemaCache.get(string(raw), func(s string) (*schemaDoc, error) { return parseSchema([]byte(s)) })
}

func parseSchema(raw []byte) (*schemaDoc, error) {
	var root any
	if err := json.Unmarshal(raw, &root); err != nil {
		return nil, err
	}
	return &schemaDoc{root: root, runes: utf8.RuneCount(raw), fills: clearingCache[any]{max: maxCachedFills}}, nil
}

// node is a schema with $ref resolved and anyOf / oneOf / allOf folded into
// one map. types holds the non-null JSON types it allows (inferred when
// "type" is absent); nullable reports whether null is allowed. x holds
// what the filler derives from m; it is nil for a node not made by
// schemaDoc.node, whose methods then derive it each time. A node is
// shared between requests: nothing may change m or x.
type node struct {
	m        map[string]any
	types    []string
	nullable bool
	x        *nodeExtra
}

// node folds schema s into a node. The node of a subschema of the
// document is folded once and then shared.
func (d *schemaDoc) node(s any) node {
	sm, ok := s.(map[string]any)
	if !ok || sm == nil {
		return d.foldNode(s)
	}
	key := mapKey(sm)
	if v, ok := d.nodes.Load(key); ok {
		return v.(*nodeEntry).n
	}
	n := d.foldNode(s)
	if d.nodeCount.Load() >= maxCachedNodes {
		return n
	}
	v, loaded := d.nodes.LoadOrStore(key, &nodeEntry{src: sm, n: n})
	if !loaded {
		d.nodeCount.Add(1)
	}
	return v.(*nodeEntry).n
}

// mapKey returns m's address (a map is a pointer), which names m while m
// lives.
func mapKey(m map[string]any) unsafe.Pointer {
	return reflect.ValueOf(m).UnsafePointer()
}

// foldNode folds schema s into a new node.
func (d *schemaDoc) foldNode(s any) node {
	m := d.fold(s, 0)
	n := node{m: m, nullable: nullableOf(m)}
	n.types = typesOf(m)
	n.x = deriveExtra(n)
	return n
}

func (d *schemaDoc) fold(s any, depth int) map[string]any {
	m, _ := s.(map[string]any)
	if m == nil || depth > maxSchemaDepth {
		return map[string]any{}
	}
	out := map[string]any{}
	if ref, ok := m["$ref"].(string); ok {
		if target, ok := d.resolve(ref); ok {
			for k, v := range d.fold(target, depth+1) {
				out[k] = v
			}
		}
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		branches, _ := m[k].([]any)
		for _, b := range branches {
			bm := d.fold(b, depth+1)
			if isNullOnly(bm) {
				out["x-llmsim-nullable"] = true
				continue
			}
			if nullableOf(bm) {
				out["x-llmsim-nullable"] = true
			}
			if k != "allOf" {
				if _, done := out["x-llmsim-branch"]; done {
					continue // the first non-null branch of anyOf / oneOf is the one filled
				}
				out["x-llmsim-branch"] = true
			}
			mergeInto(out, bm)
		}
	}
	for k, v := range m {
		switch k {
		case "$ref", "allOf", "anyOf", "oneOf":
		default:
			out[k] = v
		}
	}
	return out
}

// mergeInto copies src's keys into dst; properties and required are
// unioned into new values, as dst's may be the document's own.
func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		switch k {
		case "properties":
			dp, _ := dst[k].(map[string]any)
			p := make(map[string]any, len(dp))
			for name, s := range dp {
				p[name] = s
			}
			sp, _ := v.(map[string]any)
			for name, s := range sp {
				p[name] = s
			}
			dst[k] = p
		case "required":
			r, _ := dst[k].([]any)
			sr, _ := v.([]any)
			dst[k] = append(append([]any(nil), r...), sr...)
		default:
			dst[k] = v
		}
	}
}

// resolve follows a "#/..." reference within the document.
func (d *schemaDoc) resolve(ref string) (any, bool) {
	if !strings.HasPrefix(ref, "#") {
		return nil, false
	}
	toks, root := splitPointer(ref[1:])
	if root {
		return d.root, true
	}
	return getAt(d.root, toks)
}

func isNullOnly(m map[string]any) bool {
	switch t := m["type"].(type) {
	case string:
		return t == "null"
	case []any:
		return len(t) == 1 && t[0] == "null"
	}
	if c, ok := m["const"]; ok && c == nil {
		return true
	}
	return false
}

func nullableOf(m map[string]any) bool {
	if b, _ := m["x-llmsim-nullable"].(bool); b {
		return true
	}
	if b, _ := m["nullable"].(bool); b {
		return true
	}
	if t, ok := m["type"].([]any); ok {
		for _, x := range t {
			if x == "null" {
				return true
			}
		}
	}
	if t, ok := m["type"].(string); ok && t == "null" {
		return true
	}
	if e, ok := m["enum"].([]any); ok {
		for _, x := range e {
			if x == nil {
				return true
			}
		}
	}
	return false
}

// typesOf returns the non-null types of m, inferring one when "type" is
// absent.
func typesOf(m map[string]any) []string {
	var out []string
	switch t := m["type"].(type) {
	case string:
		if t != "null" {
			out = append(out, t)
		}
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok && s != "null" {
				out = append(out, s)
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	if e, ok := m["enum"].([]any); ok {
		for _, x := range e {
			if x != nil {
				return []string{jsonType(x)}
			}
		}
	}
	switch {
	case m["properties"] != nil:
		return []string{"object"}
	case m["items"] != nil:
		return []string{"array"}
	case m["pattern"] != nil, m["format"] != nil, m["x-hint"] != nil:
		return []string{"string"}
	}
	return nil
}

// primary returns the type the simulator fills: the first non-null type.
func (n node) primary() string {
	if len(n.types) == 0 {
		return ""
	}
	return n.types[0]
}

// allows reports whether v's JSON type is allowed by n.
func (n node) allows(v any) bool {
	t := jsonType(v)
	if t == "null" {
		return n.nullable
	}
	if len(n.types) == 0 {
		return true
	}
	for _, a := range n.types {
		if a == t || (a == "number" && t == "integer") {
			return true
		}
		if a == "integer" && t == "number" {
			if f, ok := v.(float64); ok && f == float64(int64(f)) {
				return true
			}
		}
	}
	return false
}

func jsonType(v any) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if t == float64(int64(t)) {
			return "integer"
		}
		return "number"
	case int, int64:
		return "integer"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return ""
}

// properties returns the object node's property names, sorted, and its
// required set. The caller must not change them.
func (n node) properties() ([]string, map[string]any, map[string]bool) {
	if n.x != nil {
		return n.x.names, n.x.props, n.x.req
	}
	return n.deriveProperties()
}

func (n node) deriveProperties() ([]string, map[string]any, map[string]bool) {
	props, _ := n.m["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	sort.Strings(names)
	req := map[string]bool{}
	if r, ok := n.m["required"].([]any); ok {
		for _, x := range r {
			if s, ok := x.(string); ok {
				req[s] = true
			}
		}
	}
	return names, props, req
}

func (n node) grounded() bool {
	b, _ := n.m["x-grounded"].(bool)
	return b
}

func (n node) enum() []any {
	e, _ := n.m["enum"].([]any)
	return e
}

func (n node) str(key string) string {
	s, _ := n.m[key].(string)
	return s
}

func (n node) num(key string) (float64, bool) {
	f, ok := n.m[key].(float64)
	return f, ok
}

// at returns the node the schema gives for the instance location toks,
// and whether the schema describes it. inArray reports whether the last
// token is an array index.
func (d *schemaDoc) at(toks []string) (n node, required, inArray, ok bool) {
	n = d.node(d.root)
	for _, tok := range toks {
		switch n.primary() {
		case "object":
			_, props, req := n.properties()
			s, found := props[tok]
			if !found {
				ap, isMap := n.m["additionalProperties"].(map[string]any)
				if !isMap {
					return node{}, false, false, false
				}
				s = ap
			}
			n, required, inArray = d.node(s), req[tok], false
		case "array":
			if _, err := strconv.Atoi(tok); err != nil {
				return node{}, false, false, false
			}
			n, required, inArray = d.node(n.m["items"]), false, true
		default:
			return node{}, false, false, false
		}
	}
	return n, required, inArray, true
}
