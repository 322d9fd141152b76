package ingest

import (
	"context"
	"strings"
	"time"

	"github.com/extractq/extractq/store"
)

// newReport returns the report of what one ingest counted (sum), without
// the batch's outcomes: see addOutcomes.
func newReport(sum Summary) Report {
	return Report{BatchID: sum.BatchID, Lines: sum.Lines, Published: sum.Published, Duplicates: sum.Duplicates,
		Rejected: sum.Rejected, InvalidUTF8: sum.InvalidUTF8, InvalidUTF8Lines: sum.InvalidUTF8Lines, Errors: sum.Errors}
}

// addOutcomes reads where sum's batch stands into rep: queued (with the
// duplicates of sum whose earlier run is still queued), succeeded,
// repaired, failed and the LLM calls, tokens and cost; nothing when no
// batch was recorded (sum.BatchID ""). A lost connection
// is retried for up to 10s within ctx; the error is the last one.
func addOutcomes(ctx context.Context, st *store.Store, sum Summary, rep *Report) error {
	if sum.BatchID == "" {
		return nil // no batch was recorded: every line was rejected
	}
	var bs store.BatchSummary
	err := store.Retry(ctx, 10*time.Second, func() error {
		var err error
		bs, err = st.BatchSummary(ctx, st.Pool, sum.BatchID)
		return err
	})
	if err != nil {
		return err
	}
	waiting, _ := st.RunCountQueued(ctx, st.Pool, sum.Waiting)
	rep.Queued, rep.Succeeded, rep.Repaired, rep.Failed = bs.Queued+waiting, bs.Succeeded, bs.Repaired, bs.Failed
	rep.QueuedDuplicates = waiting
	rep.LLMCalls, rep.PromptTokens, rep.CompletionTokens, rep.CostUSD = bs.LLMCalls, bs.PromptTokens, bs.CompletionTokens, bs.CostUSD
	return nil
}

// csvReadAsJSONL reports whether sum's input was CSV read as JSONL: its
// first line reads as a CSV header (LooksLikeCSV, set for JSONL input
// only) and every line was rejected as not JSON or not a JSON object.
func (sum Summary) csvReadAsJSONL() bool {
	if !sum.LooksLikeCSV || len(sum.Errors) == 0 {
		return false
	}
	for _, e := range sum.Errors {
		if !strings.HasPrefix(e.Reason, "invalid JSON") && !strings.HasPrefix(e.Reason, "not a JSON object") {
			return false
		}
	}
	return true
}
