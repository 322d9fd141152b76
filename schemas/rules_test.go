package schemas

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
)

func loadPipelineSchema(t *testing.T, id, file string) *pipeline.Schema {
	t.Helper()
	s, err := pipeline.LoadSchema(FS, id, file)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// intentFlows is the schema's own intent → flow map (x-intents on flow).
func intentFlows(t *testing.T) map[string]any {
	t.Helper()
	s, _ := readRaw(t, customerMessage)
	var flow struct {
		Enum    []any               `json:"enum"`
		Intents map[string][]string `json:"x-intents"`
	}
	if err := json.Unmarshal(s.Properties["flow"], &flow); err != nil {
		t.Fatal(err)
	}
	m := map[string]any{"status_delivery_date": nil}
	for f, intents := range flow.Intents {
		for _, i := range intents {
			m[i] = f
		}
	}
	return m
}

func customerRecord(s *pipeline.Schema, set map[string]any) map[string]any {
	m := map[string]any{}
	for _, p := range s.PropertyNames() {
		m[p] = nil
	}
	for k, v := range set {
		m[k] = v
	}
	return m
}

// Every intent with every flow (null included): the rules accept exactly
// the pairs of the x-intents map and report every other at /flow.
func TestCustomerMessageIntentFlowRules(t *testing.T) {
	t.Parallel()
	s := loadPipelineSchema(t, "customer_message", customerMessage)
	want := intentFlows(t)
	raw, _ := readRaw(t, customerMessage)
	var intent, flow struct {
		Enum []any `json:"enum"`
	}
	json.Unmarshal(raw.Properties["intent"], &intent)
	json.Unmarshal(raw.Properties["flow"], &flow)
	if len(intent.Enum) != len(want) {
		t.Fatalf("%d intents, %d in the map", len(intent.Enum), len(want))
	}
	pairs, caught := 0, 0
	for _, i := range intent.Enum {
		for _, f := range flow.Enum {
			errs, _ := s.Validate(customerRecord(s, map[string]any{"intent": i, "flow": f}), "hello")
			if f == want[i.(string)] {
				if len(errs) != 0 {
					t.Errorf("intent %v flow %v: errors %v, want none", i, f, errs)
				}
				continue
			}
			pairs++
			if len(errs) != 1 || errs[0].Kind != extracttype.KindRule || errs[0].Path != "/flow" || !strings.HasPrefix(errs[0].Keyword, "flow_") {
				t.Errorf("intent %v flow %v: errors %v, want one flow_ rule error at /flow", i, f, errs)
				continue
			}
			caught++
		}
	}
	if pairs != caught || pairs != len(intent.Enum)*(len(flow.Enum)-1) {
		t.Errorf("caught %d of %d contradictions", caught, pairs)
	}
}

func TestCustomerMessageLimits(t *testing.T) {
	t.Parallel()
	s := loadPipelineSchema(t, "customer_message", customerMessage)
	received := time.Date(2026, 5, 10, 9, 0, 0, 0, time.UTC)
	base := map[string]any{"intent": "refund_initiate", "flow": "product_defect"}
	for _, tt := range []struct {
		name    string
		set     map[string]any
		keyword string
	}{
		{"Refund", map[string]any{"refund_amount": "40"}, ""},
		{"RefundCents", map[string]any{"refund_amount": "19.24"}, ""},
		{"RefundAtMax", map[string]any{"refund_amount": "1000"}, ""},
		{"RefundInjected", map[string]any{"refund_amount": "5000"}, "refund_amount_max"},
		{"RefundZero", map[string]any{"refund_amount": "0.00"}, "refund_amount_positive"},
		{"RefundTenthsOfCents", map[string]any{"refund_amount": "19.245"}, "pattern"},
		{"PurchasedThatDay", map[string]any{"purchase_date": "2026-05-10"}, ""},
		{"PurchasedEarlier", map[string]any{"purchase_date": "2019-11-02"}, ""},
		{"PurchasedLater", map[string]any{"purchase_date": "2026-05-12"}, "purchase_date_not_after_received"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			set := map[string]any{}
			for k, v := range base {
				set[k] = v
			}
			for k, v := range tt.set {
				set[k] = v
			}
			errs, _ := s.ValidateMessage(customerRecord(s, set), "hello", pipeline.MessageMeta{ReceivedAt: received})
			if tt.keyword == "" {
				if len(errs) != 0 {
					t.Errorf("errors %v, want none", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Keyword != tt.keyword {
				t.Errorf("errors %v, want one %s", errs, tt.keyword)
			}
		})
	}
}

// scriptedModel answers each chat call with the next reply and keeps the
// requests.
type scriptedModel struct {
	mu       sync.Mutex
	replies  []string
	requests []openai.ChatCompletionRequest
}

func (m *scriptedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req openai.ChatCompletionRequest
	json.NewDecoder(r.Body).Decode(&req)
	m.mu.Lock()
	m.requests = append(m.requests, req)
	content := m.replies[0]
	m.replies = m.replies[1:]
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(openai.ChatCompletionResponse{ID: "x", Object: "chat.completion", Model: "test",
		Choices: []openai.ChatCompletionChoice{{Message: openai.ChatCompletionMessage{Role: "assistant", Content: content}, FinishReason: "stop"}},
		Usage:   openai.Usage{PromptTokens: 100, CompletionTokens: 20, TotalTokens: 120}})
}

// A scripted model that sends a flow contradicting the intent gets the
// rule's message in its repair turn; sent again, the run fails with the
// rule error, never stored as a success.
func TestCustomerMessageContradictionThroughExtractor(t *testing.T) {
	t.Parallel()
	s := loadPipelineSchema(t, "customer_message", customerMessage)
	rec := func(intent string, flow any) string {
		b, _ := json.Marshal(customerRecord(s, map[string]any{"intent": intent, "flow": flow}))
		return string(b)
	}
	prompt, err := pipeline.LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, replies ...string) (*pipeline.Result, *scriptedModel) {
		m := &scriptedModel{replies: replies}
		hs := httptest.NewServer(m)
		t.Cleanup(hs.Close)
		cfg := openai.DefaultConfig("k")
		cfg.BaseURL = hs.URL + "/v1"
		ext := pipeline.NewExtractor(openai.NewClientWithConfig(cfg), pipeline.ExtractorConfig{
			Model: "test", RequestMode: pipeline.ModeResponseFormat, MaxCompletionTokens: 512, ContextWindowTokens: 32768,
			Budget: pipeline.Budget{MaxTokens: 100000, MaxCostUSD: 1}})
		res, err := ext.Process(context.Background(), pipeline.Input{Text: "I forgot my password", Schema: s, Prompt: prompt,
			Repair: pipeline.RepairRegenerate, Meta: pipeline.MessageMeta{ReceivedAt: time.Now()}})
		if err != nil {
			t.Fatal(err)
		}
		return res, m
	}
	t.Run("Repaired", func(t *testing.T) {
		t.Parallel()
		res, m := run(t, rec("recover_password", "order_issue"), rec("recover_password", "account_access"))
		if res.Outcome != pipeline.OutcomeRepaired {
			t.Fatalf("outcome %s, errors %v", res.Outcome, res.Errors)
		}
		turns := m.requests[1].Messages
		if last := turns[len(turns)-1].Content; !strings.Contains(last, "/flow: flow must be account_access for intent recover_username, recover_password or reset_2fa") {
			t.Errorf("repair turn does not carry the rule's message:\n%s", last)
		}
	})
	t.Run("Failed", func(t *testing.T) {
		t.Parallel()
		res, _ := run(t, rec("recover_password", "order_issue"), rec("recover_password", nil))
		if res.Outcome != pipeline.OutcomeFailed || res.Data != nil {
			t.Fatalf("outcome %s, data %v", res.Outcome, res.Data)
		}
		want := extracttype.ErrorList{{Kind: extracttype.KindRule, Path: "/flow", Keyword: "flow_account_access",
			Message: "flow must be account_access for intent recover_username, recover_password or reset_2fa"}}
		if len(res.Errors) != 1 || res.Errors[0] != want[0] {
			t.Errorf("errors %v, want %v", res.Errors, want)
		}
	})
}
