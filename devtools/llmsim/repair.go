package llmsim

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// patchOp is one RFC 6902 operation; the simulator uses add, replace and
// remove.
type patchOp struct {
	Op    string
	Path  string
	Value any
}

// MarshalJSON writes {"op","path","value"}; remove has no value, and a
// null value is written as null.
func (o patchOp) MarshalJSON() ([]byte, error) {
	if o.Op == "remove" {
		return json.Marshal(struct {
			Op   string `json:"op"`
			Path string `json:"path"`
		}{o.Op, o.Path})
	}
	return json.Marshal(struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}{o.Op, o.Path, o.Value})
}

// repairResult is the simulator's answer to a repair turn.
type repairResult struct {
	doc     any       // the corrected record
	ops     []patchOp // the same fixes as operations against the previous reply
	patchOK bool      // ops apply to the previous reply (it parsed)
	raw     string    // when set, the reply repeats this broken text
	fixed   []string  // the listed paths the repair chose to fix
}

// repair fixes each listed path with probability rate, drawing from rng
// once per path in list order. It starts from the previous reply when that
// parses (strictly, or inside a code fence or prose), else from the honest
// record; a previous reply that did not parse stays as it was unless its
// root error ("/") is chosen for fixing.
func (f *filler) repair(c conversation, honest any, rate float64, rng *rand.Rand) repairResult {
	prev, parsed := parseLoose(c.prev)
	var work any
	if parsed {
		work = deepCopy(prev)
	} else {
		work = deepCopy(honest)
	}
	res := repairResult{patchOK: parsed}
	rootListed, rootFixed := false, false
	for _, e := range c.errs {
		toks, root := splitPointer(e.path)
		rootListed = rootListed || root
		if rng.Float64() >= rate {
			continue
		}
		res.fixed = append(res.fixed, e.path)
		var ops []patchOp
		if root {
			rootFixed = true
			var ok bool
			ops, ok = rootOps(work, honest)
			if !ok {
				work, res.patchOK = deepCopy(honest), false
				continue
			}
		} else if op, ok := f.instructedOp(work, toks, e.message); ok {
			ops = []patchOp{op}
		} else if op, ok := f.fixOp(work, honest, toks); ok {
			ops = []patchOp{op}
		}
		for _, op := range ops {
			next, err := apply(work, op)
			if err != nil {
				continue
			}
			work = next
			res.ops = append(res.ops, op)
		}
	}
	res.doc = work
	if !parsed && rootListed && !rootFixed && c.prev != "" {
		res.raw = c.prev
	}
	return res
}

// instructedOp follows an error line that says which value the field must
// take, as a rule's message does ("flow must be account_access for
// intent ..."; "flow must be null for ..."): when the words after "must be"
// are one of the field's enum values (or null where the field allows it),
// it replaces the value with that one. ok is false otherwise.
func (f *filler) instructedOp(work any, toks []string, message string) (patchOp, bool) {
	if f.d == nil || len(toks) == 0 {
		return patchOp{}, false
	}
	_, after, found := strings.Cut(message, "must be ")
	if !found {
		return patchOp{}, false
	}
	word, _, _ := strings.Cut(after, " ")
	word = strings.TrimRight(word, ".,;:")
	n, _, _, ok := f.d.at(toks)
	if !ok {
		return patchOp{}, false
	}
	if _, exists := getAt(work, toks); !exists {
		return patchOp{}, false
	}
	for _, v := range n.enum() {
		if v == nil && word == "null" || v != nil && v == word {
			return patchOp{Op: "replace", Path: joinPointer(toks), Value: v}, true
		}
	}
	return patchOp{}, false
}

// fixOp returns the operation that sets the honest value at toks in work:
// replace it, add it (at the first missing level), or remove it when the
// honest record has no such field. A value equal to the honest one becomes
// null where allowed ("use null if unsure").
func (f *filler) fixOp(work, honest any, toks []string) (patchOp, bool) {
	if cur, exists := getAt(work, toks); exists {
		hv, known := f.honestAt(honest, toks)
		if !known {
			return patchOp{Op: "remove", Path: joinPointer(toks)}, true
		}
		if reflect.DeepEqual(cur, hv) {
			if cur == nil || f.d == nil {
				return patchOp{}, false
			}
			if n, _, _, ok := f.d.at(toks); !ok || !n.nullable {
				return patchOp{}, false
			}
			hv = nil
		}
		return patchOp{Op: "replace", Path: joinPointer(toks), Value: hv}, true
	}
	k := 0
	for k < len(toks) {
		if _, ok := getAt(work, toks[:k+1]); !ok {
			break
		}
		k++
	}
	hv, known := f.honestAt(honest, toks[:k+1])
	if !known {
		return patchOp{}, false
	}
	parent, _ := getAt(work, toks[:k])
	switch p := parent.(type) {
	case map[string]any:
	case []any:
		if i, err := strconv.Atoi(toks[k]); err != nil || i > len(p) {
			return patchOp{}, false
		}
	default:
		return patchOp{}, false
	}
	return patchOp{Op: "add", Path: joinPointer(toks[:k+1]), Value: hv}, true
}

