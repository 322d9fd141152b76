package store_test

import (
	"testing"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// The analyst views (migration 000017, docs/views.md) agree with the
// store's own figures: batch_summary and batch_cost with BatchSummary,
// triage_backlog with the open items; field_failures holds field errors
// only (with their keyword) and reply_failures the whole-reply ones.
func TestAnalystViews(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batch := batchFixture(ctx, t, st, tx)
	if err := st.RunOutcomeInsert(ctx, tx, succeededOutcome(messageFixture(ctx, t, st, tx, batch))); err != nil {
		t.Fatal(err)
	}
	failed := failedOutcome(messageFixture(ctx, t, st, tx, batch))
	whole := extracttype.Errorf(extracttype.KindParse, "", "", "no JSON object in the reply")
	failed.Failures = append(failed.Failures, store.FailureEvent{CallIndex: 1, Err: whole})
	if err := st.RunOutcomeInsert(ctx, tx, failed); err != nil {
		t.Fatal(err)
	}
	messageFixture(ctx, t, st, tx, batch) // queued
	want, err := st.BatchSummary(ctx, tx, batch)
	if err != nil {
		t.Fatal(err)
	}

	var got store.BatchSummary
	if err := tx.QueryRow(ctx, `SELECT messages, queued, succeeded, repaired, failed, llm_calls, prompt_tokens, completion_tokens, cost_usd::float8
		FROM batch_summary WHERE batch_id = $1`, batch).Scan(&got.Messages, &got.Queued, &got.Succeeded, &got.Repaired, &got.Failed,
		&got.LLMCalls, &got.PromptTokens, &got.CompletionTokens, &got.CostUSD); err != nil {
		t.Fatal(err)
	}
	if got.Messages != 3 || got.Messages != want.Messages || got.Queued != want.Queued || got.Succeeded != want.Succeeded ||
		got.Failed != want.Failed || got.LLMCalls != want.LLMCalls || got.PromptTokens != want.PromptTokens || got.CostUSD != want.CostUSD {
		t.Errorf("batch_summary = %+v, BatchSummary = %+v", got, want)
	}

	var calls, runs, repairs int
	var cost float64
	if err := tx.QueryRow(ctx, `SELECT sum(calls), sum(runs), sum(repair_calls), sum(cost_usd)::float8 FROM batch_cost
		WHERE batch_id = $1 AND prompt_version = 'extract.v1' AND model = 'sim-1'`, batch).Scan(&calls, &runs, &repairs, &cost); err != nil {
		t.Fatal(err)
	}
	if calls != want.LLMCalls || runs != 2 || repairs != 1 || cost != want.CostUSD {
		t.Errorf("batch_cost: %d calls, %d runs, %d repairs, $%v; want %d, 2, 1, $%v", calls, runs, repairs, cost, want.LLMCalls, want.CostUSD)
	}

	var open int
	if err := tx.QueryRow(ctx, `SELECT open FROM triage_backlog WHERE schema_id = 'support_ticket'`).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if n, err := st.TriageOpenCount(ctx, tx); err != nil || open != 1 || n != open {
		t.Errorf("triage_backlog open = %d, TriageOpenCount %d (%v), want 1", open, n, err)
	}

	rows, err := tx.Query(ctx, `SELECT path_pattern, kind, keyword, errors FROM field_failures WHERE schema_id = 'support_ticket' ORDER BY path_pattern`)
	if err != nil {
		t.Fatal(err)
	}
	type ff struct {
		path, kind, keyword string
		errors              int
	}
	var fields []ff
	for rows.Next() {
		var f ff
		if err := rows.Scan(&f.path, &f.kind, &f.keyword, &f.errors); err != nil {
			t.Fatal(err)
		}
		fields = append(fields, f)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	wantFields := []ff{{"/items/*/sku", "schema", "pattern", 2}, {"/order_id", "rule", "grounded", 1}}
	if len(fields) != len(wantFields) || fields[0] != wantFields[0] || fields[1] != wantFields[1] {
		t.Errorf("field_failures = %+v, want %+v", fields, wantFields)
	}
	var kind string
	var n int
	if err := tx.QueryRow(ctx, `SELECT kind, errors FROM reply_failures WHERE schema_id = 'support_ticket'`).Scan(&kind, &n); err != nil || kind != "parse" || n != 1 {
		t.Errorf("reply_failures: %s %d (%v), want the one parse error", kind, n, err)
	}
}
