package store_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/extractq/extractq/store"
)

// Fixture builders, in the manner of river's testfactory: each makes a
// valid row with defaults the test may override.

var fixtureSeq atomic.Int64

// batchFixture inserts a batch of schema "support_ticket" and returns its id.
func batchFixture(ctx context.Context, t *testing.T, st *store.Store) string {
	t.Helper()
	id := fmt.Sprintf("batch-%d", fixtureSeq.Add(1))
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: id, SchemaID: "support_ticket", SourceName: "fixture.jsonl"}); err != nil {
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
func messageFixture(ctx context.Context, t *testing.T, st *store.Store, batchID string) store.Run {
	t.Helper()
	id := fmt.Sprintf("m-%d", fixtureSeq.Add(1))
	res, err := st.MessageIngest(ctx, st.Pool, ingestParams(batchID, id, "my parcel never arrived, order "+id))
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
func count(ctx context.Context, t *testing.T, st *store.Store, table string, messageID int64) int {
	t.Helper()
	var n int
	if err := st.Pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE message_id = $1", messageID).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}
