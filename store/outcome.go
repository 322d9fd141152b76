package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/extractq/extractq/extracttype"
)

// LLMCall is one call to the model, failed ones too.
type LLMCall struct {
	Attempt          int    // 1 is the extraction, 2 the repair
	Purpose          string // "extract" or "repair"; default "extract" for attempt 1, else "repair"
	Model            string
	PromptVersion    string
	SchemaID         string // default RunOutcomeParams.SchemaID
	SchemaVersion    string // default RunOutcomeParams.SchemaVersion
	RequestMode      string // "response_format" or "tools"
	RepairStrategy   string // "regenerate" or "patch"; empty for the extraction
	PromptTokens     int
	CachedTokens     int // the part of PromptTokens served from the provider's prompt cache
	CompletionTokens int
	UsageEstimated   bool    // the tokens are the worker's estimates: the reply had no usage
	CostUSD          float64 // US dollars, stored to 8 decimals
	PriceVersion     string  // the price table version CostUSD was computed with
	LatencyMS        int     // milliseconds
	FinishReason     string  // the reply's finish_reason, or "undecodable"
	// HTTPStatus and ReplyBytes are, for a reply that could not be decoded
	// (finish reason "undecodable"), its HTTP status and size in bytes; 0
	// otherwise.
	HTTPStatus int
	ReplyBytes int
	Reply      string // the model's raw reply; NUL and invalid UTF-8 become U+FFFD
	Stripped   string // the JSON taken from the reply; cleaned as Reply
	Valid      bool   // the reply passed validation
	ErrorCount int    // errors found in the reply
	// Patch is the RFC 6902 patch a patch-strategy repair applied; nil
	// for other calls.
	Patch json.RawMessage
}

// FailureEvent is one error for failure analytics (failure_events: one row
// per error per call). The row's path_pattern is Err.PathPattern().
type FailureEvent struct {
	// CallIndex is the index in RunOutcomeParams.Calls of the call the error
	// was found in, or -1 for an error of no call (kinds input, delivery,
	// budget before the first call).
	CallIndex int
	// Attempt defaults to the call's attempt; 0 when there is no call.
	Attempt int
	// SchemaID and SchemaVersion default to RunOutcomeParams'.
	SchemaID, SchemaVersion string
	// PromptVersion and Model default to the call's.
	PromptVersion, Model string
	Err                  extracttype.Error
}

// ExtractionParams is a validated record to store as the run's result.
type ExtractionParams struct {
	Data      json.RawMessage // the validated record; required
	Evidence  json.RawMessage // grounding evidence, a JSON array; nil means []
	Outcome   string          // "succeeded", "repaired" or "approved"; default the run's status
	CreatedBy string          // default "model"
}

// TriageParams is a failed or held run's item for people.
type TriageParams struct {
	Reason    string                // the kind that failed the run, such as "schema", or "held"; required
	Errors    extracttype.ErrorList // the final error list; for a held run, the review rules that held it (kind held)
	LastReply string                // the last reply; NUL and invalid UTF-8 become U+FFFD
	// Held is the validated record a review rule held, for a held run
	// only (Reason "held"); nil otherwise.
	Held *HeldParams
}

// HeldParams is the validated record of a held run, waiting on its
// triage item. It is no result: a reviewer's approval makes one.
type HeldParams struct {
	Data     json.RawMessage // the validated record; required
	Evidence json.RawMessage // grounding evidence, a JSON array; nil means []
	ValidAs  string          // how it validated: RunSucceeded (first pass) or RunRepaired; required
}

// TriageReasonHeld is the reason of a held run's triage item, the kind of
// its entries (extracttype.KindHeld).
const TriageReasonHeld = "held"

// RunOutcomeParams is a run's whole outcome.
type RunOutcomeParams struct {
	MessageID     int64
	RunNo         int
	SchemaID      string // required
	SchemaVersion string // required
	Status        string // RunSucceeded, RunRepaired, RunHeld or RunFailed
	Calls         []LLMCall
	// Extraction is required for succeeded and repaired, and must be nil
	// for held and failed.
	Extraction *ExtractionParams
	// Triage is required for failed and held (with Triage.Held), and must
	// be nil otherwise.
	Triage   *TriageParams
	Failures []FailureEvent
	// QA, if set, draws a succeeded or repaired run for the QA queue in
	// the outcome's transaction (see QASampleParams); ignored otherwise.
	QA *QASampleParams
}

