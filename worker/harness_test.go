package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/worker"
)

// The pieces a test's worker service is built from: an LLM endpoint that
// counts its calls, an extractor on cfg's llm, budget and prices, and a
// service run until the test stops it.

// llmServer serves h (an LLM simulator, llmsim.New) on a test server closed
// at cleanup, counting the chat completions it serves in calls, and
// returns the base URL an OpenAI client takes ("http://…/v1").
func llmServer(t *testing.T, h http.Handler, calls *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			calls.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// testExtractor is the extractor cfg configures (llm, budget, prices, as
// cmd/worker builds it) on the OpenAI-compatible endpoint at baseURL.
// edit, when set, changes the extractor's configuration first.
func testExtractor(cfg *config.Config, baseURL string, log *zap.Logger, edit func(*pipeline.ExtractorConfig)) *pipeline.Extractor {
	oc := openai.DefaultConfig("test")
	oc.BaseURL = baseURL
	price := cfg.Prices.Models[cfg.LLM.Model]
	ec := pipeline.ExtractorConfig{
		Model: cfg.LLM.Model, RequestMode: cfg.LLM.RequestMode, MaxCompletionTokens: cfg.LLM.MaxCompletionTokens,
		ContextWindowTokens: cfg.LLM.ContextWindowTokens,
		Budget:              pipeline.Budget{MaxTokens: cfg.Budget.MaxTokens, MaxCostUSD: cfg.Budget.MaxCostUSD},
		Price:               pipeline.Price{InputPerMTok: price.InputPerMTok, CachedInputPerMTok: price.CachedInputPerMTok, OutputPerMTok: price.OutputPerMTok},
		PriceVersion:        cfg.Prices.Version, Logger: log,
	}
	if edit != nil {
		edit(&ec)
	}
	return pipeline.NewExtractor(openai.NewClientWithConfig(oc), ec)
}

// runService runs worker.RunService with sc until the returned stop is
// called (as SIGTERM stops it) or the test ends; stop waits for it to
// return and fails t, naming what, on its error. It may be called more
// than once.
func runService(t *testing.T, what string, sc worker.ServiceConfig) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.RunService(ctx, sc) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunService of %s: %v", what, err)
		}
	})
	t.Cleanup(stop)
	return stop
}
