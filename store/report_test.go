package store_test

import (
	"errors"
	"math"
	"testing"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestBatchSummary(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batchID := batchFixture(ctx, t, st, tx)
	other := batchFixture(ctx, t, st, tx)

	succeeded := messageFixture(ctx, t, st, tx, batchID)
	repaired := messageFixture(ctx, t, st, tx, batchID)
	failed := messageFixture(ctx, t, st, tx, batchID)
	queued := messageFixture(ctx, t, st, tx, batchID)
	_ = queued
	otherRun := messageFixture(ctx, t, st, tx, other)

	if err := st.RunOutcomeInsert(ctx, tx, succeededOutcome(succeeded)); err != nil {
		t.Fatal(err)
	}
	rp := succeededOutcome(repaired)
	rp.Status = store.RunRepaired
	rp.Calls = append(rp.Calls, store.LLMCall{Attempt: 2, PromptTokens: 150, CompletionTokens: 10, CostUSD: 0.0002, Valid: true})
	if err := st.RunOutcomeInsert(ctx, tx, rp); err != nil {
		t.Fatal(err)
	}
	if err := st.RunOutcomeInsert(ctx, tx, failedOutcome(failed)); err != nil {
		t.Fatal(err)
	}
	if err := st.RunOutcomeInsert(ctx, tx, succeededOutcome(otherRun)); err != nil {
		t.Fatal(err)
	}

	sum, err := st.BatchSummary(ctx, tx, batchID)
	if err != nil {
		t.Fatal(err)
	}
	// Calls: 1 (succeeded) + 2 (repaired) + 2 (failed); the other batch's
	// call is not counted.
	want := store.BatchSummary{
		BatchID: batchID, Messages: 4, Runs: 4, Queued: 1, Succeeded: 1, Repaired: 1, Failed: 1,
		LLMCalls: 5, PromptTokens: 100 + 100 + 150 + 300 + 400, CompletionTokens: 20 + 20 + 10 + 50 + 30,
	}
	wantCost := 0.00012 + 0.00012 + 0.0002 + 0.001 + 0.002
	if math.Abs(sum.CostUSD-wantCost) > 1e-9 {
		t.Errorf("cost = %v, want %v", sum.CostUSD, wantCost)
	}
	sum.CostUSD = 0
	if sum != want {
		t.Errorf("summary = %+v\nwant      %+v", sum, want)
	}
	if sum.Done() {
		t.Error("Done with a queued run")
	}

	empty := batchFixture(ctx, t, st, tx)
	sum, err = st.BatchSummary(ctx, tx, empty)
	if err != nil || sum.Messages != 0 || sum.LLMCalls != 0 || !sum.Done() {
		t.Errorf("empty batch: %+v, %v", sum, err)
	}
	if _, err := st.BatchSummary(ctx, tx, "no-such-batch"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown batch: err = %v, want ErrNotFound", err)
	}
}

func TestFailingFieldList(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batchID := batchFixture(ctx, t, st, tx)

	// Two failed runs flag /items/*/sku at both attempts and /order_id at
	// the first; one repaired run flags /order_id at the first attempt.
	for range 2 {
		if err := st.RunOutcomeInsert(ctx, tx, failedOutcome(messageFixture(ctx, t, st, tx, batchID))); err != nil {
			t.Fatal(err)
		}
	}
	r := messageFixture(ctx, t, st, tx, batchID)
	if err := st.RunOutcomeInsert(ctx, tx, repairedOutcome(r)); err != nil {
		t.Fatal(err)
	}

	got, err := st.FailingFieldList(ctx, tx, store.FailingFieldListParams{SchemaID: "support_ticket"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("failing fields = %+v, want 2 rows", got)
	}
	sku, order := got[0], got[1]
	if sku.PathPattern != "/items/*/sku" || sku.Kind != "schema" || sku.Errors != 4 || sku.Runs != 2 ||
		sku.FirstPassErrors != 2 || sku.RunsRepaired != 0 || sku.RunsFailed != 2 {
		t.Errorf("first row = %+v", sku)
	}
	if order.PathPattern != "/order_id" || order.Kind != "rule" || order.Errors != 3 || order.Runs != 3 ||
		order.FirstPassErrors != 3 || order.RunsRepaired != 1 || order.RunsFailed != 2 {
		t.Errorf("second row = %+v", order)
	}
	if sku.FirstSeen.IsZero() || sku.LastSeen.Before(sku.FirstSeen) {
		t.Errorf("seen %v .. %v", sku.FirstSeen, sku.LastSeen)
	}

	got, err = st.FailingFieldList(ctx, tx, store.FailingFieldListParams{SchemaID: "other", Limit: 1})
	if err != nil || len(got) != 0 {
		t.Errorf("other schema: %+v, %v", got, err)
	}
	got, err = st.FailingFieldList(ctx, tx, store.FailingFieldListParams{Limit: 1})
	if err != nil || len(got) != 1 {
		t.Errorf("limit 1: %d rows, %v", len(got), err)
	}
}

// A re-run in the same batch: the counts follow the latest run, the calls
// and cost every run the batch paid for.
func TestBatchSummaryCountsRerunCalls(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batchID := batchFixture(ctx, t, st, tx)
	id, failed := triageItemFixture(ctx, t, st, tx, batchID)
	before, err := st.BatchSummary(ctx, tx, batchID)
	if err != nil {
		t.Fatal(err)
	}
	run, err := st.TriageItemRerun(ctx, tx, store.TriageItemRerunParams{ItemID: id, Reviewer: "alice", Via: store.ViaUI})
	if err != nil {
		t.Fatal(err)
	}
	if run.BatchID != batchID || run.RunNo != failed.RunNo+1 {
		t.Fatalf("re-run = %+v, want run %d in batch %s", run, failed.RunNo+1, batchID)
	}
	if err := st.RunOutcomeInsert(ctx, tx, succeededOutcome(run)); err != nil {
		t.Fatal(err)
	}
	sum, err := st.BatchSummary(ctx, tx, batchID)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Messages != 1 || sum.Runs != 2 || sum.Succeeded != 1 || sum.Failed != 0 {
		t.Errorf("counts = %+v, want the re-run's success only", sum)
	}
	if sum.LLMCalls != before.LLMCalls+1 || sum.CostUSD <= before.CostUSD {
		t.Errorf("calls %d, cost %f; want %d calls (the failed run's and the re-run's), more than %f",
			sum.LLMCalls, sum.CostUSD, before.LLMCalls+1, before.CostUSD)
	}
	acc, err := st.BatchAccountingGet(ctx, tx, batchID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := acc.CostUSD - sum.CostUSD; diff > 1e-9 || diff < -1e-9 {
		t.Errorf("accounting cost %f, summary cost %f: want the same whole cost", acc.CostUSD, sum.CostUSD)
	}
	// The failed run's repair call was paid for: it stays counted.
	if acc.RepairCalls != 1 || acc.RepairCostUSD <= 0 || acc.Repaired != 0 || acc.Failed != 0 {
		t.Errorf("accounting = %+v, want the replaced run's repair call and the re-run's outcome", acc)
	}
}
