package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
	openai "github.com/sashabaranov/go-openai"
)

// enforcing is an OpenAI-compatible test server that behaves as a server
// that enforces the output schema each request sends (strict structured
// outputs, vLLM's guided decoding, llama.cpp's grammar, Ollama's format):
// for call n it answers the first of candidates[n] that validates against
// the schema of that request (response_format's json_schema, or the
// parameters of the tool tool_choice names, else of the only tool), as
// content or as a call of that tool. When none conforms the call fails
// with 500: an enforcing server cannot answer outside the schema. Values
// can still be wrong: conforming is not being right.
type enforcing struct {
	t          testing.TB
	mu         sync.Mutex
	candidates [][]string
	bodies     [][]byte
	requests   []openai.ChatCompletionRequest
	schemas    []json.RawMessage // the output schema of each request
}

func newEnforcing(t testing.TB, candidates ...[]string) (*enforcing, string) {
	e := &enforcing{t: t, candidates: candidates}
	hs := httptest.NewServer(e)
	t.Cleanup(hs.Close)
	return e, hs.URL + "/v1"
}

func (e *enforcing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req openai.ChatCompletionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	schema, tool, err := outputOf(body)
	e.mu.Lock()
	n := len(e.requests)
	e.bodies = append(e.bodies, body)
	e.requests = append(e.requests, req)
	e.schemas = append(e.schemas, schema)
	var cands []string
	if n < len(e.candidates) {
		cands = e.candidates[n]
	}
	e.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	answer, ok := "", false
	for _, c := range cands {
		if conforms(schema, c) {
			answer, ok = c, true
			break
		}
	}
	if !ok {
		status(500)(w)
		return
	}
	msg := openai.ChatCompletionMessage{Role: "assistant", Content: answer}
	finish := openai.FinishReasonStop
	if tool != "" {
		msg = openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{
			{ID: fmt.Sprintf("call_%d", n), Type: "function", Function: openai.FunctionCall{Name: tool, Arguments: answer}}}}
		finish = openai.FinishReasonToolCalls
	}
	reply(msg, finish)(w)
}

// outputOf returns the output schema a request body asks for and, in
// tools mode, the tool to call.
func outputOf(body []byte) (json.RawMessage, string, error) {
	var raw struct {
		ResponseFormat *struct {
			JSONSchema *struct {
				Schema json.RawMessage `json:"schema"`
			} `json:"json_schema"`
		} `json:"response_format"`
		Tools []struct {
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		ToolChoice json.RawMessage `json:"tool_choice"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, "", err
	}
	if len(raw.Tools) > 0 {
		var named struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		_ = json.Unmarshal(raw.ToolChoice, &named)
		for _, t := range raw.Tools {
			if t.Function.Name == named.Function.Name || (named.Function.Name == "" && len(raw.Tools) == 1) {
				return t.Function.Parameters, t.Function.Name, nil
			}
		}
		return nil, "", fmt.Errorf("tool_choice names no tool of the request")
	}
	if raw.ResponseFormat != nil && raw.ResponseFormat.JSONSchema != nil {
		return raw.ResponseFormat.JSONSchema.Schema, "", nil
	}
	return nil, "", fmt.Errorf("the request asks for no schema")
}

// conforms reports whether doc validates against schema (draft 2020-12).
func conforms(schema json.RawMessage, doc string) bool {
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource("mem://output.json", bytes.NewReader(schema)); err != nil {
		return false
	}
	s, err := c.Compile("mem://output.json")
	if err != nil {
		return false
	}
	v, err := DecodeStrict([]byte(doc))
	if err != nil {
		return false
	}
	return s.Validate(v) == nil
}
