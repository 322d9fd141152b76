package store_test

import (
	"context"
	"testing"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
)

// triageFailedOutcome is a run that failed after its repair, with a grounding
// error at /order_id and a schema error at /items/2/sku.
func triageFailedOutcome(r store.Run) store.RunOutcomeParams {
	errs := extracttype.ErrorList{
		{Kind: extracttype.KindSchema, Path: "/items/2/sku", Keyword: "pattern", Message: "does not match pattern"},
		{Kind: extracttype.KindRule, Path: "/order_id", Keyword: "grounded", Message: "value does not appear in the message"},
	}
	return store.RunOutcomeParams{
		MessageID: r.MessageID, RunNo: r.RunNo,
		SchemaID: "support_ticket", SchemaVersion: "1",
		Status: store.RunFailed,
		Calls: []store.LLMCall{
			{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
				PromptTokens: 100, CompletionTokens: 20, CostUSD: 0.00012, LatencyMS: 40, FinishReason: "stop",
				Reply: `{"order_id":"99999"}`, ErrorCount: 2},
			{Attempt: 2, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
				RepairStrategy: "regenerate", PromptTokens: 150, CompletionTokens: 20, CostUSD: 0.0002, LatencyMS: 50,
				FinishReason: "stop", Reply: `{"order_id":"99998"}`, ErrorCount: 2},
		},
		Triage: &store.TriageParams{Reason: string(errs[0].Kind), Errors: errs, LastReply: `{"order_id":"99998"}`},
	}
}

// triageItemFixture ingests a message in batch and fails its run 1; it
// returns the open triage item's id and the run.
func triageItemFixture(ctx context.Context, t *testing.T, st *store.Store, db store.DBTX, batchID string) (int64, store.Run) {
	t.Helper()
	r := messageFixture(ctx, t, st, db, batchID)
	if err := st.RunOutcomeInsert(ctx, db, triageFailedOutcome(r)); err != nil {
		t.Fatalf("RunOutcomeInsert: %v", err)
	}
	var id int64
	if err := db.QueryRow(ctx, `SELECT id FROM triage_items WHERE message_id = $1 AND run_no = $2`, r.MessageID, r.RunNo).Scan(&id); err != nil {
		t.Fatalf("triage item of %d: %v", r.MessageID, err)
	}
	return id, r
}

// auditActions returns the actions of item id's audit entries, oldest first.
func auditActions(ctx context.Context, t *testing.T, st *store.Store, db store.DBTX, id int64) []string {
	t.Helper()
	entries, err := st.AuditList(ctx, db, store.AuditListParams{TriageItemID: id})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(entries))
	for i, e := range entries {
		out[len(entries)-1-i] = e.Action
	}
	return out
}
