package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/extractq/extractq/pipeline"
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
	CompletionTokens int
	CostUSD          float64 // US dollars, stored to 8 decimals
	PriceVersion     string  // the price table version CostUSD was computed with
	LatencyMS        int     // milliseconds
	FinishReason     string
	Reply            string // the model's raw reply; NUL and invalid UTF-8 become U+FFFD
	Stripped         string // the JSON taken from the reply; cleaned as Reply
	Valid            bool   // the reply passed validation
	ErrorCount       int    // errors found in the reply
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
	Err                  pipeline.Error
}

// ExtractionParams is a validated record to store as the run's result.
type ExtractionParams struct {
	Data      json.RawMessage // the validated record; required
	Evidence  json.RawMessage // grounding evidence, a JSON array; nil means []
	Outcome   string          // "succeeded", "repaired" or "approved"; default the run's status
	CreatedBy string          // default "model"
}

// TriageParams is a failed run's item for people.
type TriageParams struct {
	Reason    string             // the kind that failed the run, such as "schema"; required
	Errors    pipeline.ErrorList // the final error list
	LastReply string             // the last reply; NUL and invalid UTF-8 become U+FFFD
}

// RunOutcomeParams is a run's whole outcome.
type RunOutcomeParams struct {
	MessageID     int64
	RunNo         int
	SchemaID      string // required
	SchemaVersion string // required
	Status        string // RunSucceeded, RunRepaired or RunFailed
	Calls         []LLMCall
	// Extraction is required for succeeded and repaired, and must be nil
	// for failed.
	Extraction *ExtractionParams
	// Triage is required for failed, and must be nil otherwise.
	Triage   *TriageParams
	Failures []FailureEvent
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
		if p.Triage.Reason == "" {
			return fmt.Errorf("status %s: triage reason is empty", p.Status)
		}
	default:
		return fmt.Errorf("status %q is not succeeded, repaired or failed", p.Status)
	}
	if p.SchemaID == "" || p.SchemaVersion == "" {
		return fmt.Errorf("schema id and schema version are required")
	}
	for i, f := range p.Failures {
		if f.CallIndex < -1 || f.CallIndex >= len(p.Calls) {
			return fmt.Errorf("failure %d: call index %d out of range [-1, %d)", i, f.CallIndex, len(p.Calls))
		}
	}
	return nil
}

const runFinishSQL = `
UPDATE runs
SET status = $3, finished_at = now(), published_at = coalesce(published_at, now())
WHERE message_id = $1 AND run_no = $2 AND status = 'queued'`

const runStatusSQL = `SELECT status FROM runs WHERE message_id = $1 AND run_no = $2`

const llmCallInsertSQL = `
INSERT INTO llm_calls (
    message_id, run_no, attempt, purpose, model, prompt_version, schema_id, schema_version,
    request_mode, repair_strategy, prompt_tokens, completion_tokens, cost_usd, price_version,
    latency_ms, finish_reason, reply, stripped, valid, error_count, patch)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
RETURNING id`

const extractionInsertSQL = `
INSERT INTO extractions (message_id, run_no, schema_id, schema_version, outcome, data, evidence, created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`

const triageItemInsertSQL = `
INSERT INTO triage_items (message_id, run_no, schema_id, reason, errors, last_reply)
VALUES ($1, $2, $3, $4, $5, $6)`

// failureEventInsertSQL writes all of a run's failure events in one
// statement, one array per column.
const failureEventInsertSQL = `
INSERT INTO failure_events (
    llm_call_id, message_id, run_no, attempt, schema_id, schema_version, prompt_version,
    model, kind, path, path_pattern, keyword, message)
SELECT u.llm_call_id, $1, $2, u.attempt, u.schema_id, u.schema_version, u.prompt_version,
       u.model, u.kind, u.path, u.path_pattern, u.keyword, u.message
FROM unnest($3::bigint[], $4::int[], $5::text[], $6::text[], $7::text[],
            $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[])
     AS u(llm_call_id, attempt, schema_id, schema_version, prompt_version,
          model, kind, path, path_pattern, keyword, message)`

