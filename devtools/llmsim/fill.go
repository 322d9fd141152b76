package llmsim

import (
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// filler makes the honest record: every value it writes is found in the
// message text by a heuristic the schema asks for (a pattern, an e-mail
// format, an "x-hint" regex, enum keywords). What it cannot find is null,
// left out, or, where the schema forbids both, an empty-ish placeholder.
type filler struct {
	d  *schemaDoc // nil when the request gave no schema
	re *regexCache

	// last is the last scope prepared for keyword search: the fields
	// of an object are filled from the same scope.
	last *searchScope
}

// search returns scope prepared for keyword search.
func (f *filler) search(scope string) *searchScope {
	if f.last == nil || f.last.scope != scope {
		f.last = newSearchScope(scope)
	}
	return f.last
}

// fill returns the honest record for text. Without a schema it is an empty
// object. The record may be shared (schemaDoc.fills): copy it before
// changing it.
func (f *filler) fill(text string) any {
	if f.d == nil {
		return map[string]any{}
	}
	v, _ := f.d.fills.get(text, func(text string) (any, error) { return f.fillNew(text), nil })
	return v
}

// fillNew is fill without the cache, for a schema.
func (f *filler) fillNew(text string) any {
	n := f.d.node(f.d.root)
	v, known := f.value(n, "", text)
	if v == nil && !known {
		return f.emptyish(n)
	}
	return v
}

// value fills node n for property name from scope. known reports whether
// the value was found in the text; when it was not, v is the best-effort
// value a parent uses if the field is required and not nullable (an object
// of unknowns, an enum's fallback) or nil.
func (f *filler) value(n node, name, scope string) (v any, known bool) {
	if c, ok := n.m["const"]; ok {
		return c, true
	}
	if len(n.enum()) > 0 {
		return f.enumValue(n, scope)
	}
	switch n.primary() {
	case "object":
		return f.object(n, scope, nil)
	case "array":
		return f.array(n, name, scope)
	case "boolean":
		return f.boolean(n, scope)
	case "string", "integer", "number":
		cs, _ := f.cands(n, name, scope)
		if len(cs) == 0 {
			return nil, false
		}
		return convert(n, cs[0].val), true
	}
	return nil, false
}

// place puts a filled value into obj under the rules for unknowns.
func (f *filler) place(obj map[string]any, name string, n node, required bool, v any, known bool) {
	switch {
	case known:
		obj[name] = v
	case n.nullable:
		obj[name] = nil
	case required && v != nil:
		obj[name] = v
	case required:
		obj[name] = f.emptyish(n)
	}
}

// emptyish is the placeholder of a required, non-nullable field whose value
// is unknown.
func (f *filler) emptyish(n node) any {
	if c, ok := n.m["const"]; ok {
		return c
	}
	if len(n.enum()) > 0 {
		return enumFallback(n.enum())
	}
	switch n.primary() {
	case "string":
		return ""
	case "integer", "number":
		if m, ok := n.num("minimum"); ok {
			return m
		}
		return float64(0)
	case "boolean":
		return false
	case "array":
		return []any{}
	case "object":
		v, _ := f.object(n, "", nil)
		return v
	}
	return nil
}

// enumFallback is the enum's catch-all value ("other", "unknown", "none")
// or its first value.
func enumFallback(enum []any) any {
	for _, v := range enum {
		if s, ok := v.(string); ok {
			switch strings.ToLower(s) {
			case "other", "unknown", "none", "unspecified":
				return v
			}
		}
	}
	for _, v := range enum {
		if v != nil {
			return v
		}
	}
	return nil
}

func (f *filler) enumValue(n node, scope string) (any, bool) {
	scores := enumScores(n, f.search(scope))
	best := -1
	for i, s := range scores {
		if s > 0 && (best < 0 || s > scores[best]) {
			best = i
		}
	}
	if best < 0 {
		return enumFallback(n.enum()), false
	}
	return n.enum()[best], true
}

func (f *filler) boolean(n node, scope string) (any, bool) {
	for _, h := range stringList(n.m["x-hint"]) {
		if cr := f.re.get(h, false); cr != nil && cr.re.MatchString(scope) {
			return true, true
		}
	}
	for _, k := range stringList(n.m["x-keywords"]) {
		if countPhrase(k, scope) > 0 {
			return true, true
		}
	}
	return nil, false
}

// hasExtractor reports whether n is a scalar field filled from candidates
// found in the text.
func hasExtractor(n node) bool {
	if n.x != nil {
		return n.x.extractor
	}
	return deriveHasExtractor(n)
}

func deriveHasExtractor(n node) bool {
	if len(n.enum()) > 0 || n.m["const"] != nil {
		return false
	}
	switch n.primary() {
	case "string":
		return n.m["x-hint"] != nil || n.str("format") == "email" || searchablePattern(n.str("pattern"))
	case "integer", "number":
		return n.m["x-hint"] != nil || searchablePattern(n.str("pattern"))
	}
	return false
}

// maxBreadth is the widest character class a pattern may have to be
// searched for in the text. Patterns that admit free text ("[^0-9@]+",
// "\S.*", ".+") would match whole sentences, so they are used only to
// check values, never to find them.
const maxBreadth = 128

func searchablePattern(p string) bool {
	if p == "" {
		return false
	}
	if v, ok := searchableCache.Load(p); ok {
		return v.(bool)
	}
	ok := breadth(stripAnchors(p)) <= maxBreadth
	searchableCache.Store(p, ok) // patterns come from schemas: few
	return ok
}

// searchableCache keeps searchablePattern's answer per pattern, which
// otherwise parses the pattern again for every request.
var searchableCache sync.Map

// minIDLen is the fewest characters a pattern must demand, and a token
// must have, for a match to be taken by its shape alone.
const minIDLen = 6

// idLike reports whether a token looks like an identifier by itself: it
// holds a digit and has at least minIDLen characters. Other matches are
// taken only when a field keyword introduces them, so "^[A-Za-z]{2}$"
// does not take "my" and "^[0-9]{1,7}$" does not take every number.
func idLike(s string) bool {
	return utf8.RuneCountInString(s) >= minIDLen && hasDigit(s)
}

// cands finds the candidate values of field n (property name) in scope,
// best first, without duplicates, and the specificity of its extractor
// (smaller is more specific).
func (f *filler) cands(n node, name, scope string) ([]cand, int) {
	if !hasExtractor(n) {
		return nil, 0
	}
	kw := fieldKeywords(name, n)
	var full *cachedRegex
	if p := n.str("pattern"); p != "" {
		full = f.re.get(p, false)
	}
	var out []cand
	seen := map[string]bool{}
	spec := 0
	byShape := false // a pattern strict enough that its id-like matches need no keyword
	whole := false   // every token matches the pattern whole: no need to check
	add := func(val string, pos, score int) {
		if n.primary() == "string" && !lengthOK(n, val) {
			return
		}
		if full != nil && n.primary() == "string" && !whole && !full.re.MatchString(val) {
			return
		}
		if n.primary() != "string" {
			num, ok := parseNumber(val)
			if !ok || !numberOK(n, num) {
				return
			}
			val = strconv.FormatFloat(num, 'f', -1, 64)
		}
		if seen[val] {
			return
		}
		seen[val] = true
		switch {
		case score != 0:
		case keywordEnds(f.search(scope).lineBefore(pos), kw, val):
			score = 2
		case n.str("format") == "email", byShape && idLike(val):
			score = 1
		default:
			return
		}
		out = append(out, cand{val: val, pos: pos, score: score})
	}
	switch {
	case n.m["x-hint"] != nil:
		for _, h := range stringList(n.m["x-hint"]) {
			cr := f.re.get(h, false)
			if cr == nil {
				continue
			}
			for _, m := range cr.re.FindAllStringSubmatchIndex(scope, -1) {
				s, e := m[0], m[1]
				if len(m) >= 4 && m[2] >= 0 {
					s, e = m[2], m[3]
				}
				add(strings.TrimSpace(scope[s:e]), s, 3)
			}
		}
	case n.primary() == "string" && n.str("format") == "email":
		cr := f.re.get(emailExpr, true)
		for _, loc := range cr.findTokens(scope) {
			add(scope[loc[0]:loc[1]], loc[0], 0)
		}
	default:
		if full == nil {
			return nil, 0
		}
		p := n.str("pattern")
		innerExpr := stripAnchors(p)
		inner := f.re.get(innerExpr, true)
		if inner == nil {
			return nil, 0
		}
		spec = inner.spec
		byShape = inner.minLen >= minIDLen
		// A token is a match of innerExpr, and so matches "^innerExpr$"
		// whole, when innerExpr looks at nothing around it: no assertion,
		// as a scanner ensures.
		whole = inner.scan != nil && p == "^"+innerExpr+"$"
		for _, loc := range inner.findTokens(scope) {
			add(scope[loc[0]:loc[1]], loc[0], 0)
		}
	}
	sortCands(out)
	return out, spec
}

func lengthOK(n node, s string) bool {
	l := float64(utf8.RuneCountInString(s))
	if m, ok := n.num("minLength"); ok && l < m {
		return false
	}
	if m, ok := n.num("maxLength"); ok && l > m {
		return false
	}
	return true
}

// parseNumber reads "1,299.50", "$20" or "20" as a number.
func parseNumber(s string) (float64, bool) {
	s = strings.Map(func(r rune) rune {
		switch r {
		case ',', '$', '€', '£', ' ':
			return -1
		}
		return r
	}, s)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

func numberOK(n node, v float64) bool {
	if n.primary() == "integer" && v != float64(int64(v)) {
		return false
	}
	if m, ok := n.num("minimum"); ok && v < m {
		return false
	}
	if m, ok := n.num("maximum"); ok && v > m {
		return false
	}
	if m, ok := n.num("exclusiveMinimum"); ok && v <= m {
		return false
	}
	if m, ok := n.num("exclusiveMaximum"); ok && v >= m {
		return false
	}
	return true
}

// convert turns a candidate into the field's JSON value.
func convert(n node, val string) any {
	switch n.primary() {
	case "integer", "number":
		v, _ := strconv.ParseFloat(val, 64)
		return v
	}
	return val
}

// object fills an object node. fixed holds values already chosen (an array
// element's key); they are claimed, so no sibling takes the same token.
// Fields filled from candidates share the text: a token goes to the field
// that scores it best (a field keyword just before it), then the more
// specific pattern, then property order; the loser takes its next
// candidate.
func (f *filler) object(n node, scope string, fixed map[string]any) (any, bool) {
	names, props, req := n.properties()
	out := map[string]any{}
	claimed := map[string]bool{}
	anyKnown := false
	for k, v := range fixed {
		out[k] = v
		if s, ok := v.(string); ok {
			claimed[s] = true
		}
		anyKnown = true
	}
	type extField struct {
		name  string
		n     node
		cands []cand
		spec  int
	}
	var ext []extField
	for _, name := range names {
		if _, ok := fixed[name]; ok {
			continue
		}
		cn := f.d.node(props[name])
		if hasExtractor(cn) {
			cs, spec := f.cands(cn, name, scope)
			ext = append(ext, extField{name: name, n: cn, cands: cs, spec: spec})
			continue
		}
		v, known := f.value(cn, name, scope)
		f.place(out, name, cn, req[name], v, known)
		if known && v != nil {
			anyKnown = true
		}
	}
	type pair struct{ field, cand int }
	var pairs []pair
	for i, e := range ext {
		for j := range e.cands {
			pairs = append(pairs, pair{i, j})
		}
	}
	sort.SliceStable(pairs, func(a, b int) bool {
		ca, cb := ext[pairs[a].field].cands[pairs[a].cand], ext[pairs[b].field].cands[pairs[b].cand]
		if ca.score != cb.score {
			return ca.score > cb.score
		}
		if sa, sb := ext[pairs[a].field].spec, ext[pairs[b].field].spec; sa != sb {
			return sa < sb
		}
		if ca.pos != cb.pos {
			return ca.pos < cb.pos
		}
		return pairs[a].field < pairs[b].field
	})
	chosen := map[int]string{}
	for _, p := range pairs {
		if _, done := chosen[p.field]; done {
			continue
		}
		c := ext[p.field].cands[p.cand]
		if claimed[c.val] {
			continue
		}
		claimed[c.val] = true
		chosen[p.field] = c.val
	}
	for i, e := range ext {
		if val, ok := chosen[i]; ok {
			f.place(out, e.name, e.n, req[e.name], convert(e.n, val), true)
			anyKnown = true
			continue
		}
		f.place(out, e.name, e.n, req[e.name], nil, false)
	}
	return out, anyKnown
}

// array fills an array node. An array of objects gets one element per
// candidate of its key property (the first required property with an
// extractor), each filled from the text line around that candidate. An
// array of scalars gets every distinct candidate; an array of enum values
// every value that scores.
func (f *filler) array(n node, name, scope string) (any, bool) {
	items := f.d.node(n.m["items"])
	limit := -1
	if m, ok := n.num("maxItems"); ok {
		limit = int(m)
	}
	var out []any
	switch {
	case len(items.enum()) > 0:
		// Each value is named in full ("calvin klein boots"), or by one
		// of its x-keywords phrases.
		ss := f.search(scope)
		named := items.enumNamed()
		for i, v := range items.enum() {
			if _, ok := v.(string); !ok {
				continue
			}
			for _, ws := range named[i] {
				if n, _ := ss.find(ws, 1); n > 0 {
					out = append(out, v)
					break
				}
			}
		}
	case items.primary() == "object":
		names, props, req := items.properties()
		key := ""
		for _, pass := range []bool{true, false} {
			for _, k := range names {
				if key == "" && req[k] == pass && hasExtractor(f.d.node(props[k])) {
					key = k
				}
			}
		}
		if key == "" {
			// No searchable key: an enum property whose values are named
			// in full ("michael kors jacket") keys the elements instead.
			out = f.enumKeyed(items, names, props, scope)
			break
		}
		kn := f.d.node(props[key])
		cs, _ := f.cands(kn, key, scope)
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].pos < cs[j].pos })
		for _, c := range cs {
			el, _ := f.object(items, lineAround(scope, c.pos), map[string]any{key: convert(kn, c.val)})
			out = append(out, el)
		}
	case hasExtractor(items):
		cs, _ := f.cands(items, name, scope)
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].pos < cs[j].pos })
		for _, c := range cs {
			out = append(out, convert(items, c.val))
		}
	}
	if limit >= 0 && len(out) > limit {
		out = out[:limit]
	}
	if len(out) == 0 {
		return []any{}, false
	}
	return out, true
}

