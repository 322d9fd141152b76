package store_test

import (
	"errors"
	"testing"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestRunOutcomeInsertMany(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	batchID := batchFixture(ctx, t, st)
	a := messageFixture(ctx, t, st, batchID)
	b := messageFixture(ctx, t, st, batchID)
	c := messageFixture(ctx, t, st, batchID)

	// c already has its outcome: in the batch it fails alone.
	if err := st.RunOutcomeInsert(ctx, st.Pool, failedOutcome(c)); err != nil {
		t.Fatal(err)
	}
	errs := st.RunOutcomeInsertMany(ctx, []store.RunOutcomeParams{failedOutcome(a), failedOutcome(c), failedOutcome(b)})
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], store.ErrOutcomeExists) {
		t.Fatalf("errors %v", errs)
	}
	var runs, items, calls int
	if err := st.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM runs WHERE status = 'failed'),
		(SELECT count(*) FROM triage_items), (SELECT count(*) FROM llm_calls)`).Scan(&runs, &items, &calls); err != nil {
		t.Fatal(err)
	}
	if runs != 3 || items != 3 || calls != 6 {
		t.Fatalf("runs %d items %d calls %d, want 3 3 6", runs, items, calls)
	}

	// A params error fails only its own outcome.
	d := messageFixture(ctx, t, st, batchID)
	bad := failedOutcome(d)
	bad.Triage = nil
	errs = st.RunOutcomeInsertMany(ctx, []store.RunOutcomeParams{bad})
	if errs[0] == nil {
		t.Fatal("bad params written")
	}
}
