package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// BatchResult is where one message of a batch stands: the status of its
// latest run in the batch, its triage item's status when that run failed,
// and its current result for the batch's schema (as the current_results
// view has it: the latest validated record, the model's or a reviewer's,
// whichever run or batch made it), if it has one.
type BatchResult struct {
	MessageID  int64  `db:"message_id" json:"message_id"`
	ExternalID string `db:"external_id" json:"id"`
	Source     string `db:"source" json:"source"`
	RunNo      int    `db:"run_no" json:"run_no"`
	// Status is the run's: RunQueued, RunSucceeded, RunRepaired, RunHeld
	// or RunFailed.
	Status string `db:"status" json:"status"`
	// Triage is the failed or held run's item status (TriageOpen,
	// TriageApproved, TriageRejected, TriageRerun); nil otherwise.
	Triage *string `db:"triage" json:"triage"`
	// Result is the message's current result for the schema; nil when it
	// has none (queued, or held or failed and not approved: a held record
	// is no result).
	Result *BatchResultRecord `db:"result" json:"result"`
	// ErasedAt is when the message's text was erased (retention), which
	// removed its result too; nil, and left out of the JSON, otherwise.
	ErasedAt *time.Time `db:"erased_at" json:"erased_at,omitempty"`
}

// BatchResultRecord is a current result in a BatchResult.
type BatchResultRecord struct {
	RunNo         int             `json:"run_no"`
	SchemaID      string          `json:"schema_id"`
	SchemaVersion string          `json:"schema_version"`
	Outcome       string          `json:"outcome"` // "succeeded", "repaired" or "approved"
	Data          json.RawMessage `json:"data"`
	Evidence      json.RawMessage `json:"evidence"`
	CreatedBy     string          `json:"created_by"` // "model", or who approved it
	HumanMade     bool            `json:"human_made"`
	CreatedAt     time.Time       `json:"created_at"`
}

// BatchResultListParams selects a page of a batch's messages.
type BatchResultListParams struct {
	BatchID string
	// After keeps the messages whose id is above it (keyset paging: the
	// last MessageID of the page before); 0 starts at the first.
	After int64
	// Limit is the most rows returned. Default 1000.
	Limit int
}

// The latest run of each message in the batch, then its item and its
// current result (as the view current_results, by a lookup per message
// on extractions_run_key).
const batchResultListSQL = `
WITH latest AS (
    SELECT DISTINCT ON (r.message_id) r.message_id, r.run_no, r.status, r.schema_id
    FROM runs r
    WHERE r.batch_id = $1 AND r.message_id > $2
    ORDER BY r.message_id, r.run_no DESC
    LIMIT $3
)
SELECT l.message_id, m.external_id, m.source, l.run_no, l.status, t.status AS triage,
       CASE WHEN c.run_no IS NULL THEN NULL ELSE jsonb_build_object(
           'run_no', c.run_no, 'schema_id', l.schema_id, 'schema_version', c.schema_version,
           'outcome', c.outcome, 'data', c.data, 'evidence', c.evidence, 'created_by', c.created_by,
           'human_made', c.outcome = 'approved', 'created_at', c.created_at) END AS result,
       m.erased_at
FROM latest l
JOIN messages m ON m.id = l.message_id
LEFT JOIN triage_items t ON t.message_id = l.message_id AND t.run_no = l.run_no
LEFT JOIN LATERAL (
    SELECT e.run_no, e.schema_version, e.outcome, e.data, e.evidence, e.created_by, e.created_at
    FROM extractions e
    WHERE e.message_id = l.message_id AND e.schema_id = l.schema_id
    ORDER BY e.run_no DESC, e.id DESC
    LIMIT 1
) c ON true
ORDER BY l.message_id`

// BatchResultList returns a page of the batch's messages, by message id,
// with where each stands and its current result. An unknown batch returns
// no rows (see BatchSummary to tell it from an empty one).
func (s *Store) BatchResultList(ctx context.Context, db DBTX, p BatchResultListParams) ([]BatchResult, error) {
	rows, err := db.Query(ctx, batchResultListSQL, p.BatchID, p.After, limitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("store.BatchResultList(%q): %w", p.BatchID, interpretError(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[BatchResult])
	if err != nil {
		return nil, fmt.Errorf("store.BatchResultList(%q): %w", p.BatchID, interpretError(err))
	}
	return out, nil
}

// BatchResultPages calls fn with each page of the batch's messages
// (BatchResultList from p.After, p.Limit at a time, each page its own
// query) until a page comes back short. It returns fn's error as it is, or
// the store's.
func (s *Store) BatchResultPages(ctx context.Context, db DBTX, p BatchResultListParams, fn func([]BatchResult) error) error {
	p.Limit = limitOr(p.Limit, 1000)
	for {
		page, err := s.BatchResultList(ctx, db, p)
		if err != nil {
			return err
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
		}
		if len(page) < p.Limit {
			return nil
		}
		p.After = page[len(page)-1].MessageID
	}
}
