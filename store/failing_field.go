package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailingField is one row of the failing_fields view: the errors of one
// kind at one field (array indices folded to *) of one schema, over all
// calls.
type FailingField struct {
	SchemaID        string    `db:"schema_id"`
	PathPattern     string    `db:"path_pattern"` // such as /items/*/sku
	Kind            string    `db:"kind"`
	Errors          int       `db:"errors"`            // error rows
	Runs            int       `db:"runs"`              // distinct runs with such an error
	FirstPassErrors int       `db:"first_pass_errors"` // errors at attempt 1
	RunsRepaired    int       `db:"runs_repaired"`     // of Runs, those that ended repaired
	RunsFailed      int       `db:"runs_failed"`       // of Runs, those that ended failed
	FirstSeen       time.Time `db:"first_seen"`
	LastSeen        time.Time `db:"last_seen"`
}

// FailingFieldListParams selects failing fields.
type FailingFieldListParams struct {
	// SchemaID keeps one schema's fields; empty means all.
	SchemaID string
	// Limit is the most rows returned. Default 100.
	Limit int
}

const failingFieldListSQL = `
SELECT schema_id, path_pattern, kind, errors, runs, first_pass_errors, runs_repaired,
       runs_failed, first_seen, last_seen
FROM failing_fields
WHERE ($1 = '' OR schema_id = $1)
ORDER BY errors DESC, schema_id, path_pattern, kind
LIMIT $2`

// FailingFieldList returns the fields that fail most, most errors first.
func (s *Store) FailingFieldList(ctx context.Context, db DBTX, p FailingFieldListParams) ([]FailingField, error) {
	rows, err := db.Query(ctx, failingFieldListSQL, p.SchemaID, limitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("store.FailingFieldList(%q): %w", p.SchemaID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[FailingField])
	if err != nil {
		return nil, fmt.Errorf("store.FailingFieldList(%q): %w", p.SchemaID, err)
	}
	return out, nil
}
