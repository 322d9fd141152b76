package ingest_test

import (
	"crypto/sha256"
	"testing"

	"github.com/extractq/extractq/eval"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestReportSaysSimulatorFigures: the report of a batch whose calls named
// the LLM simulator's model says its figures are the simulator's; a
// model's batch says nothing of the kind.
func TestReportSaysSimulatorFigures(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	for _, c := range []struct {
		model     string
		simulated bool
	}{{eval.SimulatorModel, true}, {"gpt-4o-mini", false}} {
		batch := "b-" + c.model
		if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: batch, SchemaID: "support_ticket", SourceName: "r.jsonl"}); err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256([]byte(c.model))
		res, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{Source: "r", ExternalID: c.model,
			Body: c.model, ContentHash: h[:], BatchID: batch, SchemaID: "support_ticket"})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.RunOutcomeInsert(ctx, st.Pool, store.RunOutcomeParams{MessageID: res.Run.MessageID, RunNo: 1,
			SchemaID: "support_ticket", SchemaVersion: "1", Status: store.RunSucceeded,
			Calls: []store.LLMCall{{Attempt: 1, Model: c.model, PromptVersion: "extract.v1", RequestMode: "response_format",
				PromptTokens: 100, CompletionTokens: 20, CostUSD: 0.0001, FinishReason: "stop", Reply: `{}`, Valid: true}},
			Extraction: &store.ExtractionParams{Data: []byte(`{}`), Evidence: []byte(`[]`)}}); err != nil {
			t.Fatal(err)
		}
		rep := ingest.NewReport(ingest.Summary{BatchID: batch})
		if err := ingest.AddOutcomes(ctx, st, ingest.Summary{BatchID: batch}, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.LLMCalls != 1 || rep.Simulated != c.simulated || (rep.Note == eval.SimulatorNote) != c.simulated {
			t.Errorf("model %s: %d calls, simulated %v, note %q; want 1 call, simulated %v", c.model, rep.LLMCalls, rep.Simulated, rep.Note, c.simulated)
		}
	}
}