// honestAt returns the honest value at toks: the honest record's own, else
// null or the placeholder the schema demands there; known is false where
// the field should not exist (not in the schema, an array element past the
// honest ones, or optional and unknown).
func (f *filler) honestAt(honest any, toks []string) (any, bool) {
	if v, ok := getAt(honest, toks); ok {
		return deepCopy(v), true
	}
	if f.d == nil {
		return nil, false
	}
	n, required, inArray, ok := f.d.at(toks)
	switch {
	case !ok || inArray:
		return nil, false
	case n.nullable:
		return nil, true
	case required:
		return f.emptyish(n), true
	}
	return nil, false
}

// rootOps returns the top-level operations that turn work into honest, for
// an error at the document root. ok is false unless both are objects.
func rootOps(work, honest any) ([]patchOp, bool) {
	w, ok1 := work.(map[string]any)
	h, ok2 := honest.(map[string]any)
	if !ok1 || !ok2 {
		return nil, false
	}
	keys := map[string]bool{}
	for k := range w {
		keys[k] = true
	}
	for k := range h {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var ops []patchOp
	for _, k := range sorted {
		wv, inW := w[k]
		hv, inH := h[k]
		p := joinPointer([]string{k})
		switch {
		case inW && !inH:
			ops = append(ops, patchOp{Op: "remove", Path: p})
		case !inW && inH:
			ops = append(ops, patchOp{Op: "add", Path: p, Value: deepCopy(hv)})
		case !reflect.DeepEqual(wv, hv):
			ops = append(ops, patchOp{Op: "replace", Path: p, Value: deepCopy(hv)})
		}
	}
	return ops, true
}

// parseLoose decodes a previous reply: strict JSON, else the JSON inside a
// code fence or between the first "{" and the last "}". Tool arguments
// given as a JSON string holding the object are decoded once more.
func parseLoose(s string) (any, bool) {
	s = strings.TrimSpace(s)
	try := func(t string) (any, bool) {
		var v any
		if err := json.Unmarshal([]byte(t), &v); err != nil || v == nil {
			return nil, false
		}
		if inner, ok := v.(string); ok {
			var w any
			if err := json.Unmarshal([]byte(inner), &w); err == nil && w != nil {
				return w, true
			}
		}
		return v, true
	}
	if v, ok := try(s); ok {
		return v, true
	}
	if i := strings.Index(s, "```"); i >= 0 {
		rest := s[i+3:]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[nl+1:]
		}
		if j := strings.Index(rest, "```"); j >= 0 {
			if v, ok := try(rest[:j]); ok {
				return v, true
			}
		}
	}
	if i, j := strings.IndexByte(s, '{'), strings.LastIndexByte(s, '}'); i >= 0 && j > i {
		return try(s[i : j+1])
	}
	return nil, false
}

// wrapPatch shapes a patch for the requested schema: a bare array, or
// {"<name>": [...]} when the schema is an object whose one array property
// holds operations (items with an "op" property).
func wrapPatch(d *schemaDoc, ops []patchOp) any {
	if ops == nil {
		ops = []patchOp{}
	}
	if name, ok := patchProperty(d); ok {
		return map[string]any{name: ops}
	}
	return ops
}

// patchProperty returns the name of the array property of operations when
// schema d asks for an object holding one ({"operations": [{"op", ...}]}).
func patchProperty(d *schemaDoc) (string, bool) {
	if d == nil {
		return "", false
	}
	root := d.node(d.root)
	if root.primary() != "object" {
		return "", false
	}
	names, props, _ := root.properties()
	for _, name := range names {
		pn := d.node(props[name])
		if pn.primary() != "array" {
			continue
		}
		_, itemProps, _ := d.node(pn.m["items"]).properties()
		if _, ok := itemProps["op"]; ok {
			return name, true
		}
	}
	return "", false
}

// recordSchemas remembers, per message text, the record schema its
// extraction call sent, so that a repair sending a patch-shaped schema is
// answered from the record's honest values. Safe for concurrent use.
type recordSchemas struct {
	c clearingCache[*schemaDoc]
}

const maxRecordSchemas = 4096

func (r *recordSchemas) remember(text string, d *schemaDoc) {
	r.c.m.Store(text, d)
	if r.c.n.Add(1) > maxRecordSchemas {
		r.c.m.Clear()
		r.c.n.Store(0)
	}
}

func (r *recordSchemas) recall(text string) *schemaDoc {
	if v, ok := r.c.m.Load(text); ok {
		return v.(*schemaDoc)
	}
	return nil
}
