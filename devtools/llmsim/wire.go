package llmsim

import (
	"encoding/json"
	"strings"
)

// The OpenAI chat completions wire format, as far as the simulator reads
// and writes it. Unknown request fields are ignored, as the provider does.

type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Tools               []tool          `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	ResponseFormat      *responseFormat `json:"response_format,omitempty"`
	MaxTokens           int             `json:"max_tokens,omitempty"`
	MaxCompletionTokens int             `json:"max_completion_tokens,omitempty"`
	Seed                *int64          `json:"seed,omitempty"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	Stream              bool            `json:"stream,omitempty"`
	N                   int             `json:"n,omitempty"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []toolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`

	// decoded holds decodeText's answer once keepTexts has run.
	decoded *string
}

// keepTexts decodes the text of every message once, for text.
func (r *chatRequest) keepTexts() {
	for i := range r.Messages {
		t := r.Messages[i].decodeText()
		r.Messages[i].decoded = &t
	}
}

// text returns the message's text: the content string, or the text parts of
// a multi-part content joined by newlines.
func (m chatMessage) text() string {
	if m.decoded != nil {
		return *m.decoded
	}
	return m.decodeText()
}

func (m chatMessage) decodeText() string {
	if len(m.Content) == 0 {
		return ""
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return ""
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" || p.Type == "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

type tool struct {
	Type     string       `json:"type"`
	Function *functionDef `json:"function,omitempty"`
}

type functionDef struct {
	Name       string          `json:"name"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
	Strict     bool            `json:"strict,omitempty"`
}

type toolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"`
	Function functionCall `json:"function"`
}

type functionCall struct {
	Name      string    `json:"name,omitempty"`
	Arguments argString `json:"arguments"`
}

// argString is tool call arguments: encoded as a JSON string, decoded from
// a string or, as llama.cpp server sends them, from any other JSON value,
// kept as its text.
type argString string

func (a *argString) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*a = argString(s)
		return nil
	}
	*a = argString(b)
	return nil
}

type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict bool            `json:"strict"`
	} `json:"json_schema,omitempty"`
}

// nameOf returns the json_schema's name, "" for none.
func (rf *responseFormat) nameOf() string {
	if rf == nil || rf.JSONSchema == nil {
		return ""
	}
	return rf.JSONSchema.Name
}

type chatResponse struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"`
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	SystemFingerprint string   `json:"system_fingerprint"`
	Choices           []choice `json:"choices"`
	Usage             usage    `json:"usage"`
}

type choice struct {
	Index        int          `json:"index"`
	Message      replyMessage `json:"message"`
	FinishReason string       `json:"finish_reason"`
}

type replyMessage struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelInfo `json:"data"`
}

type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// apiError is the body of an OpenAI error reply.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// code returns the error code, "" for null.
func (b apiErrorBody) code() string {
	if b.Code == nil {
		return ""
	}
	return *b.Code
}
