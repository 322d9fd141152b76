package store_test

import (
	"slices"
	"strings"
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

// field_failures and reply_failures count by cohort (migration 000020):
// a run of another prompt version, schema version and model is a row of
// its own, and the cohort columns come last.
func TestAnalystViewCohorts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batch := batchFixture(ctx, t, st, tx)
	whole := extracttype.Errorf(extracttype.KindParse, "", "", "no JSON object in the reply")
	for _, v := range []struct{ schema, prompt, model string }{{"1", "extract.v1", "sim-1"}, {"2", "extract.v2@abc123", "sim-2"}} {
		o := failedOutcome(messageFixture(ctx, t, st, tx, batch))
		o.SchemaVersion = v.schema
		for i := range o.Calls {
			o.Calls[i].PromptVersion, o.Calls[i].Model = v.prompt, v.model
		}
		o.Failures = append(o.Failures, store.FailureEvent{CallIndex: 1, Err: whole})
		if err := st.RunOutcomeInsert(ctx, tx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, view := range []string{"field_failures", "reply_failures"} {
		var cols []string
		rows, err := tx.Query(ctx, `SELECT column_name FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, view)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				t.Fatal(err)
			}
			cols = append(cols, c)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(cols) < 3 || strings.Join(cols[len(cols)-3:], ",") != "schema_version,prompt_version,model" {
			t.Errorf("%s columns %v: want schema_version, prompt_version, model last", view, cols)
		}
	}

	type row struct {
		schemaVersion, prompt, model string
		errors, runs                 int
	}
	read := func(q string) []row {
		t.Helper()
		rows, err := tx.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var out []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.schemaVersion, &r.prompt, &r.model, &r.errors, &r.runs); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := []row{{"1", "extract.v1", "sim-1", 2, 1}, {"2", "extract.v2@abc123", "sim-2", 2, 1}}
	got := read(`SELECT schema_version, prompt_version, model, errors, runs FROM field_failures
		WHERE schema_id = 'support_ticket' AND path_pattern = '/items/*/sku' ORDER BY prompt_version`)
	if !slices.Equal(got, want) {
		t.Errorf("field_failures of /items/*/sku by cohort = %+v, want %+v", got, want)
	}
	want = []row{{"1", "extract.v1", "sim-1", 1, 1}, {"2", "extract.v2@abc123", "sim-2", 1, 1}}
	got = read(`SELECT schema_version, prompt_version, model, errors, runs FROM reply_failures
		WHERE schema_id = 'support_ticket' ORDER BY prompt_version`)
	if !slices.Equal(got, want) {
		t.Errorf("reply_failures by cohort = %+v, want %+v", got, want)
	}
}
