package pipeline

import (
	"encoding/json"
	"unicode/utf8"
)

// decodeFast decodes exactly one JSON value from s as DecodeStrict does,
// without encoding/json's token stream, which costs a scan and an error
// value per scalar. It reports false for anything it does not accept
// (bad syntax, a duplicate key, nesting deeper than MaxJSONDepth, data
// after the value); the caller then decodes with decodeTokens, which
// gives the error. Strings with escapes or invalid UTF-8 are unquoted by
// encoding/json itself, so every value is the one decodeTokens returns.
//
// Keys and strings without escapes share memory with s.
func decodeFast(s string) (any, bool) {
	d := fastDecoder{s: s}
	v, ok := d.value(0)
	if !ok {
		return nil, false
	}
	d.skipSpace()
	if d.i != len(d.s) {
		return nil, false
	}
	return v, true
}

type fastDecoder struct {
	s string
	i int
}

func (d *fastDecoder) skipSpace() {
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// value decodes the value at d.i, after white space. depth counts as in
// decodeValue: the document is depth 0.
func (d *fastDecoder) value(depth int) (any, bool) {
	if depth > MaxJSONDepth {
		return nil, false
	}
	d.skipSpace()
	if d.i >= len(d.s) {
		return nil, false
	}
	switch c := d.s[d.i]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		s, ok := d.str()
		return s, ok
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	}
	return nil, false
}

func (d *fastDecoder) literal(lit string) bool {
	if len(d.s)-d.i < len(lit) || d.s[d.i:d.i+len(lit)] != lit {
		return false
	}
	d.i += len(lit)
	return true
}

func (d *fastDecoder) object(depth int) (any, bool) {
	d.i++ // '{'
	m := map[string]any{}
	d.skipSpace()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		return m, true
	}
	for {
		d.skipSpace()
		if d.i >= len(d.s) || d.s[d.i] != '"' {
			return nil, false
		}
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		d.skipSpace()
		if d.i >= len(d.s) || d.s[d.i] != ':' {
			return nil, false
		}
		d.i++
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		m[k] = v
		done, ok := d.afterMember('}')
		if !ok {
			return nil, false
		}
		if done {
			return m, true
		}
	}
}

func (d *fastDecoder) array(depth int) (any, bool) {
	d.i++ // '['
	a := []any{}
	d.skipSpace()
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		return a, true
	}
	for {
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		a = append(a, v)
		done, ok := d.afterMember(']')
		if !ok {
			return nil, false
		}
		if done {
			return a, true
		}
	}
}

// afterMember reads what follows a member of an object or array: a ","
// (more to come) or the closing byte (done). Anything else is not ok.
func (d *fastDecoder) afterMember(closing byte) (done, ok bool) {
	d.skipSpace()
	if d.i >= len(d.s) {
		return false, false
	}
	switch d.s[d.i] {
	case ',':
		d.i++
		return false, true
	case closing:
		d.i++
		return true, true
	}
	return false, false
}

// str decodes the string literal at d.i (a '"').
func (d *fastDecoder) str() (string, bool) {
	start := d.i + 1
	plain := true // no escape, valid UTF-8: the literal is the value
	ascii := true
	for j := start; j < len(d.s); j++ {
		c := d.s[j]
		switch {
		case c == '"':
			d.i = j + 1
			body := d.s[start:j]
			if plain && (ascii || utf8.ValidString(body)) {
				return body, true
			}
			var out string
			if err := json.Unmarshal([]byte(d.s[start-1:j+1]), &out); err != nil {
				return "", false
			}
			return out, true
		case c < 0x20:
			return "", false
		case c == '\\':
			plain = false
			j++ // the escaped byte; encoding/json checks the escape
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

// number decodes the number literal at d.i (RFC 8259 grammar) as a
// json.Number holding the literal.
func (d *fastDecoder) number() (any, bool) {
	s, i := d.s, d.i
	start := i
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return nil, false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return nil, false
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return nil, false
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	d.i = i
	return json.Number(s[start:i]), true
}
