package llmsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/santhosh-tekuri/jsonschema/v5"
	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
)

// testSchema is a small record schema in the product's style: grounded ids
// with patterns, an e-mail, a name found by an x-hint, an intent enum with
// x-keywords, and an array of objects through $defs.
const testSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["intent", "full_name", "account_id", "order_id", "email", "items"],
  "properties": {
    "intent": {"type": "string", "enum": ["refund", "order_status", "manage_dispute_bill", "other"],
      "x-keywords": {"refund": ["money back"], "manage_dispute_bill": ["charged", "twice"], "order_status": ["where is"]}},
    "full_name": {"type": ["string", "null"], "x-grounded": true,
      "x-hint": "(?:name is|it's|this is)\\s+([A-Z][a-z]+ [A-Z][a-z]+)"},
    "account_id": {"type": ["string", "null"], "pattern": "^[A-Z0-9]{10}$", "x-grounded": true},
    "order_id": {"type": ["string", "null"], "pattern": "^[0-9]{10}$", "x-grounded": true},
    "email": {"type": ["string", "null"], "format": "email", "x-grounded": true},
    "items": {"type": "array", "items": {"$ref": "#/$defs/item"}}
  },
  "$defs": {
    "item": {
      "type": "object",
      "additionalProperties": false,
      "required": ["sku", "qty"],
      "properties": {
        "sku": {"type": "string", "pattern": "^SKU-[0-9]{4}$", "x-grounded": true},
        "qty": {"type": ["integer", "null"], "minimum": 1, "x-hint": "(?i)qty\\s*([0-9]+)"}
      }
    }
  }
}`

// Short customer messages in the style of the product's sample data.
const (
	textDispute = "Hello. I recently signed up for a subscription but it looks like you guys charged me twice for it.\n" +
		"sure, it's Albert Sanders and my account id is U85ALFLG2Z\nyes its 7149958247\nsilver"
	textOrder = "where is my package? my order id is 7149958247"
	textEmail = "Hi, I want my money back. You can reach me at czhang14@email.com"
	textItems = "I ordered these and want a refund:\nSKU-1234 qty 2\nSKU-5678 qty 1\nthanks"
)

var allTexts = []string{textDispute, textOrder, textEmail, textItems}

type testBundle struct {
	sim    *Server
	client *openai.Client
	url    string
	schema *jsonschema.Schema
}

func setup(t *testing.T, cfg config.Simulator) *testBundle {
	t.Helper()
	sim := New(cfg, zaptest.NewLogger(t))
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	oc := openai.DefaultConfig("x")
	oc.BaseURL = srv.URL + "/v1"
	sch, err := jsonschema.CompileString("test.json", testSchema)
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{sim: sim, client: openai.NewClientWithConfig(oc), url: srv.URL, schema: sch}
}

// The product's prompt: the customer text sits between <message> lines.
func userTurn(text string) string {
	return "Extract the record from this customer message.\n<message>\n" + text + "\n</message>"
}

func extractionMessages(text string) []openai.ChatCompletionMessage {
	return []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You extract one structured record."},
		{Role: openai.ChatMessageRoleUser, Content: userTurn(text)},
	}
}

func formatRequest(msgs []openai.ChatCompletionMessage) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model:               DefaultModel,
		Messages:            msgs,
		MaxCompletionTokens: 1024,
		ResponseFormat: &openai.ChatCompletionResponseFormat{
			Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
				Name: "customer_message", Schema: json.RawMessage(testSchema), Strict: true,
			},
		},
	}
}

func toolsRequest(msgs []openai.ChatCompletionMessage) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model:    DefaultModel,
		Messages: msgs,
		Tools: []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: "record", Parameters: json.RawMessage(testSchema),
		}}},
		ToolChoice: openai.ToolChoice{Type: openai.ToolTypeFunction, Function: openai.ToolFunction{Name: "record"}},
	}
}

func (b *testBundle) call(t *testing.T, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, string) {
	t.Helper()
	resp, err := b.client.CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	if len(resp.Choices) != 1 {
		t.Fatalf("got %d choices, want 1", len(resp.Choices))
	}
	m := resp.Choices[0].Message
	if len(m.ToolCalls) > 0 {
		return resp, m.ToolCalls[0].Function.Arguments
	}
	return resp, m.Content
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("reply is not a JSON object: %v\n%s", err, s)
	}
	return v
}

func valueAt(doc any, path string) (any, bool) {
	toks, _ := splitPointer(path)
	return getAt(doc, toks)
}

// honest is the simulator's fault-free record for text.
func honest(t *testing.T, text string) map[string]any {
	t.Helper()
	b := setup(t, config.Simulator{Seed: 1})
	_, content := b.call(t, formatRequest(extractionMessages(text)))
	return decode(t, content)
}

func TestChatCompletions(t *testing.T) {
	t.Parallel()

	t.Run("ResponseFormat", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 7})
		want := map[string]map[string]any{
			textDispute: {"intent": "manage_dispute_bill", "full_name": "Albert Sanders", "account_id": "U85ALFLG2Z",
				"order_id": "7149958247", "email": nil, "items": []any{}},
			textOrder: {"intent": "order_status", "full_name": nil, "account_id": nil, "order_id": "7149958247",
				"email": nil, "items": []any{}},
			textEmail: {"intent": "refund", "full_name": nil, "account_id": nil, "order_id": nil,
				"email": "czhang14@email.com", "items": []any{}},
			textItems: {"intent": "refund", "full_name": nil, "account_id": nil, "order_id": nil, "email": nil,
				"items": []any{
					map[string]any{"sku": "SKU-1234", "qty": float64(2)},
					map[string]any{"sku": "SKU-5678", "qty": float64(1)},
				}},
		}
		for _, text := range allTexts {
			resp, content := b.call(t, formatRequest(extractionMessages(text)))
			got := decode(t, content)
			if !reflect.DeepEqual(got, want[text]) {
				t.Errorf("record for %q:\n got %v\nwant %v", text[:20], got, want[text])
			}
			if err := b.schema.Validate(any(got)); err != nil {
				t.Errorf("honest record is not schema-valid: %v", err)
			}
			if fr := resp.Choices[0].FinishReason; fr != openai.FinishReasonStop {
				t.Errorf("finish_reason = %q, want stop", fr)
			}
			if resp.Object != "chat.completion" || resp.Model != DefaultModel || resp.ID == "" || resp.Created == 0 {
				t.Errorf("envelope: object %q model %q id %q created %d", resp.Object, resp.Model, resp.ID, resp.Created)
			}
			u := resp.Usage
			if u.PromptTokens <= 0 || u.CompletionTokens != (len([]rune(content))+3)/4 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
				t.Errorf("usage = %+v for a %d-character reply", u, len([]rune(content)))
			}
			if resp.Header().Get("X-Llmsim-Fault") != "none" {
				t.Errorf("X-Llmsim-Fault = %q, want none", resp.Header().Get("X-Llmsim-Fault"))
			}
		}
	})

	t.Run("Tools", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 7})
		for _, text := range allTexts {
			resp, args := b.call(t, toolsRequest(extractionMessages(text)))
			m := resp.Choices[0].Message
			if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "record" || m.ToolCalls[0].ID == "" ||
				m.ToolCalls[0].Type != openai.ToolTypeFunction {
				t.Fatalf("tool calls = %+v, want one call to record", m.ToolCalls)
			}
			if m.Content != "" {
				t.Errorf("content = %q, want none beside the tool call", m.Content)
			}
			if fr := resp.Choices[0].FinishReason; fr != openai.FinishReasonToolCalls {
				t.Errorf("finish_reason = %q, want tool_calls", fr)
			}
			if got, want := decode(t, args), honest(t, text); !reflect.DeepEqual(got, want) {
				t.Errorf("tool arguments %v, want the response_format record %v", got, want)
			}
		}
	})

	t.Run("NoSchema", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 7})
		_, content := b.call(t, openai.ChatCompletionRequest{Model: "any-model", Messages: extractionMessages(textOrder)})
		if content != "{}" {
			t.Errorf("content without a schema = %q, want {}", content)
		}
	})

	t.Run("MultiPartContent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 7})
		req := formatRequest([]openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, MultiContent: []openai.ChatMessagePart{
			{Type: openai.ChatMessagePartTypeText, Text: textOrder},
		}}})
		_, content := b.call(t, req)
		if got := decode(t, content)["order_id"]; got != "7149958247" {
			t.Errorf("order_id = %v, want 7149958247", got)
		}
	})

	t.Run("Determinism", func(t *testing.T) {
		t.Parallel()
		rates := config.Simulator{InvalidJSONRate: 0.1, FencedRate: 0.1, ProseRate: 0.1, WrongTypeRate: 0.1,
			MissingRequiredRate: 0.1, UngroundedRate: 0.1, TruncatedRate: 0.1}
		replies := func(seed int64) []string {
			cfg := rates
			cfg.Seed = seed
			b := setup(t, cfg)
			var out []string
			for i := 0; i < 12; i++ {
				text := fmt.Sprintf("%s\nticket %d", allTexts[i%len(allTexts)], i)
				_, c := b.call(t, formatRequest(extractionMessages(text)))
				out = append(out, c)
			}
			return out
		}
		a, again, other := replies(42), replies(42), replies(43)
		if !reflect.DeepEqual(a, again) {
			t.Errorf("same seed gave different replies:\n%q\n%q", a, again)
		}
		if reflect.DeepEqual(a, other) {
			t.Errorf("seeds 42 and 43 gave the same twelve replies")
		}
	})

	t.Run("MaxCompletionTokens", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 7})
		req := formatRequest(extractionMessages(textDispute))
		req.MaxCompletionTokens = 5
		resp, content := b.call(t, req)
		if resp.Choices[0].FinishReason != openai.FinishReasonLength || len([]rune(content)) != 20 {
			t.Errorf("finish_reason %q, content %q; want length and 20 characters", resp.Choices[0].FinishReason, content)
		}
	})

	t.Run("Latency", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 7, Latency: 20 * time.Millisecond})
		start := time.Now()
		b.call(t, formatRequest(extractionMessages(textOrder)))
		if d := time.Since(start); d < 10*time.Millisecond {
			t.Errorf("call took %v; want at least half the 20ms mean latency", d)
		}
		slow := setup(t, config.Simulator{Seed: 7, Latency: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start = time.Now()
		if _, err := slow.client.CreateChatCompletion(ctx, formatRequest(extractionMessages(textOrder))); err == nil {
			t.Fatal("call with a 50ms deadline against a 1m latency succeeded")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("cancelled call took %v", d)
		}
	})
}

func TestFaults(t *testing.T) {
	t.Parallel()

	type check func(t *testing.T, text string, resp openai.ChatCompletionResponse, content string)
	emailRE := regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$`)
	tests := []struct {
		fault Fault
		cfg   config.Simulator
		check check
	}{
		{FaultInvalidJSON, config.Simulator{InvalidJSONRate: 1}, func(t *testing.T, _ string, _ openai.ChatCompletionResponse, c string) {
			if json.Valid([]byte(c)) {
				t.Errorf("invalid_json reply is valid JSON: %s", c)
			}
			if i, j := strings.Index(c, "{"), strings.LastIndex(c, "}"); i >= 0 && j > i && json.Valid([]byte(c[i:j+1])) {
				t.Errorf("invalid_json reply holds a valid JSON object: %s", c)
			}
		}},
		{FaultFenced, config.Simulator{FencedRate: 1}, func(t *testing.T, text string, _ openai.ChatCompletionResponse, c string) {
			inner, ok := strings.CutPrefix(c, "```json\n")
			inner, ok2 := strings.CutSuffix(inner, "\n```")
			if !ok || !ok2 || json.Valid([]byte(c)) {
				t.Fatalf("fenced reply = %q", c)
			}
			if !reflect.DeepEqual(decode(t, inner), honest(t, text)) {
				t.Errorf("fenced JSON differs from the honest record")
			}
		}},
		{FaultProse, config.Simulator{ProseRate: 1}, func(t *testing.T, text string, _ openai.ChatCompletionResponse, c string) {
			i, j := strings.Index(c, "{"), strings.LastIndex(c, "}")
			if json.Valid([]byte(c)) || i <= 0 || j < i || !strings.Contains(c, "Here is the record") {
				t.Fatalf("prose reply = %q", c)
			}
			if !reflect.DeepEqual(decode(t, c[i:j+1]), honest(t, text)) {
				t.Errorf("JSON in prose differs from the honest record")
			}
		}},
		{FaultWrongType, config.Simulator{WrongTypeRate: 1}, func(t *testing.T, text string, resp openai.ChatCompletionResponse, c string) {
			doc, path := decode(t, c), resp.Header().Get("X-Llmsim-Fault-Path")
			v, ok := valueAt(doc, path)
			hv, _ := valueAt(honest(t, text), path)
			if !ok || jsonType(v) == jsonType(hv) {
				t.Errorf("%s: %v (%s), honest %v: want a different JSON type", path, v, jsonType(v), hv)
			}
			if err := testValidator(t).Validate(any(doc)); err == nil {
				t.Errorf("wrong_type reply is schema-valid: %s", c)
			}
		}},
		{FaultMissingRequired, config.Simulator{MissingRequiredRate: 1}, func(t *testing.T, text string, resp openai.ChatCompletionResponse, c string) {
			doc, path := decode(t, c), resp.Header().Get("X-Llmsim-Fault-Path")
			if _, ok := valueAt(doc, path); ok || path == "" {
				t.Errorf("missing_required left %q in place", path)
			}
			if _, ok := valueAt(honest(t, text), path); !ok {
				t.Errorf("missing_required removed %q, which the honest record lacks", path)
			}
			if err := testValidator(t).Validate(any(doc)); err == nil {
				t.Errorf("missing_required reply is schema-valid: %s", c)
			}
		}},
		{FaultWrongEnum, config.Simulator{WrongEnumRate: 1}, func(t *testing.T, text string, resp openai.ChatCompletionResponse, c string) {
			doc, path := decode(t, c), resp.Header().Get("X-Llmsim-Fault-Path")
			v, _ := valueAt(doc, path)
			hv, _ := valueAt(honest(t, text), path)
			if s, ok := v.(string); !ok || s == "" || v == hv {
				t.Errorf("%s: %v, honest %v: want another string", path, v, hv)
			}
			if err := testValidator(t).Validate(any(doc)); err == nil {
				t.Errorf("wrong_enum reply is schema-valid: %s", c)
			}
		}},
		{FaultUngrounded, config.Simulator{UngroundedRate: 1}, func(t *testing.T, text string, resp openai.ChatCompletionResponse, c string) {
			doc, path := decode(t, c), resp.Header().Get("X-Llmsim-Fault-Path")
			v, _ := valueAt(doc, path)
			s, ok := v.(string)
			if !ok || s == "" {
				t.Fatalf("%s = %v, want a made-up string", path, v)
			}
			if strings.Contains(normalize(text), normalize(s)) {
				t.Errorf("%s = %q appears in the message", path, s)
			}
			if err := testValidator(t).Validate(any(doc)); err != nil {
				t.Errorf("ungrounded reply should pass the schema (only grounding catches it): %v", err)
			}
			if strings.HasSuffix(path, "email") && !emailRE.MatchString(s) {
				t.Errorf("made-up email %q has not an e-mail's shape", s)
			}
		}},
		{FaultTruncated, config.Simulator{TruncatedRate: 1}, func(t *testing.T, text string, resp openai.ChatCompletionResponse, c string) {
			if resp.Choices[0].FinishReason != openai.FinishReasonLength {
				t.Errorf("finish_reason = %q, want length", resp.Choices[0].FinishReason)
			}
			full, _ := json.Marshal(honest(t, text))
			if json.Valid([]byte(c)) || c == "" || !strings.HasPrefix(string(full), c) {
				t.Errorf("truncated reply %q is not a cut prefix of %s", c, full)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.fault), func(t *testing.T) {
			t.Parallel()
			for _, mode := range []string{"response_format", "tools"} {
				b := setup(t, tt.cfg)
				for _, text := range allTexts {
					req := formatRequest(extractionMessages(text))
					if mode == "tools" {
						req = toolsRequest(extractionMessages(text))
					}
					resp, content := b.call(t, req)
					if got := Fault(resp.Header().Get("X-Llmsim-Fault")); got != tt.fault {
						t.Fatalf("%s: X-Llmsim-Fault = %q, want %q", mode, got, tt.fault)
					}
					tt.check(t, text, resp, content)
				}
			}
		})
	}

	t.Run("NestedPaths", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []config.Simulator{{WrongTypeRate: 1}, {MissingRequiredRate: 1}, {UngroundedRate: 1}} {
			nested := ""
			for seed := int64(0); seed < 200 && nested == ""; seed++ {
				cfg.Seed = seed
				b := setup(t, cfg)
				resp, _ := b.call(t, formatRequest(extractionMessages(textItems)))
				if p := resp.Header().Get("X-Llmsim-Fault-Path"); strings.HasPrefix(p, "/items/") {
					nested = p
				}
			}
			if !regexp.MustCompile(`^/items/[01]/(sku|qty)$`).MatchString(nested) {
				t.Errorf("%+v: no fault hit /items/N/... in 200 seeds (last %q)", cfg, nested)
			}
		}
	})

	t.Run("OnlyFirstReply", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{TruncatedRate: 1, RepairFixRate: 1})
		msgs := append(extractionMessages(textOrder),
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: `{"intent":"other"}`},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: "/order_id: missing\nReturn the corrected JSON only. Use null if unsure."})
		resp, _ := b.call(t, formatRequest(msgs))
		if f := resp.Header().Get("X-Llmsim-Fault"); f != "none" || resp.Choices[0].FinishReason != openai.FinishReasonStop {
			t.Errorf("repair reply: fault %q, finish_reason %q; want none and stop", f, resp.Choices[0].FinishReason)
		}
	})
}

