package ingestapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/store"
)

// A batch whose run is held is done, with the run counted as held; the
// results export gives it no result.
func TestServeBatchHeld(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	p := se.post(t, "", "application/x-ndjson", `{"id":"h-1","text":"refund 900 for order 48213"}`+"\n")
	if p.status != http.StatusOK || p.ans.Queued != 1 {
		t.Fatalf("POST: %d %s", p.status, p.body)
	}
	ctx := t.Context()
	var id int64
	if err := se.Env.Store.Pool.QueryRow(ctx, `SELECT message_id FROM runs WHERE batch_id = $1`, p.ans.BatchID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := se.Env.Store.RunOutcomeInsert(ctx, se.Env.Store.Pool, store.RunOutcomeParams{
		MessageID: id, RunNo: 1, SchemaID: ingesttest.Schema, SchemaVersion: "1", Status: store.RunHeld,
		Calls: []store.LLMCall{{Attempt: 1, Model: "sim", PromptTokens: 100, CompletionTokens: 10, FinishReason: "stop", Reply: `{"refund_amount":"900"}`, Valid: true}},
		Triage: &store.TriageParams{Reason: store.TriageReasonHeld, LastReply: `{"refund_amount":"900"}`,
			Errors: extracttype.ErrorList{{Kind: extracttype.KindHeld, Path: "/refund_amount", Keyword: "refund_amount_review", Message: "refund above 500.00"}},
			Held:   &store.HeldParams{Data: []byte(`{"refund_amount":"900"}`), ValidAs: store.RunSucceeded}},
	}); err != nil {
		t.Fatal(err)
	}
	r, b := se.batchStatus(t, "/v1/batches/"+p.ans.BatchID)
	if r.status != http.StatusOK || !b.Done || b.Held != 1 || b.Succeeded != 0 || !strings.Contains(string(r.body), `"held":1`) {
		t.Fatalf("batch with a held run: %d %s, want done with held 1", r.status, r.body)
	}
	status, lines := se.resultLines(t, "/v1/batches/"+p.ans.BatchID+"/results")
	if status != http.StatusOK || len(lines) != 1 || lines[0]["status"] != "held" || lines[0]["result"] != nil || lines[0]["triage"] != "open" {
		t.Fatalf("results of a held run: %d %v", status, lines)
	}
}
