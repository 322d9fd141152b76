package main

import (
	"crypto/sha256"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/eval"
	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// The report of a batch with one success and two failed runs, one of them
// approved by a reviewer.
func TestPrintReport(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	const batch = "b-report"
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: batch, SchemaID: "support_ticket", SourceName: "r.jsonl"}); err != nil {
		t.Fatal(err)
	}
	call := store.LLMCall{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
		PromptTokens: 100, CompletionTokens: 20, CostUSD: 0.0001, FinishReason: "stop", Reply: `{}`}
	var items []int64
	for i, text := range []string{"order 48213 never came", "refund please", "wrong size"} {
		h := sha256.Sum256([]byte(text))
		res, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{Source: "r", ExternalID: string(rune('a' + i)),
			Body: text, ContentHash: h[:], BatchID: batch, SchemaID: "support_ticket"})
		if err != nil {
			t.Fatal(err)
		}
		o := store.RunOutcomeParams{MessageID: res.Run.MessageID, RunNo: 1, SchemaID: "support_ticket", SchemaVersion: "1", Calls: []store.LLMCall{call}}
		switch i {
		case 1: // the provider's cache served part of its prompt
			o.Calls[0].CachedTokens = 40
		case 2: // its reply had no usage
			o.Calls[0].UsageEstimated = true
		}
		if i == 0 {
			o.Status, o.Calls[0].Valid = store.RunSucceeded, true
			o.Extraction = &store.ExtractionParams{Data: []byte(`{"order_id":"48213"}`), Evidence: []byte(`[]`)}
		} else {
			errs := extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: "/order_id", Keyword: "required", Message: "missing"}}
			o.Status, o.Calls[0].ErrorCount = store.RunFailed, 1
			o.Triage = &store.TriageParams{Reason: "schema", Errors: errs, LastReply: `{}`}
			o.Failures = []store.FailureEvent{{CallIndex: 0, Err: errs[0]}}
		}
		if err := st.RunOutcomeInsert(ctx, st.Pool, o); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			var id int64
			if err := st.Pool.QueryRow(ctx, `SELECT id FROM triage_items WHERE message_id = $1`, res.Run.MessageID).Scan(&id); err != nil {
				t.Fatal(err)
			}
			items = append(items, id)
		}
	}
	if _, err := st.TriageItemClaim(ctx, st.Pool, store.TriageItemClaimParams{ItemID: items[0], Reviewer: "alice", Via: store.ViaUI}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TriageItemApprove(ctx, st.Pool, store.TriageItemApproveParams{ItemID: items[0], Reviewer: "alice", Via: store.ViaUI,
		Data: []byte(`{"order_id":null}`), SchemaVersion: "1"}); err != nil {
		t.Fatal(err)
	}

	// Another batch's failed run, at another field: in the failing fields
	// of every batch, not in b-report's.
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: "b-other", SchemaID: "support_ticket", SourceName: "o.jsonl"}); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte("other"))
	res, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{Source: "o", ExternalID: "o1",
		Body: "other", ContentHash: h[:], BatchID: "b-other", SchemaID: "support_ticket"})
	if err != nil {
		t.Fatal(err)
	}
	otherErr := extracttype.Error{Kind: extracttype.KindSchema, Path: "/email", Keyword: "format", Message: "not an email"}
	if err := st.RunOutcomeInsert(ctx, st.Pool, store.RunOutcomeParams{MessageID: res.Run.MessageID, RunNo: 1, SchemaID: "support_ticket",
		SchemaVersion: "1", Calls: []store.LLMCall{call}, Status: store.RunFailed,
		Triage:   &store.TriageParams{Reason: "schema", Errors: extracttype.ErrorList{otherErr}, LastReply: `{}`},
		Failures: []store.FailureEvent{{CallIndex: 0, Err: otherErr}}}); err != nil {
		t.Fatal(err)
	}

	var out strings.Builder
	if err := printReport(ctx, &out, st, reportParams{Source: "r.jsonl", SchemaID: "support_ticket", Examples: 2, Fields: 5}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Batch b-report: 3 messages",
		"succeeded 1 (valid at first pass), repaired 0 (valid after the one repair), held 0 (valid, held for review: no result until approved), failed 2 (sent to triage), queued 0",
		"check: succeeded + repaired + held + failed + queued = 3 of 3 messages",
		"triage items (every run): 1 open, 1 approved, 0 rejected, 0 sent back for a re-run",
		"LLM (every run): 3 calls (1 with estimated tokens), 300 prompt (40 cached) + 60 completion tokens, cost $0.000300",
		"Failing fields of batch b-report (every run) (failing_fields_in, top 5):",
		"support_ticket  /order_id  schema  2       2     0         2",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "/email") {
		t.Errorf("b-report's failing fields list another batch's /email:\n%s", out.String())
	}
	if strings.Contains(out.String(), " runs: ") {
		t.Errorf("a batch without re-runs has a runs line:\n%s", out.String())
	}

	out.Reset()
	if err := printReport(ctx, &out, st, reportParams{BatchID: batch, Examples: 1, Fields: 5, AllBatches: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Failing fields of all batches and schemas (failing_fields_in, top 5):",
		"support_ticket  /order_id  schema  2       2     0         2",
		"support_ticket  /email     schema  1       1     0         1",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report of all batches lacks %q:\n%s", want, out.String())
		}
	}

	// A window that starts after every error shows no failing field.
	out.Reset()
	since := time.Now().Add(time.Hour)
	if err := printReport(ctx, &out, st, reportParams{BatchID: batch, Examples: 1, Fields: 5, Since: since}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Failing fields of batch b-report (every run) since " + since.UTC().Format(time.RFC3339) + " (failing_fields_in, top 5):\n",
		"(none)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report since the future lacks %q:\n%s", want, out.String())
		}
	}

	// A reviewer re-runs the open item in the same batch, and the re-run
	// succeeds: the message counts once, by its latest run; the lines over
	// every run say so.
	run, err := st.TriageItemRerun(ctx, st.Pool, store.TriageItemRerunParams{ItemID: items[1], Reviewer: "alice", Via: store.ViaUI})
	if err != nil {
		t.Fatal(err)
	}
	ok := store.RunOutcomeParams{MessageID: run.MessageID, RunNo: run.RunNo, SchemaID: "support_ticket", SchemaVersion: "1",
		Status: store.RunSucceeded, Calls: []store.LLMCall{call}, Extraction: &store.ExtractionParams{Data: []byte(`{"order_id":null}`)}}
	ok.Calls[0].Valid = true
	if err := st.RunOutcomeInsert(ctx, st.Pool, ok); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := printReport(ctx, &out, st, reportParams{BatchID: batch, Examples: 1, Fields: 5}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Batch b-report: 3 messages\n  4 runs: one more run of a message re-run in this batch",
		"succeeded 2 (valid at first pass), repaired 0 (valid after the one repair), held 0 (valid, held for review: no result until approved), failed 1 (sent to triage), queued 0",
		"triage items (every run): 0 open, 1 approved, 0 rejected, 1 sent back for a re-run",
		"LLM (every run): 4 calls (1 with estimated tokens), 400 prompt (40 cached) + 80 completion tokens",
		"first-pass failures 1 (33.3% of messages); repair calls (every run) 0;",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report after a re-run lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "erased:") {
		t.Errorf("a report without erasures has an erased line:\n%s", out.String())
	}

	// Message a's text is erased: the report says so.
	if _, err := st.MessagesErase(ctx, st.Pool, []store.MessageKey{{Source: "r", ExternalID: "a"}}, store.ErasureParams{Actor: "dpo", Via: store.ViaCLI}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := printReport(ctx, &out, st, reportParams{BatchID: batch, Examples: 3, Fields: 5}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "erased: 1 of the messages' text and results (retention)") || strings.Contains(out.String(), "48213") {
		t.Errorf("report after an erasure:\n%s", out.String())
	}
}

