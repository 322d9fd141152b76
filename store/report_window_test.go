package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// ageFailures moves the failure events of message id back by d.
func ageFailures(ctx context.Context, t *testing.T, db store.DBTX, messageID int64, d time.Duration) {
	t.Helper()
	if _, err := db.Exec(ctx, `UPDATE failure_events SET created_at = created_at - $2::interval WHERE message_id = $1`,
		messageID, d.String()); err != nil {
		t.Fatal(err)
	}
}

// Errors before Since are not counted; without Since the list is the
// failing_fields view.
func TestFailingFieldListSince(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batchID := batchFixture(ctx, t, st, tx)

	old := messageFixture(ctx, t, st, tx, batchID)
	if err := st.RunOutcomeInsert(ctx, tx, failedOutcome(old)); err != nil {
		t.Fatal(err)
	}
	ageFailures(ctx, t, tx, old.MessageID, 30*24*time.Hour)
	recent := messageFixture(ctx, t, st, tx, batchID)
	if err := st.RunOutcomeInsert(ctx, tx, failedOutcome(recent)); err != nil {
		t.Fatal(err)
	}

	all, err := st.FailingFieldList(ctx, tx, store.FailingFieldListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].PathPattern != "/items/*/sku" || all[0].Errors != 4 || all[0].Runs != 2 {
		t.Fatalf("all time = %+v, want /items/*/sku with 4 errors in 2 runs first", all)
	}
	var viewRows int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM failing_fields WHERE errors = 4 AND runs = 2 AND path_pattern = '/items/*/sku'`).Scan(&viewRows); err != nil || viewRows != 1 {
		t.Errorf("failing_fields view: %d matching rows, %v", viewRows, err)
	}

	week, err := st.FailingFieldList(ctx, tx, store.FailingFieldListParams{Since: time.Now().Add(-7 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(week) != 2 {
		t.Fatalf("last week = %+v, want 2 rows", week)
	}
	for _, f := range week {
		if f.Runs != 1 {
			t.Errorf("last week %s: %d runs, want 1 (the old run's errors are 30 days old)", f.PathPattern, f.Runs)
		}
		if time.Since(f.FirstSeen) > time.Hour {
			t.Errorf("last week %s: first seen %v", f.PathPattern, f.FirstSeen)
		}
	}
	none, err := st.FailingFieldList(ctx, tx, store.FailingFieldListParams{Since: time.Now().Add(time.Hour)})
	if err != nil || len(none) != 0 {
		t.Errorf("since the future: %+v, %v", none, err)
	}
}

func TestRepairEffectList(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batchID := batchFixture(ctx, t, st, tx)

	// One failed run flags /items/*/sku and /order_id at attempt 1; one
	// repaired run flags /order_id at attempt 1.
	if err := st.RunOutcomeInsert(ctx, tx, failedOutcome(messageFixture(ctx, t, st, tx, batchID))); err != nil {
		t.Fatal(err)
	}
	r := messageFixture(ctx, t, st, tx, batchID)
	if err := st.RunOutcomeInsert(ctx, tx, repairedOutcome(r)); err != nil {
		t.Fatal(err)
	}

	got, err := st.RepairEffectList(ctx, tx, store.RepairEffectListParams{SchemaID: "support_ticket"})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.RepairEffect{
		{SchemaID: "support_ticket", PathPattern: "/order_id", RunsFlagged: 2, RunsRepaired: 1, RepairedPct: 50},
		{SchemaID: "support_ticket", PathPattern: "/items/*/sku", RunsFlagged: 1, RunsRepaired: 0, RepairedPct: 0},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("repair effect = %+v\nwant %+v", got, want)
	}

	ageFailures(ctx, t, tx, r.MessageID, 48*time.Hour)
	got, err = st.RepairEffectList(ctx, tx, store.RepairEffectListParams{Since: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].RunsFlagged != 1 || got[0].RunsRepaired != 0 || got[1].RunsFlagged != 1 {
		t.Errorf("last hour = %+v, want only the failed run's two fields", got)
	}
}

// A batch's report counts the errors of its own runs only, through the
// functions of migration 000007, and the views still count every batch's.
func TestReportListsOfBatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	first, second := batchFixture(ctx, t, st, tx), batchFixture(ctx, t, st, tx)
	// first: one failed run (/items/*/sku twice, /order_id); second: one
	// repaired run (/order_id at attempt 1).
	if err := st.RunOutcomeInsert(ctx, tx, failedOutcome(messageFixture(ctx, t, st, tx, first))); err != nil {
		t.Fatal(err)
	}
	if err := st.RunOutcomeInsert(ctx, tx, repairedOutcome(messageFixture(ctx, t, st, tx, second))); err != nil {
		t.Fatal(err)
	}

	ff, err := st.FailingFieldList(ctx, tx, store.FailingFieldListParams{BatchID: second})
	if err != nil {
		t.Fatal(err)
	}
	if len(ff) != 1 || ff[0].PathPattern != "/order_id" || ff[0].Errors != 1 || ff[0].RunsRepaired != 1 || ff[0].RunsFailed != 0 {
		t.Errorf("failing fields of %s = %+v, want /order_id once, repaired", second, ff)
	}
	ff, err = st.FailingFieldList(ctx, tx, store.FailingFieldListParams{BatchID: first})
	if err != nil {
		t.Fatal(err)
	}
	if len(ff) != 2 || ff[0].PathPattern != "/items/*/sku" || ff[0].Errors != 2 || ff[1].PathPattern != "/order_id" || ff[1].RunsFailed != 1 {
		t.Errorf("failing fields of %s = %+v, want /items/*/sku twice then /order_id, failed", first, ff)
	}
	re, err := st.RepairEffectList(ctx, tx, store.RepairEffectListParams{BatchID: second})
	if err != nil {
		t.Fatal(err)
	}
	if len(re) != 1 || re[0] != (store.RepairEffect{SchemaID: "support_ticket", PathPattern: "/order_id", RunsFlagged: 1, RunsRepaired: 1, RepairedPct: 100}) {
		t.Errorf("repair effect of %s = %+v, want /order_id 1 of 1", second, re)
	}
	// The batch and the window together: the second batch's errors, aged
	// out of the window, leave nothing.
	ff, err = st.FailingFieldList(ctx, tx, store.FailingFieldListParams{BatchID: second, Since: time.Now().Add(time.Hour)})
	if err != nil || len(ff) != 0 {
		t.Errorf("of %s since the future: %+v, %v", second, ff, err)
	}
	ff, err = st.FailingFieldList(ctx, tx, store.FailingFieldListParams{BatchID: "no-such-batch"})
	if err != nil || len(ff) != 0 {
		t.Errorf("of an unknown batch: %+v, %v", ff, err)
	}
	var orderID int
	if err := tx.QueryRow(ctx, `SELECT runs FROM failing_fields WHERE path_pattern = '/order_id'`).Scan(&orderID); err != nil || orderID != 2 {
		t.Errorf("failing_fields view: /order_id in %d runs, %v; want 2 (both batches)", orderID, err)
	}
}

// Each listed batch has the counts BatchSummary gives it.
func TestBatchList(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	first := batchFixture(ctx, t, st, tx)
	if err := st.RunOutcomeInsert(ctx, tx, succeededOutcome(messageFixture(ctx, t, st, tx, first))); err != nil {
		t.Fatal(err)
	}
	if err := st.RunOutcomeInsert(ctx, tx, failedOutcome(messageFixture(ctx, t, st, tx, first))); err != nil {
		t.Fatal(err)
	}
	messageFixture(ctx, t, st, tx, first) // queued
	second := batchFixture(ctx, t, st, tx)
	if err := st.RunOutcomeInsert(ctx, tx, succeededOutcome(messageFixture(ctx, t, st, tx, second))); err != nil {
		t.Fatal(err)
	}
	empty := batchFixture(ctx, t, st, tx)
	otherSchema := uniqueID("other-schema")
	if err := st.BatchInsert(ctx, tx, store.BatchInsertParams{ID: otherSchema, SchemaID: "invoice"}); err != nil {
		t.Fatal(err)
	}
	// now() stands still in the test's transaction: give the batches the
	// minutes they were made in, oldest first.
	for i, id := range []string{first, second, empty, otherSchema} {
		if _, err := tx.Exec(ctx, `UPDATE batches SET created_at = now() - make_interval(mins => $2) WHERE id = $1`, id, 4-i); err != nil {
			t.Fatal(err)
		}
	}

	got, err := st.BatchList(ctx, tx, store.BatchListParams{SchemaID: "support_ticket"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != empty || got[1].ID != second || got[2].ID != first {
		t.Fatalf("batches = %+v, want %s, %s, %s (newest first)", got, empty, second, first)
	}
	for _, b := range got {
		sum, err := st.BatchSummary(ctx, tx, b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if b.Messages != sum.Messages || b.Queued != sum.Queued || b.Succeeded != sum.Succeeded ||
			b.Repaired != sum.Repaired || b.Failed != sum.Failed || b.LLMCalls != sum.LLMCalls || b.CostUSD != sum.CostUSD {
			t.Errorf("batch %s: list %+v, summary %+v", b.ID, b, sum)
		}
		if b.SchemaID != "support_ticket" || b.SourceName != "fixture.jsonl" || b.CreatedAt.IsZero() {
			t.Errorf("batch %s: %+v", b.ID, b)
		}
	}
	if f := got[2]; f.Messages != 3 || f.Succeeded != 1 || f.Failed != 1 || f.Queued != 1 || f.LLMCalls != 3 || f.Done() {
		t.Errorf("first batch = %+v", f)
	}
	if e := got[0]; e.Messages != 0 || e.LLMCalls != 0 || !e.Done() {
		t.Errorf("empty batch = %+v", e)
	}

	got, err = st.BatchList(ctx, tx, store.BatchListParams{Limit: 2})
	if err != nil || len(got) != 2 || got[0].ID != otherSchema {
		t.Errorf("limit 2 over all schemas: %+v, %v", got, err)
	}
}
