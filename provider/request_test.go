package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// oddStrings are strings whose JSON encoding has every escape
// encoding/json writes.
var oddStrings = []string{
	"", "plain", `quote " and backslash \ and slash /`, "<b>a & b</b>", "tab\tnewline\nreturn\r\b\f",
	"\x00\x01\x1f\x7f", "line\u2028para\u2029end", "bad utf-8 \xff\xfe and \xc3", "truncated \xe2\x82",
	"émoji 😀 and 中文", "\u00a0non-breaking", strings.Repeat("long text, ", 500),
}

// TestAppendJSONString holds appendJSONString to encoding/json's Marshal
// of the same string, on every escape and on random bytes.
func TestAppendJSONString(t *testing.T) {
	t.Parallel()
	check := func(s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendJSONString(%q) = %s, Marshal gives %s", s, got, want)
		}
	}
	for _, s := range oddStrings {
		check(s)
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("ab\"\\<>&\n\t\x00\x1f\x7f\xe2\x80\xa8\xa9\xff\xc3\xa9 ")
	for range 5000 {
		b := make([]byte, r.IntN(24))
		for i := range b {
			if r.IntN(4) == 0 {
				b[i] = byte(r.IntN(256))
			} else {
				b[i] = alphabet[r.IntN(len(alphabet))]
			}
		}
		check(string(b))
	}
}

