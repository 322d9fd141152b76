package llmsim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp/syntax"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/extractq/extractq/config"
)

// Fault names one way a first reply, or a whole call, goes wrong. The
// reply header X-Llmsim-Fault carries it ("none" for an honest reply).
type Fault string

// The faults, each injected at its configured rate on the first
// (extraction) reply only.
const (
	FaultNone            Fault = "none"
	FaultInvalidJSON     Fault = "invalid_json"     // not JSON at all
	FaultFenced          Fault = "fenced"           // valid JSON in a ``` code fence
	FaultProse           Fault = "prose"            // valid JSON inside prose
	FaultWrongType       Fault = "wrong_type"       // one field with a wrong JSON type
	FaultMissingRequired Fault = "missing_required" // one required field left out
	FaultWrongEnum       Fault = "wrong_enum"       // one value outside its enum
	FaultUngrounded      Fault = "ungrounded"       // an id that is not in the message
	FaultTruncated       Fault = "truncated"        // cut off, finish_reason "length"

	// Under the openai profile only (RefusalRate, ContentFilterRate):
	FaultRefusal       Fault = "refusal"        // message.refusal set, content null
	FaultContentFilter Fault = "content_filter" // content null, finish_reason "content_filter"

	// In tools mode, under the profiles whose server may send it
	// (SeveralToolCallsRate, ProfileFeatures.SeveralToolCalls):
	FaultSeveralToolCalls Fault = "several_tool_calls" // the tool called twice
)

// pickFault draws at most one fault. The rates are cumulative in the order
// listed, so when they add up to more than 1 the earlier ones win.
func pickFault(cfg config.Simulator, rng *rand.Rand) Fault {
	u := rng.Float64()
	for _, r := range []struct {
		f    Fault
		rate float64
	}{
		{FaultInvalidJSON, cfg.InvalidJSONRate}, {FaultFenced, cfg.FencedRate}, {FaultProse, cfg.ProseRate},
		{FaultWrongType, cfg.WrongTypeRate}, {FaultMissingRequired, cfg.MissingRequiredRate}, {FaultWrongEnum, cfg.WrongEnumRate},
		{FaultUngrounded, cfg.UngroundedRate}, {FaultTruncated, cfg.TruncatedRate},
	} {
		if u < r.rate {
			return r.f
		}
		u -= r.rate
	}
	return FaultNone
}

// site is one value inside a record, with the schema node describing it.
type site struct {
	toks       []string
	v          any
	n          node
	required   bool // a required property of its parent object
	inObject   bool // a property, not an array element
	scalarLike bool // a scalar or null
}

// sites lists every value below the root of doc, in a stable order.
func (f *filler) sites(doc any) []site {
	var out []site
	var walk func(v any, n node, toks []string, required, inObject bool, depth int)
	walk = func(v any, n node, toks []string, required, inObject bool, depth int) {
		if depth > maxSchemaDepth {
			return
		}
		if len(toks) > 0 {
			_, isMap := v.(map[string]any)
			_, isArr := v.([]any)
			out = append(out, site{toks: toks, v: v, n: n, required: required, inObject: inObject, scalarLike: !isMap && !isArr})
		}
		switch t := v.(type) {
		case map[string]any:
			_, props, req := n.properties()
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(t[k], f.nodeOf(props[k]), appendTok(toks, k), req[k], true, depth+1)
			}
		case []any:
			items := f.nodeOf(n.m["items"])
			for i, c := range t {
				walk(c, items, appendTok(toks, strconv.Itoa(i)), false, false, depth+1)
			}
		}
	}
	root := node{m: map[string]any{}}
	if f.d != nil {
		root = f.d.node(f.d.root)
	}
	walk(doc, root, nil, false, false, 0)
	return out
}

func (f *filler) nodeOf(s any) node {
	if f.d == nil || s == nil {
		return node{m: map[string]any{}}
	}
	return f.d.node(s)
}