// RunOutcomeInsert writes a run's whole outcome in one transaction: db's
// own if db is a pgx.Tx (the worker locks the run with RunLockForOutcome
// first), else one it begins. It first sets the run's status and
// finished_at where the run is still queued; if it is not, nothing is
// written and the error wraps ErrOutcomeExists (or ErrNotFound for an
// unknown run). Then it inserts every call, the extraction (succeeded,
// repaired) or the triage item (failed), and the failure events, each
// linked to its call by FailureEvent.CallIndex.
//
// Text taken from replies is cleaned first (see CleanText and CleanJSON),
// so a reply holding NUL bytes cannot make the transaction fail. A params
// error (such as a failed status without a triage item) is returned
// before anything is written.
func (s *Store) RunOutcomeInsert(ctx context.Context, db DBTX, p RunOutcomeParams) error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("store.RunOutcomeInsert(%d, %d): %w", p.MessageID, p.RunNo, err)
	}
	err := inTx(ctx, db, func(tx DBTX) error {
		tag, err := tx.Exec(ctx, runFinishSQL, p.MessageID, p.RunNo, p.Status)
		if err != nil {
			return fmt.Errorf("finish run: %w", err)
		}
		if tag.RowsAffected() == 0 {
			var status string
			if err := tx.QueryRow(ctx, runStatusSQL, p.MessageID, p.RunNo).Scan(&status); err != nil {
				return interpretError(err)
			}
			return fmt.Errorf("run is %s: %w", status, ErrOutcomeExists)
		}

		callIDs := make([]int64, len(p.Calls))
		for i, c := range p.Calls {
			purpose := c.Purpose
			if purpose == "" {
				purpose = "repair"
				if c.Attempt <= 1 {
					purpose = "extract"
				}
			}
			err := tx.QueryRow(ctx, llmCallInsertSQL,
				p.MessageID, p.RunNo, c.Attempt, purpose, CleanText(c.Model), CleanText(c.PromptVersion),
				cmp.Or(c.SchemaID, p.SchemaID), cmp.Or(c.SchemaVersion, p.SchemaVersion),
				c.RequestMode, c.RepairStrategy, c.PromptTokens, c.CompletionTokens, c.CostUSD,
				c.PriceVersion, c.LatencyMS, CleanText(c.FinishReason), CleanText(c.Reply),
				CleanText(c.Stripped), c.Valid, c.ErrorCount, nullJSON(CleanJSON(c.Patch)),
			).Scan(&callIDs[i])
			if err != nil {
				return fmt.Errorf("insert call %d (attempt %d): %w", i, c.Attempt, interpretError(err))
			}
		}

		if e := p.Extraction; e != nil {
			evidence := CleanJSON(e.Evidence)
			if len(evidence) == 0 {
				evidence = json.RawMessage(`[]`)
			}
			_, err := tx.Exec(ctx, extractionInsertSQL,
				p.MessageID, p.RunNo, p.SchemaID, p.SchemaVersion, cmp.Or(e.Outcome, p.Status),
				CleanJSON(e.Data), evidence, cmp.Or(e.CreatedBy, "model"))
			if err != nil {
				return fmt.Errorf("insert extraction: %w", interpretError(err))
			}
		}

		if t := p.Triage; t != nil {
			errs, err := marshalErrorList(t.Errors)
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, triageItemInsertSQL,
				p.MessageID, p.RunNo, p.SchemaID, CleanText(t.Reason), errs, CleanText(t.LastReply))
			if err != nil {
				return fmt.Errorf("insert triage item: %w", interpretError(err))
			}
		}

		if len(p.Failures) > 0 {
			if err := insertFailureEvents(ctx, tx, p, callIDs); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store.RunOutcomeInsert(%d, %d): %w", p.MessageID, p.RunNo, err)
	}
	return nil
}

func insertFailureEvents(ctx context.Context, tx DBTX, p RunOutcomeParams, callIDs []int64) error {
	n := len(p.Failures)
	var (
		callID                                  = make([]*int64, n)
		attempt                                 = make([]int, n)
		schemaID, schemaVersion, promptVersion  = make([]string, n), make([]string, n), make([]string, n)
		model, kind, path, pathPattern, keyword = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		message                                 = make([]string, n)
	)
	for i, f := range p.Failures {
		var call LLMCall
		if f.CallIndex >= 0 {
			callID[i] = &callIDs[f.CallIndex]
			call = p.Calls[f.CallIndex]
		}
		e := cleanError(f.Err)
		attempt[i] = cmp.Or(f.Attempt, call.Attempt)
		schemaID[i] = cmp.Or(f.SchemaID, p.SchemaID)
		schemaVersion[i] = cmp.Or(f.SchemaVersion, p.SchemaVersion)
		promptVersion[i] = CleanText(cmp.Or(f.PromptVersion, call.PromptVersion))
		model[i] = CleanText(cmp.Or(f.Model, call.Model))
		kind[i] = string(e.Kind)
		path[i] = e.Path
		pathPattern[i] = e.PathPattern()
		keyword[i] = e.Keyword
		message[i] = e.Message
	}
	_, err := tx.Exec(ctx, failureEventInsertSQL, p.MessageID, p.RunNo,
		callID, attempt, schemaID, schemaVersion, promptVersion,
		model, kind, path, pathPattern, keyword, message)
	if err != nil {
		return fmt.Errorf("insert %d failure events: %w", n, interpretError(err))
	}
	return nil
}

// cleanError returns e with its text fields cleaned (see CleanText): a
// path or keyword may come from the model's own field names.
func cleanError(e pipeline.Error) pipeline.Error {
	e.Kind = pipeline.Kind(CleanText(string(e.Kind)))
	e.Path = CleanText(e.Path)
	e.Keyword = CleanText(e.Keyword)
	e.Message = CleanText(e.Message)
	return e
}

// marshalErrorList encodes l for a jsonb column: cleaned, and [] for an
// empty list.
func marshalErrorList(l pipeline.ErrorList) ([]byte, error) {
	clean := make(pipeline.ErrorList, len(l))
	for i, e := range l {
		clean[i] = cleanError(e)
	}
	b, err := json.Marshal(clean)
	if err != nil {
		return nil, fmt.Errorf("encode error list: %w", err)
	}
	return b, nil
}

// nullJSON returns nil (SQL NULL) for an empty document.
func nullJSON(doc json.RawMessage) any {
	if len(doc) == 0 {
		return nil
	}
	return doc
}
