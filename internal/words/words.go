// Package words holds the wording helpers that the commands' output and
// the ingest API's error messages share, so a count or an optional clause
// reads the same in each.
package words

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Plural is "1 one" for n of 1, else "n many": Plural(3, "line",
// "lines") is "3 lines".
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Optional formats v into format, or returns "" for an empty v:
// Optional("; %s", hint).
func Optional(format, v string) string {
	if v == "" {
		return ""
	}
	return fmt.Sprintf(format, v)
}

// AllLinesWere says that all n lines were (something), for n of 1 too:
// "the one line was", "every one of the 3 lines was".
func AllLinesWere(n int) string {
	if n == 1 {
		return "the one line was"
	}
	return fmt.Sprintf("every one of the %d lines was", n)
}

// ShellQuote quotes s for a POSIX shell when it holds more than letters,
// digits and ./_-+,:@%, for a command a message suggests: "data.csv"
// stays as it is, "my file.csv" becomes 'my file.csv'.
func ShellQuote(s string) string {
	safe := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("./_-+,:@%", r)))
	}) < 0
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