func appendTok(toks []string, t string) []string {
	return append(append([]string(nil), toks...), t)
}

// inject applies fault fl to the honest record doc. It returns the reply
// text, whether it is cut off, the fault applied (FaultNone when the
// record has no place for it) and the path it hit, if any.
func (f *filler) inject(fl Fault, doc any, text string, rng *rand.Rand) (content string, cut bool, applied Fault, path string) {
	doc = deepCopy(doc)
	honest := func() (string, bool, Fault, string) { return compactJSON(doc), false, FaultNone, "" }
	switch fl {
	case FaultInvalidJSON:
		return invalidJSON(doc, rng), false, fl, ""
	case FaultFenced:
		return "```json\n" + indentJSON(doc) + "\n```", false, fl, ""
	case FaultProse:
		return "Here is the record: " + compactJSON(doc) + " Hope this helps.", false, fl, ""
	case FaultTruncated:
		s := []rune(compactJSON(doc))
		if len(s) < 2 {
			return honest()
		}
		at := len(s)/3 + rng.IntN(len(s)/3+1)
		return string(s[:max(1, min(at, len(s)-1))]), true, fl, ""
	case FaultWrongType:
		var leaves []site
		for _, s := range f.sites(doc) {
			if s.scalarLike && s.v != nil {
				leaves = append(leaves, s)
			}
		}
		if len(leaves) == 0 {
			for _, s := range f.sites(doc) {
				if s.scalarLike {
					leaves = append(leaves, s)
				}
			}
		}
		if len(leaves) == 0 {
			return honest()
		}
		s := leaves[rng.IntN(len(leaves))]
		out, err := apply(doc, patchOp{Op: "replace", Path: joinPointer(s.toks), Value: wrongValue(s)})
		if err != nil {
			return honest()
		}
		return compactJSON(out), false, fl, joinPointer(s.toks)
	case FaultMissingRequired:
		var req []site
		for _, s := range f.sites(doc) {
			if s.required && s.inObject {
				req = append(req, s)
			}
		}
		if len(req) == 0 {
			return honest()
		}
		s := req[rng.IntN(len(req))]
		out, err := apply(doc, patchOp{Op: "remove", Path: joinPointer(s.toks)})
		if err != nil {
			return honest()
		}
		return compactJSON(out), false, fl, joinPointer(s.toks)
	case FaultWrongEnum:
		var sites, strs []site
		for _, s := range f.sites(doc) {
			if s.scalarLike && len(s.n.enum()) > 0 {
				sites = append(sites, s)
				if _, ok := s.v.(string); ok {
					strs = append(strs, s)
				}
			}
		}
		if len(strs) > 0 {
			sites = strs // a near miss of a chosen value, rather than of a null
		}
		for len(sites) > 0 {
			i := rng.IntN(len(sites))
			s := sites[i]
			if v, ok := nearMiss(s); ok {
				out, err := apply(doc, patchOp{Op: "replace", Path: joinPointer(s.toks), Value: v})
				if err == nil {
					return compactJSON(out), false, fl, joinPointer(s.toks)
				}
			}
			sites = append(sites[:i], sites[i+1:]...)
		}
		return honest()
	case FaultUngrounded:
		var ids []site
		for _, s := range f.sites(doc) {
			if s.scalarLike && s.n.grounded() && s.n.allows("") {
				ids = append(ids, s)
			}
		}
		if len(ids) == 0 {
			// The product strips "x-" annotations before sending a schema;
			// ids are then the searchable strings named like ids
			// (order_id, email, phone, ...), else any searchable string.
			var searchable []site
			for _, s := range f.sites(doc) {
				if s.scalarLike && hasExtractor(s.n) && s.n.primary() == "string" {
					searchable = append(searchable, s)
					if idName(s.toks[len(s.toks)-1]) {
						ids = append(ids, s)
					}
				}
			}
			if len(ids) == 0 {
				ids = searchable
			}
		}
		for len(ids) > 0 {
			i := rng.IntN(len(ids))
			s := ids[i]
			if v, ok := f.madeUp(s.n, s.v, text, rng); ok {
				out, err := apply(doc, patchOp{Op: "replace", Path: joinPointer(s.toks), Value: v})
				if err == nil {
					return compactJSON(out), false, fl, joinPointer(s.toks)
				}
			}
			ids = append(ids[:i], ids[i+1:]...)
		}
		return honest()
	}
	return honest()
}

