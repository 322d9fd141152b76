package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/provider"
	"github.com/extractq/extractq/schemas"
)

func TestFixedPartsSplice(t *testing.T) {
	t.Parallel()
	f := provider.NewFixedParts()
	p, err := f.Placeholder([]byte(`{ "type": "object" }`))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := f.Placeholder([]byte(`{ "type": "object" }`)); !bytes.Equal(again, p) {
		t.Fatalf("second placeholder %s, want %s", again, p)
	}
	if other, _ := f.Placeholder([]byte(`{"type":"array"}`)); bytes.Equal(other, p) {
		t.Fatalf("another part got the same placeholder %s", p)
	}
	if _, err := f.Placeholder([]byte(`{`)); err == nil {
		t.Fatal("a part that is not JSON was taken")
	}
	inner := strings.Trim(string(p), `"`)
	for _, tc := range []struct{ name, body, want string }{
		{"None", `{"a":1}`, `{"a":1}`},
		{"One", `{"schema":` + string(p) + `,"b":2}`, `{"schema":{"type":"object"},"b":2}`},
		{"Two", `[` + string(p) + `,` + string(p) + `]`, `[{"type":"object"},{"type":"object"}]`},
		// Inside an encoded string a quote is escaped: text holding the
		// placeholder stays text.
		{"EscapedQuote", `{"content":"say \"` + inner + `\" now","schema":` + string(p) + `}`,
			`{"content":"say \"` + inner + `\" now","schema":{"type":"object"}}`},
		{"EscapedBackslashBefore", `["a\\",` + string(p) + `]`, `["a\\",{"type":"object"}]`},
	} {
		got, err := f.Splice([]byte(tc.body))
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: Splice = %s, %v; want %s", tc.name, got, err, tc.want)
		}
	}
	other := provider.NewFixedParts()
	if _, err := other.Splice([]byte(`{"schema":"` + strings.Replace(inner, ":0", ":7", 1) + `"}`)); err != nil {
		t.Errorf("another nonce's text was taken for a placeholder: %v", err)
	}
	if _, err := f.Splice([]byte(`{"schema":"` + strings.Replace(inner, ":0", ":7", 1) + `"}`)); err == nil {
		t.Error("a placeholder naming no part was sent")
	}
}

// recorder answers every call with a fixed reply and keeps the bodies it
// was sent.
type recorder struct {
	reply  []byte
	mu     sync.Mutex
	bodies [][]byte
	keep   bool
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	if r.keep {
		r.mu.Lock()
		r.bodies = append(r.bodies, b)
		r.mu.Unlock()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(r.reply)), Request: req}, nil
}

const fixedRecord = `{"intent":"missing","flow":"shipping_issue","full_name":"Albert Sanders","account_id":"U85ALFLG2Z","username":null,"email":null,"phone":null,"membership_level":"silver","order_id":"7149958247","zip_code":null,"street_address":null,"city":null,"state":null,"payment_method":null,"purchase_date":null,"refund_amount":null,"product_names":null}`

