package llmsim

import (
	"regexp"
	"regexp/syntax"
	"unicode/utf8"
)

// A scanner finds the leftmost-longest match of a pattern in a text
// without running the regular expression over the whole text from every
// token, for the patterns it can describe by bytes: ASCII only, case
// sensitive, no empty-width assertion (^, $, \b) and no empty match. A
// match of such a pattern is made of the pattern's bytes ("all"), so it
// lies in one run of them; it begins with one of the pattern's first
// bytes and holds one of its required bytes (the '@' of an e-mail, a
// digit of a phone number). The scanner skips the runs without a
// required byte and runs the regular expression on the others only,
// from their first possible start. Since the pattern looks at nothing
// around a match, this gives the match the regular expression gives on
// the whole text. newScanner returns nil for any other pattern.
type scanner struct {
	re       *regexp.Regexp // leftmost-longest
	first    byteSet        // bytes a match can begin with
	all      byteSet        // bytes a match can hold
	required byteSet        // a match holds one of these

	// A pattern that is one character class repeated min to max times
	// (max < 0: no bound), such as "[0-9]{3,5}", needs no regular
	// expression: its match is the first run of class bytes at least min
	// long, cut to max.
	repeat   bool
	min, max int
}

// byteSet is a set of bytes.
type byteSet [256]bool

// newScanner returns the scanner of re (leftmost-longest), compiled from
// expr, or nil when expr is not a pattern a scanner can match.
func newScanner(expr string, re *regexp.Regexp) *scanner {
	syn, err := syntax.Parse(expr, syntax.Perl)
	if err != nil || !scannable(syn) {
		return nil
	}
	sc := &scanner{re: re}
	if nullable := firstBytes(syn, &sc.first); nullable {
		return nil
	}
	allBytes(syn, &sc.all)
	sc.required = sc.all
	fewest := sc.all.count()
	for _, set := range requiredSets(syn) {
		if n := set.count(); n < fewest {
			fewest, sc.required = n, set
		}
	}
	if lo, hi, ok := classRepeat(syn); ok && lo >= 1 {
		sc.repeat, sc.min, sc.max = true, lo, hi
	}
	return sc
}

// find returns the leftmost-longest match in s at or after pos, as
// re.FindStringIndex on s[pos:] gives it, with offsets into s.
func (sc *scanner) find(s string, pos int) (start, end int, ok bool) {
	for i := pos; i < len(s); {
		if !sc.all[s[i]] {
			i++
			continue
		}
		// s[i:j] is a run of the pattern's bytes.
		j, hasReq := i, false
		for j < len(s) && sc.all[s[j]] {
			hasReq = hasReq || sc.required[s[j]]
			j++
		}
		switch {
		case sc.repeat:
			if j-i >= sc.min {
				if sc.max >= 0 {
					return i, min(j, i+sc.max), true
				}
				return i, j, true
			}
		case hasReq:
			k := i // no match begins before the run's first possible start
			for k < j && !sc.first[s[k]] {
				k++
			}
			if k < j {
				if loc := sc.re.FindStringIndex(s[k:j]); loc != nil {
					return k + loc[0], k + loc[1], true
				}
			}
		}
		i = j
	}
	return 0, 0, false
}

func (b *byteSet) count() int {
	n := 0
	for _, in := range b {
		if in {
			n++
		}
	}
	return n
}

// addRanges adds the ranges of a character class (pairs lo, hi), all of
// them ASCII.
func (b *byteSet) addRanges(r []rune) {
	for i := 0; i+1 < len(r); i += 2 {
		for c := r[i]; c <= r[i+1]; c++ {
			b[c] = true
		}
	}
}

// scannable reports whether every node of re is ASCII, case-sensitive and
// no empty-width assertion.
func scannable(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return false
		}
		for _, r := range re.Rune {
			if r >= utf8.RuneSelf {
				return false
			}
		}
	case syntax.OpCharClass:
		for _, r := range re.Rune {
			if r >= utf8.RuneSelf {
				return false
			}
		}
	case syntax.OpEmptyMatch, syntax.OpCapture, syntax.OpConcat, syntax.OpAlternate,
		syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
	default: // any character, assertions, no match
		return false
	}
	for _, s := range re.Sub {
		if !scannable(s) {
			return false
		}
	}
	return true
}

// firstBytes adds to set the bytes a match of re can begin with and
// reports whether re matches the empty string.
func firstBytes(re *syntax.Regexp, set *byteSet) (nullable bool) {
	switch re.Op {
	case syntax.OpLiteral:
		if len(re.Rune) == 0 {
			return true
		}
		set[re.Rune[0]] = true
		return false
	case syntax.OpCharClass:
		set.addRanges(re.Rune)
		return false
	case syntax.OpCapture, syntax.OpPlus:
		return firstBytes(re.Sub[0], set)
	case syntax.OpStar, syntax.OpQuest:
		firstBytes(re.Sub[0], set)
		return true
	case syntax.OpRepeat:
		n := firstBytes(re.Sub[0], set)
		return n || re.Min == 0
	case syntax.OpConcat:
		for _, s := range re.Sub {
			if !firstBytes(s, set) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		nullable := false
		for _, s := range re.Sub {
			if firstBytes(s, set) {
				nullable = true
			}
		}
		return nullable
	}
	return true // OpEmptyMatch
}

// allBytes adds to set every byte a match of re can hold.
func allBytes(re *syntax.Regexp, set *byteSet) {
	switch re.Op {
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			set[r] = true
		}
	case syntax.OpCharClass:
		set.addRanges(re.Rune)
	}
	for _, s := range re.Sub {
		allBytes(s, set)
	}
}

// requiredSets returns sets of bytes of which every match of re holds at
// least one byte each.
func requiredSets(re *syntax.Regexp) []byteSet {
	switch re.Op {
	case syntax.OpLiteral:
		var out []byteSet
		for _, r := range re.Rune {
			var b byteSet
			b[r] = true
			out = append(out, b)
		}
		return out
	case syntax.OpCharClass:
		var b byteSet
		b.addRanges(re.Rune)
		return []byteSet{b}
	case syntax.OpCapture, syntax.OpPlus:
		return requiredSets(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return requiredSets(re.Sub[0])
		}
	case syntax.OpConcat:
		var out []byteSet
		for _, s := range re.Sub {
			out = append(out, requiredSets(s)...)
		}
		return out
	}
	return nil
}

// classRepeat reports whether re is one character class (or a literal of
// one character), possibly captured, repeated lo to hi times (hi < 0: no
// bound). The class's bytes are then re's allBytes.
func classRepeat(re *syntax.Regexp) (lo, hi int, ok bool) {
	for re.Op == syntax.OpCapture {
		re = re.Sub[0]
	}
	lo, hi = 1, 1
	switch re.Op {
	case syntax.OpPlus:
		lo, hi, re = 1, -1, re.Sub[0]
	case syntax.OpStar:
		lo, hi, re = 0, -1, re.Sub[0]
	case syntax.OpQuest:
		lo, hi, re = 0, 1, re.Sub[0]
	case syntax.OpRepeat:
		lo, hi, re = re.Min, re.Max, re.Sub[0]
	}
	for re.Op == syntax.OpCapture {
		re = re.Sub[0]
	}
	if re.Op == syntax.OpCharClass || re.Op == syntax.OpLiteral && len(re.Rune) == 1 {
		return lo, hi, true
	}
	return 0, 0, false
}
