package llmsim

import (
	"strings"
	"unicode/utf8"
)

// searchScope is a scope prepared for keyword search: its lower-case
// form and an index of that form's word starts. The filler looks for every enum
// keyword of a schema in the same scope; with the index, a phrase is
// tried only at the words that begin with its first byte.
type searchScope struct {
	scope string
	lower string // strings.ToLower(scope)
	ascii bool   // scope is ASCII, so lower slices as scope does

	// starts are the word starts of lower (offsets of a word rune not
	// preceded by one), grouped by first byte: those beginning with byte
	// b are starts[bucket[b]:bucket[b+1]], in text order. indexed is
	// false for a text too long for int32 offsets.
	starts  []int32
	bucket  [257]int32
	indexed bool
}

// newSearchScope prepares scope for keyword search.
func newSearchScope(scope string) *searchScope {
	ss := &searchScope{scope: scope, lower: lowerOf(scope), ascii: isASCII(scope)}
	if len(ss.lower) > 1<<30 {
		return ss
	}
	ss.indexed = true
	var count [256]int32
	var at []int32
	prevWord := false
	for i, r := range ss.lower {
		w := isWordRune(r)
		if w && !prevWord {
			at = append(at, int32(i))
			count[ss.lower[i]]++
		}
		prevWord = w
	}
	for b := range 256 {
		ss.bucket[b+1] = ss.bucket[b] + count[b]
	}
	next := ss.bucket
	ss.starts = make([]int32, len(at))
	for _, i := range at {
		b := ss.lower[i]
		ss.starts[next[b]] = i
		next[b]++
	}
	return ss
}

// find counts up to limit occurrences (all when limit < 0) of the phrase
// of words ws, as findPhrase does in lower, and returns the offset of the
// first, or -1.
//
// An occurrence counts only at a word start (phraseAt), so when the
// phrase's first word is made of word runes only, the occurrences are
// the word starts where the phrase matches: findPhrase's search, which
// skips occurrences overlapping the one before, skips none there, as
// such an overlap has a word rune before it.
func (ss *searchScope) find(ws []string, limit int) (count, first int) {
	if len(ws) == 0 || !ss.indexed || !wordRunesOnly(ws[0]) {
		return findPhrase(ws, ss.lower, limit)
	}
	first = -1
	b := int(ws[0][0])
	for _, at := range ss.starts[ss.bucket[b]:ss.bucket[b+1]] {
		if limit >= 0 && count >= limit {
			break
		}
		if phraseAt(ss.lower, int(at), ws) {
			if count == 0 {
				first = int(at)
			}
			count++
		}
	}
	return count, first
}

// lineBefore returns the lower-case text from the start of the line
// holding offset pos of the scope to pos.
func (ss *searchScope) lineBefore(pos int) string {
	start := lineStart(ss.scope, pos)
	if ss.ascii {
		return ss.lower[start:pos]
	}
	return strings.ToLower(ss.scope[start:pos])
}

// wordRunesOnly reports whether s is valid UTF-8 made of word runes only.
func wordRunesOnly(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || !isWordRune(r) {
			return false
		}
	}
	return s != ""
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