// TestEncodeRequestAsMarshal: encodeRequest writes the bytes
// encoding/json's Marshal writes for every request shape the extractor
// sends (both request modes, each token-limit field, tool_choice form,
// the repair turns with their tool calls) and for the message fields it
// does not use, and fails where Marshal fails.
func TestEncodeRequestAsMarshal(t *testing.T) {
	t.Parallel()
	idx := 0
	schema := json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`)
	msgs := func(s string) []openai.ChatCompletionMessage {
		return []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "You extract records. " + s},
			{Role: openai.ChatMessageRoleUser, Content: "<message>" + s + "</message>"},
			{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{
				{ID: "call_1", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "record_extraction", Arguments: `{"a":"` + s + `"}`}},
				{Index: &idx, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{}},
			}},
			{Role: openai.ChatMessageRoleTool, ToolCallID: "call_1", Content: "errors: " + s},
			{Role: openai.ChatMessageRoleAssistant, Content: s, Refusal: s, Name: "n" + s, ReasoningContent: s,
				FunctionCall: &openai.FunctionCall{Name: "f", Arguments: s}},
			{Role: openai.ChatMessageRoleAssistant, FunctionCall: &openai.FunctionCall{}},
			{Role: "", MultiContent: []openai.ChatMessagePart{}},
			{Role: openai.ChatMessageRoleUser, MultiContent: []openai.ChatMessagePart{{Type: openai.ChatMessagePartTypeText, Text: s}}},
		}
	}
	var reqs []openai.ChatCompletionRequest
	for _, s := range oddStrings {
		reqs = append(reqs,
			openai.ChatCompletionRequest{Model: "gpt-4o" + s, Messages: msgs(s), MaxCompletionTokens: 512,
				ResponseFormat: &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
					JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: "customer_message", Schema: schema, Strict: true}}},
			//lint:ignore SA1019 Ollama and llama.cpp server read max_tokens only (pipeline/providers.go)
			openai.ChatCompletionRequest{Model: "llama", Messages: msgs(s), MaxTokens: 256,
				ResponseFormat: &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}},
			openai.ChatCompletionRequest{Model: "m", Messages: msgs(s), MaxCompletionTokens: 1,
				Tools: []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
					Name: "record_extraction", Description: "Record " + s, Strict: true, Parameters: schema}}},
				ParallelToolCalls: false,
				ToolChoice:        openai.ToolChoice{Type: openai.ToolTypeFunction, Function: openai.ToolFunction{Name: "record_extraction"}}},
			openai.ChatCompletionRequest{Model: "m", Messages: msgs(s)[:2], ToolChoice: "required", Temperature: 0.5, Seed: &idx,
				Metadata: map[string]string{"k": s}, ChatTemplateKwargs: map[string]any{"enable_thinking": false}},
		)
	}
	reqs = append(reqs, openai.ChatCompletionRequest{Model: "m"}, openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{}})
	for i, req := range reqs {
		want, werr := json.Marshal(req)
		got, gerr := encodeRequest(req)
		if werr != nil || gerr != nil {
			t.Fatalf("request %d: errors %v, Marshal's %v", i, gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("request %d:\n%s\nMarshal gives\n%s", i, got, want)
		}
	}
	misused := openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{
		{Role: "user", Content: "x", MultiContent: []openai.ChatMessagePart{{Type: openai.ChatMessagePartTypeText, Text: "y"}}}}}
	_, werr := json.Marshal(misused)
	if _, err := encodeRequest(misused); err == nil || werr == nil || err.Error() != werr.Error() {
		t.Fatalf("content and parts both set: error %v, Marshal's %v", err, werr)
	}
	bad := openai.ChatCompletionRequest{Model: "m", Messages: msgs("x"), ChatTemplateKwargs: map[string]any{"f": func() {}}}
	if _, err := encodeRequest(bad); err == nil {
		t.Fatal("a parameter Marshal cannot encode was encoded")
	}
}

// TestChatClientSendsAsGoOpenAI: NewChatClient's Chat sends go-openai's
// method, path, headers and body, and gives back what go-openai's
// refusals before sending give.
func TestChatClientSendsAsGoOpenAI(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, path string
		header       http.Header
		body         []byte
	}
	var (
		mu   sync.Mutex
		reqs []seen
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, seen{r.Method, r.URL.Path, r.Header.Clone(), b})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, okBody)
	}))
	t.Cleanup(srv.Close)
	for _, key := range []string{"test-key", ""} {
		reqs = nil
		tr := New(testConfig(), nil, nil, nil)
		oc := openai.DefaultConfig(key)
		oc.BaseURL = srv.URL + "/v1"
		oc.HTTPClient = tr.Client()
		plain, direct := openai.NewClientWithConfig(oc), NewChatClient(tr, srv.URL+"/v1", key)
		req := chatRequestFor("m")
		want, werr := plain.CreateChatCompletion(context.Background(), req)
		got, gerr := direct.CreateChatCompletion(context.Background(), req)
		if werr != nil || gerr != nil || len(reqs) != 2 {
			t.Fatalf("errors %v, %v; %d requests", gerr, werr, len(reqs))
		}
		if !reflect.DeepEqual(got.Choices, want.Choices) || got.Usage != want.Usage {
			t.Fatalf("response %+v, go-openai's %+v", got, want)
		}
		if reqs[0].method != reqs[1].method || reqs[0].path != reqs[1].path || !bytes.Equal(reqs[0].body, reqs[1].body) ||
			!reflect.DeepEqual(reqs[0].header, reqs[1].header) {
			t.Fatalf("key %q: sent %s %s %v\n%s\ngo-openai sent %s %s %v\n%s", key, reqs[1].method, reqs[1].path, reqs[1].header,
				reqs[1].body, reqs[0].method, reqs[0].path, reqs[0].header, reqs[0].body)
		}
		// Refused before sending, as go-openai refuses.
		for _, r := range []openai.ChatCompletionRequest{
			{Model: "m", Stream: true, Messages: req.Messages},
			chatRequestFor("text-davinci-003"),
			{Model: "o1-mini", MaxTokens: 10, Messages: req.Messages},
		} {
			_, werr := plain.CreateChatCompletion(context.Background(), r)
			_, gerr := direct.CreateChatCompletion(context.Background(), r)
			if werr == nil || gerr == nil || werr.Error() != gerr.Error() {
				t.Fatalf("model %s: error %v, go-openai's %v", r.Model, gerr, werr)
			}
		}
		if len(reqs) != 2 {
			t.Fatalf("%d requests sent; the refused ones went out", len(reqs))
		}
	}
	// Each model Chat leaves to go-openai is one go-openai refuses.
	oc := openai.DefaultConfig("k")
	oc.BaseURL = "http://llm.invalid/v1" // never asked: each model is refused before sending
	plain := openai.NewClientWithConfig(oc)
	for model := range chatRefusedModels {
		if _, err := plain.CreateChatCompletion(context.Background(), chatRequestFor(model)); !errors.Is(err, openai.ErrChatCompletionInvalidModel) {
			t.Errorf("model %s: go-openai gives %v, not ErrChatCompletionInvalidModel", model, err)
		}
	}
}

func chatRequestFor(model string) openai.ChatCompletionRequest {
	r := chatRequest(16)
	r.Model = model
	r.Messages = append(r.Messages, openai.ChatCompletionMessage{Role: "assistant", Content: `{"a":"<b> & \u2028"}`})
	return r
}

// BenchmarkEncodeRequest compares go-openai's encoding of an extraction
// request (encoding/json's Marshal) with encodeRequest's.
func BenchmarkEncodeRequest(b *testing.B) {
	req := openai.ChatCompletionRequest{Model: "gpt-4o-mini", MaxCompletionTokens: 512,
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: strings.Repeat("You extract a record from the customer's message. ", 24)},
			{Role: openai.ChatMessageRoleUser, Content: "<message>\nHello. I was charged twice.\nsure, it's Albert Sanders and my account id is U85ALFLG2Z\n</message>"},
		},
		ResponseFormat: &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: "customer_message", Schema: json.RawMessage(`"extractq-fixed-0123456789abcdef:0"`)}}}
	b.Run("Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encodeRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeRequest(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
