package llmsim

import (
	"slices"
	"strings"
)

// nodeExtra is what the filler derives from a node's keywords.
// schemaDoc.node computes it once per subschema, so requests sending the
// same schema share it. Nothing may change it.
type nodeExtra struct {
	names []string        // property names, sorted
	props map[string]any  // "properties"
	req   map[string]bool // "required" names
	// extractor is hasExtractor's answer.
	extractor bool
	// phrases are the distinct phrases enumScores counts, each lower-cased
	// and split into words.
	phrases [][]string
	// terms are what enumScores adds up: each adds weight times the
	// count of phrases[phrase] to the score of enum value value.
	terms []enumTerm
	// named holds, per enum value, the phrases that name it in full (see
	// namePhrases); nil for a value that is not a string.
	named [][][]string
}

// enumTerm is one addend of an enum value's score.
type enumTerm struct {
	value, phrase, weight int
}

// deriveExtra computes n's nodeExtra.
func deriveExtra(n node) *nodeExtra {
	x := &nodeExtra{extractor: deriveHasExtractor(n)}
	x.names, x.props, x.req = n.deriveProperties()
	enum := n.enum()
	if len(enum) == 0 {
		return x
	}
	kwMap, _ := n.m["x-keywords"].(map[string]any)
	index := map[string]int{} // phrase words joined by " " -> index in x.phrases
	addTerm := func(value int, phrase string, weight int) {
		ws := phraseWords(phrase)
		key := strings.Join(ws, " ")
		j, ok := index[key]
		if !ok {
			j = len(x.phrases)
			index[key] = j
			x.phrases = append(x.phrases, ws)
		}
		x.terms = append(x.terms, enumTerm{value: value, phrase: j, weight: weight})
	}
	x.named = make([][][]string, len(enum))
	for i, v := range enum {
		s, ok := v.(string)
		if !ok {
			continue
		}
		for _, w := range words(s) {
			addTerm(i, w, 1)
		}
		for _, p := range stringList(kwMap[s]) {
			addTerm(i, p, 2)
		}
		for _, p := range namePhrases(s, kwMap) {
			x.named[i] = append(x.named[i], phraseWords(p))
		}
	}
	return x
}

// namePhrases returns the phrases naming enum value s in full: s with
// "_", "-" and " " read as word separators ("calvin klein boots"), then
// its x-keywords phrases.
func namePhrases(s string, kwMap map[string]any) []string {
	return append([]string{strings.Join(strings.FieldsFunc(s, isSeparator), " ")}, stringList(kwMap[s])...)
}

// enumNamed returns n's namePhrases per enum value, split as phraseWords
// does.
func (n node) enumNamed() [][][]string {
	if n.x != nil && n.x.named != nil {
		return n.x.named
	}
	kwMap, _ := n.m["x-keywords"].(map[string]any)
	out := make([][][]string, len(n.enum()))
	for i, v := range n.enum() {
		if s, ok := v.(string); ok {
			for _, p := range namePhrases(s, kwMap) {
				out[i] = append(out[i], phraseWords(p))
			}
		}
	}
	return out
}

// wordsCache keeps words' answer per string: it is asked about property
// names, which come from schemas and are few.
var wordsCache = clearingCache[[]string]{max: 4096}

// cachedWords is words, cached. The caller must not change the slice;
// appending to it copies.
func cachedWords(s string) []string {
	ws, _ := wordsCache.get(s, func(s string) ([]string, error) { return slices.Clip(words(s)), nil })
	return ws
}
