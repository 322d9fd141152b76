package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/extractq/extractq/provider"
)

// noUsage answers m without a usage object, as some OpenAI-compatible
// servers and proxies do.
func noUsage(m openai.ChatCompletionMessage, finish openai.FinishReason) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": "x", "object": "chat.completion", "model": "test",
			"choices": []openai.ChatCompletionChoice{{Message: m, FinishReason: finish}},
		})
	}
}

// raw answers a 200 with body as it is.
func raw(body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("MissingIsEstimatedAndWarnedOnce", func(t *testing.T) {
		t.Parallel()
		bad := openai.ChatCompletionMessage{Role: "assistant", Content: ungroundedJSON}
		good := openai.ChatCompletionMessage{Role: "assistant", Content: validJSON,
			ReasoningContent: "the customer gave the order id 4821300017"}
		b := setupExtractor(t, ModeResponseFormat, noUsage(bad, "stop"), noUsage(good, "stop"))
		core, logs := observer.New(zapcore.WarnLevel)
		b.ext.log = zap.New(core)
		res, err := b.ext.Process(ctx, b.in)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeRepaired || len(res.Calls) != 2 {
			t.Fatalf("%+v", res)
		}
		first, second := res.Calls[0], res.Calls[1]
		for _, c := range res.Calls {
			if !c.UsageEstimated || c.PromptTokens <= 0 || c.CompletionTokens <= 0 || c.CachedTokens != 0 || c.CostUSD <= 0 {
				t.Fatalf("call %d not estimated: %+v", c.Attempt, c)
			}
			want := Price{InputPerMTok: 1, OutputPerMTok: 2}.Cost(c.PromptTokens, 0, c.CompletionTokens)
			if c.CostUSD != want {
				t.Errorf("call %d costs %v, want %v", c.Attempt, c.CostUSD, want)
			}
		}
		// The prompt as the budget estimates it; the completion from the
		// reply (and its reasoning) at one token per four bytes.
		if want := b.ext.estimate(b.requestMessages(0), b.ext.outputSchema(b.in, "")); first.PromptTokens != want {
			t.Errorf("first prompt estimate %d, want %d", first.PromptTokens, want)
		}
		if second.PromptTokens <= first.PromptTokens {
			t.Errorf("repair prompt estimate %d not above the first's %d", second.PromptTokens, first.PromptTokens)
		}
		if first.CompletionTokens != EstimateTokens(ungroundedJSON) ||
			second.CompletionTokens != EstimateTokens(validJSON)+EstimateTokens(good.ReasoningContent) {
			t.Errorf("completion estimates %d, %d", first.CompletionTokens, second.CompletionTokens)
		}
		if n := logs.FilterMessageSnippet("no token usage").Len(); n != 1 {
			t.Errorf("%d warnings of missing usage for two calls of one model, want 1", n)
		}
	})

	t.Run("PresentIsKeptWithCachedTokens", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(openai.ChatCompletionResponse{
				ID: "x", Object: "chat.completion", Model: "test",
				Choices: []openai.ChatCompletionChoice{{Message: openai.ChatCompletionMessage{Role: "assistant", Content: validJSON}, FinishReason: "stop"}},
				Usage: openai.Usage{PromptTokens: 2048, CompletionTokens: 30, TotalTokens: 2078,
					PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: 1024}},
			})
		})
		res, err := b.ext.Process(ctx, b.in)
		if err != nil {
			t.Fatal(err)
		}
		c := res.Calls[0]
		if c.UsageEstimated || c.PromptTokens != 2048 || c.CachedTokens != 1024 || c.CompletionTokens != 30 ||
			c.CostUSD != (1024*1+30*2)/1e6 {
			t.Fatalf("call %+v", c)
		}
	})

	t.Run("UndecodableReplyIsAPaidCall", func(t *testing.T) {
		t.Parallel()
		// First reply valid but invalid for the schema; the repair's reply
		// is not a chat completion go-openai can decode.
		b := setupExtractor(t, ModeResponseFormat, content(ungroundedJSON), raw(`{"choices":[{"message":{"content":7}}]}`))
		res, err := b.ext.Process(ctx, b.in)
		var te *TransportError
		if !errors.As(err, &te) || te.Class != provider.ClassMalformed || !te.Retryable() {
			t.Fatalf("err %v", err)
		}
		if len(res.Calls) != 2 {
			t.Fatalf("calls %+v, want the extract and the undecodable repair", res.Calls)
		}
		c := res.Calls[1]
		if !c.Undecodable() || c.Valid() || c.Attempt != 2 || c.Purpose != PurposeRepair || !c.UsageEstimated ||
			c.PromptTokens <= 0 || c.CostUSD <= 0 || c.Latency <= 0 {
			t.Fatalf("undecodable call %+v", c)
		}
	})
}

// requestMessages returns the messages of request i the server received.
func (b *extractorBundle) requestMessages(i int) []openai.ChatCompletionMessage {
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	return b.srv.requests[i].Messages
}
