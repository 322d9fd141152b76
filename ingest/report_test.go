package ingest_test

import (
	"context"
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

// TestReportOneSnapshot: a run a worker commits while the report is read
// shows in none of its fields. Read apart, the counts said no call and
// the versions, read after the commit, said "simulated":true.
func TestReportOneSnapshot(t *testing.T) {
	ctx := t.Context()
	st := storetest.NewStore(t)
	const batch = "b-snapshot"
	res := storetest.QueuedMessage(ctx, t, st, batch, "support_ticket", "s1", "where is order 48213")
	ingest.SetOutcomesRead(func() {
		if err := st.RunOutcomeInsert(context.WithoutCancel(ctx), st.Pool, store.RunOutcomeParams{MessageID: res.Run.MessageID, RunNo: 1,
			SchemaID: "support_ticket", SchemaVersion: "1", Status: store.RunSucceeded,
			Calls: []store.LLMCall{{Attempt: 1, Model: eval.SimulatorModel, PromptVersion: "extract.v1", RequestMode: "response_format",
				PromptTokens: 100, CompletionTokens: 20, CostUSD: 0.0001, FinishReason: "stop", Reply: `{}`, Valid: true}},
			Extraction: &store.ExtractionParams{Data: []byte(`{}`), Evidence: []byte(`[]`)}}); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { ingest.SetOutcomesRead(nil) })
	rep := ingest.NewReport(ingest.Summary{BatchID: batch})
	if err := ingest.AddOutcomes(ctx, st, ingest.Summary{BatchID: batch}, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Queued != 1 || rep.LLMCalls != 0 || rep.Simulated || rep.Note != "" {
		t.Errorf("report read across a commit: queued %d, %d calls, simulated %v, note %q; want queued 1, no call, not simulated",
			rep.Queued, rep.LLMCalls, rep.Simulated, rep.Note)
	}
	ingest.SetOutcomesRead(nil)
	rep = ingest.NewReport(ingest.Summary{BatchID: batch})
	if err := ingest.AddOutcomes(ctx, st, ingest.Summary{BatchID: batch}, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Succeeded != 1 || rep.LLMCalls != 1 || !rep.Simulated {
		t.Errorf("report read after the commit: succeeded %d, %d calls, simulated %v; want 1, 1, true", rep.Succeeded, rep.LLMCalls, rep.Simulated)
	}
}
