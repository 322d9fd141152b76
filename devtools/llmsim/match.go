package llmsim

import (
	"regexp"
	"regexp/syntax"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// regexCache compiles each expression once per server. A failed compile
// (JSON Schema patterns are ECMA-262; RE2 lacks look-around) is cached as
// nil and the field is treated as having no pattern.
type regexCache struct{ m sync.Map }

type cachedRegex struct {
	re     *regexp.Regexp
	spec   int      // breadth of the widest character class
	minLen int      // fewest characters a match has
	scan   *scanner // finds re's matches faster; nil when it cannot, or re is not leftmost-longest
}

func (c *regexCache) get(expr string, longest bool) *cachedRegex {
	key := expr
	if longest {
		key = "L\x00" + expr
	}
	if v, ok := c.m.Load(key); ok {
		return v.(*cachedRegex)
	}
	var cr *cachedRegex
	if re, err := regexp.Compile(expr); err == nil {
		if longest {
			re.Longest()
		}
		cr = &cachedRegex{re: re, spec: breadth(expr), minLen: minLen(expr)}
		if longest {
			cr.scan = newScanner(expr, re)
		}
	}
	v, _ := c.m.LoadOrStore(key, cr)
	return v.(*cachedRegex)
}

// breadth estimates how many characters a pattern's widest character class
// admits: "[0-9]" is 10, "[A-Z0-9]" 36. A smaller breadth is a more specific
// pattern, which wins a token two fields both match.
func breadth(expr string) int {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return 1 << 20
	}
	var walk func(r *syntax.Regexp) int
	walk = func(r *syntax.Regexp) int {
		w := 1
		switch r.Op {
		case syntax.OpCharClass:
			w = 0
			for i := 0; i+1 < len(r.Rune); i += 2 {
				w += int(r.Rune[i+1]-r.Rune[i]) + 1
			}
		case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			w = 1 << 20
		}
		for _, s := range r.Sub {
			w = max(w, walk(s))
		}
		return w
	}
	return walk(re)
}

// cand is one value found in the text for a field.
type cand struct {
	val   string
	pos   int // byte offset in the scope
	score int // 3 hint match, 2 introduced by a field keyword, 1 by its shape
}

const emailExpr = `[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}`

func isWordRune(r rune) bool {
	if r < utf8.RuneSelf { // the ASCII letters and digits are the only ASCII ones
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r)
}

// bounded reports whether s[start:end] is a whole token: not glued to
// letters or digits on either side.
func bounded(s string, start, end int) bool {
	if start > 0 && start < len(s) {
		before, _ := utf8.DecodeLastRuneInString(s[:start])
		first, _ := utf8.DecodeRuneInString(s[start:])
		if isWordRune(before) && isWordRune(first) {
			return false
		}
	}
	if end < len(s) && end > start {
		after, _ := utf8.DecodeRuneInString(s[end:])
		lastR, _ := utf8.DecodeLastRuneInString(s[:end])
		if isWordRune(after) && isWordRune(lastR) {
			return false
		}
	}
	return true
}

// findTokens returns every whole-token match of re in s, in text order.
func findTokens(re *regexp.Regexp, s string) [][2]int {
	return tokens(s, func(pos int) (int, int, bool) {
		loc := re.FindStringIndex(s[pos:])
		if loc == nil {
			return 0, 0, false
		}
		return pos + loc[0], pos + loc[1], true
	})
}

// findTokens returns every whole-token match of c's expression in s, in
// text order.
func (c *cachedRegex) findTokens(s string) [][2]int {
	if c.scan == nil {
		return findTokens(c.re, s)
	}
	return tokens(s, func(pos int) (int, int, bool) { return c.scan.find(s, pos) })
}

// tokens returns the whole-token matches in s that find gives: find
// returns the leftmost match at or after pos, if any.
func tokens(s string, find func(pos int) (start, end int, ok bool)) [][2]int {
	var out [][2]int
	pos := 0
	for pos <= len(s) {
		start, end, ok := find(pos)
		if !ok {
			break
		}
		if end > start && bounded(s, start, end) {
			out = append(out, [2]int{start, end})
			pos = end
			continue
		}
		// Skip to the next token start after start.
		next := start + 1
		for next < len(s) && !utf8.RuneStart(s[next]) {
			next++
		}
		for next < len(s) {
			before, _ := utf8.DecodeLastRuneInString(s[:next])
			if !isWordRune(before) {
				break
			}
			_, size := utf8.DecodeRuneInString(s[next:])
			next += size
		}
		pos = next
	}
	return out
}

