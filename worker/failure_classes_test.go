package worker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/store"
)

// scriptedLLM answers each chat call with the next scripted message.
type scriptedLLM struct {
	mu      sync.Mutex
	replies []openai.ChatCompletionChoice
}

func (s *scriptedLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if len(s.replies) == 0 {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"error":{"message":"script exhausted","type":"server_error"}}`))
		return
	}
	c := s.replies[0]
	s.replies = s.replies[1:]
	json.NewEncoder(w).Encode(openai.ChatCompletionResponse{
		ID: "x", Object: "chat.completion", Model: "extractq-sim-1", Choices: []openai.ChatCompletionChoice{c},
		Usage: openai.Usage{PromptTokens: 1000, CompletionTokens: 100, TotalTokens: 1100},
	})
}

func text(s string) openai.ChatCompletionChoice {
	return openai.ChatCompletionChoice{Message: openai.ChatCompletionMessage{Role: "assistant", Content: s}, FinishReason: "stop"}
}

const classText = "hi, order 4821300017 never arrived, my account id is U85ALFLG2Z"

// record returns a valid customer_message record with the given overrides.
func record(t *testing.T, over map[string]any) string {
	t.Helper()
	r := map[string]any{"intent": "missing", "flow": "shipping_issue", "full_name": nil, "account_id": "U85ALFLG2Z", "username": nil,
		"email": nil, "phone": nil, "membership_level": nil, "order_id": "4821300017", "zip_code": nil,
		"street_address": nil, "city": nil, "state": nil, "payment_method": nil, "purchase_date": nil,
		"refund_amount": nil, "product_names": nil}
	for k, v := range over {
		if v == "<delete>" {
			delete(r, k)
			continue
		}
		r[k] = v
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFailureClasses drives each failure class through the worker with a
// scripted provider over HTTP and checks what was stored.
func TestFailureClasses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		opts       setupOpts
		repair     string
		replies    func(t *testing.T) []openai.ChatCompletionChoice
		status     string
		reason     extracttype.Kind
		calls      int
		eventKinds []string // kinds of the failure events, in call order
		patch      bool
	}{
		{name: "Succeeded", replies: func(t *testing.T) []openai.ChatCompletionChoice {
			return []openai.ChatCompletionChoice{text(record(t, nil))}
		}, status: store.RunSucceeded, calls: 1},
		{name: "UngroundedRepaired", replies: func(t *testing.T) []openai.ChatCompletionChoice {
			return []openai.ChatCompletionChoice{text(record(t, map[string]any{"order_id": "1111111111"})), text(record(t, nil))}
		}, status: store.RunRepaired, calls: 2, eventKinds: []string{"rule"}},
		{name: "MissingRequiredFailsAfterOneRepair", replies: func(t *testing.T) []openai.ChatCompletionChoice {
			bad := record(t, map[string]any{"order_id": "<delete>"})
			return []openai.ChatCompletionChoice{text(bad), text(bad), text(record(t, nil))}
		}, status: store.RunFailed, reason: extracttype.KindSchema, calls: 2, eventKinds: []string{"schema", "schema"}},
		{name: "TruncatedNotRepaired", replies: func(t *testing.T) []openai.ChatCompletionChoice {
			return []openai.ChatCompletionChoice{{Message: openai.ChatCompletionMessage{Role: "assistant", Content: `{"intent":"miss`}, FinishReason: "length"}}
		}, status: store.RunFailed, reason: extracttype.KindTruncated, calls: 1, eventKinds: []string{"truncated"}},
		{name: "ContentFilterIsRefusal", replies: func(t *testing.T) []openai.ChatCompletionChoice {
			return []openai.ChatCompletionChoice{{Message: openai.ChatCompletionMessage{Role: "assistant"}, FinishReason: "content_filter"}}
		}, status: store.RunFailed, reason: extracttype.KindRefusal, calls: 1, eventKinds: []string{"refusal"}},
		{name: "NotJSONRepaired", replies: func(t *testing.T) []openai.ChatCompletionChoice {
			return []openai.ChatCompletionChoice{text("I could not find anything."), text("```json\n" + record(t, nil) + "\n```")}
		}, status: store.RunRepaired, calls: 2, eventKinds: []string{"parse"}},
		{name: "PatchRepairStored", repair: pipeline.RepairPatch, replies: func(t *testing.T) []openai.ChatCompletionChoice {
			return []openai.ChatCompletionChoice{text(record(t, map[string]any{"order_id": "1111111111"})),
				text(`[{"op":"replace","path":"/order_id","value":"4821300017"}]`)}
		}, status: store.RunRepaired, calls: 2, eventKinds: []string{"rule"}, patch: true},
		{name: "PatchOutsideFlaggedPaths", repair: pipeline.RepairPatch, replies: func(t *testing.T) []openai.ChatCompletionChoice {
			return []openai.ChatCompletionChoice{text(record(t, map[string]any{"order_id": "1111111111"})),
				text(`[{"op":"replace","path":"/intent","value":"cost"}]`)}
		}, status: store.RunFailed, reason: extracttype.KindPatchInvalid, calls: 2, eventKinds: []string{"rule", "patch_invalid"}},
		// Bad model replies: each ends as a result or a triage item, and the
		// outcome transaction never fails on what Postgres cannot store.
		{name: "DeeplyNestedReply", replies: func(t *testing.T) []openai.ChatCompletionChoice {
			return []openai.ChatCompletionChoice{text(strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)), text(record(t, nil))}
		}, status: store.RunRepaired, calls: 2, eventKinds: []string{"parse"}},
		{name: "HugeReply", replies: func(t *testing.T) []openai.ChatCompletionChoice {
			// Too large to parse, and too large to send back for the repair
			// within the budget: it fails at once.
			return []openai.ChatCompletionChoice{text(`{"intent":"` + strings.Repeat("x", 2<<20) + `"}`), text(record(t, nil))}
		}, status: store.RunFailed, reason: extracttype.KindBudget, calls: 1, eventKinds: []string{"parse"}},
		{name: "NULInsideAString", replies: func(t *testing.T) []openai.ChatCompletionChoice {
			return []openai.ChatCompletionChoice{text(strings.Replace(record(t, nil), `"city":null`, `"city":"Ber\u0000lin"`, 1)), text(record(t, nil))}
		}, status: store.RunRepaired, calls: 2, eventKinds: []string{"rule", "rule"}},
		{name: "LoneSurrogateTwice", replies: func(t *testing.T) []openai.ChatCompletionChoice {
			bad := strings.Replace(record(t, nil), `"city":null`, `"city":"\ud800"`, 1)
			return []openai.ChatCompletionChoice{text(bad), text(bad)}
		}, status: store.RunFailed, reason: extracttype.KindRule, calls: 2, eventKinds: []string{"rule", "rule"}},
		{name: "NumberPastFloat64", replies: func(t *testing.T) []openai.ChatCompletionChoice {
			bad := strings.Replace(record(t, nil), `"refund_amount":null`, `"refund_amount":1e400`, 1)
			return []openai.ChatCompletionChoice{text(bad), text(record(t, nil))}
		}, status: store.RunRepaired, calls: 2, eventKinds: []string{"schema"}},
		{name: "EmptyReplyTwice", replies: func(t *testing.T) []openai.ChatCompletionChoice {
			return []openai.ChatCompletionChoice{text(""), text("   ")}
		}, status: store.RunFailed, reason: extracttype.KindParse, calls: 2, eventKinds: []string{"parse", "parse"}},
		{name: "ToolModeSeveralCallsRepaired", opts: setupOpts{mode: pipeline.ModeTools}, replies: func(t *testing.T) []openai.ChatCompletionChoice {
			call := func(id, name, args string) openai.ToolCall {
				return openai.ToolCall{ID: id, Type: "function", Function: openai.FunctionCall{Name: name, Arguments: args}}
			}
			return []openai.ChatCompletionChoice{
				{Message: openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{
					call("a", "record_extraction", record(t, nil)), call("b", "record_extraction", record(t, nil))}}, FinishReason: "tool_calls"},
				{Message: openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{
					call("c", "record_extraction", record(t, nil))}}, FinishReason: "tool_calls"},
			}
		}, status: store.RunRepaired, calls: 2, eventKinds: []string{"tool"}},
		{name: "ToolModeWrongToolFails", opts: setupOpts{mode: pipeline.ModeTools}, replies: func(t *testing.T) []openai.ChatCompletionChoice {
			wrong := openai.ChatCompletionChoice{Message: openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{
				{ID: "a", Type: "function", Function: openai.FunctionCall{Name: "lookup_order", Arguments: "{}"}}}}, FinishReason: "tool_calls"}
			return []openai.ChatCompletionChoice{wrong, wrong}
		}, status: store.RunFailed, reason: extracttype.KindTool, calls: 2, eventKinds: []string{"tool", "tool"}},
		{name: "BudgetStopsTheRepair", opts: setupOpts{maxTokens: 3500}, replies: func(t *testing.T) []openai.ChatCompletionChoice {
			// The first call fits the estimate; after it used 1,100 tokens the
			// repair's estimate does not.
			return []openai.ChatCompletionChoice{text(record(t, map[string]any{"order_id": "1111111111"})), text(record(t, nil))}
		}, status: store.RunFailed, reason: extracttype.KindBudget, calls: 1, eventKinds: []string{"rule"}},
		{name: "OverContextNoCall", opts: setupOpts{contextWin: 1200}, replies: func(t *testing.T) []openai.ChatCompletionChoice {
			return []openai.ChatCompletionChoice{text(record(t, nil))}
		}, status: store.RunFailed, reason: extracttype.KindInput, calls: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := tc.opts
			o.handler, o.repair = &scriptedLLM{replies: tc.replies(t)}, tc.repair
			b := setup(t, o)
			sum := b.ingestReader(t, strings.NewReader(`{"id":"c1","text":"`+classText+`"}`+"\n"))
			b.wait(t, sum.BatchID)
			ctx := context.Background()
			var status string
			if err := b.st.Pool.QueryRow(ctx, `SELECT status FROM runs`).Scan(&status); err != nil {
				t.Fatal(err)
			}
			if status != tc.status {
				t.Fatalf("status %s, want %s", status, tc.status)
			}
			if n := b.count(t, `SELECT count(*) FROM llm_calls`); n != tc.calls || int64(n) != b.calls.Load() {
				t.Fatalf("%d calls stored, %d made, want %d", n, b.calls.Load(), tc.calls)
			}
			if n := b.count(t, `SELECT count(*) FROM llm_calls WHERE cost_usd > 0 AND prompt_tokens = 1000 AND price_version <> ''`); n != tc.calls {
				t.Fatalf("%d calls with cost and price version", n)
			}
			rows, err := b.st.Pool.Query(ctx, `SELECT f.kind FROM failure_events f JOIN llm_calls c ON c.id = f.llm_call_id ORDER BY c.attempt, f.id`)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for rows.Next() {
				var k string
				rows.Scan(&k)
				kinds = append(kinds, k)
			}
			if strings.Join(kinds, ",") != strings.Join(tc.eventKinds, ",") {
				t.Fatalf("failure events %v, want %v", kinds, tc.eventKinds)
			}
			if tc.status == store.RunFailed {
				items, err := b.st.TriageItemList(ctx, b.st.Pool, store.TriageItemListParams{})
				if err != nil || len(items) != 1 || items[0].Reason != string(tc.reason) {
					t.Fatalf("triage %+v %v, want reason %s", items, err, tc.reason)
				}
				want := 0
				if tc.reason == extracttype.KindBudget || tc.reason == extracttype.KindInput {
					want = 1 // an error no call produced
				}
				if n := b.count(t, `SELECT count(*) FROM failure_events WHERE llm_call_id IS NULL AND kind = $1`, string(tc.reason)); n != want {
					t.Fatalf("%d call-less %s events, want %d", n, tc.reason, want)
				}
				if n := b.count(t, `SELECT count(*) FROM extractions`); n != 0 {
					t.Fatal("failed run has an extraction")
				}
			} else if n := b.count(t, `SELECT count(*) FROM extractions WHERE jsonb_array_length(evidence) = 2`); n != 1 {
				t.Fatalf("want one extraction with evidence for order_id and account_id, got %d", n)
			}
			if got := b.count(t, `SELECT count(*) FROM llm_calls WHERE patch IS NOT NULL`); (got == 1) != tc.patch {
				t.Fatalf("%d calls with a stored patch", got)
			}
		})
	}
}
