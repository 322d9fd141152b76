package store_test

import (
	"errors"
	"testing"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestRunOutcomeInsertMany(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// A schema of its own: RunOutcomeInsertMany begins its transactions on
	// the pool.
	st := storetest.NewStore(t)
	batchID := batchFixture(ctx, t, st, st.Pool)
	a := messageFixture(ctx, t, st, st.Pool, batchID)
	b := messageFixture(ctx, t, st, st.Pool, batchID)
	c := messageFixture(ctx, t, st, st.Pool, batchID)

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
	d := messageFixture(ctx, t, st, st.Pool, batchID)
	bad := failedOutcome(d)
	bad.Triage = nil
	errs = st.RunOutcomeInsertMany(ctx, []store.RunOutcomeParams{bad})
	if errs[0] == nil {
		t.Fatal("bad params written")
	}
}

// TestRunOutcomeInsertManyMatchesInsert: the batched write stores exactly
// the rows RunOutcomeInsert stores, calls and failure events linked alike.
func TestRunOutcomeInsertManyMatchesInsert(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// A schema of its own: RunOutcomeInsertMany begins its transactions on
	// the pool.
	st := storetest.NewStore(t)
	batchID := batchFixture(ctx, t, st, st.Pool)
	withNoCallEvent := func(p store.RunOutcomeParams) store.RunOutcomeParams {
		p.Failures = append(p.Failures, store.FailureEvent{CallIndex: -1, Attempt: 3, Model: "sim-1",
			Err: extracttype.Errorf(extracttype.KindBudget, "", "max_tokens", "next call needs too many tokens")})
		return p
	}
	type row struct {
		Status                                       string
		Calls, Events, Linked, Unlinked, Ext, Triage int
		Patch                                        int
	}
	read := func(r store.Run) row {
		var x row
		err := st.Pool.QueryRow(ctx, `SELECT r.status,
			(SELECT count(*) FROM llm_calls c WHERE c.message_id = r.message_id AND c.run_no = r.run_no),
			(SELECT count(*) FROM failure_events f WHERE f.message_id = r.message_id AND f.run_no = r.run_no),
			(SELECT count(*) FROM failure_events f JOIN llm_calls c ON c.id = f.llm_call_id AND c.attempt = f.attempt
			  WHERE f.message_id = r.message_id AND f.run_no = r.run_no),
			(SELECT count(*) FROM failure_events f WHERE f.message_id = r.message_id AND f.run_no = r.run_no AND f.llm_call_id IS NULL),
			(SELECT count(*) FROM extractions e WHERE e.message_id = r.message_id AND e.run_no = r.run_no),
			(SELECT count(*) FROM triage_items t WHERE t.message_id = r.message_id AND t.run_no = r.run_no),
			(SELECT count(*) FROM llm_calls c WHERE c.message_id = r.message_id AND c.run_no = r.run_no AND c.patch IS NOT NULL)
			FROM runs r WHERE r.message_id = $1 AND r.run_no = $2`, r.MessageID, r.RunNo).
			Scan(&x.Status, &x.Calls, &x.Events, &x.Linked, &x.Unlinked, &x.Ext, &x.Triage, &x.Patch)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for name, mk := range map[string]func(store.Run) store.RunOutcomeParams{
		"Failed": func(r store.Run) store.RunOutcomeParams { return withNoCallEvent(failedOutcome(r)) },
		"Succeeded": func(r store.Run) store.RunOutcomeParams {
			p := succeededOutcome(r)
			if len(p.Calls) > 0 {
				p.Calls[len(p.Calls)-1].Patch = []byte(`[{"op":"replace","path":"/a","value":1}]`)
			}
			return p
		},
	} {
		single, many := messageFixture(ctx, t, st, st.Pool, batchID), messageFixture(ctx, t, st, st.Pool, batchID)
		if err := st.RunOutcomeInsert(ctx, st.Pool, mk(single)); err != nil {
			t.Fatal(err)
		}
		if errs := st.RunOutcomeInsertMany(ctx, []store.RunOutcomeParams{mk(many)}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		if a, b := read(single), read(many); a != b {
			t.Errorf("%s: RunOutcomeInsert stored %+v, RunOutcomeInsertMany %+v", name, a, b)
		}
	}
}