// stripAnchors removes a leading "^" and a trailing unescaped "$".
func stripAnchors(p string) string {
	p = strings.TrimPrefix(p, "^")
	if strings.HasSuffix(p, "$") && !strings.HasSuffix(p, `\$`) {
		p = p[:len(p)-1]
	}
	return p
}

var stopWords = map[string]bool{
	"the": true, "and": true, "for": true, "with": true, "other": true, "none": true,
	"unknown": true, "misc": true, "not": true, "any": true, "null": true, "number": true,
	"num": true, "code": true, "value": true, "type": true,
}

// words splits an identifier or phrase into lower-case words of at least
// three letters, dropping stop words: "order_id" gives ["order"],
// "trackingNumber" gives ["tracking"].
func words(s string) []string {
	var b strings.Builder
	prevLower := false
	for _, r := range s {
		if unicode.IsUpper(r) && prevLower {
			b.WriteByte(' ')
		}
		prevLower = unicode.IsLower(r) || unicode.IsDigit(r)
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(unicode.ToLower(r))
		} else {
			b.WriteByte(' ')
		}
	}
	var out []string
	for _, w := range strings.Fields(b.String()) {
		if len(w) >= 3 && !stopWords[w] {
			out = append(out, w)
		}
	}
	return out
}

// stringList reads a schema value that is a string or a list of strings.
func stringList(v any) []string {
	switch t := v.(type) {
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

// fieldKeywords are the words that, just before a candidate, tie it to the
// field: the property name's words and an "x-keywords" list.
func fieldKeywords(name string, n node) []string {
	kw := cachedWords(name)
	if _, isMap := n.m["x-keywords"].(map[string]any); !isMap {
		for _, k := range stringList(n.m["x-keywords"]) {
			kw = append(kw, strings.ToLower(k))
		}
	}
	return kw
}

// keywordBefore reports whether a field keyword introduces the candidate
// at pos: on the same line, followed by at most three short words and no
// sentence end, as in "account id is U85ALFLG2Z" or "Zip: 12818". A
// candidate without a digit also needs a ":" or "is" / "was" in between,
// so "the state of my refund" does not make "of" a state.
func keywordBefore(scope string, pos int, kw []string, val string) bool {
	return keywordEnds(strings.ToLower(scope[lineStart(scope, pos):pos]), kw, val)
}

// lineStart returns the offset in scope of the line holding offset pos.
func lineStart(scope string, pos int) int {
	return strings.LastIndexByte(scope[:pos], '\n') + 1
}

// keywordEnds is keywordBefore on line, the lower-case text from the
// start of the candidate's line to the candidate.
func keywordEnds(line string, kw []string, val string) bool {
	end := -1
	for _, k := range kw {
		if k == "" {
			continue
		}
		// The last occurrence that is a whole word, or the word with a
		// plural s: "usernames" counts, "statement" does not.
		for i := strings.LastIndex(line, k); i >= 0; i = strings.LastIndex(line[:i], k) {
			e := i + len(k)
			if e < len(line) && line[e] == 's' {
				e++
			}
			if bounded(line, i, e) {
				end = max(end, e)
				break
			}
		}
	}
	if end < 0 {
		return false
	}
	gap := line[end:]
	if len(gap) > 24 || strings.ContainsAny(gap, ".?!") {
		return false
	}
	ws := strings.FieldsFunc(gap, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	if len(ws) > 3 {
		return false
	}
	if hasDigit(val) {
		return true
	}
	if strings.ContainsAny(gap, ":=") {
		return true
	}
	for _, w := range ws {
		if w == "is" || w == "was" || w == "are" {
			return true
		}
	}
	return false
}

func hasDigit(s string) bool {
	return strings.ContainsAny(s, "0123456789")
}

// minLen is the fewest characters a pattern matches.
func minLen(expr string) int {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return 0
	}
	var walk func(r *syntax.Regexp) int
	walk = func(r *syntax.Regexp) int {
		switch r.Op {
		case syntax.OpLiteral:
			return len(r.Rune)
		case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			return 1
		case syntax.OpCapture, syntax.OpPlus:
			return walk(r.Sub[0])
		case syntax.OpRepeat:
			return r.Min * walk(r.Sub[0])
		case syntax.OpConcat:
			n := 0
			for _, s := range r.Sub {
				n += walk(s)
			}
			return n
		case syntax.OpAlternate:
			n := -1
			for _, s := range r.Sub {
				if m := walk(s); n < 0 || m < n {
					n = m
				}
			}
			return max(n, 0)
		}
		return 0
	}
	return walk(re)
}

// countPhrase counts the occurrences of a keyword phrase in scope, case
// folded, at word starts. Words of four letters or more also match with
// any ending ("refund" matches "refunded"), so no stemming is needed;
// shorter words match whole. Words of a phrase may be separated by spaces,
// "-", "_" or "/".
func countPhrase(phrase, scope string) int {
	n, _ := findPhrase(phraseWords(phrase), lowerOf(scope), -1)
	return n
}

// phraseIndex returns the byte offset in scope of the first occurrence of
// a keyword phrase, matched as countPhrase does, or -1.
func phraseIndex(phrase, scope string) int {
	_, at := findPhrase(phraseWords(phrase), lowerOf(scope), 1)
	return at
}

// phraseWords splits a keyword phrase into its lower-case words, as
// findPhrase takes it.
func phraseWords(phrase string) []string {
	return strings.Fields(strings.ToLower(phrase))
}

// findPhrase counts up to limit occurrences (all when limit < 0) of the
// phrase of words ws in lower, the lower-case form of a scope, and
// returns the byte offset of the first, or -1. Offsets are into the scope
// when case folding keeps its length, else into lower.
func findPhrase(ws []string, lower string, limit int) (count, first int) {
	first = -1
	if len(ws) == 0 {
		return 0, -1
	}
	for i := 0; i < len(lower) && (limit < 0 || count < limit); {
		j := strings.Index(lower[i:], ws[0])
		if j < 0 {
			break
		}
		start := i + j
		if phraseAt(lower, start, ws) {
			if count == 0 {
				first = start
			}
			count++
		}
		i = start + len(ws[0])
	}
	return count, first
}

func phraseAt(s string, pos int, ws []string) bool {
	if pos > 0 {
		if r, _ := utf8.DecodeLastRuneInString(s[:pos]); isWordRune(r) {
			return false
		}
	}
	for k, w := range ws {
		if !strings.HasPrefix(s[pos:], w) {
			return false
		}
		pos += len(w)
		if utf8.RuneCountInString(w) >= 4 {
			for pos < len(s) {
				r, size := utf8.DecodeRuneInString(s[pos:])
				if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
					break // "_" separates words: "michael_kors"
				}
				pos += size
			}
		} else if pos < len(s) {
			if r, _ := utf8.DecodeRuneInString(s[pos:]); isWordRune(r) {
				return false
			}
		}
		if k == len(ws)-1 {
			break
		}
		seps := 0
		for pos < len(s) && strings.IndexByte(" \t\r\n-_/", s[pos]) >= 0 {
			pos++
			seps++
		}
		if seps == 0 {
			return false
		}
	}
	return true
}

// enumScores scores each string enum value by how often its words (and its
// "x-keywords" phrases, counted twice) occur in the scope.
func enumScores(n node, ss *searchScope) []int {
	x := n.x
	if x == nil {
		x = deriveExtra(n)
	}
	scores := make([]int, len(n.enum()))
	counts := make([]int, len(x.phrases))
	for j, ws := range x.phrases {
		counts[j], _ = ss.find(ws, -1)
	}
	for _, t := range x.terms {
		scores[t.value] += t.weight * counts[t.phrase]
	}
	return scores
}

// sortCands orders candidates best first: score, then text order.
func sortCands(cs []cand) {
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].score != cs[j].score {
			return cs[i].score > cs[j].score
		}
		return cs[i].pos < cs[j].pos
	})
}

// lowerCache keeps the lower-cased form of recent scopes: every enum
// keyword of a schema is looked for in the same message text, and
// lower-casing it each time was most of the simulator's work.
var lowerCache = clearingCache[string]{max: 4096}

func lowerOf(s string) string {
	l, _ := lowerCache.get(s, func(s string) (string, error) { return strings.ToLower(s), nil })
	return l
}
