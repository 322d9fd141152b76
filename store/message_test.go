package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"

	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

func TestMessageIngest(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		st      *store.Store
		db      store.DBTX // the test's transaction, or its own store's pool
		batchID string
		key     string // an external id no other test uses
	}
	// setup gives the test a transaction on the shared schema.
	setup := func(t *testing.T) (context.Context, *testBundle) {
		t.Helper()
		ctx := t.Context()
		st, tx := storetest.TestTx(ctx, t)
		return ctx, &testBundle{st: st, db: tx, batchID: batchFixture(ctx, t, st, tx), key: uniqueID("A")}
	}
	// setupPool gives the test a schema of its own: ingests racing on
	// several connections must see each other's commits.
	setupPool := func(t *testing.T) (context.Context, *testBundle) {
		t.Helper()
		ctx := t.Context()
		st := storetest.NewStore(t)
		return ctx, &testBundle{st: st, db: st.Pool, batchID: batchFixture(ctx, t, st, st.Pool), key: uniqueID("A")}
	}

	t.Run("Inserted", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		p := ingestParams(b.batchID, b.key, "parcel 1Z999AA10123456784 never arrived")
		p.Flags = []string{"trimmed"}
		res, err := b.st.MessageIngest(ctx, b.db, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != store.IngestInserted {
			t.Fatalf("status = %s, want inserted", res.Status)
		}
		m, r := res.Message, res.Run
		if m.ID == 0 || m.Source != "fixture" || m.ExternalID != b.key || m.Body != p.Body ||
			!bytes.Equal(m.ContentHash, p.ContentHash) || m.BatchID != b.batchID || m.ReceivedAt.IsZero() {
			t.Errorf("message = %+v", m)
		}
		if string(m.Metadata) != `{"channel": "email"}` {
			t.Errorf("metadata = %s", m.Metadata)
		}
		if len(m.Flags) != 1 || m.Flags[0] != "trimmed" {
			t.Errorf("flags = %q", m.Flags)
		}
		if r.MessageID != m.ID || r.RunNo != 1 || r.Status != store.RunQueued || r.BatchID != b.batchID ||
			r.SchemaID != "support_ticket" || r.PublishedAt != nil || r.FinishedAt != nil {
			t.Errorf("run = %+v", r)
		}
		if !randomDedupID.MatchString(r.DedupID) {
			t.Errorf("dedup id = %q, want run- and a random UUID", r.DedupID)
		}
	})

	t.Run("NilMetadataAndFlags", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		p := ingestParams(b.batchID, b.key, "hello")
		p.Metadata, p.Flags = nil, nil
		res, err := b.st.MessageIngest(ctx, b.db, p)
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Message.Metadata) != `{}` || res.Message.Flags == nil || len(res.Message.Flags) != 0 {
			t.Errorf("metadata = %s, flags = %#v; want {} and empty", res.Message.Metadata, res.Message.Flags)
		}
	})

	t.Run("Duplicate", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		p := ingestParams(b.batchID, b.key, "order 48213, please refund")
		first, err := b.st.MessageIngest(ctx, b.db, p)
		if err != nil {
			t.Fatal(err)
		}
		// Same id and text from another batch, later: a duplicate.
		p.BatchID = batchFixture(ctx, t, b.st, b.db)
		res, err := b.st.MessageIngest(ctx, b.db, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != store.IngestDuplicate {
			t.Fatalf("status = %s, want duplicate", res.Status)
		}
		if res.Message.ID != first.Message.ID || res.Message.BatchID != b.batchID {
			t.Errorf("message = %+v, want the first one", res.Message)
		}
		if res.Run.RunNo != 1 || res.Run.DedupID != first.Run.DedupID || res.Run.PublishedAt != nil {
			t.Errorf("run = %+v, want run 1 unpublished", res.Run)
		}
		if n := count(ctx, t, b.db, "runs", first.Message.ID); n != 1 {
			t.Errorf("runs = %d, want 1", n)
		}
	})

	t.Run("DuplicateReturnsLatestRun", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		p := ingestParams(b.batchID, b.key, "text")
		first, err := b.st.MessageIngest(ctx, b.db, p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.db.Exec(ctx, `INSERT INTO runs (message_id, run_no, batch_id, schema_id, dedup_id)
			VALUES ($1, 2, $2, 'support_ticket', $3)`, first.Message.ID, b.batchID, fmt.Sprintf("msg-%d-run-2", first.Message.ID))
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.st.MessageIngest(ctx, b.db, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != store.IngestDuplicate || res.Run.RunNo != 2 {
			t.Errorf("status %s run %d, want duplicate with run 2", res.Status, res.Run.RunNo)
		}
	})

	t.Run("ConflictNeverOverwrites", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		first, err := b.st.MessageIngest(ctx, b.db, ingestParams(b.batchID, b.key, "the first text"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.st.MessageIngest(ctx, b.db, ingestParams(b.batchID, b.key, "a different text"))
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("err = %v, want ErrConflict", err)
		}
		if res.Status != store.IngestConflict || res.Message.ID != first.Message.ID {
			t.Errorf("result = %s %d, want conflict with the stored message", res.Status, res.Message.ID)
		}
		got, err := b.st.RunGetWithMessage(ctx, b.db, store.RunGetParams{MessageID: first.Message.ID, RunNo: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got.Message.Body != "the first text" || !bytes.Equal(got.Message.ContentHash, first.Message.ContentHash) {
			t.Errorf("stored message changed: %q", got.Message.Body)
		}
	})

	t.Run("SameIDOtherSource", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		p := ingestParams(b.batchID, b.key, "text one")
		if _, err := b.st.MessageIngest(ctx, b.db, p); err != nil {
			t.Fatal(err)
		}
		p.Source, p.Body = "crm", "text two"
		res, err := b.st.MessageIngest(ctx, b.db, p)
		if err != nil || res.Status != store.IngestInserted {
			t.Fatalf("status %s, err %v; want inserted (the key is source + id)", res.Status, err)
		}
	})

	t.Run("NULInBodyStoredSafely", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		res, err := b.st.MessageIngest(ctx, b.db, ingestParams(b.batchID, b.key, "a\x00b\xffc"))
		if err != nil {
			t.Fatal(err)
		}
		if res.Message.Body != "a\uFFFDb\uFFFDc" {
			t.Errorf("body = %q", res.Message.Body)
		}
	})

	t.Run("UnknownBatch", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		if _, err := b.st.MessageIngest(ctx, b.db, ingestParams("no-such-batch", b.key, "x")); err == nil {
			t.Fatal("ingest into an unknown batch succeeded")
		}
	})

	t.Run("MissingParams", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		p := ingestParams(b.batchID, "", "x")
		if _, err := b.st.MessageIngest(ctx, b.db, p); err == nil {
			t.Fatal("ingest without an external id succeeded")
		}
	})

	t.Run("BatchIDTaken", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		err := b.st.BatchInsert(ctx, b.db, store.BatchInsertParams{ID: b.batchID, SchemaID: "x"})
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("err = %v, want ErrConflict", err)
		}
	})

	t.Run("ConcurrentSameIDOneInserted", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupPool(t)
		results := ingestAtOnce(ctx, t, b.st, ingestParams(b.batchID, "RACE-1", "the same text"), 16)
		inserted := 0
		for i := range results {
			switch results[i].Status {
			case store.IngestInserted:
				inserted++
			case store.IngestDuplicate:
			default:
				t.Errorf("ingest %d: status %s", i, results[i].Status)
			}
			if results[i].Message.ID != results[0].Message.ID {
				t.Errorf("ingest %d: message id %d, want %d", i, results[i].Message.ID, results[0].Message.ID)
			}
		}
		if inserted != 1 {
			t.Errorf("inserted %d times, want 1", inserted)
		}
		if c := count(ctx, t, b.db, "runs", results[0].Message.ID); c != 1 {
			t.Errorf("runs = %d, want 1", c)
		}
	})

	t.Run("SecondSchemaNewRun", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		p := ingestParams(b.batchID, b.key, "I want to return the shoes")
		first, err := b.st.MessageIngest(ctx, b.db, p)
		if err != nil {
			t.Fatal(err)
		}
		second := batchFixture(ctx, t, b.st, b.db)
		p.BatchID, p.SchemaID = second, "return_request"
		res, err := b.st.MessageIngest(ctx, b.db, p)
		if err != nil {
			t.Fatal(err)
		}
		r := res.Run
		if res.Status != store.IngestNewRun || res.Message.ID != first.Message.ID {
			t.Fatalf("status %s, message %d; want new_run of message %d", res.Status, res.Message.ID, first.Message.ID)
		}
		if r.RunNo != 2 || r.SchemaID != "return_request" || r.BatchID != second || r.Status != store.RunQueued ||
			r.PublishedAt != nil || !randomDedupID.MatchString(r.DedupID) || r.DedupID == first.Run.DedupID {
			t.Errorf("new run = %+v", r)
		}
		// Again with either schema: nothing new, and each finds its own run.
		again, err := b.st.MessageIngest(ctx, b.db, p)
		if err != nil || again.Status != store.IngestDuplicate || again.Run.RunNo != 2 {
			t.Errorf("second schema again: status %s, run %d, err %v; want duplicate of run 2", again.Status, again.Run.RunNo, err)
		}
		p.SchemaID = "support_ticket"
		again, err = b.st.MessageIngest(ctx, b.db, p)
		if err != nil || again.Status != store.IngestDuplicate || again.Run.RunNo != 1 {
			t.Errorf("first schema again: status %s, run %d, err %v; want duplicate of run 1", again.Status, again.Run.RunNo, err)
		}
		// Another text under the same id is still a conflict, whatever the schema.
		p.SchemaID, p.Body = "third_schema", "another text"
		p.ContentHash = ingestParams("", "", p.Body).ContentHash
		if _, err := b.st.MessageIngest(ctx, b.db, p); !errors.Is(err, store.ErrConflict) {
			t.Errorf("other text, new schema: err %v, want ErrConflict", err)
		}
		if c := count(ctx, t, b.db, "runs", first.Message.ID); c != 2 {
			t.Errorf("runs = %d, want 2", c)
		}
	})

	t.Run("ConcurrentSecondSchemaOneNewRun", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupPool(t)
		p := ingestParams(b.batchID, "RACE-2", "the same text")
		first, err := b.st.MessageIngest(ctx, b.db, p)
		if err != nil {
			t.Fatal(err)
		}
		p.SchemaID = "return_request"
		results := ingestAtOnce(ctx, t, b.st, p, 16)
		created := 0
		for i := range results {
			if results[i].Status == store.IngestNewRun {
				created++
			}
			if results[i].Run.RunNo != 2 || results[i].Run.SchemaID != "return_request" {
				t.Errorf("ingest %d: %s run %+v, want run 2 of return_request", i, results[i].Status, results[i].Run)
			}
		}
		if created != 1 {
			t.Errorf("new runs %d, want 1", created)
		}
		if c := count(ctx, t, b.db, "runs", first.Message.ID); c != 2 {
			t.Errorf("runs = %d, want 2", c)
		}
	})
}

