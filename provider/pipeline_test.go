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
