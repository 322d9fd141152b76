package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// BatchRow is one batch in a list: what it is and where it stands, counted
// as BatchSummary counts (outcomes of the latest run of each message whose
// run is in the batch; calls and cost of every run of the batch).
type BatchRow struct {
	ID         string    `db:"id" json:"id"`
	SchemaID   string    `db:"schema_id" json:"schema_id"`
	SourceName string    `db:"source_name" json:"source_name"` // the ingested file's name, or ""
	CreatedAt  time.Time `db:"created_at" json:"created_at"`
	Messages   int       `db:"messages" json:"messages"` // 0 for a batch whose lines were all duplicates
	Queued     int       `db:"queued" json:"queued"`
	Succeeded  int       `db:"succeeded" json:"succeeded"`
	Repaired   int       `db:"repaired" json:"repaired"`
	Failed     int       `db:"failed" json:"failed"`
	Held       int       `db:"held" json:"held"` // valid, held for review: final for the worker, no result yet
	LLMCalls   int       `db:"llm_calls" json:"llm_calls"`
	// UsageEstimatedCalls counts the calls whose tokens, and so cost, are
	// estimates (the reply had no usage).
	UsageEstimatedCalls int     `db:"usage_estimated_calls" json:"usage_estimated_calls"`
	CostUSD             float64 `db:"cost_usd" json:"cost_usd"` // US dollars
}

// Done reports whether every message of the batch has a final state for
// its latest run.
func (b BatchRow) Done() bool { return b.Queued == 0 }

// BatchListParams selects batches.
type BatchListParams struct {
	// SchemaID keeps the batches of one schema; empty means all.
	SchemaID string
	// Limit is the most batches returned, newest first. Default 50.
	Limit int
}

const batchListSQL = `
WITH b AS (
    SELECT id, schema_id, source_name, created_at
    FROM batches
    WHERE ($1 = '' OR schema_id = $1)
    ORDER BY created_at DESC, id DESC
    LIMIT $2
), latest AS (
    SELECT DISTINCT ON (r.batch_id, r.message_id) r.batch_id, r.status
    FROM runs r JOIN b ON b.id = r.batch_id
    ORDER BY r.batch_id, r.message_id, r.run_no DESC
), counts AS (
    SELECT batch_id,
           count(*)                                     AS messages,
           count(*) FILTER (WHERE status = 'queued')    AS queued,
           count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE status = 'repaired')  AS repaired,
           count(*) FILTER (WHERE status = 'failed')    AS failed,
           count(*) FILTER (WHERE status = 'held')      AS held
    FROM latest GROUP BY batch_id
), calls AS (
    SELECT r.batch_id, count(*) AS llm_calls, count(*) FILTER (WHERE c.usage_estimated) AS usage_estimated_calls,
           sum(c.cost_usd)::float8 AS cost_usd
    FROM llm_calls c
    JOIN runs r ON r.message_id = c.message_id AND r.run_no = c.run_no
    JOIN b ON b.id = r.batch_id
    GROUP BY r.batch_id
)
SELECT b.id, b.schema_id, b.source_name, b.created_at,
       coalesce(counts.messages, 0)  AS messages,
       coalesce(counts.queued, 0)    AS queued,
       coalesce(counts.succeeded, 0) AS succeeded,
       coalesce(counts.repaired, 0)  AS repaired,
       coalesce(counts.failed, 0)    AS failed,
       coalesce(counts.held, 0)      AS held,
       coalesce(calls.llm_calls, 0)  AS llm_calls,
       coalesce(calls.usage_estimated_calls, 0) AS usage_estimated_calls,
       coalesce(calls.cost_usd, 0)   AS cost_usd
FROM b
LEFT JOIN counts ON counts.batch_id = b.id
LEFT JOIN calls ON calls.batch_id = b.id
ORDER BY b.created_at DESC, b.id DESC`

// BatchList returns the newest batches with their counts.
func (s *Store) BatchList(ctx context.Context, db DBTX, p BatchListParams) ([]BatchRow, error) {
	rows, err := db.Query(ctx, batchListSQL, p.SchemaID, limitOr(p.Limit, 50))
	if err != nil {
		return nil, fmt.Errorf("store.BatchList(%q): %w", p.SchemaID, interpretError(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[BatchRow])
	if err != nil {
		return nil, fmt.Errorf("store.BatchList(%q): %w", p.SchemaID, interpretError(err))
	}
	return out, nil
}
