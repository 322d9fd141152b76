package provider

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	openai "github.com/sashabaranov/go-openai"
)

// decodeCompletion decodes body, a chat completion of the common shape,
// in one pass, and reports whether it could: ok false means "not decoded
// here", never "not a chat completion"; the caller then decodes with
// encoding/json, which decides. What it decodes is what encoding/json
// decodes into go-openai's ChatCompletionResponse (its json.Decoder, as
// go-openai's client; ChatCompletionMessage.UnmarshalJSON's string
// content form), field for field: TestDecodeCompletionAsEncodingJSON and
// its mutations hold it to that.
//
// Its shape is the CreateChatCompletionResponse of OpenAI's API reference
// (openai/openai-openapi, openapi.yaml at
// 578000861507cd19620e3f1092adf62303757c0a: id, object, created, model,
// choices with index, message, finish_reason and logprobs, usage,
// system_fingerprint, service_tier). It gives up (ok false) on anything
// whose decoding it does not repeat exactly: a key written with escapes,
// in another case or repeated, a value of an unexpected JSON type, a
// number that is not a plain integer, message content as parts, logprobs
// or filter results that are not null, prompt_filter_results, data after
// the object, invalid JSON. Keys the response type does not have are
// skipped, as encoding/json skips them, after checking that their value is
// valid JSON.
func decodeCompletion(body []byte) (resp openai.ChatCompletionResponse, ok bool) {
	d := &completionDecoder{b: body}
	d.ws()
	if !d.object(func(key string) bool {
		switch key {
		case "id":
			return d.str(&resp.ID)
		case "object":
			return d.str(&resp.Object)
		case "created":
			return d.int64(&resp.Created)
		case "model":
			return d.str(&resp.Model)
		case "choices":
			return d.choices(&resp.Choices)
		case "usage":
			return d.usage(&resp.Usage)
		case "system_fingerprint":
			return d.str(&resp.SystemFingerprint)
		case "service_tier":
			var s string
			ok := d.str(&s)
			resp.ServiceTier = openai.ServiceTier(s)
			return ok
		}
		return d.unknown(key, responseKeys)
	}) {
		return resp, false
	}
	d.ws()
	return resp, d.i == len(d.b)
}