func (p RunOutcomeParams) validate() error {
	switch p.Status {
	case RunSucceeded, RunRepaired:
		if p.Extraction == nil || p.Triage != nil {
			return fmt.Errorf("status %s wants an extraction and no triage item", p.Status)
		}
		if len(p.Extraction.Data) == 0 {
			return fmt.Errorf("status %s: extraction data is empty", p.Status)
		}
	case RunFailed:
		if p.Triage == nil || p.Extraction != nil {
			return fmt.Errorf("status %s wants a triage item and no extraction", p.Status)
		}
		if p.Triage.Reason == "" || p.Triage.Reason == TriageReasonHeld || p.Triage.Held != nil {
			return fmt.Errorf("status %s: triage reason is empty or held, or the item holds a record", p.Status)
		}
	case RunHeld:
		if p.Triage == nil || p.Extraction != nil || p.Triage.Held == nil {
			return fmt.Errorf("status %s wants a triage item with the held record and no extraction", p.Status)
		}
		if p.Triage.Reason != TriageReasonHeld || len(p.Triage.Errors) == 0 {
			return fmt.Errorf("status %s: triage reason must be %q, with the rules that held it", p.Status, TriageReasonHeld)
		}
		if h := p.Triage.Held; len(h.Data) == 0 || (h.ValidAs != RunSucceeded && h.ValidAs != RunRepaired) {
			return fmt.Errorf("status %s: held data is empty or valid_as %q is not succeeded or repaired", p.Status, h.ValidAs)
		}
	default:
		return fmt.Errorf("status %q is not succeeded, repaired, held or failed", p.Status)
	}
	if p.SchemaID == "" || p.SchemaVersion == "" {
		return fmt.Errorf("schema id and schema version are required")
	}
	if err := p.QA.validate(); err != nil {
		return err
	}
	for i, f := range p.Failures {
		if f.CallIndex < -1 || f.CallIndex >= len(p.Calls) {
			return fmt.Errorf("failure %d: call index %d out of range [-1, %d)", i, f.CallIndex, len(p.Calls))
		}
	}
	return nil
}

const runStatusSQL = `SELECT status FROM runs WHERE message_id = $1 AND run_no = $2`

// extractionInsertSQL stores a validated record of a run; a reviewer's
// approval uses it (TriageItemApprove).
const extractionInsertSQL = `
INSERT INTO extractions (message_id, run_no, schema_id, schema_version, outcome, data, evidence, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`

// RunOutcomeInsert writes a run's whole outcome, atomically, in one
// statement (outcomeWriteSQL): the run's status and finished_at where the
// run is still queued, and then, only then, every call, the extraction
// (succeeded, repaired) or the triage item (held, failed), the failure
// events, each linked to its call by FailureEvent.CallIndex, and the
// results outbox's event (with a batch.done when it was its batch's last
// outcome; one transaction of its own when db is the pool). If the run is
// not queued, nothing is written and the error wraps ErrOutcomeExists (or
// ErrNotFound for an unknown run). db may be the pool or a transaction.
//
// Text taken from replies is cleaned first (see CleanText and CleanJSON),
// so a reply holding NUL bytes cannot make the write fail. A params error
// (such as a failed status without a triage item, or two calls with one
// attempt) is returned before anything is written.
func (s *Store) RunOutcomeInsert(ctx context.Context, db DBTX, p RunOutcomeParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("store.RunOutcomeInsert(%d, %d): %w", p.MessageID, p.RunNo, err)
	}
	if _, isTx := db.(pgx.Tx); !isTx && qaSampleArgs(p) != nil {
		// The QA draw commits with the outcome, or neither does.
		return inTx(ctx, db, func(tx DBTX) error { return s.RunOutcomeInsert(ctx, tx, p) })
	}
	var cols outcomeCols
	if err := cols.add(p); err != nil {
		return fmt.Errorf("store.RunOutcomeInsert(%d, %d): %w", p.MessageID, p.RunNo, err)
	}
	var finished int
	err := inTx(ctx, db, func(tx DBTX) error {
		var fin []int64
		if err := tx.QueryRow(ctx, outcomeWriteSQL, cols.args()...).Scan(&fin); err != nil {
			return err
		}
		if finished = len(fin); finished == 0 {
			return nil
		}
		// The results outbox's batch.done, if this was the batch's last
		// outcome (outboxBatchCheck).
		return s.outboxBatchCheck(ctx, tx, []RunSeqRef{{MessageID: p.MessageID, RunNo: p.RunNo}})
	})
	if err != nil {
		return fmt.Errorf("store.RunOutcomeInsert(%d, %d): %w", p.MessageID, p.RunNo, interpretError(err))
	}
	if finished == 1 {
		if err := qaSampleInsert(ctx, db, p); err != nil {
			return fmt.Errorf("store.RunOutcomeInsert(%d, %d): %w", p.MessageID, p.RunNo, interpretError(err))
		}
		return nil
	}
	var status string
	if err := db.QueryRow(ctx, runStatusSQL, p.MessageID, p.RunNo).Scan(&status); err != nil {
		return fmt.Errorf("store.RunOutcomeInsert(%d, %d): %w", p.MessageID, p.RunNo, interpretError(err))
	}
	return fmt.Errorf("store.RunOutcomeInsert(%d, %d): run is %s: %w", p.MessageID, p.RunNo, status, ErrOutcomeExists)
}

// cleanError returns e with its text fields cleaned (see CleanText): a
// path or keyword may come from the model's own field names.
func cleanError(e extracttype.Error) extracttype.Error {
	e.Kind = extracttype.Kind(CleanText(string(e.Kind)))
	e.Path = CleanText(e.Path)
	e.Keyword = CleanText(e.Keyword)
	e.Message = CleanText(e.Message)
	return e
}

// marshalErrorList encodes l for a jsonb column: cleaned, and [] for an
// empty list.
func marshalErrorList(l extracttype.ErrorList) ([]byte, error) {
	clean := make(extracttype.ErrorList, len(l))
	for i, e := range l {
		clean[i] = cleanError(e)
	}
	b, err := json.Marshal(clean)
	if err != nil {
		return nil, fmt.Errorf("encode error list: %w", err)
	}
	return b, nil
}
