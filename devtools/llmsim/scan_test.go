package llmsim

import (
	"math/rand/v2"
	"reflect"
	"regexp"
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
		re := regexp.MustCompile(expr)
		re.Longest()
		sc := newScanner(expr, re)
		if sc == nil {
			t.Errorf("newScanner(%q) is nil", expr)
			continue
		}
		for _, s := range texts {
			for pos := 0; pos <= len(s); pos++ {
				want := re.FindStringIndex(s[pos:])
				start, end, ok := sc.find(s, pos)
				if ok != (want != nil) || ok && (start != pos+want[0] || end != pos+want[1]) {
					t.Fatalf("%s in %q from %d: scanner %d, %d, %v; regexp %v", expr, s, pos, start, end, ok, want)
				}
			}
			c := &cachedRegex{re: re, scan: sc}
			if got, want := c.findTokens(s), findTokens(re, s); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s in %q: tokens %v, want %v", expr, s, got, want)
			}
		}
	}
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
