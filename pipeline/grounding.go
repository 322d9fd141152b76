package pipeline

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/extractq/extractq/extracttype"
)

// Ground applies the grounding rule: every string (or number) value at a
// property marked "x-grounded": true must occur in text. A grounded array
// or object grounds every value inside it.
//
// Matching is on normalised forms: letters are lower-cased and every
// character that is not a letter or digit (spaces, hyphens, dots, "@",
// brackets) is dropped, so "AB-123 45" matches "ab12345" and "(720)
// 986-4183" matches "720-986-4183". The match must not be part of a longer
// run of letters or digits in the text, so "123" is not found inside
// "0123". Null values are not checked.
//
// It returns one KindRule error (keyword "grounded") per value not found,
// whose message names no value, and the evidence of every value found.
func (s *Schema) Ground(instance any, text string) (extracttype.ErrorList, []extracttype.Evidence) {
	return s.ground(instance, &runText{text: text}, nil)
}

// ground is Ground over a text normalised on first use. trimmed is what
// trimGrounded cut.
func (s *Schema) ground(instance any, text *runText, trimmed map[string]string) (extracttype.ErrorList, []extracttype.Evidence) {
	g := grounder{doc: s.doc, text: text, trimmed: trimmed}
	g.walk(s.doc, instance, "", false, 0)
	sort.Slice(g.evidence, func(i, j int) bool { return g.evidence[i].Path < g.evidence[j].Path })
	return g.errs, g.evidence
}

type grounder struct {
	doc      map[string]any
	text     *runText
	trimmed  map[string]string // what trimGrounded cut
	trim     bool              // walk to trim, not to ground
	cut      map[string]string // what a trim walk cut: path → the value before
	errs     extracttype.ErrorList
	evidence []extracttype.Evidence
}

// resolve follows $ref from schema and returns the schema node that
// describes the value, whether the value is grounded, and the depth
// reached; false past the depth limit.
func (g *grounder) resolve(schema any, grounded bool, depth int) (map[string]any, bool, int, bool) {
	for {
		if depth > 64 {
			return nil, false, depth, false
		}
		sm, _ := schema.(map[string]any)
		if ref, ok := sm["$ref"].(string); ok && strings.HasPrefix(ref, "#") {
			if target, ok := resolvePointer(g.doc, ref[1:]); ok {
				grounded = grounded || isTrue(sm["x-grounded"])
				schema, depth = target, depth+1
				continue
			}
		}
		return sm, grounded || isTrue(sm["x-grounded"]), depth, true
	}
}

func (g *grounder) walk(schema any, inst any, path string, grounded bool, depth int) {
	sm, grounded, depth, ok := g.resolve(schema, grounded, depth)
	if !ok {
		return
	}
	switch v := inst.(type) {
	case map[string]any:
		props, _ := sm["properties"].(map[string]any)
		for k, child := range v {
			if g.trim {
				if t, ok := g.trimChild(props[k], child, grounded, depth+1); ok {
					v[k] = t
					g.cut[path+"/"+escapeToken(k)] = child.(string)
				}
			}
			g.child(props[k], child, path, escapeToken(k), grounded, depth+1)
		}
	case []any:
		items := sm["items"]
		for i, child := range v {
			if g.trim {
				if t, ok := g.trimChild(items, child, grounded, depth+1); ok {
					v[i] = t
					g.cut[path+"/"+strconv.Itoa(i)] = child.(string)
				}
			}
			g.child(items, child, path, strconv.Itoa(i), grounded, depth+1)
		}
	default:
		g.scalar(inst, path, grounded)
	}
}

// child walks the value at path+"/"+tok, building that path only for a
// value that needs it: a container, or a grounded string or number.
func (g *grounder) child(schema any, inst any, path, tok string, grounded bool, depth int) {
	switch inst.(type) {
	case map[string]any, []any:
		g.walk(schema, inst, path+"/"+tok, grounded, depth)
	case string, json.Number:
		if g.trim {
			return
		}
		if _, grounded, _, ok := g.resolve(schema, grounded, depth); ok && grounded {
			g.scalar(inst, path+"/"+tok, true)
		}
	}
}

