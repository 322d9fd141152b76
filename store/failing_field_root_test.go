package store_test

import (
	"errors"
	"testing"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestFailingFieldsRootPath: an error about the whole reply (a parse
// error, path "") is reported at "/" by the analytics views.
func TestFailingFieldsRootPath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	run := messageFixture(ctx, t, st, tx, batchFixture(ctx, t, st, tx))
	p := failedOutcome(run)
	p.Failures = append(p.Failures, store.FailureEvent{CallIndex: 0, Err: extracttype.Error{Kind: extracttype.KindParse, Message: "reply holds no JSON object"}})
	if err := st.RunOutcomeInsert(ctx, tx, p); err != nil {
		t.Fatal(err)
	}
	ff, err := st.FailingFieldList(ctx, tx, store.FailingFieldListParams{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range ff {
		if f.PathPattern == "" {
			t.Errorf("empty path in failing_fields: %+v", f)
		}
		if f.PathPattern == "/" && f.Kind == "parse" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no parse error at / in %+v", ff)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM repair_effectiveness WHERE path_pattern = '/'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("repair_effectiveness at /: %d %v", n, err)
	}
}

// TestRepairEffectivenessOnlyRepairedRuns: a run whose first reply was
// cut off at the token limit is never sent to repair, so it counts in
// failing_fields but not in repair_effectiveness, whose share is of the
// runs that got the repair call.
func TestRepairEffectivenessOnlyRepairedRuns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batch := batchFixture(ctx, t, st, tx)
	// Repaired: a parse error at attempt 1, then a valid repair.
	repaired := repairedOutcome(messageFixture(ctx, t, st, tx, batch))
	repaired.Failures = []store.FailureEvent{{CallIndex: 0, Err: extracttype.Error{Kind: extracttype.KindParse, Message: "reply holds no JSON object"}}}
	// Truncated: one call, cut off, straight to triage.
	truncated := failedOutcome(messageFixture(ctx, t, st, tx, batch))
	truncated.Calls = truncated.Calls[:1]
	truncated.Calls[0].FinishReason = "length"
	cut := extracttype.Error{Kind: extracttype.KindTruncated, Message: "reply was cut off at the completion token limit"}
	truncated.Failures = []store.FailureEvent{{CallIndex: 0, Err: cut}}
	truncated.Triage = &store.TriageParams{Reason: string(extracttype.KindTruncated), Errors: extracttype.ErrorList{cut}}
	for _, p := range []store.RunOutcomeParams{repaired, truncated} {
		if err := st.RunOutcomeInsert(ctx, tx, p); err != nil {
			t.Fatal(err)
		}
	}
	re, err := st.RepairEffectList(ctx, tx, store.RepairEffectListParams{})
	if err != nil {
		t.Fatal(err)
	}
	want := store.RepairEffect{SchemaID: "support_ticket", PathPattern: "/", RunsFlagged: 1, RunsRepaired: 1, RepairedPct: 100}
	if len(re) != 1 || re[0] != want {
		t.Errorf("repair effectiveness = %+v, want only %+v", re, want)
	}
	ff, err := st.FailingFieldList(ctx, tx, store.FailingFieldListParams{})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, f := range ff {
		kinds[f.Kind] += f.Runs
	}
	if kinds["truncated"] != 1 || kinds["parse"] != 1 {
		t.Errorf("failing fields count runs by kind %v, want 1 truncated and 1 parse", kinds)
	}
}

// TestBatchLatest: the newest batch with runs, optionally of one source;
// an empty batch (a re-ingest of known messages) is skipped.
func TestBatchLatest(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	withRuns := batchFixture(ctx, t, st, tx)
	messageFixture(ctx, t, st, tx, withRuns)
	emptyLater := uniqueID("empty-later")
	if err := st.BatchInsert(ctx, tx, store.BatchInsertParams{ID: emptyLater, SchemaID: "s", SourceName: "other.jsonl"}); err != nil {
		t.Fatal(err)
	}
	// now() stands still in the test's transaction.
	if _, err := tx.Exec(ctx, `UPDATE batches SET created_at = now() + interval '1 minute' WHERE id = $1`, emptyLater); err != nil {
		t.Fatal(err)
	}
	if id, err := st.BatchLatest(ctx, tx, "", ""); err != nil || id != withRuns {
		t.Fatalf("latest %q %v, want %q", id, err, withRuns)
	}
	if _, err := st.BatchLatest(ctx, tx, "other.jsonl", ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("source with only an empty batch: %v", err)
	}
	if id, err := st.BatchLatest(ctx, tx, "fixture.jsonl", "support_ticket"); err != nil || id != withRuns {
		t.Fatalf("latest of source and schema %q %v, want %q", id, err, withRuns)
	}
	if _, err := st.BatchLatest(ctx, tx, "fixture.jsonl", "return_request"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("schema without a batch: %v", err)
	}
}
