package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// outboxStore returns a store of a schema of its own with the results
// outbox on.
func outboxStore(t *testing.T) *store.Store {
	t.Helper()
	st := storetest.NewStore(t)
	if err := st.ResultsOutboxEnable(t.Context(), st.Pool, true); err != nil {
		t.Fatal(err)
	}
	return st
}

// outboxTypes counts the outbox's rows by type.
func outboxTypes(t *testing.T, st *store.Store) map[string]int {
	t.Helper()
	rows, err := st.Pool.Query(t.Context(), `SELECT type, count(*) FROM results_outbox GROUP BY type`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var typ string
		var n int
		if err := rows.Scan(&typ, &n); err != nil {
			t.Fatal(err)
		}
		out[typ] = n
	}
	return out
}

func TestResultsOutbox(t *testing.T) {
	t.Parallel()

	// Off (the default), no change writes a row.
	t.Run("OffWritesNothing", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		st := storetest.NewStore(t)
		batch := batchFixture(ctx, t, st, st.Pool)
		if err := st.RunOutcomeInsert(ctx, st.Pool, succeededOutcome(messageFixture(ctx, t, st, st.Pool, batch))); err != nil {
			t.Fatal(err)
		}
		if got := outboxTypes(t, st); len(got) != 0 {
			t.Errorf("outbox off: rows %v", got)
		}
	})

	// Many commits finishing one batch at once, each the worker's batched
	// write: the batch is done exactly once, whichever commits last.
	t.Run("BatchDoneOnceUnderConcurrentCommits", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		st := outboxStore(t)
		for round := range 5 {
			batch := batchFixture(ctx, t, st, st.Pool)
			const n = 12
			runs := make([]store.Run, n)
			for i := range runs {
				runs[i] = messageFixture(ctx, t, st, st.Pool, batch)
			}
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range runs {
				wg.Go(func() {
					errs[i] = st.RunOutcomeInsertMany(ctx, []store.RunOutcomeParams{succeededOutcome(runs[i])})[0]
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("round %d, outcome %d: %v", round, i, err)
				}
			}
			var done int
			var messages int
			if err := st.Pool.QueryRow(ctx, `SELECT count(*), coalesce(max((detail->'summary'->>'messages')::int), 0)
				FROM results_outbox WHERE type = 'batch.done' AND batch_id = $1`, batch).Scan(&done, &messages); err != nil {
				t.Fatal(err)
			}
			if done != 1 || messages != n {
				t.Fatalf("round %d: %d batch.done rows (summary of %d messages), want 1 of %d", round, done, messages, n)
			}
		}
		if got := outboxTypes(t, st); got[store.EventResult] != 60 || got[store.EventBatchDone] != 5 {
			t.Errorf("outbox = %v, want 60 results and 5 batch.done", got)
		}
	})

	// An ingest transaction still writing the batch (its foreign keys hold
	// a key-share lock on the batch's row) does not hold back an outcome
	// of the batch: the batch lock does not conflict with it.
	t.Run("IngestDoesNotBlockOutcomes", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		st := outboxStore(t)
		batch := batchFixture(ctx, t, st, st.Pool)
		done := messageFixture(ctx, t, st, st.Pool, batch)
		tx, err := st.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		messageFixture(ctx, t, st, tx, batch)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := st.RunOutcomeInsertMany(wctx, []store.RunOutcomeParams{succeededOutcome(done)})[0]; err != nil {
			t.Fatalf("outcome beside an open ingest transaction: %v", err)
		}
	})

	// A batch with a run still queued is not done.
	t.Run("NotDoneWhileQueued", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		st := outboxStore(t)
		batch := batchFixture(ctx, t, st, st.Pool)
		a, b := messageFixture(ctx, t, st, st.Pool, batch), messageFixture(ctx, t, st, st.Pool, batch)
		if err := st.RunOutcomeInsert(ctx, st.Pool, succeededOutcome(a)); err != nil {
			t.Fatal(err)
		}
		if got := outboxTypes(t, st); got[store.EventBatchDone] != 0 || got[store.EventResult] != 1 {
			t.Fatalf("one of two done: outbox %v", got)
		}
		if err := st.RunOutcomeInsert(ctx, st.Pool, succeededOutcome(b)); err != nil {
			t.Fatal(err)
		}
		// A second write of an outcome writes nothing.
		if err := st.RunOutcomeInsert(ctx, st.Pool, succeededOutcome(b)); err == nil {
			t.Fatal("second outcome: no error")
		}
		if got := outboxTypes(t, st); got[store.EventBatchDone] != 1 || got[store.EventResult] != 2 {
			t.Errorf("both done: outbox %v", got)
		}
	})
}