// trimChild returns a grounded string child without the punctuation and
// quotes at its ends (see trimEdges), and whether that cut anything.
func (g *grounder) trimChild(schema any, inst any, grounded bool, depth int) (string, bool) {
	v, ok := inst.(string)
	if !ok {
		return "", false
	}
	if _, grounded, _, ok := g.resolve(schema, grounded, depth); !ok || !grounded {
		return "", false
	}
	t := trimEdges(v)
	return t, t != v && t != ""
}

// trimEdges cuts white space, sentence punctuation (. , ; : ! ? and their
// inverted and CJK forms) and quotes (ASCII ' " ` and the Unicode opening
// and closing quote classes Pi and Pf) from both ends of a grounded value:
// they belong to the sentence around the value, not to it ("jdoe." in "my
// username is jdoe."). Brackets, "#", "@", "+" and the like are kept.
func trimEdges(v string) string {
	return strings.TrimFunc(v, func(r rune) bool {
		switch r {
		case '.', ',', ';', ':', '!', '?', '"', '\'', '`', '¡', '¿', '。', '、', '，', '！', '？', '；', '：', '…':
			return true
		}
		return unicode.IsSpace(r) || unicode.In(r, unicode.Pi, unicode.Pf)
	})
}

// trimGrounded cuts trimEdges from every grounded string of instance, in
// place, before anything validates it, and returns what it cut: path →
// the value before.
func (s *Schema) trimGrounded(instance any) map[string]string {
	g := grounder{doc: s.doc, trim: true, cut: map[string]string{}}
	g.walk(s.doc, instance, "", false, 0)
	return g.cut
}

// untrim puts back the values trimGrounded cut, for a record that does not
// validate: what goes to triage is what the model sent.
func untrim(instance any, cut map[string]string) {
	for path, v := range cut {
		i := strings.LastIndexByte(path, '/')
		parent, ok := resolvePointer(instance, path[:i])
		if !ok {
			continue
		}
		tok := unescapeToken(path[i+1:])
		switch p := parent.(type) {
		case map[string]any:
			p[tok] = v
		case []any:
			if n, err := strconv.Atoi(tok); err == nil && n >= 0 && n < len(p) {
				p[n] = v
			}
		}
	}
}

func (g *grounder) scalar(inst any, path string, grounded bool) {
	if !grounded || g.trim {
		return
	}
	switch v := inst.(type) {
	case string:
		g.check(path, v)
	case json.Number:
		g.check(path, v.String())
	}
}

func (g *grounder) check(path, value string) {
	start, end, ok := g.text.normalized().find(value)
	if !ok {
		g.errs = append(g.errs, extracttype.Error{Kind: extracttype.KindRule, Path: path, Keyword: "grounded",
			Message: "value does not appear in the message; copy it exactly or use null"})
		return
	}
	nt := g.text.normalized()
	start, end = nt.widen(value, start, end)
	g.evidence = append(g.evidence, extracttype.Evidence{Path: path, Start: start, End: end,
		Normalized: nt.span(start, end) != value, Trimmed: g.trimmed[path] != ""})
}

// widen grows the span [start, end) of value's letters and digits over the
// characters value has before its first and after its last letter or
// digit, where the text has exactly those ("(" of "(720) 986-4183").
func (t *normText) widen(value string, start, end int) (int, int) {
	vr := []rune(value)
	i := 0
	for i < len(vr) && !keepRune(vr[i]) {
		i++
	}
	j := len(vr)
	for j > i && !keepRune(vr[j-1]) {
		j--
	}
	if lead := vr[:i]; len(lead) > 0 && start >= len(lead) && t.span(start-len(lead), start) == string(lead) {
		start -= len(lead)
	}
	if trail := vr[j:]; len(trail) > 0 && end+len(trail) <= t.size() && t.span(end, end+len(trail)) == string(trail) {
		end += len(trail)
	}
	return start, end
}

// span is the original text from code point start to end.
func (t *normText) span(start, end int) string {
	if t.ascii {
		return t.text[start:end]
	}
	return string(t.orig[start:end])
}

// size is the original text's length in code points.
func (t *normText) size() int {
	if t.ascii {
		return len(t.text)
	}
	return len(t.orig)
}

