package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/extracttype"
)

// scripted is an OpenAI-compatible test server that answers each call with
// the next scripted reply and keeps every request.
type scripted struct {
	mu       sync.Mutex
	replies  []func(w http.ResponseWriter)
	requests []openai.ChatCompletionRequest
}

func content(s string) func(w http.ResponseWriter) {
	return reply(openai.ChatCompletionMessage{Role: "assistant", Content: s}, "stop")
}

func reply(m openai.ChatCompletionMessage, finish openai.FinishReason) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(openai.ChatCompletionResponse{
			ID: "x", Object: "chat.completion", Model: "test",
			Choices: []openai.ChatCompletionChoice{{Message: m, FinishReason: finish}},
			Usage:   openai.Usage{PromptTokens: 100, CompletionTokens: 20, TotalTokens: 120},
		})
	}
}

func status(code int) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		w.Write([]byte(`{"error":{"message":"boom","type":"server_error"}}`))
	}
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req openai.ChatCompletionRequest
	json.NewDecoder(r.Body).Decode(&req)
	s.mu.Lock()
	s.requests = append(s.requests, req)
	if len(s.replies) == 0 {
		s.mu.Unlock()
		status(500)(w)
		return
	}
	f := s.replies[0]
	s.replies = s.replies[1:]
	s.mu.Unlock()
	f(w)
}

type extractorBundle struct {
	srv *scripted
	ext *Extractor
	in  Input
}

func setupExtractor(t *testing.T, mode string, replies ...func(w http.ResponseWriter)) *extractorBundle {
	t.Helper()
	srv := &scripted{replies: replies}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	cfg := openai.DefaultConfig("test-key")
	cfg.BaseURL = hs.URL + "/v1"
	prompt, err := LoadPrompt("extract.v1")
	if err != nil {
		t.Fatal(err)
	}
	ext := NewExtractor(openai.NewClientWithConfig(cfg), ExtractorConfig{
		Model: "test", RequestMode: mode, MaxCompletionTokens: 256, ContextWindowTokens: 8192,
		Budget: Budget{MaxTokens: 4000, MaxCostUSD: 1},
		Price:  Price{InputPerMTok: 1, OutputPerMTok: 2}, PriceVersion: "p1",
	})
	return &extractorBundle{srv: srv, ext: ext, in: Input{Text: orderText, Schema: loadTestSchema(t), Prompt: prompt, Repair: RepairRegenerate}}
}

const (
	validJSON      = `{"intent":"status","order_id":"4821300017","account_id":"U85ALFLG2Z","email":"czhang14@email.com","items":[{"sku":"AB-123 45","qty":2}]}`
	ungroundedJSON = `{"intent":"status","order_id":"9999999999","account_id":"U85ALFLG2Z","email":"czhang14@email.com","items":[{"sku":"AB-123 45","qty":2}]}`
)

