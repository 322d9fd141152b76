package store_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/extractq/extractq/store"
)

// Fixture builders, in the manner of river's testfactory: each makes a
// valid row with defaults the test may override. Each writes on db: the
// test's transaction (storetest.TestTx) or its store's pool
// (storetest.NewStore).

var fixtureSeq atomic.Int64

// uniqueID returns prefix-<n>, a key no other test of this binary uses.
// Tests of storetest.TestTx share one schema, where a key written by one
// test would hold up another writing the same key until the first ends.
func uniqueID(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, fixtureSeq.Add(1))
}

// batchFixture inserts a batch of schema "support_ticket" and returns its id.
func batchFixture(ctx context.Context, t *testing.T, st *store.Store, db store.DBTX) string {
	t.Helper()
	id := uniqueID("batch")
	if err := st.BatchInsert(ctx, db, store.BatchInsertParams{ID: id, SchemaID: "support_ticket", SourceName: "fixture.jsonl"}); err != nil {
		t.Fatalf("BatchInsert: %v", err)
	}
	return id
}

// ingestParams returns params for message externalID with body in batch.
func ingestParams(batchID, externalID, body string) store.MessageIngestParams {
	h := sha256.Sum256([]byte(body))
	return store.MessageIngestParams{
		Source:      "fixture",
		ExternalID:  externalID,
		Body:        body,
		ContentHash: h[:],
		Metadata:    []byte(`{"channel":"email"}`),
		BatchID:     batchID,
		SchemaID:    "support_ticket",
	}
}

// messageFixture ingests a new message in batch and returns its run 1.
func messageFixture(ctx context.Context, t *testing.T, st *store.Store, db store.DBTX, batchID string) store.Run {
	t.Helper()
	id := uniqueID("m")
	res, err := st.MessageIngest(ctx, db, ingestParams(batchID, id, "my parcel never arrived, order "+id))
	if err != nil {
		t.Fatalf("MessageIngest(%s): %v", id, err)
	}
	if res.Status != store.IngestInserted {
		t.Fatalf("MessageIngest(%s): status %s, want inserted", id, res.Status)
	}
	return res.Run
}

// succeededOutcome is a first-pass success with one call.
func succeededOutcome(r store.Run) store.RunOutcomeParams {
	return store.RunOutcomeParams{
		MessageID: r.MessageID, RunNo: r.RunNo,
		SchemaID: "support_ticket", SchemaVersion: "1",
		Status: store.RunSucceeded,
		Calls: []store.LLMCall{{
			Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
			PromptTokens: 100, CompletionTokens: 20, CostUSD: 0.00012, PriceVersion: "p1",
			LatencyMS: 40, FinishReason: "stop", Reply: `{"intent":"refund"}`, Stripped: `{"intent":"refund"}`,
			Valid: true,
		}},
		Extraction: &store.ExtractionParams{
			Data:     []byte(`{"intent":"refund","order_id":"48213"}`),
			Evidence: []byte(`[{"path":"/order_id","start":10,"end":15}]`),
		},
	}
}

// count returns the number of rows of table for message id.
func count(ctx context.Context, t *testing.T, db store.DBTX, table string, messageID int64) int {
	t.Helper()
	var n int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE message_id = $1", messageID).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// savepoint runs fn on a savepoint of tx: it releases the savepoint when fn
// returns nil and rolls back to it otherwise, as the method under test
// rolls back its own transaction when it runs on the pool. A statement
// expected to fail is run this way when the test goes on after it, since
// a failed statement aborts the whole transaction.
func savepoint(ctx context.Context, t *testing.T, tx pgx.Tx, fn func(db store.DBTX) error) error {
	t.Helper()
	sp, err := tx.Begin(ctx)
	if err != nil {
		t.Fatalf("savepoint: %v", err)
	}
	if err := fn(sp); err != nil {
		if rbErr := sp.Rollback(ctx); rbErr != nil {
			t.Fatalf("roll back to savepoint: %v", rbErr)
		}
		return err
	}
	if err := sp.Commit(ctx); err != nil {
		t.Fatalf("release savepoint: %v", err)
	}
	return nil
}
