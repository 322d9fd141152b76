package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestRunWriteBatch: one transaction reads and leases the runs being
// started and writes the outcomes of others; each gets its own result.
func TestRunWriteBatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	batchID := batchFixture(ctx, t, st, st.Pool)
	a := messageFixture(ctx, t, st, st.Pool, batchID) // started
	b := messageFixture(ctx, t, st, st.Pool, batchID) // already done
	c := messageFixture(ctx, t, st, st.Pool, batchID) // leased by another copy
	d := messageFixture(ctx, t, st, st.Pool, batchID) // outcome written
	lease := func(r store.Run, owner string, seq uint64) store.RunLeaseParams {
		return store.RunLeaseParams{MessageID: r.MessageID, RunNo: r.RunNo, Owner: owner, StreamSeq: seq, TTL: time.Minute}
	}
	if err := st.RunOutcomeInsert(ctx, st.Pool, failedOutcome(b)); err != nil {
		t.Fatal(err)
	}
	if l, err := st.RunLeaseTake(ctx, st.Pool, lease(c, "other", 7)); err != nil || l.State != store.LeaseTaken {
		t.Fatalf("lease of c: %+v %v", l, err)
	}
	missing := lease(a, "me", 1)
	missing.MessageID = -1
	rs, errs := st.RunWriteBatch(ctx,
		[]store.RunLeaseParams{lease(a, "me", 1), lease(b, "me", 2), lease(c, "me", 3), missing},
		[]store.RunOutcomeParams{failedOutcome(d), failedOutcome(b)})
	if rs[0].Err != nil || rs[0].Lease.State != store.LeaseTaken || rs[0].Run.Message.Body == "" || rs[0].Run.Run.MessageID != a.MessageID {
		t.Errorf("start a: %+v", rs[0])
	}
	if rs[1].Err != nil || rs[1].Lease.State != store.LeaseDone || rs[1].Lease.Status != store.RunFailed {
		t.Errorf("start b: %+v", rs[1])
	}
	if rs[2].Err != nil || rs[2].Lease.State != store.LeaseHeld || rs[2].Lease.Holder != "other" || rs[2].Lease.HolderSeq != 7 {
		t.Errorf("start c: %+v", rs[2])
	}
	if !errors.Is(rs[3].Err, store.ErrNotFound) {
		t.Errorf("start of a missing run: %+v", rs[3])
	}
	if errs[0] != nil || !errors.Is(errs[1], store.ErrOutcomeExists) {
		t.Errorf("outcome errors %v", errs)
	}
	var status, owner string
	if err := st.Pool.QueryRow(ctx, `SELECT (SELECT status FROM runs WHERE message_id = $1 AND run_no = $2),
		(SELECT lease_owner FROM runs WHERE message_id = $3 AND run_no = $4)`, d.MessageID, d.RunNo, a.MessageID, a.RunNo).Scan(&status, &owner); err != nil {
		t.Fatal(err)
	}
	if status != store.RunFailed || owner != "me" {
		t.Errorf("d is %s, a's lease is %q", status, owner)
	}
}

// TestRunWriteBatchSameRunTwice: a run started twice in one batch (two
// copies of its message) is leased to the first copy only, and a run
// with two outcomes in one batch gets only the first.
func TestRunWriteBatchSameRunTwice(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	batchID := batchFixture(ctx, t, st, st.Pool)
	a := messageFixture(ctx, t, st, st.Pool, batchID)
	b := messageFixture(ctx, t, st, st.Pool, batchID)
	c := messageFixture(ctx, t, st, st.Pool, batchID)
	lease := func(r store.Run, seq uint64) store.RunLeaseParams {
		return store.RunLeaseParams{MessageID: r.MessageID, RunNo: r.RunNo, Owner: "me", StreamSeq: seq, TTL: time.Minute}
	}
	rs, errs := st.RunWriteBatch(ctx,
		[]store.RunLeaseParams{lease(a, 1), lease(c, 5), lease(a, 2)},
		[]store.RunOutcomeParams{failedOutcome(b), succeededOutcome(c), succeededOutcome(b)})
	if rs[0].Err != nil || rs[0].Lease.State != store.LeaseTaken || rs[0].Run.Run.MessageID != a.MessageID {
		t.Errorf("first start of a: %+v", rs[0])
	}
	if rs[1].Err != nil || rs[1].Lease.State != store.LeaseTaken || rs[1].Run.Run.MessageID != c.MessageID {
		t.Errorf("start of c: %+v", rs[1])
	}
	if rs[2].Err != nil || rs[2].Lease.State != store.LeaseHeld || rs[2].Lease.HolderSeq != 1 {
		t.Errorf("second start of a: %+v", rs[2])
	}
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], store.ErrOutcomeExists) {
		t.Errorf("outcome errors %v", errs)
	}
	var status string
	var calls, items, exts int
	if err := st.Pool.QueryRow(ctx, `SELECT (SELECT status FROM runs WHERE message_id = $1 AND run_no = $2),
		(SELECT count(*) FROM llm_calls WHERE message_id = $1), (SELECT count(*) FROM triage_items WHERE message_id = $1),
		(SELECT count(*) FROM extractions WHERE message_id = $1)`, b.MessageID, b.RunNo).Scan(&status, &calls, &items, &exts); err != nil {
		t.Fatal(err)
	}
	if status != store.RunFailed || calls != 2 || items != 1 || exts != 0 {
		t.Errorf("b: status %s, %d calls, %d triage items, %d extractions; want failed, 2, 1, 0", status, calls, items, exts)
	}
}
