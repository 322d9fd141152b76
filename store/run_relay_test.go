package store_test

import (
	"testing"
	"time"

	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestRunLease: one copy of a run at a time is worked on. A live lease on
// another copy makes the run point to that copy; the same copy delivered
// again, or a copy that replaces the leased one, takes the lease over; a
// lease that ended is taken; a run with an outcome is done.
func TestRunLease(t *testing.T) {
	t.Parallel()
	// A schema of its own: in one transaction now() does not move, and the
	// lease's end is part of what is tested.
	ctx := t.Context()
	st := storetest.NewStore(t)
	db := st.Pool
	batch := batchFixture(ctx, t, st, db)
	r := messageFixture(ctx, t, st, db, batch)
	if err := st.RunMarkPublished(ctx, db, store.RunMarkPublishedParams{MessageID: r.MessageID, RunNo: 1, StreamSeq: 7}); err != nil {
		t.Fatal(err)
	}
	take := func(owner string, seq, replaces uint64, ttl time.Duration) store.RunLease {
		t.Helper()
		l, err := st.RunLeaseTake(ctx, db, store.RunLeaseParams{MessageID: r.MessageID, RunNo: 1, Owner: owner,
			StreamSeq: seq, Replaces: replaces, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	streamSeq := func() int64 {
		t.Helper()
		rw, err := st.RunGetWithMessage(ctx, db, store.RunGetParams{MessageID: r.MessageID, RunNo: 1})
		if err != nil {
			t.Fatal(err)
		}
		return rw.Run.StreamSeq
	}

	if l := take("a", 7, 0, time.Hour); l.State != store.LeaseTaken {
		t.Fatalf("first take: %+v", l)
	}
	if err := st.RunMarkPublished(ctx, db, store.RunMarkPublishedParams{MessageID: r.MessageID, RunNo: 1, StreamSeq: 9}); err != nil {
		t.Fatal(err)
	}
	if l := take("b", 9, 0, time.Hour); l.State != store.LeaseHeld || l.Holder != "a" || l.HolderSeq != 7 {
		t.Fatalf("another copy under a live lease: %+v", l)
	}
	if got := streamSeq(); got != 7 {
		t.Errorf("after the yield the run points to copy %d, want the leased 7", got)
	}
	if ok, err := st.RunLeaseExtend(ctx, db, store.RunLeaseParams{MessageID: r.MessageID, RunNo: 1, Owner: "b", StreamSeq: 9, TTL: time.Hour}); err != nil || ok {
		t.Errorf("b extended a lease it does not hold: %v, %v", ok, err)
	}
	if l := take("b", 7, 0, time.Hour); l.State != store.LeaseTaken {
		t.Fatalf("the leased copy delivered again: %+v, want it taken over", l)
	}
	if l := take("c", 11, 7, time.Hour); l.State != store.LeaseTaken {
		t.Fatalf("a requeued copy of the leased one: %+v, want it taken over", l)
	}
	if err := st.RunLeaseRelease(ctx, db, store.RunLeaseParams{MessageID: r.MessageID, RunNo: 1, Owner: "c", StreamSeq: 11}); err != nil {
		t.Fatal(err)
	}
	if l := take("d", 12, 0, 50*time.Millisecond); l.State != store.LeaseTaken {
		t.Fatalf("after a release: %+v", l)
	}
	testsignal.Eventually(t, 10*time.Second, "another copy taking the lease once it ended", func() bool {
		return take("e", 13, 0, time.Hour).State == store.LeaseTaken
	})
	if err := st.RunOutcomeInsert(ctx, db, succeededOutcome(r)); err != nil {
		t.Fatal(err)
	}
	if l := take("f", 14, 0, time.Hour); l.State != store.LeaseDone || l.Status != store.RunSucceeded {
		t.Fatalf("after the outcome: %+v", l)
	}
}

// TestRunIdleAt: a queued run is idle at its recorded copy, not at another
// sequence, not under a live lease, and not once it has an outcome.
func TestRunIdleAt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	db := st.Pool
	batch := batchFixture(ctx, t, st, db)
	r := messageFixture(ctx, t, st, db, batch)
	if err := st.RunMarkPublished(ctx, db, store.RunMarkPublishedParams{MessageID: r.MessageID, RunNo: 1, StreamSeq: 5}); err != nil {
		t.Fatal(err)
	}
	idle := func(seq uint64) bool {
		t.Helper()
		ok, err := st.RunIdleAt(ctx, db, r.MessageID, 1, seq)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !idle(5) || idle(6) {
		t.Fatalf("idle at 5: %v, at 6: %v; want true, false", idle(5), idle(6))
	}
	lease := store.RunLeaseParams{MessageID: r.MessageID, RunNo: 1, Owner: "w", StreamSeq: 5, TTL: time.Hour}
	if l, err := st.RunLeaseTake(ctx, db, lease); err != nil || l.State != store.LeaseTaken {
		t.Fatalf("lease %+v, %v", l, err)
	}
	if idle(5) {
		t.Fatal("idle under a live lease")
	}
	if err := st.RunLeaseRelease(ctx, db, lease); err != nil {
		t.Fatal(err)
	}
	if !idle(5) {
		t.Fatal("not idle once the lease ended")
	}
	if _, err := db.Exec(ctx, `UPDATE runs SET status = 'failed' WHERE message_id = $1`, r.MessageID); err != nil {
		t.Fatal(err)
	}
	if idle(5) {
		t.Fatal("idle with an outcome status")
	}
}
