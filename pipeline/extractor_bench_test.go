package pipeline

import (
	"context"
	"os"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// instant answers at once, in process.
type instant struct{ reply string }

func (c instant) CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	return openai.ChatCompletionResponse{Choices: []openai.ChatCompletionChoice{{
		Message: openai.ChatCompletionMessage{Role: "assistant", Content: c.reply}, FinishReason: "stop"}}}, nil
}

// BenchmarkProcess measures the pipeline's own CPU per message (prompt,
// parse, validate, ground) with an instant in-process model: the worker's
// overhead beside the provider's latency.
func BenchmarkProcess(b *testing.B) {
	raw, err := os.ReadFile("../schemas/customer_message.v1.json")
	if err != nil {
		b.Fatal(err)
	}
	s, err := CompileSchema("customer_message", raw)
	if err != nil {
		b.Fatal(err)
	}
	p, err := LoadPrompt("extract.v1")
	if err != nil {
		b.Fatal(err)
	}
	reply := `{"intent":"missing","flow":"shipping_issue","full_name":"Albert Sanders","account_id":"U85ALFLG2Z","username":null,"email":null,"phone":null,"membership_level":"silver","order_id":"7149958247","zip_code":null,"street_address":null,"city":null,"state":null,"payment_method":null,"purchase_date":null,"refund_amount":null,"product_names":null}`
	text := "Hello. I recently signed up for a subscription but it looks like you guys charged me twice for it.\nsure, it's Albert Sanders and my account id is U85ALFLG2Z\nyes its 7149958247\nsilver\nit was 20 dollars"
	ext := NewExtractor(instant{reply: reply}, ExtractorConfig{Model: "m", MaxCompletionTokens: 512, ContextWindowTokens: 32768, Budget: Budget{MaxTokens: 16000, MaxCostUSD: 1}})
	in := Input{Text: text, Schema: s, Prompt: p, Repair: RepairRegenerate}
	b.ReportAllocs()
	for b.Loop() {
		res, err := ext.Process(context.Background(), in)
		if err != nil || res.Outcome != OutcomeSucceeded {
			b.Fatalf("%v %+v", err, res.Errors)
		}
	}
}
