package store_test

import (
	"errors"
	"testing"

	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestFailingFieldsRootPath: an error about the whole reply (a parse
// error, path "") is reported at "/" by the analytics views.
func TestFailingFieldsRootPath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	run := messageFixture(ctx, t, st, batchFixture(ctx, t, st))
	p := failedOutcome(run)
	p.Failures = append(p.Failures, store.FailureEvent{CallIndex: 0, Err: pipeline.Error{Kind: pipeline.KindParse, Message: "reply holds no JSON object"}})
	if err := st.RunOutcomeInsert(ctx, st.Pool, p); err != nil {
		t.Fatal(err)
	}
	ff, err := st.FailingFieldList(ctx, st.Pool, store.FailingFieldListParams{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range ff {
		if f.PathPattern == "" {
			t.Errorf("empty path in failing_fields: %+v", f)
		}
		if f.PathPattern == "/" && f.Kind == "parse" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no parse error at / in %+v", ff)
	}
	var n int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM repair_effectiveness WHERE path_pattern = '/'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("repair_effectiveness at /: %d %v", n, err)
	}
}

// TestBatchLatest: the newest batch with runs, optionally of one source;
// an empty batch (a re-ingest of known messages) is skipped.
func TestBatchLatest(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	withRuns := batchFixture(ctx, t, st)
	messageFixture(ctx, t, st, withRuns)
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: "empty-later", SchemaID: "s", SourceName: "other.jsonl"}); err != nil {
		t.Fatal(err)
	}
	if id, err := st.BatchLatest(ctx, st.Pool, "", ""); err != nil || id != withRuns {
		t.Fatalf("latest %q %v, want %q", id, err, withRuns)
	}
	if _, err := st.BatchLatest(ctx, st.Pool, "other.jsonl", ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("source with only an empty batch: %v", err)
	}
	if id, err := st.BatchLatest(ctx, st.Pool, "fixture.jsonl", "support_ticket"); err != nil || id != withRuns {
		t.Fatalf("latest of source and schema %q %v, want %q", id, err, withRuns)
	}
	if _, err := st.BatchLatest(ctx, st.Pool, "fixture.jsonl", "return_request"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("schema without a batch: %v", err)
	}
}
