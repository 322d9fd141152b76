package provider_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/provider"
	"github.com/extractq/extractq/schemas"
)

// TestPipelineSeesTheClass runs the real extractor over go-openai over the
// Transport and checks that the pipeline's TransportError carries the
// provider's class, and that only the request's own fault is final.
func TestPipelineSeesTheClass(t *testing.T) {
	t.Parallel()
	schema, err := pipeline.LoadSchema(schemas.FS, "customer_message", "customer_message.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := pipeline.LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		status    int
		body      string
		class     provider.ErrorClass
		retryable bool
	}{
		{"Credentials", 401, `{"error":{"code":"invalid_api_key","type":"invalid_request_error","message":"bad key"}}`, provider.ClassCredentials, true},
		{"Quota", 429, `{"error":{"code":"insufficient_quota","type":"insufficient_quota","message":"no credit"}}`, provider.ClassQuotaExhausted, true},
		{"ProxyPage", 403, `<html>Forbidden</html>`, provider.ClassProxyPage, true},
		{"ContextLength", 400, `{"error":{"code":"context_length_exceeded","type":"invalid_request_error","message":"too long"}}`, provider.ClassBadRequest, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			t.Cleanup(srv.Close)
			tr := provider.New(config.Provider{MaxRetries: 1}, nil, nil, nil)
			oc := openai.DefaultConfig("test-key")
			oc.BaseURL = srv.URL + "/v1"
			oc.HTTPClient = tr.Client()
			ext := pipeline.NewExtractor(openai.NewClientWithConfig(oc), pipeline.ExtractorConfig{
				Model: "m", MaxCompletionTokens: 256, ContextWindowTokens: 8192,
				Budget: pipeline.Budget{MaxTokens: 8000, MaxCostUSD: 1},
			})
			_, err := ext.Process(context.Background(), pipeline.Input{Text: "my order 48213 never arrived", Schema: schema,
				Prompt: prompt, Repair: pipeline.RepairRegenerate})
			var te *pipeline.TransportError
			if !errors.As(err, &te) {
				t.Fatalf("err = %v, want a *pipeline.TransportError", err)
			}
			if te.Class != tc.class || te.StatusCode != tc.status || te.Retryable() != tc.retryable || provider.Class(err) != tc.class {
				t.Errorf("TransportError %+v (retryable %v), want class %s, status %d, retryable %v",
					te, te.Retryable(), tc.class, tc.status, tc.retryable)
			}
		})
	}
}

// TestPipelineReadsObjectArguments: a tools-mode reply whose tool-call
// arguments are a JSON object (llama.cpp server) is read as the record
// it holds, not failed as a reply that cannot be decoded.
func TestPipelineReadsObjectArguments(t *testing.T) {
	t.Parallel()
	schema, err := pipeline.LoadSchema(schemas.FS, "customer_message", "customer_message.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := pipeline.LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	const record = `{"intent": "missing", "flow": "shipping_issue", "full_name": null, "account_id": "U85ALFLG2Z", "username": null,
		"email": null, "phone": null, "membership_level": null, "order_id": "4821300017", "zip_code": null,
		"street_address": null, "city": null, "state": null, "payment_method": null, "purchase_date": null,
		"refund_amount": null, "product_names": null}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"finish_reason":"tool_calls","index":0,"message":{"role":"assistant","content":null,`+
			`"tool_calls":[{"type":"function","function":{"name":"record_extraction","arguments":`+record+`},"id":"t1"}]}}],`+
			`"created":1,"model":"m","object":"chat.completion","usage":{"completion_tokens":90,"prompt_tokens":900,"total_tokens":990}}`)
	}))
	t.Cleanup(srv.Close)
	tr := provider.New(config.Provider{MaxRetries: 1}, nil, nil, nil)
	oc := openai.DefaultConfig("test-key")
	oc.BaseURL = srv.URL + "/v1"
	oc.HTTPClient = tr.Client()
	ext := pipeline.NewExtractor(openai.NewClientWithConfig(oc), pipeline.ExtractorConfig{
		Model: "m", RequestMode: pipeline.ModeTools, MaxCompletionTokens: 512, ContextWindowTokens: 16384,
		Budget: pipeline.Budget{MaxTokens: 16000, MaxCostUSD: 1},
	})
	res, err := ext.Process(context.Background(), pipeline.Input{Text: "hi, order 4821300017 never arrived, my account id is U85ALFLG2Z",
		Schema: schema, Prompt: prompt, Repair: pipeline.RepairRegenerate})
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	if res.Outcome != pipeline.OutcomeSucceeded || len(res.Calls) != 1 || res.Calls[0].PromptTokens != 900 {
		t.Fatalf("outcome %s, calls %+v, errors %v", res.Outcome, res.Calls, res.Errors)
	}
}

// TestPipelineRecordsUndecodableReply: a 200 that is not a chat
// completion is a paid call: the pipeline records it with the status and
// size the Transport kept, and estimated tokens, beside the retryable
// malformed TransportError.
func TestPipelineRecordsUndecodableReply(t *testing.T) {
	t.Parallel()
	schema, err := pipeline.LoadSchema(schemas.FS, "customer_message", "customer_message.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := pipeline.LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	const body = `{"object":"chat.completion","choices":[{"message":{"role":"assistant","content":{"order_id":"48213"}}}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	tr := provider.New(config.Provider{MaxRetries: 1}, nil, nil, nil)
	oc := openai.DefaultConfig("test-key")
	oc.BaseURL = srv.URL + "/v1"
	oc.HTTPClient = tr.Client()
	ext := pipeline.NewExtractor(openai.NewClientWithConfig(oc), pipeline.ExtractorConfig{
		Model: "m", MaxCompletionTokens: 256, ContextWindowTokens: 8192, Budget: pipeline.Budget{MaxTokens: 8000, MaxCostUSD: 1},
		Price: pipeline.Price{InputPerMTok: 1, OutputPerMTok: 2},
	})
	res, err := ext.Process(context.Background(), pipeline.Input{Text: "my order 48213 never arrived", Schema: schema,
		Prompt: prompt, Repair: pipeline.RepairRegenerate})
	var te *pipeline.TransportError
	if !errors.As(err, &te) || te.Class != provider.ClassMalformed || !te.Retryable() {
		t.Fatalf("err = %v, want a retryable malformed *pipeline.TransportError", err)
	}
	if len(res.Calls) != 1 {
		t.Fatalf("calls %+v, want the one answered", res.Calls)
	}
	c := res.Calls[0]
	if c.FinishReason != pipeline.FinishUndecodable || c.HTTPStatus != 200 || c.ReplyBytes != len(body) || c.Reply != body ||
		!c.UsageEstimated || c.PromptTokens <= 0 || c.CompletionTokens != pipeline.EstimateTokens(body) || c.CostUSD <= 0 || c.Valid() {
		t.Fatalf("call %+v", c)
	}
}