// The JSON keys of each type decoded (encoding/json matches a key to a
// field case-insensitively; a key that differs from these only in case is
// left to it).
var (
	responseKeys = []string{"id", "object", "created", "model", "choices", "usage", "system_fingerprint",
		"prompt_filter_results", "service_tier"}
	choiceKeys  = []string{"index", "message", "finish_reason", "logprobs", "content_filter_results"}
	messageKeys = []string{"role", "content", "refusal", "multicontent", "name", "reasoning_content", "function_call",
		"tool_calls", "tool_call_id"}
	toolCallKeys     = []string{"index", "id", "type", "function"}
	functionKeys     = []string{"name", "arguments"}
	usageKeys        = []string{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details"}
	promptDetailKeys = []string{"audio_tokens", "cached_tokens"}
	complDetailKeys  = []string{"audio_tokens", "reasoning_tokens", "accepted_prediction_tokens", "rejected_prediction_tokens"}
)

// maxSkipDepth is the deepest nesting of a skipped value decoded here.
const maxSkipDepth = 64

type completionDecoder struct {
	b []byte
	i int
}

func (d *completionDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// null consumes a null and reports whether there was one.
func (d *completionDecoder) null() bool {
	if d.i+4 <= len(d.b) && string(d.b[d.i:d.i+4]) == "null" {
		d.i += 4
		return true
	}
	return false
}

// object reads an object, calling field for each key with d at its
// value (whitespace skipped); a repeated key gives up. null is taken as
// no object (encoding/json leaves the value as it was).
func (d *completionDecoder) object(field func(key string) bool) bool {
	if d.null() {
		return true
	}
	if d.i >= len(d.b) || d.b[d.i] != '{' {
		return false
	}
	d.i++
	var buf [16]string
	seen := buf[:0]
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return true
	}
	for {
		d.ws()
		key, ok := d.key()
		if !ok {
			return false
		}
		for _, k := range seen {
			if strings.EqualFold(k, key) {
				return false
			}
		}
		seen = append(seen, key)
		d.ws()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return false
		}
		d.i++
		d.ws()
		if !field(key) {
			return false
		}
		d.ws()
		if d.i >= len(d.b) {
			return false
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array, calling elem for each element; null is no array
// (nil, as encoding/json sets a slice), [] gives empty (not nil).
func (d *completionDecoder) array(empty func(), elem func() bool) bool {
	if d.null() {
		return true
	}
	if d.i >= len(d.b) || d.b[d.i] != '[' {
		return false
	}
	d.i++
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		empty()
		return true
	}
	for {
		d.ws()
		if !elem() {
			return false
		}
		d.ws()
		if d.i >= len(d.b) {
			return false
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			return true
		default:
			return false
		}
	}
}

// key reads an object key written without escapes, in ASCII. The key
// shares d's bytes: use it only while decoding.
func (d *completionDecoder) key() (string, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return "", false
	}
	start := d.i + 1
	for j := start; j < len(d.b); j++ {
		c := d.b[j]
		if c == '"' {
			d.i = j + 1
			if j == start {
				return "", true
			}
			// The key's bytes, not a copy: it is only compared while
			// the body is decoded (never kept), and the body does not
			// change meanwhile.
			return unsafe.String(&d.b[start], j-start), true
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return "", false
		}
	}
	return "", false
}

// unknown skips the value of a key that names no field: one that
// matches none of keys in any case (else encoding/json would fill that
// field).
func (d *completionDecoder) unknown(key string, keys []string) bool {
	for _, k := range keys {
		if strings.EqualFold(k, key) {
			return false
		}
	}
	return d.skip(0)
}

// str reads a string (null leaves s as it was), unquoted as encoding/json
// unquotes: escapes decoded, a lone surrogate escape and each byte of
// invalid UTF-8 as U+FFFD.
func (d *completionDecoder) str(s *string) bool {
	if d.null() {
		return true
	}
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return false
	}
	start := d.i + 1
	plain := true
	j := start
	for ; j < len(d.b); j++ {
		c := d.b[j]
		if c == '"' {
			break
		}
		if c < 0x20 {
			return false
		}
		if c == '\\' {
			plain = false
			j++ // the escaped byte cannot end the string
			continue
		}
		if c >= utf8.RuneSelf {
			plain = false
		}
	}
	if j >= len(d.b) {
		return false
	}
	raw := d.b[start:j]
	d.i = j + 1
	if plain {
		*s = string(raw)
		return true
	}
	out, ok := unquote(raw)
	if ok {
		*s = out
	}
	return ok
}

// unquote decodes the inside of a JSON string as encoding/json's
// unquoteBytes does; false on an invalid escape.
func unquote(s []byte) (string, bool) {
	b := make([]byte, 0, len(s)+utf8.UTFMax)
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			r++
			if r >= len(s) {
				return "", false
			}
			switch s[r] {
			case '"', '\\', '/':
				b = append(b, s[r])
				r++
			case 'b':
				b = append(b, '\b')
				r++
			case 'f':
				b = append(b, '\f')
				r++
			case 'n':
				b = append(b, '\n')
				r++
			case 'r':
				b = append(b, '\r')
				r++
			case 't':
				b = append(b, '\t')
				r++
			case 'u':
				r--
				rr := getu4(s[r:])
				if rr < 0 {
					return "", false
				}
				r += 6
				if utf16.IsSurrogate(rr) {
					rr1 := getu4(s[r:])
					if dec := utf16.DecodeRune(rr, rr1); dec != utf8.RuneError {
						r += 6
						b = utf8.AppendRune(b, dec)
						break
					}
					rr = utf8.RuneError
				}
				b = utf8.AppendRune(b, rr)
			default:
				return "", false
			}
		case c < 0x20 || c == '"':
			return "", false
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			b = utf8.AppendRune(b, rr)
		}
	}
	return string(b), true
}