// TestChooseBatchSourceSpellings: -source finds the batch of a file
// whose path was typed another way at ingest, and names the files of the
// same name when it cannot.
func TestChooseBatchSourceSpellings(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	const name = "testdata/x/messages.jsonl"
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: "b-x", SchemaID: "support_ticket", SourceName: name}); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte("text"))
	if _, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{Source: "x", ExternalID: "1", Body: "text",
		ContentHash: h[:], BatchID: "b-x", SchemaID: "support_ticket"}); err != nil {
		t.Fatal(err)
	}
	for _, typed := range []string{name, "./" + name, "testdata//x/./messages.jsonl"} {
		if id, err := chooseBatch(ctx, st, "", typed, ""); err != nil || id != "b-x" {
			t.Errorf("chooseBatch(-source %q) = %q, %v; want b-x", typed, id, err)
		}
	}
	// An absolute path to the same file, from here.
	abs, err := filepath.Abs(name)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := chooseBatch(ctx, st, "", abs, ""); err != nil || id != "b-x" {
		t.Errorf("chooseBatch(-source the absolute path) = %q, %v; want b-x", id, err)
	}
	_, err = chooseBatch(ctx, st, "", "elsewhere/messages.jsonl", "")
	if err == nil || !strings.Contains(err.Error(), `written "testdata/x/messages.jsonl"`) {
		t.Errorf("chooseBatch(-source of another folder) = %v; want the file of that name named", err)
	}
	_, err = chooseBatch(ctx, st, "", "other.jsonl", "")
	if err == nil || strings.Contains(err.Error(), "written") {
		t.Errorf("chooseBatch(-source of an unknown file) = %v; want no file named", err)
	}
}

// TestPrintReportSimulatorFigures: the report's header says a batch run on
// the LLM simulator has simulator figures, as eval does, and names a
// model's batch's model without that label.
func TestPrintReportSimulatorFigures(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	for _, model := range []string{eval.SimulatorModel, "gpt-4o-mini"} {
		batch := "b-" + model
		if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: batch, SchemaID: "support_ticket", SourceName: "r.jsonl"}); err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256([]byte(model))
		res, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{Source: "r", ExternalID: model,
			Body: model, ContentHash: h[:], BatchID: batch, SchemaID: "support_ticket"})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.RunOutcomeInsert(ctx, st.Pool, store.RunOutcomeParams{MessageID: res.Run.MessageID, RunNo: 1,
			SchemaID: "support_ticket", SchemaVersion: "1", Status: store.RunSucceeded,
			Calls: []store.LLMCall{{Attempt: 1, Model: model, PromptVersion: "extract.v1", RequestMode: "response_format",
				PromptTokens: 100, CompletionTokens: 20, CostUSD: 0.0001, FinishReason: "stop", Reply: `{}`, Valid: true}},
			Extraction: &store.ExtractionParams{Data: []byte(`{}`), Evidence: []byte(`[]`)}}); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := printReport(ctx, &out, st, reportParams{BatchID: batch, Examples: 1, Fields: 5}); err != nil {
			t.Fatal(err)
		}
		header, _, _ := strings.Cut(out.String(), "LLM (every run)")
		simulated := strings.Contains(header, "SIMULATOR FIGURES (model "+eval.SimulatorModel)
		if simulated != (model == eval.SimulatorModel) || !strings.Contains(header, "model "+model) {
			t.Errorf("model %s: the header before the LLM figures says simulated %v:\n%s", model, simulated, out.String())
		}
	}
}