// wrongValue returns a value of a JSON type the field does not allow,
// keeping what it can of the value: "7149958247" becomes a number, a word
// is wrapped in an array, a number becomes a string.
func wrongValue(s site) any {
	var alts []any
	switch t := s.v.(type) {
	case string:
		if v, err := strconv.ParseFloat(t, 64); err == nil {
			alts = append(alts, v)
		}
		alts = append(alts, []any{t}, true)
	case float64:
		alts = append(alts, strconv.FormatFloat(t, 'f', -1, 64), []any{t})
	case bool:
		alts = append(alts, strconv.FormatBool(t), float64(1))
	case nil:
		alts = append(alts, "null", float64(0), false)
	}
	for _, a := range alts {
		if !s.n.allows(a) {
			return a
		}
	}
	return map[string]any{"value": s.v}
}

// nearMiss returns a value of the site's JSON type that its enum does not
// hold, the way a model misses an enum: the value in words with a
// capital ("refund_status" becomes "Refund status"), else "unknown".
func nearMiss(s site) (any, bool) {
	enum := s.n.enum()
	var alts []string
	if v, ok := s.v.(string); ok && v != "" {
		w := []rune(strings.ReplaceAll(v, "_", " "))
		w[0] = unicode.ToUpper(w[0])
		alts = append(alts, string(w), strings.ToUpper(v))
	}
	alts = append(alts, "unknown", "n/a")
	for _, a := range alts {
		held := slices.ContainsFunc(enum, func(e any) bool { es, ok := e.(string); return ok && es == a })
		if !held && s.n.allows(a) {
			return a, true
		}
	}
	return nil, false
}

// idName reports whether a property name reads as an identifier.
func idName(name string) bool {
	for _, w := range strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		switch w {
		case "id", "ids", "email", "mail", "phone", "username", "zip", "sku", "tracking", "account", "order", "number", "code":
			return true
		}
	}
	return strings.HasSuffix(name, "Id") || strings.HasSuffix(name, "ID")
}

var madeUpNames = []string{"Morgan Ellery", "Casey Lindqvist", "Riley Okafor", "Jordan Vasquez-Hale"}

// madeUp returns a value of the field's shape (its pattern, its format, or
// the shape of the current value) whose normal form (lower-case letters and
// digits) does not occur in text, so only the grounding rule catches it.
func (f *filler) madeUp(n node, cur any, text string, rng *rand.Rand) (string, bool) {
	normText := normalize(text)
	var full *cachedRegex
	if p := n.str("pattern"); p != "" {
		full = f.re.get(p, false)
	}
	for try := 0; try < 64; try++ {
		var s string
		curS, _ := cur.(string)
		switch {
		case curS != "" && try < 32:
			s = perturb(curS, rng)
		case full != nil && searchablePattern(n.str("pattern")):
			s = generate(n.str("pattern"), rng)
		case n.str("format") == "email":
			s = fmt.Sprintf("customer%04d@example.com", rng.IntN(10000))
		default:
			s = madeUpNames[rng.IntN(len(madeUpNames))]
		}
		if full != nil && !full.re.MatchString(s) {
			continue
		}
		if !lengthOK(n, s) {
			continue
		}
		ns := normalize(s)
		if ns == "" || strings.Contains(normText, ns) {
			continue
		}
		return s, true
	}
	return "", false
}

