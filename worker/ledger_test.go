package worker_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// usageLLM answers every chat call with a valid record and the usage
// usage gives for call n (from 1); nil means no usage object.
type usageLLM struct {
	t     *testing.T
	mu    sync.Mutex
	n     int
	usage func(n int) *openai.Usage
}

func (u *usageLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.n++
	n := u.n
	u.mu.Unlock()
	body := map[string]any{"id": "x", "object": "chat.completion", "model": "extractq-sim-1",
		"choices": []openai.ChatCompletionChoice{text(record(u.t, nil))}}
	if us := u.usage(n); us != nil {
		body["usage"] = us
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(body)
}

// TestLedgerUsage: a reply without usage is booked with estimated tokens
// and marked so, never at $0; cached prompt tokens are booked per call.
func TestLedgerUsage(t *testing.T) {
	t.Parallel()
	h := &usageLLM{t: t, usage: func(n int) *openai.Usage {
		if n == 1 {
			return nil
		}
		return &openai.Usage{PromptTokens: 1500, CompletionTokens: 90, TotalTokens: 1590,
			PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: 1152}}
	}}
	b := setup(t, setupOpts{handler: h})
	first := b.ingestReader(t, strings.NewReader(`{"id":"u1","text":"`+classText+`"}`+"\n"))
	b.wait(t, first.BatchID)
	second := b.ingestReader(t, strings.NewReader(`{"id":"u2","text":"`+classText+` (again)"}`+"\n"))
	b.wait(t, second.BatchID)

	type row struct {
		prompt, cached, completion int
		estimated                  bool
		cost                       float64
	}
	get := func(id string) row {
		t.Helper()
		var r row
		if err := b.st.Pool.QueryRow(context.Background(), `SELECT c.prompt_tokens, c.cached_tokens, c.completion_tokens,
			c.usage_estimated, c.cost_usd::float8 FROM llm_calls c JOIN messages m ON m.id = c.message_id WHERE m.external_id = $1`, id).
			Scan(&r.prompt, &r.cached, &r.completion, &r.estimated, &r.cost); err != nil {
			t.Fatalf("call of %s: %v", id, err)
		}
		return r
	}
	est := get("u1")
	if !est.estimated || est.prompt < 500 || est.completion < 50 || est.cached != 0 || est.cost <= 0 {
		t.Errorf("call without usage booked as %+v; want estimated tokens, marked, costed", est)
	}
	got := get("u2")
	if got.estimated || got.prompt != 1500 || got.cached != 1152 || got.completion != 90 ||
		math.Abs(got.cost-(348*0.15+1152*0.075+90*0.60)/1e6) > 1e-12 {
		t.Errorf("call with cached tokens booked as %+v", got)
	}
	sum, err := b.st.BatchSummary(context.Background(), b.st.Pool, first.BatchID)
	if err != nil {
		t.Fatal(err)
	}
	if sum.LLMCalls != 1 || sum.UsageEstimatedCalls != 1 || sum.CostUSD <= 0 {
		t.Errorf("summary %+v", sum)
	}
}
