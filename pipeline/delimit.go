package pipeline

import (
	"regexp"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/mtibben/confusables"
	"golang.org/x/text/unicode/norm"
)

// TagMarker replaces, in the prompt's copy of a message, every sequence
// that reads as the prompt's own <message> or </message> tag.
const TagMarker = "[message tag removed]"

// NeutralizeMessage returns text as the prompt carries it between its
// <message> and </message> lines: every sequence that would read as one
// of those tags is replaced with TagMarker, so that the customer's text can
// neither close the data block nor open a forged one. Text holding no such
// sequence is returned unchanged, byte for byte; the stored text is never
// changed (grounding and evidence offsets are computed against it).
//
// A sequence is found on a folded view of the text, so that case,
// spacing, look-alikes and encodings do not hide it:
//
//   - default-ignorable code points (zero-width spaces and joiners, soft
//     hyphens, bidi controls, variation selectors) and combining marks are
//     dropped; white space of any kind is one space;
//   - each character is folded by compatibility (NFKD: fullwidth ＜／ｍ,
//     small forms ﹤), lower-cased, and mapped to its Unicode confusable
//     prototype (UTS #39 skeleton: Cyrillic е, ѕ, Greek ο; angle
//     quotation marks ‹ ›), with a few more look-alikes of the tag's
//     characters (〈 ⟨ ❬ « ⁄ ∕ ⧸ \, Cyrillic м, Greek ε);
//   - the escapes &lt; &gt; &sol; &#60; &#x3c; (any case, with or without
//     the semicolon, nested &amp;), %3C %3E %2F and \u003c \x3c read as
//     the characters they encode.
//
// On that view a tag is "<", optionally "/", then the letters of "message"
// (white space allowed between any two), running on to the next ">" if one
// follows; or "/message" with a ">" after it.
func NeutralizeMessage(text string) string {
	if !mayHoldTag(text) {
		return text
	}
	units := foldText(text)
	var b strings.Builder
	found := false
	last := 0 // bytes of text written or replaced
	for j := 0; j < len(units); {
		if units[j].start < last { // the rest of a character already replaced
			j++
			continue
		}
		end, ok := matchTag(units, j)
		if !ok {
			j++
			continue
		}
		if !found {
			b.Grow(len(text) + len(TagMarker))
			found = true
		}
		b.WriteString(text[last:units[j].start])
		b.WriteString(TagMarker)
		last = units[end-1].end
		j = end
	}
	if !found {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// mayHoldTag is a fast test: ASCII text without '<', '>', '&', '%' or
// '\' holds no tag in any form.
func mayHoldTag(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= utf8.RuneSelf, c == '<', c == '>', c == '&', c == '%', c == '\\':
			return true
		}
	}
	return false
}

// unit is one folded character and the bytes of the text it comes from.
type unit struct {
	r          rune
	start, end int
}

// tagWord is "message" folded.
var tagWord = []rune(foldString("message"))

// matchTag reports whether a tag starts at units[j], and where it ends
// (exclusive).
func matchTag(u []unit, j int) (int, bool) {
	n := len(u)
	skip := func(k int) int {
		for k < n && u[k].r == ' ' {
			k++
		}
		return k
	}
	k := j
	opened := false
	switch u[j].r {
	case '<':
		opened = true
		k = skip(k + 1)
		if k < n && u[k].r == '/' {
			k = skip(k + 1)
		}
	case '/':
		k = skip(k + 1)
	default:
		return 0, false
	}
	for i, r := range tagWord {
		if i > 0 {
			k = skip(k)
		}
		if k >= n || u[k].r != r {
			return 0, false
		}
		k++
	}
	// A longer name (<messages>, <message_id>) reads as a tag too.
	for k < n && (isWordRune(u[k].r)) {
		k++
	}
	end := k
	if c := skip(k); c < n && u[c].r == '>' {
		return c + 1, true
	}
	if !opened {
		return 0, false
	}
	return end, true
}

