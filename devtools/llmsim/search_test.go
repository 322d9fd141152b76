package llmsim

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestSearchScopeFindMatchesSearch checks that the word index finds keyword
// phrases as the plain search does.
func TestSearchScopeFindMatchesSearch(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "b", "ab", "aba", "A", "B", "Ab", "r", "e", "f", "u", "n", "d", "refund", "Refund",
		"état", "ÉTAT", "İ", "K", "ß", "2", "fa", "2FA", "_", "-", "/", " ", " ", "\n", ".", "'", "\xff", "\xc3", "é"}
	vocab := []string{"a", "ab", "aba", "a-a", "a/b", "refund", "refunds", "ref", "état", "2fa", "k", "kk", "ß",
		"\xff", "i̇", "b_a", "'a", "aé"}
	var texts []string
	for range 1500 {
		var b strings.Builder
		for range rng.IntN(30) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for _, m := range loadSampleMessages(t)[:20] {
		texts = append(texts, m.Text)
	}
	var phrases [][]string
	for range 200 {
		ws := make([]string, 1+rng.IntN(3))
		for i := range ws {
			ws[i] = vocab[rng.IntN(len(vocab))]
		}
		phrases = append(phrases, ws)
	}
	phrases = append(phrases, []string{"refund"}, []string{"order"}, []string{"charged", "twice"}, nil)
	for _, s := range texts {
		ss, lower := newSearchScope(s), strings.ToLower(s)
		for _, ws := range phrases {
			for _, limit := range []int{-1, 1} {
				gotN, gotAt := ss.find(ws, limit)
				wantN, wantAt := findPhrase(ws, lower, limit)
				if gotN != wantN || gotAt != wantAt {
					t.Fatalf("%q in %q, limit %d: %d at %d, want %d at %d", ws, s, limit, gotN, gotAt, wantN, wantAt)
				}
			}
		}
	}
}

// TestIsWordRune checks the ASCII shortcut of isWordRune against the
// Unicode tables, at every rune where the answer may change: the tables'
// answer changes only at the bounds of their ranges (and at every rune of
// a range with a stride over 1), so the test takes each bound and the
// runes either side of it, every rune of a strided range, and every rune
// below 0x1100 (the shortcut, Latin-1's own table, and well past both),
// -1 and past MaxRune; and every 61st rune besides, so that a rule of
// its own that a later isWordRune gets wrong over a span of 61 runes or
// more fails too.
func TestIsWordRune(t *testing.T) {
	t.Parallel()
	check := func(r rune) {
		if got, want := isWordRune(r), unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_'; got != want {
			t.Fatalf("isWordRune(%U) = %v, want %v", r, got, want)
		}
	}
	for r := rune(-1); r < 0x1100; r++ {
		check(r)
	}
	for r := rune(0x1100); r <= unicode.MaxRune; r += 61 {
		check(r)
	}
	around := func(lo, hi, stride rune) {
		for _, r := range []rune{lo - 1, lo, lo + 1, hi - 1, hi, hi + 1} {
			check(r)
		}
		if stride > 1 {
			for r := lo; r <= hi; r++ {
				check(r)
			}
		}
	}
	for _, tab := range []*unicode.RangeTable{unicode.Letter, unicode.Digit} {
		for _, rg := range tab.R16 {
			around(rune(rg.Lo), rune(rg.Hi), rune(rg.Stride))
		}
		for _, rg := range tab.R32 {
			around(rune(rg.Lo), rune(rg.Hi), rune(rg.Stride))
		}
	}
	for _, r := range []rune{unicode.MaxRune, unicode.MaxRune + 1, utf8.RuneError, 0xd800, 0xdfff} {
		check(r)
	}
}