func TestExtractor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SucceededFirstPass", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, content(validJSON))
		res, err := b.ext.Process(ctx, b.in)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeSucceeded || len(res.Calls) != 1 || res.Data == nil {
			t.Fatalf("%+v", res)
		}
		if len(res.Evidence) != 4 {
			t.Fatalf("evidence %+v", res.Evidence)
		}
		c := res.Calls[0]
		if c.PromptTokens != 100 || c.CompletionTokens != 20 || c.CostUSD != (100*1+20*2)/1e6 || c.PriceVersion != "p1" || c.SchemaVersion != "1" || c.PromptVersion != "extract.v1" {
			t.Fatalf("call %+v", c)
		}
		req := b.srv.requests[0]
		if req.ResponseFormat == nil || req.ResponseFormat.Type != openai.ChatCompletionResponseFormatTypeJSONSchema {
			t.Fatal("no json_schema response_format")
		}
		if !strings.Contains(req.Messages[1].Content, "<message>\n"+orderText+"\n</message>") {
			t.Fatalf("user turn: %q", req.Messages[1].Content)
		}
	})

	t.Run("RepairedOnce", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, content("Sure! ```json\n"+ungroundedJSON+"\n```"), content(validJSON))
		res, err := b.ext.Process(ctx, b.in)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeRepaired || len(res.Calls) != 2 {
			t.Fatalf("%+v", res)
		}
		if res.Calls[0].Stripped != "fence,prose" || len(res.Calls[0].Errors) != 1 || res.Calls[0].Errors[0].Path != "/order_id" {
			t.Fatalf("first call %+v", res.Calls[0])
		}
		msgs := b.srv.requests[1].Messages
		if len(msgs) != 4 || msgs[2].Role != "assistant" || msgs[3].Role != "user" {
			t.Fatalf("repair turns %+v", msgs)
		}
		if !strings.Contains(msgs[2].Content, ungroundedJSON) {
			t.Fatal("bad reply not sent back as the assistant turn")
		}
		want := "Your JSON has these errors:\n/order_id: value does not appear in the message; copy it exactly or use null\nReturn the corrected JSON only. Use null if unsure."
		if msgs[3].Content != want {
			t.Fatalf("repair turn:\n%s\nwant:\n%s", msgs[3].Content, want)
		}
	})

	t.Run("FailedAfterOneRepair", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, content(ungroundedJSON), content(ungroundedJSON), content(validJSON))
		res, err := b.ext.Process(ctx, b.in)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeFailed || len(res.Calls) != 2 || len(b.srv.requests) != 2 || res.Data != nil {
			t.Fatalf("outcome %s calls %d requests %d", res.Outcome, len(res.Calls), len(b.srv.requests))
		}
		if res.Reason() != extracttype.KindRule {
			t.Fatalf("reason %s", res.Reason())
		}
	})

	t.Run("RepairPromptAtMostFiveLines", func(t *testing.T) {
		t.Parallel()
		bad := `{"intent":"x","order_id":1,"account_id":2,"email":3,"items":4,"extra":5}`
		b := setupExtractor(t, ModeResponseFormat, content(bad), content(validJSON))
		if _, err := b.ext.Process(ctx, b.in); err != nil {
			t.Fatal(err)
		}
		turn := b.srv.requests[1].Messages[3].Content
		if n := strings.Count(turn, "\n/"); n != 5 {
			t.Fatalf("%d error lines in\n%s", n, turn)
		}
	})

	t.Run("TruncatedNotRepaired", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, reply(openai.ChatCompletionMessage{Role: "assistant", Content: `{"intent":"st`}, openai.FinishReasonLength))
		res, err := b.ext.Process(ctx, b.in)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeFailed || res.Reason() != extracttype.KindTruncated || len(b.srv.requests) != 1 {
			t.Fatalf("%+v", res)
		}
	})

	t.Run("RefusalNotRepaired", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, reply(openai.ChatCompletionMessage{Role: "assistant", Refusal: "I can't help"}, "stop"))
		res, _ := b.ext.Process(ctx, b.in)
		if res.Reason() != extracttype.KindRefusal || len(b.srv.requests) != 1 {
			t.Fatalf("%+v", res)
		}
	})

	t.Run("EmptyInputNoCall", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, content(validJSON))
		b.in.Text = " \n\t "
		res, _ := b.ext.Process(ctx, b.in)
		if res.Reason() != extracttype.KindInput || len(b.srv.requests) != 0 || len(res.Calls) != 0 {
			t.Fatalf("%+v", res)
		}
	})

	t.Run("BudgetStopsRepairCall", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, content(ungroundedJSON), content(validJSON))
		first := b.ext.estimate([]openai.ChatCompletionMessage{
			{Content: b.in.Prompt.System(b.in.Schema.Title)}, {Content: b.in.Prompt.User(b.in.Text)}}, b.in.Schema.ModelSchema())
		b.ext.cfg.Budget.MaxTokens = first + 256 + 50 // the first call fits, the repair does not
		res, _ := b.ext.Process(ctx, b.in)
		if res.Reason() != extracttype.KindBudget || len(b.srv.requests) != 1 || len(res.Calls) != 1 {
			t.Fatalf("reason %s requests %d: %v", res.Reason(), len(b.srv.requests), res.Errors)
		}
	})

	t.Run("ToolModeSeveralCallsRepaired", func(t *testing.T) {
		t.Parallel()
		two := openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{
			{ID: "c1", Type: "function", Function: openai.FunctionCall{Name: toolName, Arguments: validJSON}},
			{ID: "c2", Type: "function", Function: openai.FunctionCall{Name: toolName, Arguments: ungroundedJSON}},
		}}
		quoted, _ := json.Marshal(validJSON) // arguments as a JSON string, decoded once
		one := openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{
			{ID: "c3", Type: "function", Function: openai.FunctionCall{Name: toolName, Arguments: string(quoted)}},
		}}
		b := setupExtractor(t, ModeTools, reply(two, "tool_calls"), reply(one, "tool_calls"))
		res, err := b.ext.Process(ctx, b.in)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeRepaired || res.Calls[0].Errors[0].Kind != extracttype.KindTool {
			t.Fatalf("%+v", res)
		}
		msgs := b.srv.requests[1].Messages
		if len(msgs) != 5 || msgs[3].Role != "tool" || msgs[3].ToolCallID != "c1" || msgs[4].ToolCallID != "c2" {
			t.Fatalf("tool repair turns %+v", msgs)
		}
		if len(b.srv.requests[0].Tools) != 1 || b.srv.requests[0].ResponseFormat != nil {
			t.Fatal("tool mode request")
		}
	})

	t.Run("TransportErrorIsReturned", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, status(503))
		_, err := b.ext.Process(ctx, b.in)
		var te *TransportError
		if !errors.As(err, &te) || te.StatusCode != 503 || !te.Retryable() {
			t.Fatalf("err %v", err)
		}
	})

	t.Run("PatchRepair", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, content(ungroundedJSON), content(`[{"op":"replace","path":"/order_id","value":"4821300017"}]`))
		b.in.Repair = RepairPatch
		res, err := b.ext.Process(ctx, b.in)
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != OutcomeRepaired || res.Patch == nil {
			t.Fatalf("%+v", res)
		}
		if !strings.Contains(b.srv.requests[1].Messages[3].Content, "JSON Patch") {
			t.Fatal("patch instruction missing")
		}
	})

	t.Run("PatchTouchingOtherFieldIsInvalid", func(t *testing.T) {
		t.Parallel()
		b := setupExtractor(t, ModeResponseFormat, content(ungroundedJSON), content(`[{"op":"replace","path":"/order_id","value":null},{"op":"replace","path":"/intent","value":"refund"}]`))
		b.in.Repair = RepairPatch
		res, _ := b.ext.Process(ctx, b.in)
		if res.Outcome != OutcomeFailed || res.Reason() != extracttype.KindPatchInvalid {
			t.Fatalf("%+v", res)
		}
	})
}

