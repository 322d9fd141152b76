package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LLMCallRecord is a stored LLM call, as the triage view shows it.
type LLMCallRecord struct {
	ID               int64           `db:"id"`
	Attempt          int             `db:"attempt"` // 1 the extraction, 2 the repair
	Purpose          string          `db:"purpose"` // "extract" or "repair"
	Model            string          `db:"model"`
	PromptVersion    string          `db:"prompt_version"`
	SchemaVersion    string          `db:"schema_version"`
	RequestMode      string          `db:"request_mode"`
	RepairStrategy   string          `db:"repair_strategy"`
	PromptTokens     int             `db:"prompt_tokens"`
	CachedTokens     int             `db:"cached_tokens"` // the part of PromptTokens from the provider's prompt cache
	CompletionTokens int             `db:"completion_tokens"`
	UsageEstimated   bool            `db:"usage_estimated"` // the tokens are estimates: the reply had no usage
	CostUSD          float64         `db:"cost_usd"`        // US dollars
	LatencyMS        int             `db:"latency_ms"`      // milliseconds
	FinishReason     string          `db:"finish_reason"`
	Reply            string          `db:"reply"`
	Stripped         string          `db:"stripped"` // what the parser removed around the JSON
	Valid            bool            `db:"valid"`
	ErrorCount       int             `db:"error_count"`
	Patch            json.RawMessage `db:"patch"` // the applied RFC 6902 patch of a patch repair; nil otherwise
	CreatedAt        time.Time       `db:"created_at"`
}

// TriageItemDetail is everything the item view shows: the item, its
// message and run, every call of the run, every run of the message and
// the message's current result.
type TriageItemDetail struct {
	Item TriageQueueItem
	// LastReply is the last reply of the failed run, as the item keeps it.
	LastReply string
	// Held is, for a held run's item (reason TriageReasonHeld), the
	// validated record a review rule held, with its evidence and how it
	// validated (RunSucceeded or RunRepaired); nil and "" otherwise, and
	// nil once erased.
	Held         json.RawMessage
	HeldEvidence json.RawMessage
	HeldValidAs  string
	Message      Message
	Run          Run
	// Calls are the failed run's LLM calls, in order: those of the
	// delivery that decided it, not those of deliveries nak'ed before
	// (superseded), which the ledger keeps.
	Calls []LLMCallRecord
	// Runs are every run of the message, in order.
	Runs []Run
	// RunVersions are the schema and prompt versions each run's calls
	// used, by run number (several, comma-separated, when its calls
	// differ); a run without calls has none.
	RunVersions map[int]RunVersions
	// Current is the message's current result of the item's schema (the
	// current_results view), or nil when it has none.
	Current *Extraction
}

// RunVersions are the versions a run's LLM calls used.
type RunVersions struct {
	RunNo          int    `db:"run_no"`
	SchemaVersions string `db:"schema_versions"` // such as "1" or "1, 2"
	PromptVersions string `db:"prompt_versions"` // such as "extract.v1"
}