func completion(t testing.TB, mode string) []byte {
	msg := map[string]any{"role": "assistant", "content": fixedRecord}
	finish := "stop"
	if mode == pipeline.ModeTools {
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": "t1", "type": "function", "function": map[string]any{"name": "record_extraction", "arguments": fixedRecord}}}}
		finish = "tool_calls"
	}
	b, err := json.Marshal(map[string]any{"object": "chat.completion", "model": "m", "created": 1,
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": msg}},
		"usage":   map[string]any{"prompt_tokens": 1600, "completion_tokens": 90, "total_tokens": 1690}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type fixture struct {
	ext *pipeline.Extractor
	rec *recorder
	in  pipeline.Input
}

func newFixture(t testing.TB, mode, prov string, fixed, keep bool) fixture {
	schema, err := pipeline.LoadSchema(schemas.FS, "customer_message", "customer_message.v1.json")
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := pipeline.LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{reply: completion(t, mode), keep: keep}
	tr := provider.New(config.Provider{MaxRetries: 1}, rec, nil, nil)
	oc := openai.DefaultConfig("test-key")
	oc.BaseURL = "http://llm.invalid/v1"
	oc.HTTPClient = tr.Client()
	cfg := pipeline.ExtractorConfig{Model: "m", RequestMode: mode, Provider: prov, MaxCompletionTokens: 512,
		ContextWindowTokens: 32768, Budget: pipeline.Budget{MaxTokens: 16000, MaxCostUSD: 1}}
	if fixed {
		cfg.FixedParts = tr.FixedParts()
	}
	return fixture{ext: pipeline.NewExtractor(openai.NewClientWithConfig(oc), cfg), rec: rec,
		in: pipeline.Input{Text: "Hello. I was charged twice.\nsure, it's Albert Sanders and my account id is U85ALFLG2Z\nyes its 7149958247\nsilver",
			Schema: schema, Prompt: prompt, Repair: pipeline.RepairRegenerate}}
}

// TestFixedPartsSentAlike: with FixedParts the provider receives the same
// request, as JSON, as without, in both request modes and under a strict
// provider; no placeholder reaches it.
func TestFixedPartsSentAlike(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{pipeline.ModeResponseFormat, pipeline.ModeTools} {
		for _, prov := range []string{pipeline.ProviderGeneric, pipeline.ProviderOpenAI} {
			var sent [2]any
			for i, fixed := range []bool{false, true} {
				fx := newFixture(t, mode, prov, fixed, true)
				res, err := fx.ext.Process(context.Background(), fx.in)
				if err != nil || res.Outcome != pipeline.OutcomeSucceeded {
					t.Fatalf("%s %s fixed=%v: %v %+v", mode, prov, fixed, err, res.Errors)
				}
				if len(fx.rec.bodies) != 1 {
					t.Fatalf("%d bodies sent", len(fx.rec.bodies))
				}
				if bytes.Contains(fx.rec.bodies[0], []byte("extractq-fixed-")) {
					t.Fatalf("%s %s: a placeholder was sent: %s", mode, prov, fx.rec.bodies[0])
				}
				if err := json.Unmarshal(fx.rec.bodies[0], &sent[i]); err != nil {
					t.Fatal(err)
				}
			}
			if !reflect.DeepEqual(sent[0], sent[1]) {
				t.Errorf("%s %s: requests differ:\nwithout: %v\nwith:    %v", mode, prov, sent[0], sent[1])
			}
		}
	}
}

// BenchmarkRequestPath is the worker's CPU per message from the
// extractor to the bytes sent (prompt, go-openai's encoding, the
// Transport, decoding and checking the reply) with an in-process model
// that answers at once, in each request mode: old encodes the schema on
// every call, new sends a placeholder the Transport replaces
// (FixedParts). Each iteration runs one message each way, and the
// process's CPU time (user + system, garbage collection included) is
// summed for each, so both figures and their ratio come from one run on
// a machine whatever its load:
//
//	go test ./provider -run XXX -bench RequestPath -benchtime 3000x
func BenchmarkRequestPath(b *testing.B) {
	for _, mode := range []string{pipeline.ModeResponseFormat, pipeline.ModeTools} {
		b.Run(mode, func(b *testing.B) {
			fx := [2]fixture{newFixture(b, mode, pipeline.ProviderGeneric, false, false),
				newFixture(b, mode, pipeline.ProviderGeneric, true, false)}
			var cpu [2]time.Duration
			b.ReportAllocs()
			for b.Loop() {
				for i := range fx {
					t0 := cpuTime(b)
					res, err := fx[i].ext.Process(context.Background(), fx[i].in)
					cpu[i] += cpuTime(b) - t0
					if err != nil || res.Outcome != pipeline.OutcomeSucceeded {
						b.Fatalf("%v %+v", err, res.Errors)
					}
				}
			}
			n := float64(b.N)
			b.ReportMetric(float64(cpu[0].Microseconds())/n, "old-cpu-µs/msg")
			b.ReportMetric(float64(cpu[1].Microseconds())/n, "new-cpu-µs/msg")
			b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "new/old")
		})
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
