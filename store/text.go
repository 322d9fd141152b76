package store

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// What Postgres refuses, and what the store does about it.
//
// A text column refuses the NUL byte and bytes that are not UTF-8; a jsonb
// value also refuses the escapes \u0000 and lone UTF-16 surrogates
// (\ud800 not followed by a low surrogate, or a low surrogate alone). A
// model's reply, or a field name taken from it, may hold any of these; if
// written as is, the outcome transaction would fail and the run would be
// retried for ever. So the store replaces each offending character with
// U+FFFD (the replacement character) in what it writes from replies:
// llm_calls.reply and .stripped, triage_items.last_reply and .errors,
// failure_events text, extractions.data and .evidence. Message bodies and
// metadata are cleaned the same way at ingest.
//
// Each invalid byte becomes one U+FFFD, exactly as Go's range loop and
// []rune conversion read a string, so code-point offsets computed by Go
// over the original text still point at the same characters.

const replacementEscape = `\ufffd`

// CleanText returns s with every NUL byte and every byte that is not part
// of valid UTF-8 replaced by U+FFFD, so Postgres accepts it in a text
// column. A clean s is returned unchanged, without copying.
func CleanText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for _, r := range s { // an invalid byte reads as one utf8.RuneError
		if r == 0 {
			r = utf8.RuneError
		}
		b.WriteRune(r)
	}
	return b.String()
}

// CleanJSON returns doc with the string escapes Postgres jsonb refuses
// (\u0000 and lone UTF-16 surrogates) replaced by \ufffd, and invalid
// UTF-8 bytes replaced by U+FFFD. It does not check that doc is JSON;
// Postgres does. An escaped backslash followed by "u0000" is text, not an
// escape, and is kept. A clean doc is returned unchanged.
func CleanJSON(doc json.RawMessage) json.RawMessage {
	if !needsJSONClean(doc) {
		return doc
	}
	doc = json.RawMessage(CleanText(string(doc)))
	out := make([]byte, 0, len(doc)+8)
	inString := false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			out = append(out, c)
			continue
		}
		switch c {
		case '"':
			inString = false
			out = append(out, c)
		case '\\':
			if i+1 >= len(doc) {
				out = append(out, c)
				continue
			}
			if doc[i+1] != 'u' {
				out = append(out, c, doc[i+1])
				i++
				continue
			}
			u, ok := hex4(doc, i+2)
			if !ok { // malformed: leave for Postgres to reject
				out = append(out, c)
				continue
			}
			switch {
			case u == 0:
				out = append(out, replacementEscape...)
				i += 5
			case u >= 0xD800 && u <= 0xDBFF: // high surrogate: needs a low one next
				if i+11 < len(doc) && doc[i+6] == '\\' && doc[i+7] == 'u' {
					if low, ok := hex4(doc, i+8); ok && low >= 0xDC00 && low <= 0xDFFF {
						out = append(out, doc[i:i+12]...)
						i += 11
						continue
					}
				}
				out = append(out, replacementEscape...)
				i += 5
			case u >= 0xDC00 && u <= 0xDFFF: // low surrogate alone
				out = append(out, replacementEscape...)
				i += 5
			default:
				out = append(out, doc[i:i+6]...)
				i += 5
			}
		default:
			out = append(out, c)
		}
	}
	return out
}

// needsJSONClean reports whether doc may hold something CleanJSON changes.
func needsJSONClean(doc []byte) bool {
	if !utf8.Valid(doc) {
		return true
	}
	for i := 0; i+5 < len(doc); i++ {
		if doc[i] != '\\' || doc[i+1] != 'u' {
			continue
		}
		if u, ok := hex4(doc, i+2); ok && (u == 0 || (u >= 0xD800 && u <= 0xDFFF)) {
			return true
		}
	}
	return false
}

// hex4 reads four hex digits at doc[i:i+4].
func hex4(doc []byte, i int) (rune, bool) {
	if i+4 > len(doc) {
		return 0, false
	}
	var r rune
	for _, c := range doc[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}
