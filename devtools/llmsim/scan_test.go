package llmsim

import (
	"math/rand/v2"
	"reflect"
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"
)

// scanPatterns are the searched patterns of the product's schemas, the
// e-mail expression, and more shapes a scanner takes.
var scanPatterns = []string{
	`[A-Za-z0-9]{10}`, `[A-Za-z0-9._-]{2,40}`, `\+?\(?[0-9]{1,4}\)?([ .-]?[0-9]{2,4}){1,4}`,
	`[0-9]{10}`, `[0-9]{3,5}`, `[A-Za-z]{2}`, `[0-9]{1,7}(\.[0-9]{1,2})?`, emailExpr,
	`SKU-[0-9]{4}`, `[A-Z]{2}[0-9]+`, `x+`, `(ab|a)(c|bcd)`, `[0-9]+(?:-[0-9]+)*`, `a{2,}b?`,
}

// unscannedPatterns are patterns a scanner must leave to the regular
// expression: case folded, not ASCII, with an assertion, or matching
// the empty string.
var unscannedPatterns = []string{
	`(?i)sku-[0-9]{4}`, `[^0-9@\r\n]+`, `\bx[0-9]+`, `[0-9]*`, `é[0-9]+`, `.[0-9]`, `x?`, `^x`,
}

// TestScannerMatchesRegexp checks, for every offset of many texts, that a
// scanner finds what the regular expression finds.
func TestScannerMatchesRegexp(t *testing.T) {
	t.Parallel()
	texts := []string{"", "a", "@", "x@y.z", "call +1 (555) 123-4567 or 555.123.4567 now"}
	for _, m := range loadSampleMessages(t)[:10] { // every offset of each: quadratic, so a few
		texts = append(texts, m.Text)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "c", "x", "K", "Z", "S", "k", "U", "0", "1", "5", "9", " ", " ", ".", "-", "_",
		"+", "(", ")", "@", "%", "\n", "é", "€", "\xff", "\x80", "SKU-", "ab", "bcd", "co", ".com"}
	for range 400 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for _, expr := range scanPatterns {
		if op, ok := assertionIn(expr); ok {
			t.Fatalf("%s has an assertion (%v): the check below skips reruns of the regexp only for patterns without", expr, op)
		}
		re := regexp.MustCompile(expr)
		re.Longest()
		sc := newScanner(expr, re)
		if sc == nil {
			t.Errorf("newScanner(%q) is nil", expr)
			continue
		}
		for _, s := range texts {
			// want is the regexp's match from pos on, in offsets into s;
			// nil for none. The regexp runs on s[pos:] at every 8th
			// offset, and wherever the match from the last offset it ran
			// at starts before pos. At the other offsets that match is
			// the match from pos too (and none stays none): the pattern
			// looks at nothing around a match (no assertion, checked
			// above), so no match starts between the two offsets, else
			// the regexp would have found it, and the leftmost-longest
			// match at the same start is the same. This keeps the check
			// of every offset of a text linear, not quadratic, in its
			// length.
			var want []int
			ranAt := -1
			for pos := 0; pos <= len(s); pos++ {
				if ranAt < 0 || pos%8 == 0 || want != nil && want[0] < pos {
					want, ranAt = re.FindStringIndex(s[pos:]), pos
					if want != nil {
						want[0], want[1] = want[0]+pos, want[1]+pos
					}
				}
				start, end, ok := sc.find(s, pos)
				if ok != (want != nil) || ok && (start != want[0] || end != want[1]) {
					t.Fatalf("%s in %q from %d: scanner %d, %d, %v; regexp %v (run from %d)", expr, s, pos, start, end, ok, want, ranAt)
				}
			}
			c := &cachedRegex{re: re, scan: sc}
			if got, want := c.findTokens(s), findTokens(re, s); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s in %q: tokens %v, want %v", expr, s, got, want)
			}
		}
	}
}

// assertionIn reports the first assertion (^, $, \A, \z, \b, \B) of
// expr, if it has one.
func assertionIn(expr string) (syntax.Op, bool) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		panic(err)
	}
	var walk func(*syntax.Regexp) (syntax.Op, bool)
	walk = func(re *syntax.Regexp) (syntax.Op, bool) {
		switch re.Op {
		case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
			syntax.OpWordBoundary, syntax.OpNoWordBoundary:
			return re.Op, true
		}
		for _, sub := range re.Sub {
			if op, ok := walk(sub); ok {
				return op, true
			}
		}
		return 0, false
	}
	return walk(re)
}

// TestNewScannerRefuses checks the patterns a scanner must leave to the
// regular expression.
func TestNewScannerRefuses(t *testing.T) {
	t.Parallel()
	for _, expr := range unscannedPatterns {
		if newScanner(expr, regexp.MustCompile(expr)) != nil {
			t.Errorf("newScanner(%q) is not nil", expr)
		}
	}
}
