package store_test

import (
	"testing"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// Each message of a batch is listed once, with its latest run's status,
// its item's status and its current result, page by page.
func TestBatchResultList(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	batch, other := batchFixture(ctx, t, st, tx), batchFixture(ctx, t, st, tx)

	ok := messageFixture(ctx, t, st, tx, batch)
	if err := st.RunOutcomeInsert(ctx, tx, succeededOutcome(ok)); err != nil {
		t.Fatal(err)
	}
	open := messageFixture(ctx, t, st, tx, batch)
	if err := st.RunOutcomeInsert(ctx, tx, failedOutcome(open)); err != nil {
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
	// A message of another batch only is not listed.
	if err := st.RunOutcomeInsert(ctx, tx, succeededOutcome(messageFixture(ctx, t, st, tx, other))); err != nil {
		t.Fatal(err)
	}

	all, err := st.BatchResultList(ctx, tx, store.BatchResultListParams{BatchID: batch})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 {
		t.Fatalf("%d rows, want the batch's 4 messages: %+v", len(all), all)
	}
	byID := map[int64]store.BatchResult{}
	for i, r := range all {
		byID[r.MessageID] = r
		if i > 0 && r.MessageID <= all[i-1].MessageID {
			t.Errorf("rows not in message id order: %d after %d", r.MessageID, all[i-1].MessageID)
		}
	}
	if r := byID[ok.MessageID]; r.Status != store.RunSucceeded || r.Triage != nil || r.Result == nil ||
		r.Result.Outcome != "succeeded" || r.Result.HumanMade || r.Result.CreatedBy != "model" || r.Result.CreatedAt.IsZero() || r.ExternalID == "" {
		t.Errorf("succeeded: %+v (result %+v)", r, r.Result)
	}
	if r := byID[open.MessageID]; r.Status != store.RunFailed || r.Triage == nil || *r.Triage != store.TriageOpen || r.Result != nil {
		t.Errorf("failed, open: %+v", r)
	}
	if r := byID[approved.MessageID]; r.Status != store.RunFailed || r.Triage == nil || *r.Triage != store.TriageApproved || r.Result == nil ||
		r.Result.Outcome != "approved" || !r.Result.HumanMade || r.Result.CreatedBy != "alice" || string(r.Result.Data) != `{"order_id": "by-alice"}` {
		t.Errorf("failed, approved: %+v (result %+v)", r, r.Result)
	}
	if r := byID[queued.MessageID]; r.Status != store.RunQueued || r.Triage != nil || r.Result != nil {
		t.Errorf("queued: %+v", r)
	}

	// Pages of 3 and 1, then none.
	page1, err := st.BatchResultList(ctx, tx, store.BatchResultListParams{BatchID: batch, Limit: 3})
	if err != nil || len(page1) != 3 {
		t.Fatalf("page 1: %d rows, %v", len(page1), err)
	}
	page2, err := st.BatchResultList(ctx, tx, store.BatchResultListParams{BatchID: batch, After: page1[2].MessageID, Limit: 3})
	if err != nil || len(page2) != 1 || page2[0].MessageID != all[3].MessageID {
		t.Fatalf("page 2: %+v, %v", page2, err)
	}
	none, err := st.BatchResultList(ctx, tx, store.BatchResultListParams{BatchID: "no-such-batch"})
	if err != nil || len(none) != 0 {
		t.Errorf("unknown batch: %+v, %v", none, err)
	}
}