// getu4 decodes \uXXXX at the start of s, or returns -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c = c - '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// int64 reads a plain integer (-?digits, no leading zero, no fraction or
// exponent) into v; null leaves v as it was.
func (d *completionDecoder) int64(v *int64) bool {
	if d.null() {
		return true
	}
	start := d.i
	j := d.i
	if j < len(d.b) && d.b[j] == '-' {
		j++
	}
	digits := j
	for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
		j++
	}
	if j == digits || (d.b[digits] == '0' && j > digits+1) {
		return false
	}
	if j < len(d.b) {
		switch d.b[j] {
		case '.', 'e', 'E':
			return false
		}
	}
	n, err := strconv.ParseInt(string(d.b[start:j]), 10, 64)
	if err != nil {
		return false
	}
	d.i = j
	*v = n
	return true
}

func (d *completionDecoder) int(v *int) bool {
	n := int64(*v)
	if !d.int64(&n) {
		return false
	}
	*v = int(n)
	return true
}

func (d *completionDecoder) choices(out *[]openai.ChatCompletionChoice) bool {
	*out = nil
	return d.array(func() { *out = []openai.ChatCompletionChoice{} }, func() bool {
		var c openai.ChatCompletionChoice
		if !d.choice(&c) {
			return false
		}
		*out = append(*out, c)
		return true
	})
}

func (d *completionDecoder) choice(c *openai.ChatCompletionChoice) bool {
	if d.i < len(d.b) && d.b[d.i] == 'n' {
		return false // a null choice: left to encoding/json
	}
	return d.object(func(key string) bool {
		switch key {
		case "index":
			return d.int(&c.Index)
		case "message":
			return d.message(&c.Message)
		case "finish_reason":
			var s string
			ok := d.str(&s)
			c.FinishReason = openai.FinishReason(s)
			return ok
		case "logprobs", "content_filter_results":
			return d.null()
		}
		return d.unknown(key, choiceKeys)
	})
}

// message reads a message as ChatCompletionMessage.UnmarshalJSON reads
// one whose content is a string or null.
func (d *completionDecoder) message(m *openai.ChatCompletionMessage) bool {
	*m = openai.ChatCompletionMessage{}
	return d.object(func(key string) bool {
		switch key {
		case "role":
			return d.str(&m.Role)
		case "content":
			return d.str(&m.Content)
		case "refusal":
			return d.str(&m.Refusal)
		case "name":
			return d.str(&m.Name)
		case "reasoning_content":
			return d.str(&m.ReasoningContent)
		case "tool_call_id":
			return d.str(&m.ToolCallID)
		case "tool_calls":
			m.ToolCalls = nil
			return d.array(func() { m.ToolCalls = []openai.ToolCall{} }, func() bool {
				var tc openai.ToolCall
				if !d.toolCall(&tc) {
					return false
				}
				m.ToolCalls = append(m.ToolCalls, tc)
				return true
			})
		}
		return d.unknown(key, messageKeys)
	})
}

func (d *completionDecoder) toolCall(tc *openai.ToolCall) bool {
	if d.i < len(d.b) && d.b[d.i] == 'n' {
		return false
	}
	return d.object(func(key string) bool {
		switch key {
		case "index":
			if d.null() {
				return true
			}
			n := 0
			if !d.int(&n) {
				return false
			}
			tc.Index = &n
			return true
		case "id":
			return d.str(&tc.ID)
		case "type":
			var s string
			ok := d.str(&s)
			tc.Type = openai.ToolType(s)
			return ok
		case "function":
			return d.object(func(key string) bool {
				switch key {
				case "name":
					return d.str(&tc.Function.Name)
				case "arguments":
					return d.str(&tc.Function.Arguments)
				}
				return d.unknown(key, functionKeys)
			})
		}
		return d.unknown(key, toolCallKeys)
	})
}