func testValidator(t *testing.T) *jsonschema.Schema {
	t.Helper()
	s, err := jsonschema.CompileString("test.json", testSchema)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const repairAsk = "Return the corrected JSON only. Use null if unsure."
const patchAsk = "Return only a JSON Patch (RFC 6902) array of add, remove or replace operations against your previous JSON that fixes these errors and touches nothing else. Use null if unsure."

// damaged is textDispute's record with three errors: a wrong type, a
// made-up account id, and a missing order id.
func damaged(t *testing.T) (doc map[string]any, errLines string) {
	d := honest(t, textDispute)
	d["full_name"] = float64(12)
	d["account_id"] = "ZZ99ZZ99ZZ"
	delete(d, "order_id")
	return d, "/account_id: value does not appear in the message; copy it exactly or use null\n" +
		"/full_name: got number, want string or null\n/order_id: missing property\n"
}

func repairMessages(prev, ask string) []openai.ChatCompletionMessage {
	return append(extractionMessages(textDispute),
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: prev},
		openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: ask})
}

func TestRepair(t *testing.T) {
	t.Parallel()
	want := honest(t, textDispute)

	t.Run("FixRateOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 3, RepairFixRate: 1})
		prev, lines := damaged(t)
		prevJSON, _ := json.Marshal(prev)
		resp, content := b.call(t, formatRequest(repairMessages(string(prevJSON), "Your JSON has these errors:\n"+lines+repairAsk)))
		if got := decode(t, content); !reflect.DeepEqual(got, want) {
			t.Errorf("repaired record\n got %v\nwant %v", got, want)
		}
		if a := resp.Header().Get("X-Llmsim-Attempt"); a != "2" {
			t.Errorf("X-Llmsim-Attempt = %q, want 2", a)
		}
		if f := resp.Header().Get("X-Llmsim-Fixed"); f != "/account_id,/full_name,/order_id" {
			t.Errorf("X-Llmsim-Fixed = %q", f)
		}
	})

	t.Run("FixRateZero", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{Seed: 3, RepairFixRate: 0})
		prev, lines := damaged(t)
		prevJSON, _ := json.Marshal(prev)
		_, content := b.call(t, formatRequest(repairMessages(string(prevJSON), "Your JSON has these errors:\n"+lines+repairAsk)))
		if got := decode(t, content); !reflect.DeepEqual(got, prev) {
			t.Errorf("fix rate 0 changed the record\n got %v\nwant %v", got, prev)
		}
	})

	t.Run("FromInjectedFault", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []config.Simulator{{WrongTypeRate: 1}, {MissingRequiredRate: 1}, {UngroundedRate: 1}} {
			cfg.RepairFixRate = 1
			b := setup(t, cfg)
			for _, text := range allTexts {
				resp, first := b.call(t, formatRequest(extractionMessages(text)))
				path := resp.Header().Get("X-Llmsim-Fault-Path")
				msgs := append(extractionMessages(text),
					openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: first},
					openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser,
						Content: "Your JSON has these errors:\n" + path + ": bad value\n" + repairAsk})
				_, fixed := b.call(t, formatRequest(msgs))
				if got, w := decode(t, fixed), honest(t, text); !reflect.DeepEqual(got, w) {
					t.Errorf("%+v %s: repaired\n got %v\nwant %v", cfg, path, got, w)
				}
			}
		}
	})

	t.Run("ParseError", func(t *testing.T) {
		t.Parallel()
		broken := "{'intent': 'refund',"
		ask := "Your JSON has these errors:\n/: reply is not a JSON object\n" + repairAsk
		fix := setup(t, config.Simulator{RepairFixRate: 1})
		if _, c := fix.call(t, formatRequest(repairMessages(broken, ask))); !reflect.DeepEqual(decode(t, c), want) {
			t.Errorf("fix rate 1 after a parse error = %s, want the honest record", c)
		}
		keep := setup(t, config.Simulator{RepairFixRate: 0})
		if _, c := keep.call(t, formatRequest(repairMessages(broken, ask))); c != broken {
			t.Errorf("fix rate 0 after a parse error = %q, want the broken reply again", c)
		}
	})

	t.Run("Tools", func(t *testing.T) {
		t.Parallel()
		b := setup(t, config.Simulator{RepairFixRate: 1})
		prev, lines := damaged(t)
		prevJSON, _ := json.Marshal(prev)
		msgs := append(extractionMessages(textDispute),
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{
				ID: "call_1", Type: openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: "record", Arguments: string(prevJSON)},
			}}},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: "call_1",
				Content: "Your JSON has these errors:\n" + lines + repairAsk})
		resp, args := b.call(t, toolsRequest(msgs))
		if len(resp.Choices[0].Message.ToolCalls) != 1 {
			t.Fatalf("repair in tools mode gave no tool call")
		}
		if got := decode(t, args); !reflect.DeepEqual(got, want) {
			t.Errorf("repaired record\n got %v\nwant %v", got, want)
		}
	})

	t.Run("Patch", func(t *testing.T) {
		t.Parallel()
		for _, rate := range []float64{1, 0.5, 0} {
			prev, lines := damaged(t)
			prevJSON, _ := json.Marshal(prev)
			cfg := config.Simulator{Seed: 11, RepairFixRate: rate}
			_, patchReply := setup(t, cfg).call(t, formatRequest(repairMessages(string(prevJSON), "Your JSON has these errors:\n"+lines+patchAsk)))
			_, whole := setup(t, cfg).call(t, formatRequest(repairMessages(string(prevJSON), "Your JSON has these errors:\n"+lines+repairAsk)))

			var ops []map[string]any
			if err := json.Unmarshal([]byte(patchReply), &ops); err != nil {
				t.Fatalf("rate %v: patch reply is not a JSON array: %v\n%s", rate, err, patchReply)
			}
			for _, op := range ops {
				switch op["op"] {
				case "add", "replace", "remove":
				default:
					t.Errorf("rate %v: op %v", rate, op)
				}
			}
			p, err := jsonpatch.DecodePatch([]byte(patchReply))
			if err != nil {
				t.Fatalf("rate %v: DecodePatch: %v", rate, err)
			}
			out, err := p.Apply(prevJSON)
			if err != nil {
				t.Fatalf("rate %v: Apply: %v\n%s", rate, err, patchReply)
			}
			if got, w := decode(t, string(out)), decode(t, whole); !reflect.DeepEqual(got, w) {
				t.Errorf("rate %v: patched record\n got %v\nwant the regenerated %v", rate, got, w)
			}
			if rate == 1 && !reflect.DeepEqual(decode(t, string(out)), want) {
				t.Errorf("rate 1: patched record is not the honest one: %s", out)
			}
			if rate == 0 && len(ops) != 0 {
				t.Errorf("rate 0: %d operations, want none", len(ops))
			}
		}
	})
}

func TestErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, config.Simulator{})

	raw := func(t *testing.T, method, path, body string) (int, apiError) {
		t.Helper()
		req, _ := http.NewRequest(method, b.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e apiError
		data, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(data, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.code() == "" {
			t.Errorf("%s %s: body %s is not an OpenAI error", method, path, data)
		}
		return resp.StatusCode, e
	}
	for _, tc := range []struct {
		name, method, path, body, code string
		status                         int
	}{
		{"BadJSON", "POST", "/v1/chat/completions", `{"model":`, "invalid_json", 400},
		{"NoModel", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, "missing_model", 400},
		{"NoMessages", "POST", "/v1/chat/completions", `{"model":"m","messages":[]}`, "missing_messages", 400},
		{"BadRole", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"robot","content":"hi"}]}`, "invalid_role", 400},
		{"NoUser", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"system","content":"hi"}]}`, "missing_user_message", 400},
		{"Stream", "POST", "/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "stream_unsupported", 400},
		{"NoSchema", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x"}}}`, "missing_schema", 400},
		{"UnknownTool", "POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"a","parameters":{}}}],"tool_choice":{"type":"function","function":{"name":"b"}}}`, "invalid_tool_choice", 400},
		{"WrongMethod", "GET", "/v1/chat/completions", ``, "method_not_allowed", 405},
		{"UnknownURL", "GET", "/v1/embeddings", ``, "unknown_url", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, e := raw(t, tc.method, tc.path, tc.body)
			if status != tc.status || e.Error.code() != tc.code {
				t.Errorf("status %d code %q, want %d %q (%s)", status, e.Error.code(), tc.status, tc.code, e.Error.Message)
			}
		})
	}

	t.Run("ClientSeesAPIError", func(t *testing.T) {
		req := toolsRequest(extractionMessages(textOrder))
		req.ToolChoice = openai.ToolChoice{Type: openai.ToolTypeFunction, Function: openai.ToolFunction{Name: "nope"}}
		_, err := b.client.CreateChatCompletion(context.Background(), req)
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 400 || apiErr.Type != "invalid_request_error" {
			t.Errorf("err = %v, want a 400 *openai.APIError", err)
		}
	})
}

func TestModelsAndHealth(t *testing.T) {
	t.Parallel()
	b := setup(t, config.Simulator{})
	models, err := b.client.ListModels(context.Background())
	if err != nil || len(models.Models) != 1 || models.Models[0].ID != DefaultModel {
		t.Errorf("ListModels = %+v, %v", models, err)
	}
	resp, err := http.Get(b.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || resp.StatusCode != 200 || h["status"] != "ok" {
		t.Errorf("healthz: %d %v %v", resp.StatusCode, h, err)
	}
}
