package ingest

import (
	"context"
	"strings"
	"time"

	"github.com/extractq/extractq/eval"
	"github.com/extractq/extractq/store"
)

// Report is what one ingest did and where its batch stands: what
// `ingest -json` prints and what POST /v1/messages answers.
type Report struct {
	BatchID          string  `json:"batch_id,omitempty"` // left out when no batch was recorded: nothing new got in (every line rejected or a duplicate)
	Lines            int     `json:"lines"`
	Published        int     `json:"published"`
	Duplicates       int     `json:"duplicates"`
	Rejected         int     `json:"rejected"`
	Queued           int     `json:"queued"`
	Succeeded        int     `json:"succeeded"`
	Repaired         int     `json:"repaired"`
	Held             int     `json:"held"` // valid, held for review by a review rule: final for the worker, no result until approved
	Failed           int     `json:"failed"`
	LLMCalls         int     `json:"llm_calls"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	CostUSD          float64 `json:"cost_usd"`
	// Simulated says the batch's LLM calls all named the LLM simulator's
	// model (eval.IsSimulator): its calls, tokens and cost describe the
	// simulator, not a model, as Note (eval.SimulatorNote) says.
	Simulated bool   `json:"simulated,omitempty"`
	Note      string `json:"note,omitempty"`
	// QueuedDuplicates counts duplicates whose earlier run is still queued;
	// they are in Queued and a wait covers them.
	QueuedDuplicates int `json:"queued_duplicates,omitempty"`
	// InvalidUTF8 counts the messages stored with U+FFFD in place of bytes
	// that are not UTF-8, and InvalidUTF8Lines gives the first of their
	// line numbers (Summary's fields of the same names).
	InvalidUTF8      int   `json:"invalid_utf8,omitempty"`
	InvalidUTF8Lines []int `json:"invalid_utf8_lines,omitempty"`
	// DuplicateAnomalies is Summary's: runs the stream answered
	// "duplicate" for while it held another message under their dedup id
	// (published again under a fresh key).
	DuplicateAnomalies int         `json:"duplicate_anomalies,omitempty"`
	TimedOut           bool        `json:"timed_out,omitempty"`
	Errors             []LineError `json:"errors,omitempty"`
	// ErrorsOmitted counts the rejected lines not in Errors, which lists
	// the first Config.MaxErrors (ingest.max_errors).
	ErrorsOmitted int `json:"errors_omitted,omitempty"`
	// Hint says what the input probably is when every line was rejected
	// for a reason the input's format explains, such as "the input looks
	// like CSV: use -format csv".
	Hint string `json:"hint,omitempty"`
}

// NewReport returns the report of what one ingest counted (sum), without
// the batch's outcomes: see AddOutcomes.
func NewReport(sum Summary) Report {
	return Report{BatchID: sum.BatchID, Lines: sum.Lines, Published: sum.Published, Duplicates: sum.Duplicates,
		Rejected: sum.Rejected, InvalidUTF8: sum.InvalidUTF8, InvalidUTF8Lines: sum.InvalidUTF8Lines,
		DuplicateAnomalies: sum.DuplicateAnomalies, Errors: sum.Errors, ErrorsOmitted: sum.ErrorsOmitted}
}

// outcomesRead, when set (by tests), runs after AddOutcomes has read the
// batch's counts and before it reads the batch's versions.
var outcomesRead func()

// AddOutcomes reads where sum's batch stands into rep: queued (with the
// duplicates of sum whose earlier run is still queued), succeeded,
// repaired, held, failed and the LLM calls, tokens and cost, with
// Simulated and Note when the calls were the simulator's; only the queued
// duplicates when no batch was recorded (sum.BatchID ""). A lost connection
// is retried for up to 10s within ctx; the error is the last one.
func AddOutcomes(ctx context.Context, st *store.Store, sum Summary, rep *Report) error {
	if sum.BatchID == "" {
		// No batch was recorded (nothing new got in): what is queued is
		// the duplicates' earlier runs.
		waiting, err := st.RunCountQueued(ctx, st.Pool, sum.Waiting)
		rep.Queued, rep.QueuedDuplicates = waiting, waiting
		return err
	}
	// The counts and the versions are read in one snapshot: read apart,
	// a call a worker records in between gave "llm_calls":0 beside
	// "simulated":true.
	var bs store.BatchSummary
	var v store.EvalVersions
	err := store.Retry(ctx, 10*time.Second, func() error {
		return st.ReadSnapshot(ctx, func(db store.DBTX) error {
			var err error
			if bs, err = st.BatchSummary(ctx, db, sum.BatchID); err != nil {
				return err
			}
			if outcomesRead != nil {
				outcomesRead()
			}
			v, err = st.EvalBatchVersions(ctx, db, sum.BatchID)
			return err
		})
	})
	if err != nil {
		return err
	}
	waiting, _ := st.RunCountQueued(ctx, st.Pool, sum.Waiting)
	rep.Queued, rep.Succeeded, rep.Repaired, rep.Held, rep.Failed = bs.Queued+waiting, bs.Succeeded, bs.Repaired, bs.Held, bs.Failed
	rep.QueuedDuplicates = waiting
	rep.LLMCalls, rep.PromptTokens, rep.CompletionTokens, rep.CostUSD = bs.LLMCalls, bs.PromptTokens, bs.CompletionTokens, bs.CostUSD
	if rep.Simulated = eval.BatchOf(sum.BatchID, v).Simulated; rep.Simulated {
		rep.Note = eval.SimulatorNote
	}
	return nil
}

// CSVReadAsJSONL reports whether sum's input was CSV read as JSONL: its
// first line reads as a CSV header (LooksLikeCSV, set for JSONL input
// only) and every line was rejected as not JSON or not a JSON object.
func (sum Summary) CSVReadAsJSONL() bool {
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
