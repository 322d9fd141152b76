package main

import (
	"context"
	"strings"
	"testing"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// TestPrintReportOneSnapshot: a run a worker commits while the report is
// being read changes none of its lines. The report reads the batch's
// summary, then its triage items, accounting and failing fields; a failed
// run committed in between must not show as an open triage item, a repair
// call or a failing field beside a summary that still counts it queued.
func TestPrintReportOneSnapshot(t *testing.T) {
	ctx := t.Context()
	st := storetest.NewStore(t)
	const batch = "b-snapshot"
	res := storetest.QueuedMessage(ctx, t, st, batch, "support_ticket", "q1", "where is order 48213")
	errs := extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: "/order_id", Keyword: "required", Message: "missing"}}
	call := store.LLMCall{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
		PromptTokens: 100, CompletionTokens: 20, CostUSD: 0.0001, FinishReason: "stop", Reply: `{}`, ErrorCount: 1}
	outcome := store.RunOutcomeParams{MessageID: res.Run.MessageID, RunNo: 1, SchemaID: "support_ticket", SchemaVersion: "1",
		Status: store.RunFailed, Calls: []store.LLMCall{call, {Attempt: 2, Model: "sim-1", PromptVersion: "extract.v1",
			RequestMode: "response_format", Purpose: "repair", PromptTokens: 120, CompletionTokens: 20, CostUSD: 0.0001,
			FinishReason: "stop", Reply: `{}`, ErrorCount: 1}},
		Triage:   &store.TriageParams{Reason: "schema", Errors: errs, LastReply: `{}`},
		Failures: []store.FailureEvent{{CallIndex: 0, Err: errs[0]}, {CallIndex: 1, Err: errs[0]}}}

	// The worker commits the run's failure once the summary is read.
	reportRead = func() {
		if err := st.RunOutcomeInsert(context.WithoutCancel(ctx), st.Pool, outcome); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { reportRead = nil })

	var out strings.Builder
	if err := printReport(ctx, &out, st, reportParams{BatchID: batch, Examples: 1, Fields: 5}); err != nil {
		t.Fatal(err)
	}
	report := out.String()
	for _, want := range []string{
		"failed 0 (sent to triage), queued 1",
		"triage items (every run): 0 open,",
		"LLM (every run): 0 calls",
		"repair calls (every run) 0;",
		"final failures 0",
		"Triage items (0 shown)",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report does not say %q: it mixes what it read before and after the run's commit:\n%s", want, report)
		}
	}
	if strings.Contains(report, "/order_id") {
		t.Errorf("the report lists the failing field of a run its summary counts queued:\n%s", report)
	}

	// Read again, the committed run is in every line.
	reportRead = nil
	out.Reset()
	if err := printReport(ctx, &out, st, reportParams{BatchID: batch, Examples: 1, Fields: 5}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"failed 1 (sent to triage), queued 0", "triage items (every run): 1 open,", "/order_id"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report read after the commit does not say %q:\n%s", want, out.String())
		}
	}
}