func (d *completionDecoder) usage(u *openai.Usage) bool {
	return d.object(func(key string) bool {
		switch key {
		case "prompt_tokens":
			return d.int(&u.PromptTokens)
		case "completion_tokens":
			return d.int(&u.CompletionTokens)
		case "total_tokens":
			return d.int(&u.TotalTokens)
		case "prompt_tokens_details":
			if d.null() {
				u.PromptTokensDetails = nil
				return true
			}
			if u.PromptTokensDetails == nil {
				u.PromptTokensDetails = &openai.PromptTokensDetails{}
			}
			p := u.PromptTokensDetails
			return d.object(func(key string) bool {
				switch key {
				case "audio_tokens":
					return d.int(&p.AudioTokens)
				case "cached_tokens":
					return d.int(&p.CachedTokens)
				}
				return d.unknown(key, promptDetailKeys)
			})
		case "completion_tokens_details":
			if d.null() {
				u.CompletionTokensDetails = nil
				return true
			}
			if u.CompletionTokensDetails == nil {
				u.CompletionTokensDetails = &openai.CompletionTokensDetails{}
			}
			c := u.CompletionTokensDetails
			return d.object(func(key string) bool {
				switch key {
				case "audio_tokens":
					return d.int(&c.AudioTokens)
				case "reasoning_tokens":
					return d.int(&c.ReasoningTokens)
				case "accepted_prediction_tokens":
					return d.int(&c.AcceptedPredictionTokens)
				case "rejected_prediction_tokens":
					return d.int(&c.RejectedPredictionTokens)
				}
				return d.unknown(key, complDetailKeys)
			})
		}
		return d.unknown(key, usageKeys)
	})
}

// skip passes over one JSON value, checking it is valid JSON (RFC 8259),
// as encoding/json checks a value it does not store.
func (d *completionDecoder) skip(depth int) bool {
	if depth > maxSkipDepth || d.i >= len(d.b) {
		return false
	}
	switch c := d.b[d.i]; {
	case c == '{':
		d.i++
		d.ws()
		if d.i < len(d.b) && d.b[d.i] == '}' {
			d.i++
			return true
		}
		for {
			d.ws()
			var s string
			if d.i >= len(d.b) || d.b[d.i] != '"' || !d.str(&s) {
				return false
			}
			d.ws()
			if d.i >= len(d.b) || d.b[d.i] != ':' {
				return false
			}
			d.i++
			d.ws()
			if !d.skip(depth + 1) {
				return false
			}
			d.ws()
			if d.i >= len(d.b) {
				return false
			}
			if d.b[d.i] == '}' {
				d.i++
				return true
			}
			if d.b[d.i] != ',' {
				return false
			}
			d.i++
		}
	case c == '[':
		d.i++
		d.ws()
		if d.i < len(d.b) && d.b[d.i] == ']' {
			d.i++
			return true
		}
		for {
			d.ws()
			if !d.skip(depth + 1) {
				return false
			}
			d.ws()
			if d.i >= len(d.b) {
				return false
			}
			if d.b[d.i] == ']' {
				d.i++
				return true
			}
			if d.b[d.i] != ',' {
				return false
			}
			d.i++
		}
	case c == '"':
		var s string
		return d.str(&s)
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.null()
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return false
}

func (d *completionDecoder) literal(s string) bool {
	if d.i+len(s) <= len(d.b) && string(d.b[d.i:d.i+len(s)]) == s {
		d.i += len(s)
		return true
	}
	return false
}

// number passes over a JSON number: -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func (d *completionDecoder) number() bool {
	j := d.i
	if j < len(d.b) && d.b[j] == '-' {
		j++
	}
	digits := func() int {
		k := j
		for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
			j++
		}
		return j - k
	}
	if j < len(d.b) && d.b[j] == '0' {
		j++
	} else if digits() == 0 {
		return false
	}
	if j < len(d.b) && d.b[j] == '.' {
		j++
		if digits() == 0 {
			return false
		}
	}
	if j < len(d.b) && (d.b[j] == 'e' || d.b[j] == 'E') {
		j++
		if j < len(d.b) && (d.b[j] == '+' || d.b[j] == '-') {
			j++
		}
		if digits() == 0 {
			return false
		}
	}
	d.i = j
	return true
}
