package triage

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/trustelem/zxcvbn"
	"github.com/trustelem/zxcvbn/match"
)

// The password rule. A reviewer's password must be 10 to 72 bytes of text
// (bcrypt reads no more than 72) and hard to guess: its zxcvbn score
// (github.com/trustelem/zxcvbn, a port of Dropbox's zxcvbn 4.4.2 that
// gives the same scores) must be at least MinPasswordScore. zxcvbn
// estimates the guesses a cracker needs, knowing about 30,000 common
// passwords, English words, names and surnames, keyboard patterns,
// repeats, sequences, dates and l33t spellings; the account's login and
// name, and the product's own names, count as known words too.

// MinPasswordLength is the shortest password accepted, in characters.
const MinPasswordLength = 10

// MaxPasswordBytes is the longest password accepted: bcrypt reads no
// more.
const MaxPasswordBytes = 72

// MinPasswordScore is the lowest zxcvbn score (0 to 4) accepted: 3, at
// least 10^8 guesses, "safely unguessable: moderate protection from an
// offline slow-hash scenario" in zxcvbn's words (the hashes are bcrypt).
const MinPasswordScore = 3

// productWords are guessed first by anyone attacking this product's
// accounts.
var productWords = []string{"extractq", "triage", "reviewer"}

// ErrWeakPassword is wrapped by every refusal of CheckPassword.
var ErrWeakPassword = errors.New("password refused")

// CheckPassword returns nil if password may be a reviewer's password, else
// an error wrapping ErrWeakPassword that says why (too short, too long,
// too common, too guessable and what makes it so), never quoting the
// password. userInputs are words an attacker would try first for this
// account, such as its login and name.
func CheckPassword(password string, userInputs ...string) error {
	switch n := utf8.RuneCountInString(password); {
	case !utf8.ValidString(password):
		return fmt.Errorf("%w: it is not UTF-8 text", ErrWeakPassword)
	case strings.ContainsFunc(password, unicode.IsControl):
		return fmt.Errorf("%w: it holds a control character", ErrWeakPassword)
	case n < MinPasswordLength:
		return fmt.Errorf("%w: it has %d characters; at least %d are needed", ErrWeakPassword, n, MinPasswordLength)
	case len(password) > MaxPasswordBytes:
		return fmt.Errorf("%w: it has %d bytes; at most %d are taken (bcrypt reads no more)", ErrWeakPassword, len(password), MaxPasswordBytes)
	}
	inputs := append(append([]string{}, productWords...), userInputs...)
	for _, in := range userInputs { // "Alice A." is guessed as alice, too
		inputs = append(inputs, strings.FieldsFunc(in, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })...)
	}
	res := zxcvbn.PasswordStrength(password, inputs)
	if res.Score >= MinPasswordScore {
		return nil
	}
	what := "too guessable"
	if common(res.Sequence, password) {
		what = "too common"
	}
	return fmt.Errorf("%w: %s (zxcvbn score %d of 4, at least %d needed): %s; a passphrase of four or more unrelated words is easy to remember and hard to guess",
		ErrWeakPassword, what, res.Score, MinPasswordScore, weaknesses(res.Sequence))
}

// common reports whether the password is, once capitals and l33t
// spellings are undone, one of zxcvbn's common passwords, or one followed
// or preceded by a few characters.
func common(seq []*match.Match, password string) bool {
	for _, m := range seq {
		if m.Pattern == "dictionary" && m.DictionaryName == "passwords" && utf8.RuneCountInString(m.Token)+4 >= utf8.RuneCountInString(password) {
			return true
		}
	}
	return false
}

// weaknesses names what the password is built of, from zxcvbn's reading of
// it, without quoting it.
func weaknesses(seq []*match.Match) string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, m := range seq {
		switch m.Pattern {
		case "dictionary":
			switch m.DictionaryName {
			case "passwords":
				add("a commonly used password")
			case "user_inputs":
				add("the account's login or name, or the product's")
			case "male_names", "female_names", "surnames":
				add("a common name")
			default:
				add("a common word")
			}
			if m.L33t {
				add("l33t spelling (@ for a, 0 for o ...), which crackers try")
			}
			if m.Reversed {
				add("a word reversed")
			}
		case "spatial":
			add("a keyboard pattern such as qwerty")
		case "repeat":
			add("repeated characters or groups such as aaa or abcabc")
		case "sequence":
			add("a sequence such as abcd or 1234")
		case "date", "regex":
			add("a date or a year")
		}
	}
	if len(out) == 0 {
		return "it is too short for the characters it uses"
	}
	return "it is made of " + strings.Join(out, ", ")
}
