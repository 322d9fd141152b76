package llmsim

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode"
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
// Unicode tables.
func TestIsWordRune(t *testing.T) {
	t.Parallel()
	for r := rune(-1); r <= unicode.MaxRune+1; r++ {
		if got, want := isWordRune(r), unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_'; got != want {
			t.Fatalf("isWordRune(%U) = %v, want %v", r, got, want)
		}
	}
}
