package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestRun(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		st      *store.Store
		db      store.DBTX // the test's transaction, or its own store's pool
		batchID string
	}
	// setup gives the test a transaction on the shared schema.
	setup := func(t *testing.T) (context.Context, *testBundle) {
		t.Helper()
		ctx := t.Context()
		st, tx := storetest.TestTx(ctx, t)
		return ctx, &testBundle{st: st, db: tx, batchID: batchFixture(ctx, t, st, tx)}
	}
	// setupPool gives the test a schema of its own, for Store.InTx, which
	// begins its transaction on the pool.
	setupPool := func(t *testing.T) (context.Context, *testBundle) {
		t.Helper()
		ctx := t.Context()
		st := storetest.NewStore(t)
		return ctx, &testBundle{st: st, db: st.Pool, batchID: batchFixture(ctx, t, st, st.Pool)}
	}

	t.Run("MarkPublishedAndListUnpublished", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		r1 := messageFixture(ctx, t, b.st, b.db, b.batchID)
		r2 := messageFixture(ctx, t, b.st, b.db, b.batchID)
		r3 := messageFixture(ctx, t, b.st, b.db, b.batchID)

		if err := b.st.RunMarkPublished(ctx, b.db, store.RunMarkPublishedParams{MessageID: r2.MessageID, RunNo: 1}); err != nil {
			t.Fatal(err)
		}
		// A run with an outcome was evidently delivered: not listed.
		if err := b.st.RunOutcomeInsert(ctx, b.db, succeededOutcome(r3)); err != nil {
			t.Fatal(err)
		}
		runs, err := b.st.RunListUnpublished(ctx, b.db, store.RunListUnpublishedParams{OlderThan: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 1 || runs[0].MessageID != r1.MessageID || runs[0].DedupID != r1.DedupID {
			t.Fatalf("unpublished = %+v, want only run of message %d", runs, r1.MessageID)
		}
		// Runs younger than OlderThan are left alone.
		runs, err = b.st.RunListUnpublished(ctx, b.db, store.RunListUnpublishedParams{OlderThan: r1.CreatedAt.Add(-time.Minute)})
		if err != nil || len(runs) != 0 {
			t.Fatalf("unpublished older than creation = %+v, %v; want none", runs, err)
		}

		got, err := b.st.RunGetWithMessage(ctx, b.db, store.RunGetParams{MessageID: r2.MessageID, RunNo: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got.PublishedAt == nil {
			t.Fatal("published_at not set")
		}
		// now() stands still in the test's transaction: move the first
		// publication back, so a second one that overwrote it would show.
		if _, err := b.db.Exec(ctx, `UPDATE runs SET published_at = published_at - interval '1 hour' WHERE message_id = $1`, r2.MessageID); err != nil {
			t.Fatal(err)
		}
		got, _ = b.st.RunGetWithMessage(ctx, b.db, store.RunGetParams{MessageID: r2.MessageID, RunNo: 1})
		first := *got.PublishedAt
		if err := b.st.RunMarkPublished(ctx, b.db, store.RunMarkPublishedParams{MessageID: r2.MessageID, RunNo: 1}); err != nil {
			t.Fatal(err)
		}
		got, _ = b.st.RunGetWithMessage(ctx, b.db, store.RunGetParams{MessageID: r2.MessageID, RunNo: 1})
		if !got.PublishedAt.Equal(first) {
			t.Errorf("published_at moved from %v to %v", first, *got.PublishedAt)
		}
	})

	t.Run("MarkPublishedNotFound", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		err := b.st.RunMarkPublished(ctx, b.db, store.RunMarkPublishedParams{MessageID: 999, RunNo: 1})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	})

	t.Run("GetWithMessage", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		r := messageFixture(ctx, t, b.st, b.db, b.batchID)
		got, err := b.st.RunGetWithMessage(ctx, b.db, store.RunGetParams{MessageID: r.MessageID, RunNo: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got.Run.DedupID != r.DedupID || got.Message.ID != r.MessageID || got.Message.Body == "" {
			t.Errorf("got %+v", got)
		}
		_, err = b.st.RunGetWithMessage(ctx, b.db, store.RunGetParams{MessageID: r.MessageID, RunNo: 2})
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("run 2: err = %v, want ErrNotFound", err)
		}
	})

	t.Run("LockForOutcomeThenInsert", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		r := messageFixture(ctx, t, b.st, b.db, b.batchID)
		key := store.RunGetParams{MessageID: r.MessageID, RunNo: 1}
		// The test's transaction is the caller's.
		rm, err := b.st.RunLockForOutcome(ctx, b.db, key)
		if err != nil {
			t.Fatal(err)
		}
		if rm.Status != store.RunQueued {
			t.Errorf("status = %s, want queued", rm.Status)
		}
		if err := b.st.RunOutcomeInsert(ctx, b.db, succeededOutcome(r)); err != nil {
			t.Fatal(err)
		}
		rm, err = b.st.RunGetWithMessage(ctx, b.db, key)
		if err != nil {
			t.Fatal(err)
		}
		if rm.Status != store.RunSucceeded || rm.FinishedAt == nil || rm.PublishedAt == nil {
			t.Errorf("run after outcome = %+v", rm.Run)
		}
	})

	t.Run("InTxRollsBack", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupPool(t)
		r := messageFixture(ctx, t, b.st, b.db, b.batchID)
		boom := errors.New("boom")
		err := b.st.InTx(ctx, func(tx store.DBTX) error {
			if err := b.st.RunOutcomeInsert(ctx, tx, succeededOutcome(r)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v, want boom", err)
		}
		if n := count(ctx, t, b.db, "llm_calls", r.MessageID); n != 0 {
			t.Errorf("llm_calls = %d after rollback, want 0", n)
		}
	})
}