func isWordRune(r rune) bool {
	return r == '_' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

// escapeRE matches, at the start of a string, an escape of '<', '>' or
// '/' (see NeutralizeMessage).
var escapeRE = regexp.MustCompile(`^(?i:&(?:amp;)*(?:lt|gt|sol|#0*(?:60|62|47)|#x0*(?:3c|3e|2f))(?:;|\b)|%(?:25)*(?:3c|3e|2f)|\\u003c|\\u003e|\\u002f|\\x3c|\\x3e|\\x2f)`)

func escapeRune(esc string) rune {
	s := strings.ToLower(esc)
	switch {
	case strings.Contains(s, "lt"), strings.Contains(s, "60"), strings.Contains(s, "3c"):
		return '<'
	case strings.Contains(s, "gt"), strings.Contains(s, "62"), strings.Contains(s, "3e"):
		return '>'
	}
	return '/'
}

// foldText returns the folded view of s, unit by unit.
func foldText(s string) []unit {
	units := make([]unit, 0, len(s))
	for i := 0; i < len(s); {
		if c := s[i]; c == '&' || c == '%' || c == '\\' {
			if m := escapeRE.FindString(s[i:]); m != "" {
				units = append(units, unit{r: escapeRune(m), start: i, end: i + len(m)})
				i += len(m)
				continue
			}
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		for _, f := range foldRune(r) {
			units = append(units, unit{r: f, start: i, end: i + size})
		}
		i += size
	}
	return units
}

// foldString is foldText's view of s as a string.
func foldString(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteString(string(foldRune(r)))
	}
	return b.String()
}

// lookAlikes are bracket and slash look-alikes that neither NFKD nor the
// confusables table folds to '<', '>' or '/'.
var lookAlikes = map[rune]rune{
	'\u2329': '<', '\u3008': '<', '\u27E8': '<', '\u276C': '<', '\u276E': '<', '\u300A': '<', '\u00AB': '<',
	'\u2991': '<', '\u29FC': '<', '\u1438': '<',
	'\u232A': '>', '\u3009': '>', '\u27E9': '>', '\u276D': '>', '\u276F': '>', '\u300B': '>', '\u00BB': '>',
	'\u2992': '>', '\u29FD': '>', '\u1433': '>',
	'\u2044': '/', '\u2215': '/', '\u29F8': '/', '\u2571': '/', '\\': '/', '\u27CB': '/',
	'\u043C': 'm', '\u041C': 'm', '\u028D': 'm', // Cyrillic м, М; ʍ
	'\u03B5': 'e', '\u0454': 'e', '\u03C2': 's', // Greek ε, Cyrillic є, Greek final ς
}

var foldCache sync.Map // rune -> []rune, beyond ASCII

var asciiFold = func() (t [utf8.RuneSelf][]rune) {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		t[r] = foldRuneSlow(r)
	}
	return t
}()

// foldRune folds one character: nothing for an ignorable one, else one
// or more characters.
func foldRune(r rune) []rune {
	if r >= 0 && r < utf8.RuneSelf {
		return asciiFold[r]
	}
	if v, ok := foldCache.Load(r); ok {
		return v.([]rune)
	}
	f := foldRuneSlow(r)
	foldCache.Store(r, f)
	return f
}

func foldRuneSlow(r rune) []rune {
	if ignorable(r) {
		return nil
	}
	if unicode.IsSpace(r) {
		return []rune{' '}
	}
	if l, ok := lookAlikes[r]; ok {
		return foldRuneSlow(l)
	}
	var out []rune
	for _, d := range norm.NFKD.String(string(r)) {
		if ignorable(d) {
			continue
		}
		if unicode.IsSpace(d) {
			out = append(out, ' ')
			continue
		}
		if l, ok := lookAlikes[d]; ok {
			d = l
		}
		// Skeleton, lower case, and again: "М" is "M", then "m", then
		// the skeleton of "m" ("rn"), as "message" folds.
		s := strings.ToLower(confusables.Skeleton(string(d)))
		s = strings.ToLower(confusables.Skeleton(s))
		for _, x := range s {
			if ignorable(x) {
				continue
			}
			if l, ok := lookAlikes[x]; ok {
				x = l
			}
			out = append(out, x)
		}
	}
	return out
}

// ignorable reports a character the eye does not see: a default-ignorable
// code point (format characters such as zero-width spaces and joiners,
// soft hyphens and bidi controls; variation selectors) or a combining
// mark.
func ignorable(r rune) bool {
	return unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) ||
		unicode.Is(unicode.Variation_Selector, r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r)
}
