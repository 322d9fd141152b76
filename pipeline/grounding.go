package pipeline

import (
	"encoding/json"
	"sort"
	"strings"
	"unicode"
)

// Evidence locates a grounded value in the message text. Start and End are
// Unicode code-point offsets into the stored text, End exclusive.
type Evidence struct {
	Path  string `json:"path"`
	Start int    `json:"start"`
	End   int    `json:"end"`
}

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
func (s *Schema) Ground(instance any, text string) (ErrorList, []Evidence) {
	g := grounder{doc: s.doc, text: newNormText(text)}
	g.walk(s.doc, instance, "", false, 0)
	sort.Slice(g.evidence, func(i, j int) bool { return g.evidence[i].Path < g.evidence[j].Path })
	return g.errs, g.evidence
}

type grounder struct {
	doc      map[string]any
	text     normText
	errs     ErrorList
	evidence []Evidence
}

func (g *grounder) walk(schema any, inst any, path string, grounded bool, depth int) {
	if depth > 64 {
		return
	}
	sm, _ := schema.(map[string]any)
	if ref, ok := sm["$ref"].(string); ok && strings.HasPrefix(ref, "#") {
		if target, ok := resolvePointer(g.doc, ref[1:]); ok {
			g.walk(target, inst, path, grounded || isTrue(sm["x-grounded"]), depth+1)
			return
		}
	}
	if isTrue(sm["x-grounded"]) {
		grounded = true
	}
	switch v := inst.(type) {
	case map[string]any:
		props, _ := sm["properties"].(map[string]any)
		for k, child := range v {
			g.walk(props[k], child, path+"/"+escapeToken(k), grounded, depth+1)
		}
	case []any:
		items := sm["items"]
		for i, child := range v {
			g.walk(items, child, path+"/"+itoa(i), grounded, depth+1)
		}
	case string:
		if grounded {
			g.check(path, v)
		}
	case json.Number:
		if grounded {
			g.check(path, v.String())
		}
	}
}

func (g *grounder) check(path, value string) {
	start, end, ok := g.text.find(value)
	if !ok {
		g.errs = append(g.errs, Error{Kind: KindRule, Path: path, Keyword: "grounded",
			Message: "value does not appear in the message; copy it exactly or use null"})
		return
	}
	g.evidence = append(g.evidence, Evidence{Path: path, Start: start, End: end})
}

func isTrue(v any) bool { b, _ := v.(bool); return b }

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// normText is a text reduced to lower-case letters and digits, with the
// code-point offset of each kept rune in the original.
type normText struct {
	orig  []rune
	norm  []rune
	index []int
}

func newNormText(s string) normText {
	t := normText{orig: []rune(s)}
	for i, r := range t.orig {
		if keepRune(r) {
			t.norm = append(t.norm, unicode.ToLower(r))
			t.index = append(t.index, i)
		}
	}
	return t
}

func keepRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// Normalize returns s as the grounding rule compares it: lower-case letters
// and digits only.
func Normalize(s string) string {
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
func (t normText) find(value string) (int, int, bool) {
	needle := []rune(Normalize(value))
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

func runesEqual(a, b []rune) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
