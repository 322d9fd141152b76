package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap/zaptest"
)

// llamaCppObjectArguments is a non-streaming chat completion in the shape
// llama.cpp server (llama-server) answers with tools since its autoparser
// refactoring, which sends tool_calls[].function.arguments as a parsed
// JSON object rather than the JSON string OpenAI's API reference
// specifies: https://github.com/ggml-org/llama.cpp/issues/20198 (its
// --tool-args-object flag, ggml-org/llama.cpp#20202, keeps that form).
// The other fields (timings, the id after the call) are llama-server's own.
const llamaCppObjectArguments = `{"choices":[{"finish_reason":"tool_calls","index":0,"message":{"role":"assistant","content":null,` +
	`"tool_calls":[{"type":"function","function":{"name":"record_extraction","arguments":{"intent": "missing", "order_id": "48213",` +
	` "note": "a <b> & \"quoted\" \u00e9", "items": [1, 2.50, {"sku": null}]}},"id":"Vb8M0vGkHXBxXG4vS4E4QnHqa2dA0O2i"}]}}],` +
	`"created":1741345278,"model":"qwen3-coder-next","system_fingerprint":"b8233-c5a778891","object":"chat.completion",` +
	`"usage":{"completion_tokens":41,"prompt_tokens":512,"total_tokens":553},"id":"chatcmpl-5BsE1hNmcYQ3s3GVPCkTzUHbzZtjzRVL",` +
	`"timings":{"prompt_n":512,"prompt_ms":101.5,"predicted_n":41,"predicted_ms":480.2}}`

func TestToolArgumentsAsObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RewrittenOnceAsTheString", func(t *testing.T) {
		t.Parallel()
		srv := newScript(t, reply{status: 200, header: map[string]string{"Content-Type": "application/json"}, body: llamaCppObjectArguments})
		b := setup(t, testConfig(), srv, "")
		resp, err := b.client.CreateChatCompletion(ctx, chatRequest(64))
		if err != nil {
			t.Fatalf("go-openai could not read the reply: %v", err)
		}
		calls := resp.Choices[0].Message.ToolCalls
		if len(calls) != 1 || calls[0].Function.Name != "record_extraction" || calls[0].ID != "Vb8M0vGkHXBxXG4vS4E4QnHqa2dA0O2i" {
			t.Fatalf("tool calls %+v", calls)
		}
		// The string holds the object's compact JSON text, values as sent.
		want := `{"intent":"missing","order_id":"48213","note":"a <b> & \"quoted\" \u00e9","items":[1,2.50,{"sku":null}]}`
		if got := calls[0].Function.Arguments; got != want {
			t.Fatalf("arguments\n got %s\nwant %s", got, want)
		}
		if resp.Usage.PromptTokens != 512 || resp.Usage.CompletionTokens != 41 || resp.Choices[0].FinishReason != "tool_calls" {
			t.Fatalf("usage %+v, finish %q", resp.Usage, resp.Choices[0].FinishReason)
		}
		if v := b.metric(t, "extractq_provider_tool_arguments_rewritten_total", nil); v != 1 {
			t.Errorf("rewritten metric = %v, want 1", v)
		}
		if v := b.metric(t, "extractq_provider_calls_total", map[string]string{"result": "ok"}); v != 1 {
			t.Errorf("ok calls = %v, want 1", v)
		}
	})

	t.Run("StringArgumentsUntouched", func(t *testing.T) {
		t.Parallel()
		body := strings.Replace(okBody, `"content":"{}"`, `"content":null,"tool_calls":[{"id":"c","type":"function",`+
			`"function":{"name":"f","arguments":"{\"a\": 1}"}}]`, 1)
		srv := newScript(t, reply{status: 200, body: body})
		b := setup(t, testConfig(), srv, "")
		resp, err := b.client.CreateChatCompletion(ctx, chatRequest(64))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Choices[0].Message.ToolCalls[0].Function.Arguments; got != `{"a": 1}` {
			t.Fatalf("arguments %q", got)
		}
		if v := b.metric(t, "extractq_provider_tool_arguments_rewritten_total", nil); v != 0 {
			t.Errorf("rewritten metric = %v, want 0", v)
		}
	})

	t.Run("OtherBytesKept", func(t *testing.T) {
		t.Parallel()
		in := []byte(llamaCppObjectArguments)
		out, n := rewriteToolArguments(in)
		if n != 1 {
			t.Fatalf("rewrote %d arguments, want 1", n)
		}
		i := bytes.Index(in, []byte(`{"intent"`))
		j := bytes.Index(in, []byte(`},"id":"Vb8M`)) + 1
		k := bytes.Index(out, []byte(`,"id":"Vb8M`))
		if !bytes.Equal(out[:i], in[:i]) || !bytes.Equal(out[k:], in[j:]) {
			t.Fatalf("bytes around the arguments changed:\n%s", out)
		}
		if !json.Valid(out) {
			t.Fatalf("not JSON: %s", out)
		}
	})

	t.Run("Shapes", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ in, want string }{
			// Several choices and calls; a string and a null kept.
			{`{"choices":[{"message":{"tool_calls":[{"function":{"arguments":{"a":1}}},{"function":{"arguments":"{}"}}]}},` +
				`{"message":{"tool_calls":[{"function":{"name":"x","arguments":[1, 2]}},{"function":{"arguments":null}}]}}]}`,
				`{"choices":[{"message":{"tool_calls":[{"function":{"arguments":"{\"a\":1}"}},{"function":{"arguments":"{}"}}]}},` +
					`{"message":{"tool_calls":[{"function":{"name":"x","arguments":"[1,2]"}},{"function":{"arguments":null}}]}}]}`},
			// White space around the value and keys in any order.
			{"{ \"id\": 1, \"choices\" : [ { \"message\" : { \"tool_calls\" : [ { \"function\" : { \"arguments\" : { } , \"name\": \"f\" } } ] } } ] }",
				"{ \"id\": 1, \"choices\" : [ { \"message\" : { \"tool_calls\" : [ { \"function\" : { \"arguments\" : \"{}\" , \"name\": \"f\" } } ] } } ] }"},
			// Arguments elsewhere are not a tool call's.
			{`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":{"a":1}}}]}}],"arguments":{}}`, ""},
			// Not JSON, or not the expected shape: left alone.
			{`{"choices":`, ""},
			{`{"choices":{"message":{}}}`, ""},
			{`[1]`, ""},
		} {
			out, n := rewriteToolArguments([]byte(tc.in))
			if tc.want == "" {
				if n != 0 || string(out) != tc.in {
					t.Errorf("%s: rewrote %d: %s", tc.in, n, out)
				}
				continue
			}
			if string(out) != tc.want {
				t.Errorf("%s:\n got %s\nwant %s", tc.in, out, tc.want)
			}
		}
	})

	t.Run("StillMalformedKeepsTheBody", func(t *testing.T) {
		t.Parallel()
		// A wrong shape the rewrite cannot mend: content as a number.
		body := `{"object":"chat.completion","choices":[{"message":{"role":"assistant","content":5,"refusal":"order 48213"},"finish_reason":"stop"}]}`
		srv := newScript(t, reply{status: 200, body: body})
		b := setup(t, testConfig(), srv, "")
		pe := providerError(t, b.chat(ctx), ClassMalformed)
		if pe.StatusCode != 200 || string(pe.Body) != body || pe.BodySize != len(body) || strings.Contains(pe.Error(), "48213") {
			t.Fatalf("error %+v (%s)", pe, pe.Error())
		}
		if v := b.metric(t, "extractq_provider_tool_arguments_rewritten_total", nil); v != 0 {
			t.Errorf("rewritten metric = %v, want 0", v)
		}
	})

	t.Run("BodyCut", func(t *testing.T) {
		t.Parallel()
		big := "<html>" + strings.Repeat("x", 100<<10) + "</html>"
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, big)
		}))
		t.Cleanup(srv.Close)
		tr := New(testConfig(), nil, nil, zaptest.NewLogger(t))
		oc := openai.DefaultConfig("k")
		oc.BaseURL = srv.URL + "/v1"
		oc.HTTPClient = tr.Client()
		_, err := openai.NewClientWithConfig(oc).CreateChatCompletion(ctx, chatRequest(16))
		pe := providerError(t, err, ClassMalformed)
		if len(pe.Body) != maxMalformedBody || pe.BodySize != len(big) {
			t.Fatalf("body %d bytes, size %d; want %d and %d", len(pe.Body), pe.BodySize, maxMalformedBody, len(big))
		}
	})
}