func TestApplyRepairPatch(t *testing.T) {
	t.Parallel()
	doc := decode(t, `{"a":1,"b":{"c":[1,2]},"d":"x"}`)
	flagged := extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: "/b/c"}, {Kind: extracttype.KindRule, Path: "/d"}}
	for name, tc := range map[string]struct {
		patch string
		ok    bool
	}{
		"ReplaceWithNull":   {`[{"op":"replace","path":"/d","value":null}]`, true},
		"AddBelowFlagged":   {`[{"op":"add","path":"/b/c/-","value":3}]`, true},
		"RemoveFlagged":     {`[{"op":"remove","path":"/d"}]`, true},
		"EmptyIsNoOp":       {`[]`, true},
		"OtherField":        {`[{"op":"replace","path":"/a","value":2}]`, false},
		"WholeDocument":     {`[{"op":"replace","path":"","value":{}}]`, false},
		"Move":              {`[{"op":"move","from":"/d","path":"/b/c"}]`, false},
		"ReplaceNoValue":    {`[{"op":"replace","path":"/d"}]`, false},
		"BadPointer":        {`[{"op":"replace","path":"d","value":1}]`, false},
		"BadEscape":         {`[{"op":"replace","path":"/d~2","value":1}]`, false},
		"NegativeIndex":     {`[{"op":"replace","path":"/b/c/-1","value":1}]`, false},
		"DoesNotApply":      {`[{"op":"remove","path":"/b/c/9"}]`, false},
		"NotAnArray":        {`{"op":"remove","path":"/d"}`, false},
		"PrefixIsNotParent": {`[{"op":"replace","path":"/dd","value":1}]`, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, errs := ApplyRepairPatch(doc, []byte(tc.patch), flagged)
			if tc.ok != (len(errs) == 0) {
				t.Fatalf("errs %v", errs)
			}
			if !tc.ok && errs[0].Kind != extracttype.KindPatchInvalid {
				t.Fatalf("kind %s", errs[0].Kind)
			}
		})
	}
}

