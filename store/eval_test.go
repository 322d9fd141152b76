package store_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// An evaluation reads each message's latest run in the batch with that
// run's own model record (never a reviewer's), and what the deciding
// calls ran with; a recorded evaluation reads back with its fields.
func TestEvalBatchRecordsAndRuns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batch := batchFixture(ctx, t, st, tx)

	ok := messageFixture(ctx, t, st, tx, batch)
	if err := st.RunOutcomeInsert(ctx, tx, succeededOutcome(ok)); err != nil {
		t.Fatal(err)
	}
	approved := messageFixture(ctx, t, st, tx, batch)
	if err := st.RunOutcomeInsert(ctx, tx, failedOutcome(approved)); err != nil {
		t.Fatal(err)
	}
	item, err := st.TriageItemOfRun(ctx, tx, approved.MessageID, approved.RunNo)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.TriageItemClaim(ctx, tx, store.TriageItemClaimParams{ItemID: item.ID, Reviewer: "alice", Via: store.ViaAPI}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TriageItemApprove(ctx, tx, store.TriageItemApproveParams{ItemID: item.ID, Reviewer: "alice", Via: store.ViaAPI,
		Data: []byte(`{"order_id":"by-alice"}`), SchemaVersion: "1"}); err != nil {
		t.Fatal(err)
	}
	queued := messageFixture(ctx, t, st, tx, batch)

	recs, err := st.EvalBatchRecords(ctx, tx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3: %+v", len(recs), recs)
	}
	var rec map[string]any
	if err := json.Unmarshal(recs[0].Record, &rec); err != nil || rec["order_id"] != "48213" {
		t.Errorf("succeeded message's record = %s (%v), want the model's", recs[0].Record, err)
	}
	if recs[1].Record != nil || recs[1].Status != store.RunFailed {
		t.Errorf("approved message: status %s record %s, want failed and no model record", recs[1].Status, recs[1].Record)
	}
	if recs[2].Record != nil || recs[2].Status != store.RunQueued || recs[2].Text == "" {
		t.Errorf("queued message (run %d): %+v, want queued, no record, its text", queued.RunNo, recs[2])
	}

	v, err := st.EvalBatchVersions(ctx, tx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if v.SchemaID != "support_ticket" || len(v.Models) != 1 || v.Models[0] != "sim-1" || len(v.PromptVersions) != 1 || v.PromptVersions[0] != "extract.v1" {
		t.Errorf("versions = %+v, want schema support_ticket, model sim-1, prompt extract.v1", v)
	}
	if _, err := st.EvalBatchVersions(ctx, tx, "no-such-batch"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown batch: %v, want ErrNotFound", err)
	}

	f1, lo := 0.8, 0.7
	id, err := st.EvalRunInsert(ctx, tx, store.EvalRunInsertParams{
		BatchID: batch, SchemaID: "support_ticket", SchemaVersion: "1", PromptVersion: "extract.v1", Model: "sim-1",
		Simulated: true, LabelsName: "labels.jsonl", LabelsSHA256: "ab", Labels: 3, Matched: 3, NoRecord: 2,
		Fields: []store.EvalField{{Field: "order_id", Grounded: true, N: 3, TP: 1, FN: 2, F1: &f1, F1Low: &lo}, {Field: "intent", N: 1, TN: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := st.EvalRunList(ctx, tx, store.EvalRunListParams{BatchID: batch})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].ID != id || !runs[0].Simulated || len(runs[0].Fields) != 2 {
		t.Fatalf("runs = %+v, want the one recorded with 2 fields", runs)
	}
	got := runs[0].Fields[1]
	if got.Field != "order_id" || got.TP != 1 || got.FN != 2 || got.F1 == nil || *got.F1 != 0.8 || got.F1High != nil || !got.Grounded {
		t.Errorf("order_id field = %+v, want what was recorded, by name", got)
	}
	if _, err := st.EvalRunInsert(ctx, tx, store.EvalRunInsertParams{BatchID: "no-such-batch", SchemaID: "x"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown batch: %v, want ErrNotFound", err)
	}
}
