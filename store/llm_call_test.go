package store_test

import (
	"errors"
	"math"
	"testing"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestLLMCallLedger: every paid call is in llm_calls with its cached
// tokens and whether its usage was estimated, the calls of a nak'ed
// delivery included; the batch's counts read them, and the run's outcome
// is read from its own calls only.
func TestLLMCallLedger(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	batch := batchFixture(ctx, t, st, st.Pool)

	type row struct {
		attempt, prompt, cached, completion, status, bytes int
		estimated, superseded, valid                       bool
		finish, reply                                      string
	}
	rows := func(r store.Run) []row {
		t.Helper()
		q, err := st.Pool.Query(ctx, `SELECT attempt, prompt_tokens, cached_tokens, completion_tokens, http_status, reply_bytes,
			usage_estimated, superseded, valid, finish_reason, reply FROM llm_calls WHERE message_id = $1 AND run_no = $2 ORDER BY id`,
			r.MessageID, r.RunNo)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		var out []row
		for q.Next() {
			var x row
			if err := q.Scan(&x.attempt, &x.prompt, &x.cached, &x.completion, &x.status, &x.bytes, &x.estimated, &x.superseded,
				&x.valid, &x.finish, &x.reply); err != nil {
				t.Fatal(err)
			}
			out = append(out, x)
		}
		if err := q.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}

	// Run a: an outcome whose call reports cached tokens, and one whose
	// reply had no usage.
	a := messageFixture(ctx, t, st, st.Pool, batch)
	pa := failedOutcome(a)
	pa.Calls[0].CachedTokens = 256
	pa.Calls[1].UsageEstimated = true
	if err := st.RunOutcomeInsert(ctx, st.Pool, pa); err != nil {
		t.Fatal(err)
	}
	got := rows(a)
	if len(got) != 2 || got[0].cached != 256 || got[0].estimated || got[1].cached != 0 || !got[1].estimated || got[0].superseded || got[1].superseded {
		t.Fatalf("outcome calls %+v", got)
	}

	// Run b: its first delivery's extract was invalid and the repair's
	// reply could not be decoded; the delivery was nak'ed. Its calls are
	// written on their own, before any outcome.
	b := messageFixture(ctx, t, st, st.Pool, batch)
	nakd := store.LLMCallInsertSupersededParams{MessageID: b.MessageID, RunNo: b.RunNo, SchemaID: "support_ticket", SchemaVersion: "1",
		Calls: []store.LLMCall{
			{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "tools", PromptTokens: 300, CachedTokens: 128,
				CompletionTokens: 50, CostUSD: 0.001, LatencyMS: 10, FinishReason: "stop", Reply: `{"order_id":"1"}`, ErrorCount: 2},
			{Attempt: 2, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "tools", RepairStrategy: "regenerate",
				PromptTokens: 380, CompletionTokens: 9, UsageEstimated: true, CostUSD: 0.0009, LatencyMS: 11,
				FinishReason: "undecodable", HTTPStatus: 200, ReplyBytes: 36, Reply: "{\"choices\":[{\"message\":{\"content\":7}}]}\x00"},
		}}
	if err := st.LLMCallInsertSuperseded(ctx, st.Pool, nakd); err != nil {
		t.Fatal(err)
	}
	got = rows(b)
	if len(got) != 2 || !got[0].superseded || !got[1].superseded || got[0].cached != 128 || got[1].status != 200 || got[1].bytes != 36 ||
		!got[1].estimated || got[1].finish != "undecodable" || got[1].valid || got[1].reply != "{\"choices\":[{\"message\":{\"content\":7}}]}\uFFFD" {
		t.Fatalf("superseded calls %+v", got)
	}
	var status string
	if err := st.Pool.QueryRow(ctx, `SELECT status FROM runs WHERE message_id = $1`, b.MessageID).Scan(&status); err != nil || status != store.RunQueued {
		t.Fatalf("run after its superseded calls: %s, %v; want still queued", status, err)
	}
	// Its redelivery succeeds: its calls come on top.
	if err := st.RunOutcomeInsert(ctx, st.Pool, succeededOutcome(b)); err != nil {
		t.Fatal(err)
	}
	got = rows(b)
	if len(got) != 3 || got[2].superseded || got[2].attempt != 1 || !got[2].valid {
		t.Fatalf("calls after the redelivery %+v", got)
	}

	// The batch counts every paid call; the accounting reads each latest
	// run's outcome from its own calls (b succeeded at its first pass).
	sum, err := st.BatchSummary(ctx, st.Pool, batch)
	if err != nil {
		t.Fatal(err)
	}
	if sum.LLMCalls != 5 || sum.UsageEstimatedCalls != 2 || sum.PromptTokens != 300+400+300+380+100 || sum.CachedTokens != 256+128 ||
		sum.CompletionTokens != 50+30+50+9+20 || math.Abs(sum.CostUSD-(0.001+0.002+0.001+0.0009+0.00012)) > 1e-9 {
		t.Fatalf("summary %+v", sum)
	}
	acc, err := st.BatchAccountingGet(ctx, st.Pool, batch)
	if err != nil {
		t.Fatal(err)
	}
	if acc.Runs != 2 || acc.FirstPassFailures != 1 || acc.RepairCalls != 2 || acc.Failed != 1 || math.Abs(acc.CostUSD-sum.CostUSD) > 1e-9 {
		t.Fatalf("accounting %+v", acc)
	}
	list, err := st.BatchList(ctx, st.Pool, store.BatchListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].LLMCalls != 5 || list[0].UsageEstimatedCalls != 2 {
		t.Fatalf("batch list %+v", list)
	}

	// No calls write nothing; an unknown run is refused; calls that share
	// an attempt cannot be written in one statement.
	if err := st.LLMCallInsertSuperseded(ctx, st.Pool, store.LLMCallInsertSupersededParams{MessageID: b.MessageID, RunNo: 1}); err != nil {
		t.Errorf("no calls: %v", err)
	}
	unknown := nakd
	unknown.RunNo = 7
	if err := st.LLMCallInsertSuperseded(ctx, st.Pool, unknown); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown run: %v, want ErrNotFound", err)
	}
	twice := nakd
	twice.Calls = []store.LLMCall{nakd.Calls[0], nakd.Calls[0]}
	if err := st.LLMCallInsertSuperseded(ctx, st.Pool, twice); err == nil {
		t.Error("two calls with one attempt: no error")
	}
	if n := count(ctx, t, st.Pool, "llm_calls", b.MessageID); n != 3 {
		t.Errorf("%d calls of b after the refused writes, want 3", n)
	}
}

// TestTriageItemCallsOfTheOutcome: a failed run's item shows the calls of
// the delivery that decided it, not those of a delivery nak'ed before.
func TestTriageItemCallsOfTheOutcome(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	batch := batchFixture(ctx, t, st, st.Pool)
	r := messageFixture(ctx, t, st, st.Pool, batch)
	if err := st.LLMCallInsertSuperseded(ctx, st.Pool, undecodableCall(r)); err != nil {
		t.Fatal(err)
	}
	p := failedOutcome(r)
	p.Calls[0].CachedTokens, p.Calls[1].UsageEstimated = 64, true
	if err := st.RunOutcomeInsert(ctx, st.Pool, p); err != nil {
		t.Fatal(err)
	}
	ref, err := st.TriageItemOfRun(ctx, st.Pool, r.MessageID, r.RunNo)
	if err != nil {
		t.Fatal(err)
	}
	d, err := st.TriageItemGet(ctx, st.Pool, ref.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Calls) != 2 || d.Calls[0].FinishReason != "stop" || d.Calls[0].CachedTokens != 64 || !d.Calls[1].UsageEstimated {
		t.Fatalf("item calls %+v", d.Calls)
	}
}