// ingestAtOnce runs MessageIngest(p) n times at the same moment and
// returns the results; any error fails the test.
func ingestAtOnce(ctx context.Context, t *testing.T, st *store.Store, p store.MessageIngestParams, n int) []store.MessageIngestResult {
	t.Helper()
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make([]store.MessageIngestResult, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = st.MessageIngest(ctx, st.Pool, p)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ingest %d: %v", i, err)
		}
	}
	return results
}

// A message extracted with two schemas has a current result for each.
func TestCurrentResultPerSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, tx := storetest.TestTx(ctx, t)
	run1 := messageFixture(ctx, t, st, tx, batchFixture(ctx, t, st, tx))
	if err := st.RunOutcomeInsert(ctx, tx, succeededOutcome(run1)); err != nil {
		t.Fatal(err)
	}
	p := ingestParams(batchFixture(ctx, t, st, tx), "", "")
	m, err := st.RunGetWithMessage(ctx, tx, store.RunGetParams{MessageID: run1.MessageID, RunNo: 1})
	if err != nil {
		t.Fatal(err)
	}
	p.ExternalID, p.Body, p.ContentHash, p.SchemaID = m.Message.ExternalID, m.Message.Body, m.Message.ContentHash, "return_request"
	res, err := st.MessageIngest(ctx, tx, p)
	if err != nil || res.Status != store.IngestNewRun {
		t.Fatalf("second schema: %s, %v", res.Status, err)
	}
	o := succeededOutcome(res.Run)
	o.SchemaID = "return_request"
	o.Extraction.Data = []byte(`{"items":[]}`)
	if err := st.RunOutcomeInsert(ctx, tx, o); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		schema  string
		wantRun int
	}{{"support_ticket", 1}, {"return_request", 2}, {"", 2}} {
		cur, err := st.CurrentResultGet(ctx, tx, store.CurrentResultGetParams{MessageID: run1.MessageID, SchemaID: tt.schema})
		if err != nil {
			t.Fatalf("schema %q: %v", tt.schema, err)
		}
		if cur.RunNo != tt.wantRun || (tt.schema != "" && cur.SchemaID != tt.schema) {
			t.Errorf("schema %q: run %d of %s, want run %d", tt.schema, cur.RunNo, cur.SchemaID, tt.wantRun)
		}
	}
	if _, err := st.CurrentResultGet(ctx, tx, store.CurrentResultGetParams{MessageID: run1.MessageID, SchemaID: "other"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown schema: err %v, want ErrNotFound", err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM current_results WHERE message_id = $1`, run1.MessageID).Scan(&n); err != nil || n != 2 {
		t.Errorf("current_results rows = %d (%v), want 2, one per schema", n, err)
	}
}

// randomDedupID is the shape of a run's dedup id since migration 000013:
// "run-" and a version 4 UUID.
var randomDedupID = regexp.MustCompile(`^run-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
