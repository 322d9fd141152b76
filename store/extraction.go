package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Extraction is a validated record: a run's result, or a reviewer's.
type Extraction struct {
	MessageID     int64           `db:"message_id"`
	ExternalID    string          `db:"external_id"` // the message's own id
	RunNo         int             `db:"run_no"`
	SchemaID      string          `db:"schema_id"`
	SchemaVersion string          `db:"schema_version"`
	Outcome       string          `db:"outcome"` // "succeeded", "repaired" or "approved"
	Data          json.RawMessage `db:"data"`
	Evidence      json.RawMessage `db:"evidence"`
	CreatedBy     string          `db:"created_by"` // "model", or who approved it
	CreatedAt     time.Time       `db:"created_at"`
}

// ExtractionListParams selects extractions.
type ExtractionListParams struct {
	// BatchID keeps the extractions of the batch's runs; empty means all.
	BatchID string
	// Limit is the most rows returned. Default 1000.
	Limit int
}

const extractionListSQL = `
SELECT e.message_id, m.external_id, e.run_no, e.schema_id, e.schema_version, e.outcome,
       e.data, e.evidence, e.created_by, e.created_at
FROM extractions e
JOIN runs r ON r.message_id = e.message_id AND r.run_no = e.run_no
JOIN messages m ON m.id = e.message_id
WHERE ($1 = '' OR r.batch_id = $1)
ORDER BY e.message_id, e.run_no
LIMIT $2`

// ExtractionList returns extractions by message and run.
func (s *Store) ExtractionList(ctx context.Context, db DBTX, p ExtractionListParams) ([]Extraction, error) {
	rows, err := db.Query(ctx, extractionListSQL, p.BatchID, limitOr(p.Limit, 1000))
	if err != nil {
		return nil, fmt.Errorf("store.ExtractionList(%q): %w", p.BatchID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Extraction])
	if err != nil {
		return nil, fmt.Errorf("store.ExtractionList(%q): %w", p.BatchID, err)
	}
	return out, nil
}