// perturb replaces each letter and digit by a random one of the same class,
// keeping an e-mail's domain.
func perturb(s string, rng *rand.Rand) string {
	keep := ""
	if i := strings.LastIndexByte(s, '@'); i > 0 {
		s, keep = s[:i], s[i:]
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			b.WriteRune('0' + rune(rng.IntN(10)))
		case r >= 'A' && r <= 'Z':
			b.WriteRune('A' + rune(rng.IntN(26)))
		case r >= 'a' && r <= 'z':
			b.WriteRune('a' + rune(rng.IntN(26)))
		default:
			b.WriteRune(r)
		}
	}
	return b.String() + keep
}

// generate returns a random string matching pattern (anchors ignored).
func generate(pattern string, rng *rand.Rand) string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return ""
	}
	var b strings.Builder
	var gen func(r *syntax.Regexp, depth int)
	gen = func(r *syntax.Regexp, depth int) {
		if depth > 64 || b.Len() > 256 {
			return
		}
		rep := func(lo, hi int) {
			n := lo
			if hi > lo {
				n += rng.IntN(hi - lo + 1)
			}
			for i := 0; i < n; i++ {
				gen(r.Sub[0], depth+1)
			}
		}
		switch r.Op {
		case syntax.OpLiteral:
			b.WriteString(string(r.Rune))
		case syntax.OpCharClass:
			total := 0
			for i := 0; i+1 < len(r.Rune); i += 2 {
				total += int(r.Rune[i+1]-r.Rune[i]) + 1
			}
			if total == 0 {
				return
			}
			k := rng.IntN(min(total, 1<<20))
			for i := 0; i+1 < len(r.Rune); i += 2 {
				w := int(r.Rune[i+1]-r.Rune[i]) + 1
				if k < w {
					b.WriteRune(r.Rune[i] + rune(k))
					return
				}
				k -= w
			}
		case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			b.WriteRune('a' + rune(rng.IntN(26)))
		case syntax.OpCapture:
			gen(r.Sub[0], depth+1)
		case syntax.OpConcat:
			for _, s := range r.Sub {
				gen(s, depth+1)
			}
		case syntax.OpAlternate:
			gen(r.Sub[rng.IntN(len(r.Sub))], depth+1)
		case syntax.OpStar:
			rep(0, 3)
		case syntax.OpPlus:
			rep(1, 4)
		case syntax.OpQuest:
			rep(0, 1)
		case syntax.OpRepeat:
			hi := r.Max
			if hi < 0 {
				hi = r.Min + 3
			}
			rep(r.Min, hi)
		}
	}
	gen(re, 0)
	return b.String()
}

// normalize keeps lower-case letters and digits, as the product's grounding
// rule compares text.
func normalize(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// invalidJSON renders doc the way a careless model breaks JSON: single
// quotes and Python literals, or unquoted keys with a trailing comma.
func invalidJSON(doc any, rng *rand.Rand) string {
	s := compactJSON(doc)
	var out string
	if rng.IntN(2) == 0 {
		out = strings.NewReplacer(`"`, `'`, "null", "None", "true", "True", "false", "False").Replace(s)
	} else {
		out = unquoteKeys(doc)
	}
	if json.Valid([]byte(out)) {
		out = "{record: None,}"
	}
	return out
}

// unquoteKeys renders an object with bare keys and a trailing comma.
func unquoteKeys(doc any) string {
	m, ok := doc.(map[string]any)
	if !ok {
		return "{value: " + compactJSON(doc) + ",}"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("{")
	for _, k := range keys {
		b.WriteString(k + ": " + compactJSON(m[k]) + ", ")
	}
	b.WriteString("}")
	return b.String()
}

// compactJSON encodes v on one line, without escaping <, > and &.
func compactJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "{}"
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func indentJSON(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "{}"
	}
	return string(b)
}
