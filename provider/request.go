package provider

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
)

// encodeRequest returns the JSON body of req, byte for byte what
// go-openai sends (encoding/json's Marshal of the request): the messages
// are written here, without the reflection and the re-scan that
// encoding/json gives every json.Marshaler's output
// (ChatCompletionMessage.MarshalJSON), and the rest of the request is
// Marshal's, cut at its messages. A message this encoder does not write
// (multi-part content) is Marshal's too. The body's shape is the
// CreateChatCompletionRequest of OpenAI's API reference (POST
// /chat/completions; openai/openai-openapi, openapi.yaml at
// 578000861507cd19620e3f1092adf62303757c0a): model, messages and the
// options, as go-openai's ChatCompletionRequest encodes them.
//
// It returns Marshal's error where Marshal would fail (content and
// multi-part content both set, a parameter that cannot be encoded).
func encodeRequest(req openai.ChatCompletionRequest) ([]byte, error) {
	msgs := req.Messages
	if len(msgs) == 0 {
		return json.Marshal(req)
	}
	req.Messages = nil
	rest, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	// Model is the struct's first field and Messages its second: nil
	// Messages is `"messages":null` right after the model.
	head := appendJSONString([]byte(`{"model":`), req.Model)
	head = append(head, `,"messages":`...)
	const null = "null"
	if len(rest) < len(head)+len(null) || string(rest[:len(head)]) != string(head) || string(rest[len(head):len(head)+len(null)]) != null {
		req.Messages = msgs
		return json.Marshal(req) // another field order: encoding/json's own
	}
	n := len(rest) + 2
	for i := range msgs {
		n += 32 + len(msgs[i].Content)*11/10
	}
	b := make([]byte, 0, n)
	b = append(b, rest[:len(head)]...)
	b = append(b, '[')
	for i := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendMessage(b, &msgs[i]); err != nil {
			return nil, err
		}
	}
	b = append(b, ']')
	return append(b, rest[len(head)+len(null):]...), nil
}

// appendMessage appends m as encoding/json encodes it through
// ChatCompletionMessage.MarshalJSON: the fields in the struct's order,
// each omitted when empty but role.
func appendMessage(b []byte, m *openai.ChatCompletionMessage) ([]byte, error) {
	if m.MultiContent != nil {
		// Multi-part content, or content fields misused (MarshalJSON's
		// error): go-openai's own encoding.
		enc, err := json.Marshal(*m)
		if err != nil {
			return nil, err
		}
		return append(b, enc...), nil
	}
	b = append(b, `{"role":`...)
	b = appendJSONString(b, m.Role)
	b = appendOmitEmpty(b, `,"content":`, m.Content)
	b = appendOmitEmpty(b, `,"refusal":`, m.Refusal)
	b = appendOmitEmpty(b, `,"name":`, m.Name)
	b = appendOmitEmpty(b, `,"reasoning_content":`, m.ReasoningContent)
	if m.FunctionCall != nil {
		b = append(b, `,"function_call":`...)
		b = appendFunctionCall(b, m.FunctionCall)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i := range m.ToolCalls {
			tc := &m.ToolCalls[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			sep := ""
			if tc.Index != nil {
				b = append(b, `"index":`...)
				b = strconv.AppendInt(b, int64(*tc.Index), 10)
				sep = ","
			}
			if tc.ID != "" {
				b = append(b, sep+`"id":`...)
				b = appendJSONString(b, tc.ID)
				sep = ","
			}
			b = append(b, sep+`"type":`...)
			b = appendJSONString(b, string(tc.Type))
			b = append(b, `,"function":`...)
			b = appendFunctionCall(b, &tc.Function)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendOmitEmpty(b, `,"tool_call_id":`, m.ToolCallID)
	return append(b, '}'), nil
}

func appendFunctionCall(b []byte, f *openai.FunctionCall) []byte {
	b = append(b, '{')
	sep := ""
	if f.Name != "" {
		b = append(b, `"name":`...)
		b = appendJSONString(b, f.Name)
		sep = ","
	}
	if f.Arguments != "" {
		b = append(b, sep+`"arguments":`...)
		b = appendJSONString(b, f.Arguments)
	}
	return append(b, '}')
}

func appendOmitEmpty(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendJSONString(append(b, key...), s)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string exactly as encoding/json's
// Marshal writes a string (HTML escaping on): ", \ and the control
// characters escaped (\b \f \n \r \t by name, the others as \u00XX), <, >
// and & as \u003c \u003e \u0026, U+2028 and U+2029 as \u2028 and \u2029,
// and each byte of invalid UTF-8 as \ufffd. The rules are Go's
// (encoding/json, appendString); TestAppendJSONString holds them to
// Marshal's output.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