// runText is a message text, normalised for grounding on first use and
// then shared by every validation of a run.
type runText struct {
	text string
	meta MessageMeta // for rules
	norm *normText
}

func (t *runText) normalized() *normText {
	if t.norm == nil {
		nt := newNormText(t.text)
		t.norm = &nt
	}
	return t.norm
}

func isTrue(v any) bool { b, _ := v.(bool); return b }

func itoa(i int) string { return strconv.Itoa(i) }

// normText is a text reduced to lower-case letters and digits, with the
// code-point offset of each kept rune in the original. An ASCII text is
// kept as bytes, where code-point offsets are byte offsets; any other
// as runes.
type normText struct {
	ascii bool
	text  string // the original, for an ASCII text
	normA []byte // the normal form of an ASCII text
	orig  []rune // the original's code points, for a non-ASCII text
	norm  []rune // the normal form of a non-ASCII text
	index []int  // code-point offset in the original of each normal rune
}

func newNormText(s string) normText {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return newNormRunes(s)
		}
	}
	t := normText{ascii: true, text: s, normA: make([]byte, 0, len(s)), index: make([]int, 0, len(s))}
	for i := 0; i < len(s); i++ {
		if c := s[i]; keepASCII(c) {
			t.normA = append(t.normA, lowerASCII(c))
			t.index = append(t.index, i)
		}
	}
	return t
}

func newNormRunes(s string) normText {
	t := normText{orig: []rune(s)}
	t.norm = make([]rune, 0, len(t.orig))
	t.index = make([]int, 0, len(t.orig))
	for i, r := range t.orig {
		if keepRune(r) {
			t.norm = append(t.norm, unicode.ToLower(r))
			t.index = append(t.index, i)
		}
	}
	return t
}

func keepRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// keepASCII is keepRune for an ASCII byte.
func keepASCII(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// lowerASCII is unicode.ToLower for an ASCII byte.
func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// Normalize returns s as the grounding rule compares it: lower-case letters
// and digits only.
func Normalize(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return normalizeRunes(s)
		}
	}
	return string(normalizeASCII(s))
}

func normalizeASCII(s string) []byte {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if c := s[i]; keepASCII(c) {
			b = append(b, lowerASCII(c))
		}
	}
	return b
}

func normalizeRunes(s string) string {
	var b strings.Builder
	for _, r := range s {
		if keepRune(r) {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// find returns the code-point span in the original text of the first
// word-bounded occurrence of value's normal form.
func (t *normText) find(value string) (int, int, bool) {
	if t.ascii {
		return t.findASCII(value)
	}
	return t.findRunes([]rune(Normalize(value)))
}

// findASCII is find in an ASCII text. A value whose normal form is not
// ASCII cannot occur in it.
func (t *normText) findASCII(value string) (int, int, bool) {
	var needle []byte
	if isASCII(value) {
		needle = normalizeASCII(value)
	} else {
		n := normalizeRunes(value)
		if !isASCII(n) {
			return 0, 0, false
		}
		needle = []byte(n)
	}
	if len(needle) == 0 || len(needle) > len(t.normA) {
		return 0, 0, false
	}
	for from := 0; ; {
		j := bytes.Index(t.normA[from:], needle)
		if j < 0 {
			return 0, 0, false
		}
		i := from + j
		from = i + 1
		start := t.index[i]
		end := t.index[i+len(needle)-1] + 1
		if start > 0 && keepASCII(t.text[start-1]) {
			continue
		}
		if end < len(t.text) && keepASCII(t.text[end]) {
			continue
		}
		return start, end, true
	}
}

func (t *normText) findRunes(needle []rune) (int, int, bool) {
	if len(needle) == 0 || len(needle) > len(t.norm) {
		return 0, 0, false
	}
	for i := 0; i+len(needle) <= len(t.norm); i++ {
		if !runesEqual(t.norm[i:i+len(needle)], needle) {
			continue
		}
		start := t.index[i]
		end := t.index[i+len(needle)-1] + 1
		if start > 0 && keepRune(t.orig[start-1]) {
			continue
		}
		if end < len(t.orig) && keepRune(t.orig[end]) {
			continue
		}
		return start, end, true
	}
	return 0, 0, false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func runesEqual(a, b []rune) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
