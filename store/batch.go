package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// BatchInsertParams names a new batch.
type BatchInsertParams struct {
	ID         string // batch id, unique; required
	SchemaID   string // the schema its messages are extracted with; required
	SourceName string // where the batch came from, such as a file name; may be empty
}

const batchInsertSQL = `
INSERT INTO batches (id, schema_id, source_name)
VALUES ($1, $2, $3)`

// BatchInsert records a batch. A batch id already used returns an error
// wrapping ErrConflict.
func (s *Store) BatchInsert(ctx context.Context, db DBTX, p BatchInsertParams) error {
	if p.ID == "" || p.SchemaID == "" {
		return fmt.Errorf("store.BatchInsert(%q): id and schema id are required", p.ID)
	}
	if _, err := db.Exec(ctx, batchInsertSQL, p.ID, p.SchemaID, CleanText(p.SourceName)); err != nil {
		return fmt.Errorf("store.BatchInsert(%q): %w", p.ID, interpretError(err))
	}
	return nil
}

// BatchSummary is where a batch stands: counts over the latest run of
// each of its messages (the runs whose batch is this one), and the LLM
// calls of every run of the batch (re-runs and the runs they replaced
// included: what the batch cost).
type BatchSummary struct {
	BatchID   string `db:"batch_id" json:"batch_id"`
	Messages  int    `db:"messages" json:"messages"`   // messages with a run in the batch
	Runs      int    `db:"runs" json:"runs"`           // runs in the batch: one per message, more after re-runs
	Queued    int    `db:"queued" json:"queued"`       // latest run still queued
	Succeeded int    `db:"succeeded" json:"succeeded"` // valid at the first pass
	Repaired  int    `db:"repaired" json:"repaired"`   // valid after the one repair
	Failed    int    `db:"failed" json:"failed"`       // sent to triage
	// Held counts latest runs whose valid record a review rule holds for a
	// person: a final worker outcome, but no result until approved.
	Held   int `db:"held" json:"held"`
	Erased int `db:"erased" json:"erased"` // messages whose text was erased (retention); counted above too
	// LLMCalls counts every paid call, those of deliveries that did not
	// decide their run (superseded: nak'ed) included; UsageEstimatedCalls those of them
	// whose tokens are the worker's estimates (the reply had no usage).
	LLMCalls            int `db:"llm_calls" json:"llm_calls"`
	UsageEstimatedCalls int `db:"usage_estimated_calls" json:"usage_estimated_calls"`
	PromptTokens        int `db:"prompt_tokens" json:"prompt_tokens"`
	// CachedTokens is the part of PromptTokens served from the provider's
	// prompt cache.
	CachedTokens     int     `db:"cached_tokens" json:"cached_tokens"`
	CompletionTokens int     `db:"completion_tokens" json:"completion_tokens"`
	CostUSD          float64 `db:"cost_usd" json:"cost_usd"` // US dollars
}

// Done reports whether every message of the batch has a final state for
// its latest run: succeeded, repaired, held or failed.
func (b BatchSummary) Done() bool { return b.Queued == 0 }

const batchSummarySQL = `
WITH latest AS (
    SELECT DISTINCT ON (message_id) message_id, run_no, status
    FROM runs
    WHERE batch_id = $1
    ORDER BY message_id, run_no DESC
), counts AS (
    SELECT count(*)                                     AS messages,
           count(*) FILTER (WHERE status = 'queued')    AS queued,
           count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE status = 'repaired')  AS repaired,
           count(*) FILTER (WHERE status = 'failed')    AS failed,
           count(*) FILTER (WHERE status = 'held')      AS held,
           (SELECT count(*) FROM runs WHERE batch_id = $1) AS runs,
           (SELECT count(*) FROM latest l JOIN messages m ON m.id = l.message_id
            WHERE m.erased_at IS NOT NULL) AS erased
    FROM latest
), calls AS (
    SELECT count(*)                              AS llm_calls,
           count(*) FILTER (WHERE c.usage_estimated) AS usage_estimated_calls,
           coalesce(sum(c.prompt_tokens), 0)     AS prompt_tokens,
           coalesce(sum(c.cached_tokens), 0)     AS cached_tokens,
           coalesce(sum(c.completion_tokens), 0) AS completion_tokens,
           coalesce(sum(c.cost_usd), 0)::float8  AS cost_usd
    FROM llm_calls c
    JOIN runs r ON r.message_id = c.message_id AND r.run_no = c.run_no
    WHERE r.batch_id = $1
)
SELECT b.id AS batch_id, counts.*, calls.*
FROM batches b, counts, calls
WHERE b.id = $1`

// BatchSummary returns the counts of batch batchID, or an error wrapping
// ErrNotFound if there is no such batch.
func (s *Store) BatchSummary(ctx context.Context, db DBTX, batchID string) (BatchSummary, error) {
	rows, err := db.Query(ctx, batchSummarySQL, batchID)
	if err != nil {
		return BatchSummary{}, fmt.Errorf("store.BatchSummary(%q): %w", batchID, err)
	}
	sum, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[BatchSummary])
	if err != nil {
		return BatchSummary{}, fmt.Errorf("store.BatchSummary(%q): %w", batchID, interpretError(err))
	}
	return sum, nil
}

// BatchDeleteEmpty deletes batch id if no message and no run names it
// (an ingest whose every line was rejected, some by the database: a
// conflict, an erased id), and reports whether it did.
func (s *Store) BatchDeleteEmpty(ctx context.Context, db DBTX, id string) (bool, error) {
	tag, err := db.Exec(ctx, `DELETE FROM batches b WHERE b.id = $1
		AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.batch_id = $1)
		AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.batch_id = $1)`, id)
	if err != nil {
		return false, fmt.Errorf("store.BatchDeleteEmpty(%q): %w", id, interpretError(err))
	}
	return tag.RowsAffected() == 1, nil
}

const batchSchemaIDSQL = `SELECT schema_id FROM batches WHERE id = $1`

// BatchSchemaID returns the id of the schema batch id's messages are
// extracted with; ErrNotFound when there is no such batch.
func (s *Store) BatchSchemaID(ctx context.Context, db DBTX, id string) (string, error) {
	var schemaID string
	err := db.QueryRow(ctx, batchSchemaIDSQL, id).Scan(&schemaID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("store.BatchSchemaID(%s): %w", id, err)
	}
	return schemaID, nil
}