// TestApplyRepairPatchMessageHoldsNoReplyText checks that a refused
// patch's message names no path or op the model wrote: the message is
// stored in failure_events and the triage item's errors, which the analyst
// role reads and erasure keeps, and a model-written key may be the
// customer's words (pipeline.Schema.FieldPath folds such keys out of the
// path, not out of the message).
func TestApplyRepairPatchMessageHoldsNoReplyText(t *testing.T) {
	t.Parallel()
	doc := decode(t, `{"a":1,"d":"x"}`)
	flagged := extracttype.ErrorList{{Kind: extracttype.KindRule, Path: "/d"}}
	for name, patch := range map[string]string{
		"PathNotFlagged": `[{"op":"replace","path":"/Chloe Zhang 4111111111111111","value":1}]`,
		"UnknownOp":      `[{"op":"Chloe Zhang 4111111111111111","path":"/d","value":1}]`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, errs := ApplyRepairPatch(doc, []byte(patch), flagged)
			if len(errs) != 1 || errs[0].Kind != extracttype.KindPatchInvalid {
				t.Fatalf("errs %v, want one %s", errs, extracttype.KindPatchInvalid)
			}
			if m := errs[0].Message; strings.Contains(m, "Chloe") || strings.Contains(m, "4111") {
				t.Fatalf("message %q holds the reply's text", m)
			}
		})
	}
}

func FuzzApplyRepairPatch(f *testing.F) {
	for _, s := range []string{`[{"op":"replace","path":"/d","value":null}]`, `[]`, `[{"op":"add","path":"/b/c/0","value":{"x":[1]}}]`, `[{"op":"remove","path":"/b"}]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, patch string) {
		doc := map[string]any{"a": json.Number("1"), "b": map[string]any{"c": []any{json.Number("1")}}, "d": "x"}
		out, errs := ApplyRepairPatch(doc, []byte(patch), extracttype.ErrorList{{Path: "/b"}, {Path: "/d"}})
		if len(errs) == 0 {
			m, ok := out.(map[string]any)
			if !ok {
				t.Fatalf("patched document is %T", out)
			}
			if m["a"] != json.Number("1") {
				t.Fatalf("unflagged field changed: %v", m["a"])
			}
		}
	})
}

func TestIsBlank(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"":                   true,
		" \t\n\u00a0\u3000":  true,
		"\u200b\u200c\u200d": true, // zero-width space, non-joiner, joiner
		"\ufeff\u2060\u00ad": true, // byte-order mark, word joiner, soft hyphen
		"\u034f\ufe0f\u3164": true, // combining grapheme joiner, variation selector, Hangul filler
		"\u200bx":            false,
		"\u0301":             false, // a combining accent is visible on its own
		".":                  false,
	} {
		if got := IsBlank(s); got != want {
			t.Errorf("IsBlank(%+q) = %v, want %v", s, got, want)
		}
	}
}

// A lone surrogate is reported at the field that holds it, a key at its
// own path.
func TestLoneSurrogateAtItsPath(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, reply string
		want        []string
	}{
		{"Value", strings.Replace(validJSON, `"czhang14@email.com"`, `"czhang14\ud800@email.com"`, 1), []string{"/email"}},
		{"InArray", strings.Replace(validJSON, `"AB-123 45"`, `"AB\udc00-123 45"`, 1), []string{"/items/0/sku"}},
		{"Key", strings.Replace(validJSON, `"intent"`, `"int\ud800ent"`, 1), []string{"/int\ufffdent"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupExtractor(t, ModeResponseFormat, content(tt.reply))
			_, errs, _, _ := b.ext.check(openai.ChatCompletionResponse{Choices: []openai.ChatCompletionChoice{{
				Message: openai.ChatCompletionMessage{Content: tt.reply}, FinishReason: "stop"}}}, b.in, &runText{text: b.in.Text})
			var got []string
			for _, e := range errs {
				if e.Keyword != "surrogate" || e.Kind != extracttype.KindRule {
					t.Errorf("error %+v, want a surrogate rule error", e)
				}
				got = append(got, e.Path)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("paths %q, want %q", got, tt.want)
			}
		})
	}
}
