package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/extractq/extractq/extracttype"
)

// Limits of the reply parser. A reply past them is a parse error, so a
// runaway model cannot exhaust the worker.
const (
	// MaxReplyBytes is the largest reply parsed, in bytes.
	MaxReplyBytes = 1 << 20
	// MaxJSONDepth is the deepest nesting of objects and arrays accepted.
	MaxJSONDepth = 64
)

// DuplicateKeyError reports an object key that occurs twice. Path is the
// JSON Pointer of the key.
type DuplicateKeyError struct{ Path string }

func (e *DuplicateKeyError) Error() string { return "duplicate key at " + e.Path }

// DecodeStrict decodes exactly one JSON value from b. Numbers stay
// json.Number (never coerced to float64), a key that occurs twice in an
// object is a *DuplicateKeyError, nesting deeper than MaxJSONDepth is an
// error, and anything but white space after the value is an error.
func DecodeStrict(b []byte) (any, error) {
	if v, ok := decodeFast(string(b)); ok {
		return v, nil
	}
	return decodeTokens(b)
}

// decodeStrictString is DecodeStrict of a string.
func decodeStrictString(s string) (any, error) {
	if v, ok := decodeFast(s); ok {
		return v, nil
	}
	return decodeTokens([]byte(s))
}

// decodeTokens is DecodeStrict on encoding/json's token stream. It is the
// reference: decodeFast only speeds up the documents it accepts, and
// every error comes from here.
func decodeTokens(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, path string, depth int) (any, error) {
	if depth > MaxJSONDepth {
		return nil, fmt.Errorf("nesting deeper than %d levels", MaxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return nil, errors.New("no JSON value")
		}
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				p := path + "/" + escapeToken(k)
				if _, dup := m[k]; dup {
					return nil, &DuplicateKeyError{Path: p}
				}
				v, err := decodeValue(dec, p, depth+1)
				if err != nil {
					return nil, err
				}
				m[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return m, nil
		case '[':
			a := []any{}
			for i := 0; dec.More(); i++ {
				v, err := decodeValue(dec, path+"/"+itoa(i), depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return a, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// Reply is a model reply parsed into one JSON object.
type Reply struct {
	// Object is the decoded object (numbers as json.Number); nil when the
	// reply held no acceptable object.
	Object map[string]any
	// Stripped names what was removed around the object, comma separated:
	// "reasoning", "fence", "prose". Empty for a strict parse.
	Stripped string
}

var (
	reasoningBlock = regexp.MustCompile(`(?s)<(think|thinking|reasoning)>.*?</(think|thinking|reasoning)>`)
	fenceBlock     = regexp.MustCompile("(?s)```[a-zA-Z]*\\s*\n?(.*?)```")
)

// ParseReply finds the one JSON object in a model's reply.
//
// It tries a strict parse of the whole reply first. Only if that fails does
// it accept exactly one JSON object found after a reasoning block
// (<think>…</think>), inside a code fence, or inside prose. Two different
// objects in one reply are an error, never first-wins. A duplicate key is
// an error, never merged. Values are never coerced or invented.
//
// The returned ErrorList holds KindParse errors and is empty on success.
func ParseReply(content string) (Reply, extracttype.ErrorList) {
	if len(content) > MaxReplyBytes {
		return Reply{}, extracttype.ErrorList{{Kind: extracttype.KindParse, Keyword: "size",
			Message: fmt.Sprintf("reply is longer than %d bytes", MaxReplyBytes)}}
	}
	trimmed := strings.TrimSpace(content)
	if trimmed == "" {
		return Reply{}, extracttype.ErrorList{{Kind: extracttype.KindParse, Message: "reply is empty; return one JSON object"}}
	}
	v, err := decodeStrictString(trimmed)
	if err == nil {
		if m, ok := v.(map[string]any); ok {
			return Reply{Object: m}, nil
		}
		return Reply{}, extracttype.ErrorList{{Kind: extracttype.KindParse, Message: fmt.Sprintf("reply is a JSON %s, not an object", jsonKind(v))}}
	}
	if de := (*DuplicateKeyError)(nil); errors.As(err, &de) {
		return Reply{}, extracttype.ErrorList{{Kind: extracttype.KindParse, Path: de.Path, Keyword: "duplicate_key", Message: "key occurs twice; give it once"}}
	}

	// Lenient pass: strip what models wrap around JSON.
	var stripped []string
	prose := false
	rest := content
	if reasoningBlock.MatchString(rest) {
		rest = reasoningBlock.ReplaceAllString(rest, " ")
		stripped = append(stripped, "reasoning")
	}
	var regions []string
	if ms := fenceBlock.FindAllStringSubmatch(rest, -1); len(ms) > 0 {
		for _, m := range ms {
			regions = append(regions, m[1])
		}
		stripped = append(stripped, "fence")
		if strings.TrimSpace(fenceBlock.ReplaceAllString(rest, "")) != "" {
			prose = true
		}
	} else {
		regions = []string{rest}
	}

	var found []map[string]any
	var canon []string
	var dupErr *DuplicateKeyError
	for _, r := range regions {
		objs, outside, dk := scanObjects(r)
		if dk != nil && dupErr == nil {
			dupErr = dk
		}
		if strings.TrimSpace(outside) != "" {
			prose = true
		}
		for _, o := range objs {
			c := compactJSON(o)
			seen := false
			for _, x := range canon {
				if x == c {
					seen = true
				}
			}
			if !seen {
				canon = append(canon, c)
				found = append(found, o)
			}
		}
	}
	if prose {
		stripped = append(stripped, "prose")
	}
	switch {
	case dupErr != nil:
		return Reply{}, extracttype.ErrorList{{Kind: extracttype.KindParse, Path: dupErr.Path, Keyword: "duplicate_key", Message: "key occurs twice; give it once"}}
	case len(found) == 1:
		return Reply{Object: found[0], Stripped: strings.Join(stripped, ",")}, nil
	case len(found) > 1:
		return Reply{}, extracttype.ErrorList{{Kind: extracttype.KindParse, Keyword: "multiple_objects",
			Message: fmt.Sprintf("reply holds %d different JSON objects; return exactly one", len(found))}}
	}
	if slips := syntaxSlips(content); len(slips) > 0 {
		return Reply{}, slips
	}
	return Reply{}, extracttype.ErrorList{{Kind: extracttype.KindParse, Message: "reply holds no JSON object; return one JSON object only"}}
}

// syntaxSlips names the usual slips that keep an object in content from
// decoding, each once (its first occurrence) with its position, in the
// order met: a trailing comma before } or ], a raw line break inside a
// string, a single-quoted key or string, a string never closed. Keywords
// trailing_comma, raw_newline, single_quotes, unclosed_string. It scans
// from the first '{' outside reasoning blocks; nil when it finds none of
// them. Messages carry positions (line and column in the reply, from 1,
// columns in characters), never the reply's text.
func syntaxSlips(content string) extracttype.ErrorList {
	blanked := reasoningBlock.ReplaceAllStringFunc(content, func(m string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, m)
	})
	start := strings.IndexByte(blanked, '{')
	if start < 0 {
		return nil
	}
	type pos struct{ line, col int }
	line, col := 1, 1
	for _, r := range blanked[:start] {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	var out extracttype.ErrorList
	seen := map[string]bool{}
	add := func(kw string, p pos, msg string) {
		if !seen[kw] {
			seen[kw] = true
			out = append(out, extracttype.Error{Kind: extracttype.KindParse, Keyword: kw,
				Message: fmt.Sprintf("line %d, column %d: %s", p.line, p.col, msg)})
		}
	}
	inString, escaped := false, false
	var strStart, comma pos
	prev := rune(0) // the last character outside strings that is not white space
	for _, r := range blanked[start:] {
		here := pos{line, col}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		if inString {
			switch {
			case escaped:
				escaped = false
			case r == '\\':
				escaped = true
			case r == '"':
				inString = false
				prev = '"'
			case r == '\n':
				add("raw_newline", here, "raw line break inside a string; write \\n")
			}
			continue
		}
		switch r {
		case '"':
			inString, strStart = true, here
		case '\'':
			if prev == '{' || prev == ',' || prev == ':' || prev == '[' {
				add("single_quotes", here, "single-quoted string; JSON keys and strings take double quotes")
			}
		case ',':
			comma = here
		case '}', ']':
			if prev == ',' {
				add("trailing_comma", comma, "trailing comma before "+string(r)+"; remove it")
			}
		}
		if r != ' ' && r != '\t' && r != '\n' && r != '\r' {
			prev = r
		}
	}
	if inString {
		add("unclosed_string", strStart, "string is never closed; end it with \"")
	}
	return out
}

// scanObjects finds the top-level balanced {...} spans of s that decode
// strictly as objects. It returns them, the text outside them, and the
// first duplicate-key error met.
func scanObjects(s string) ([]map[string]any, string, *DuplicateKeyError) {
	var objs []map[string]any
	var outside strings.Builder
	var dupErr *DuplicateKeyError
	i := 0
	for i < len(s) {
		if s[i] != '{' {
			outside.WriteByte(s[i])
			i++
			continue
		}
		end := matchBrace(s, i)
		if end < 0 {
			outside.WriteString(s[i:])
			break
		}
		v, err := decodeStrictString(s[i : end+1])
		if m, ok := v.(map[string]any); err == nil && ok {
			objs = append(objs, m)
			i = end + 1
			continue
		}
		if de := (*DuplicateKeyError)(nil); errors.As(err, &de) && dupErr == nil {
			dupErr = de
			i = end + 1
			continue
		}
		outside.WriteByte(s[i])
		i++
	}
	return objs, outside.String(), dupErr
}

// matchBrace returns the index of the '}' closing the '{' at start, aware
// of JSON strings, or -1.
func matchBrace(s string, start int) int {
	depth := 0
	inStr := false
	for i := start; i < len(s); i++ {
		c := s[i]
		if inStr {
			switch c {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{':
			depth++
			if depth > MaxJSONDepth+1 {
				return -1
			}
		case '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return "value"
}
