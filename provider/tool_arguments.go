package provider

import (
	"bytes"
	"encoding/json"
)

// rewriteToolArguments returns body with every
// choices[].message.tool_calls[].function.arguments that is a JSON value
// other than a string or null (an object, as llama.cpp server sends since
// its autoparser, ggml-org/llama.cpp#20198) replaced by a JSON string
// holding that value's compact JSON text, which is what OpenAI's API
// reference specifies and go-openai decodes. Every other byte of body is
// left as it was. It returns how many arguments it replaced; with 0 the
// body is body itself. A body that is not a JSON object, or whose path to
// the arguments is not made of objects and arrays, is left alone.
func rewriteToolArguments(body []byte) ([]byte, int) {
	var spans []argSpan
	members(body, 0, func(key string, v []byte, at int) {
		if key != "choices" {
			return
		}
		elements(v, at, func(v []byte, at int) {
			members(v, at, func(key string, v []byte, at int) {
				if key != "message" {
					return
				}
				members(v, at, func(key string, v []byte, at int) {
					if key != "tool_calls" {
						return
					}
					elements(v, at, func(v []byte, at int) {
						members(v, at, func(key string, v []byte, at int) {
							if key != "function" {
								return
							}
							members(v, at, func(key string, v []byte, at int) {
								if key == "arguments" && v[0] != '"' && !bytes.Equal(v, []byte("null")) {
									spans = append(spans, argSpan{start: at, end: at + len(v), value: v})
								}
							})
						})
					})
				})
			})
		})
	})
	if len(spans) == 0 {
		return body, 0
	}
	out := make([]byte, 0, len(body)+len(body)/8)
	last := 0
	for _, s := range spans {
		out = append(out, body[last:s.start]...)
		out = append(out, jsonString(s.value)...)
		last = s.end
	}
	return append(out, body[last:]...), len(spans)
}

// argSpan is where one tool call's arguments lie in a body.
type argSpan struct {
	start, end int
	value      []byte
}

// jsonString returns the JSON string literal whose value is v's compact
// JSON text, without HTML escapes.
func jsonString(v []byte) []byte {
	var c bytes.Buffer
	if json.Compact(&c, v) != nil {
		c.Reset()
		c.Write(v)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(c.String()) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// members calls fn with each member of the JSON object doc: its key, its
// value's bytes (never empty) and the value's offset in doc plus base. It
// calls nothing when doc is not an object, and stops at the first syntax
// error.
func members(doc []byte, base int, fn func(key string, v []byte, at int)) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return
	}
	for dec.More() {
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok {
			return
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil || len(v) == 0 {
			return
		}
		end := int(dec.InputOffset())
		fn(key, v, base+end-len(v))
	}
}

// elements calls fn with each element of the JSON array doc and its
// offset in doc plus base, as members does for an object.
func elements(doc []byte, base int, fn func(v []byte, at int)) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return
	}
	for dec.More() {
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil || len(v) == 0 {
			return
		}
		end := int(dec.InputOffset())
		fn(v, base+end-len(v))
	}
}