// enumKeyed fills an array of objects keyed by an enum property: the
// first string enum property, in the order of "required" and then of the
// other names, that has a value named in the text, in full or by one of
// its x-keywords phrases. Each distinct value named gets one element, in
// text order, filled from the line around its first mention.
func (f *filler) enumKeyed(items node, names []string, props map[string]any, scope string) []any {
	type hit struct {
		v   any
		pos int
	}
	var order []string
	seen := map[string]bool{}
	for _, k := range append(stringList(items.m["required"]), names...) {
		if _, ok := props[k]; ok && !seen[k] {
			seen[k] = true
			order = append(order, k)
		}
	}
	for _, k := range order {
		kn := f.d.node(props[k])
		if len(kn.enum()) == 0 || kn.primary() != "string" {
			continue
		}
		ss := f.search(scope)
		named := kn.enumNamed()
		var hits []hit
		for vi, v := range kn.enum() {
			if _, ok := v.(string); !ok {
				continue
			}
			pos := -1
			for _, ws := range named[vi] {
				if _, i := ss.find(ws, 1); i >= 0 && (pos < 0 || i < pos) {
					pos = i
				}
			}
			if pos >= 0 {
				hits = append(hits, hit{v: v, pos: pos})
			}
		}
		if len(hits) == 0 {
			continue
		}
		sort.SliceStable(hits, func(i, j int) bool { return hits[i].pos < hits[j].pos })
		out := make([]any, 0, len(hits))
		for _, h := range hits {
			el, _ := f.object(items, lineAround(scope, h.pos), map[string]any{k: h.v})
			out = append(out, el)
		}
		return out
	}
	return nil
}

func isSeparator(r rune) bool { return r == '_' || r == '-' || r == ' ' }

// lineAround returns the line of scope holding byte offset pos (clamped
// to scope).
func lineAround(scope string, pos int) string {
	pos = max(0, min(pos, len(scope)))
	start := strings.LastIndexByte(scope[:pos], '\n') + 1
	end := strings.IndexByte(scope[pos:], '\n')
	if end < 0 {
		return scope[start:]
	}
	return scope[start : pos+end]
}
