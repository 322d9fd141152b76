package main

import (
	"crypto/sha256"
	"encoding/json"
	"github.com/extractq/extractq/export"
	"github.com/extractq/extractq/internal/startup"
	"strings"
	"testing"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// A held run is counted apart in the report and is no result in the
// results export until a reviewer approves it.
func TestReportHeld(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	const batch = "b-held"
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: batch, SchemaID: "support_ticket", SourceName: "h.jsonl"}); err != nil {
		t.Fatal(err)
	}
	text := "refund 900 for order 48213"
	h := sha256.Sum256([]byte(text))
	res, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{Source: "h", ExternalID: "h1",
		Body: text, ContentHash: h[:], BatchID: batch, SchemaID: "support_ticket"})
	if err != nil {
		t.Fatal(err)
	}
	rule := extracttype.Error{Kind: extracttype.KindHeld, Path: "/refund_amount", Keyword: "refund_amount_review", Message: "refund above 500.00"}
	if err := st.RunOutcomeInsert(ctx, st.Pool, store.RunOutcomeParams{MessageID: res.Run.MessageID, RunNo: 1, SchemaID: "support_ticket",
		SchemaVersion: "1", Status: store.RunHeld,
		Calls: []store.LLMCall{{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
			PromptTokens: 100, CompletionTokens: 20, FinishReason: "stop", Reply: `{"refund_amount":"900"}`, Valid: true}},
		Triage: &store.TriageParams{Reason: store.TriageReasonHeld, Errors: extracttype.ErrorList{rule}, LastReply: `{"refund_amount":"900"}`,
			Held: &store.HeldParams{Data: []byte(`{"refund_amount":"900"}`), ValidAs: store.RunSucceeded}},
	}); err != nil {
		t.Fatal(err)
	}

	var out strings.Builder
	if err := printReport(ctx, &out, st, reportParams{BatchID: batch, Examples: 2, Fields: 5}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"succeeded 0 (valid at first pass), repaired 0 (valid after the one repair), held 1 (valid, held for review: no result until approved), failed 0 (sent to triage), queued 0",
		"check: succeeded + repaired + held + failed + queued = 1 of 1 messages",
		"triage items (every run): 1 open,",
		"of them held for review: 1 open, 0 approved, 0 rejected, 0 sent back for a re-run",
		"held for review 1 (0 valid after the one repair, not counted as repaired above)",
		"Example results (0 shown)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}

	var lines strings.Builder
	if _, err := writeResults(ctx, &lines, st, batch, export.FormatJSONL, "", startup.Env{}); err != nil {
		t.Fatal(err)
	}
	var line struct {
		Status string          `json:"status"`
		Triage *string         `json:"triage"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(lines.String())), &line); err != nil {
		t.Fatalf("%v: %s", err, lines.String())
	}
	if line.Status != store.RunHeld || line.Triage == nil || *line.Triage != store.TriageOpen || string(line.Result) != "null" {
		t.Errorf("results line %s, want status held, triage open, no result", lines.String())
	}
}