// TriageItemGet returns item id with its message, run, calls, the
// message's runs and its current result, or an error wrapping ErrNotFound.
func (s *Store) TriageItemGet(ctx context.Context, db DBTX, id int64) (TriageItemDetail, error) {
	var d TriageItemDetail
	var a sqlArgs
	q := triageQueueColumns + triageFrom + "\nWHERE t.id = " + a.add(id)
	rows, err := db.Query(ctx, q, a.args...)
	if err != nil {
		return d, fmt.Errorf("store.TriageItemGet(%d): %w", id, err)
	}
	d.Item, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[TriageQueueItem])
	if err != nil {
		return d, fmt.Errorf("store.TriageItemGet(%d): %w", id, interpretError(err))
	}
	if err := db.QueryRow(ctx, `SELECT last_reply, held_record, held_evidence, coalesce(held_valid_as, '') FROM triage_items WHERE id = $1`, id).
		Scan(&d.LastReply, &d.Held, &d.HeldEvidence, &d.HeldValidAs); err != nil {
		return d, fmt.Errorf("store.TriageItemGet(%d): %w", id, interpretError(err))
	}
	rm, err := s.RunGetWithMessage(ctx, db, RunGetParams{MessageID: d.Item.MessageID, RunNo: d.Item.RunNo})
	if err != nil {
		return d, fmt.Errorf("store.TriageItemGet(%d): %w", id, err)
	}
	d.Run, d.Message = rm.Run, rm.Message

	rows, err = db.Query(ctx, `
SELECT id, attempt, purpose, model, prompt_version, schema_version, request_mode, repair_strategy,
       prompt_tokens, cached_tokens, completion_tokens, usage_estimated, cost_usd::float8 AS cost_usd,
       latency_ms, finish_reason, reply, stripped, valid, error_count, patch, created_at
FROM llm_calls WHERE message_id = $1 AND run_no = $2 AND NOT superseded
ORDER BY attempt, id`, d.Item.MessageID, d.Item.RunNo)
	if err != nil {
		return d, fmt.Errorf("store.TriageItemGet(%d): calls: %w", id, err)
	}
	if d.Calls, err = pgx.CollectRows(rows, pgx.RowToStructByName[LLMCallRecord]); err != nil {
		return d, fmt.Errorf("store.TriageItemGet(%d): calls: %w", id, err)
	}

	rows, err = db.Query(ctx, `SELECT `+runColumns+` FROM runs r WHERE r.message_id = $1 ORDER BY r.run_no`, d.Item.MessageID)
	if err != nil {
		return d, fmt.Errorf("store.TriageItemGet(%d): runs: %w", id, err)
	}
	if d.Runs, err = pgx.CollectRows(rows, pgx.RowToStructByName[Run]); err != nil {
		return d, fmt.Errorf("store.TriageItemGet(%d): runs: %w", id, err)
	}

	rows, err = db.Query(ctx, `
SELECT run_no, string_agg(DISTINCT schema_version, ', ' ORDER BY schema_version) AS schema_versions,
       string_agg(DISTINCT prompt_version, ', ' ORDER BY prompt_version) AS prompt_versions
FROM llm_calls WHERE message_id = $1 AND NOT superseded GROUP BY run_no`, d.Item.MessageID)
	if err != nil {
		return d, fmt.Errorf("store.TriageItemGet(%d): run versions: %w", id, err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowToStructByName[RunVersions])
	if err != nil {
		return d, fmt.Errorf("store.TriageItemGet(%d): run versions: %w", id, err)
	}
	d.RunVersions = make(map[int]RunVersions, len(vs))
	for _, v := range vs {
		d.RunVersions[v.RunNo] = v
	}

	cur, err := s.CurrentResultGet(ctx, db, CurrentResultGetParams{MessageID: d.Item.MessageID, SchemaID: d.Item.SchemaID})
	switch {
	case err == nil:
		d.Current = &cur
	case !errors.Is(err, ErrNotFound):
		return d, fmt.Errorf("store.TriageItemGet(%d): %w", id, err)
	}
	return d, nil
}

// CurrentResultGetParams names a message and, optionally, a schema.
type CurrentResultGetParams struct {
	MessageID int64
	// SchemaID selects the result of that schema; empty means the newest
	// result of any schema (a message may be extracted with several).
	SchemaID string
}

// CurrentResultGet returns the current result of a message for a schema
// (the current_results view: its latest validated record, the model's or
// a reviewer's), or an error wrapping ErrNotFound when it has none.
func (s *Store) CurrentResultGet(ctx context.Context, db DBTX, p CurrentResultGetParams) (Extraction, error) {
	rows, err := db.Query(ctx, `
SELECT message_id, external_id, run_no, schema_id, schema_version, outcome, data, evidence, created_by, created_at
FROM current_results WHERE message_id = $1 AND ($2 = '' OR schema_id = $2)
ORDER BY run_no DESC LIMIT 1`, p.MessageID, p.SchemaID)
	if err != nil {
		return Extraction{}, fmt.Errorf("store.CurrentResultGet(%d, %q): %w", p.MessageID, p.SchemaID, err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Extraction])
	if err != nil {
		return Extraction{}, fmt.Errorf("store.CurrentResultGet(%d, %q): %w", p.MessageID, p.SchemaID, interpretError(err))
	}
	return e, nil
}
