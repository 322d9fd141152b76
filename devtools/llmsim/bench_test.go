package llmsim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/config"
)

// BenchmarkChatCompletion measures one extraction call served in process:
// the sample messages in turn, as the worker sends them for the
// customer_message schema (response_format), to a simulator with the
// default configuration and no latency. The request bodies are encoded
// before the timer starts. Besides ns/op it reports cpu-ns/op, the CPU
// time the process spent per call (garbage collection included), which
// a busy machine disturbs less than the elapsed time.
func BenchmarkChatCompletion(b *testing.B) {
	msgs := loadSampleMessages(b)
	cfg := config.Default()
	sc := loadGoldenSchemas(b, cfg)["customer_message"]
	bodies := make([][]byte, 0, len(msgs))
	for _, m := range msgs {
		req := openai.ChatCompletionRequest{
			Model: cfg.LLM.Model,
			Messages: []openai.ChatCompletionMessage{
				{Role: openai.ChatMessageRoleSystem, Content: sc.prompt.System(sc.schema.Title)},
				{Role: openai.ChatMessageRoleUser, Content: sc.prompt.User(m.Text)},
			},
			MaxCompletionTokens: cfg.LLM.MaxCompletionTokens,
			ResponseFormat: &openai.ChatCompletionResponseFormat{
				Type:       openai.ChatCompletionResponseFormatTypeJSONSchema,
				JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: sc.schema.ID, Schema: sc.schema.ModelSchema()},
			},
		}
		body, err := json.Marshal(req)
		if err != nil {
			b.Fatal(err)
		}
		bodies = append(bodies, body)
	}
	sim := New(cfg.Simulator, nil)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	for i := 0; i < b.N; i++ {
		body := bodies[i%len(bodies)]
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		clear(w.h)
		w.status = 0
		sim.ServeHTTP(w, r)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
	if cpu1, ok := processCPU(); ok && cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

// discardWriter is an http.ResponseWriter that keeps only the status.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.h }

func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return io.Discard.Write(p)
}
