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
	SchemaID        string    `db:"schema_id" json:"schema_id"`
	PathPattern     string    `db:"path_pattern" json:"path_pattern"` // such as /items/*/sku
	Kind            string    `db:"kind" json:"kind"`
	Errors          int       `db:"errors" json:"errors"`                       // error rows
	Runs            int       `db:"runs" json:"runs"`                           // distinct runs with such an error
	FirstPassErrors int       `db:"first_pass_errors" json:"first_pass_errors"` // errors at attempt 1
	RunsRepaired    int       `db:"runs_repaired" json:"runs_repaired"`         // of Runs, those that ended repaired
	RunsFailed      int       `db:"runs_failed" json:"runs_failed"`             // of Runs, those that ended failed
	FirstSeen       time.Time `db:"first_seen" json:"first_seen"`
	LastSeen        time.Time `db:"last_seen" json:"last_seen"`
}

// FailingFieldListParams selects failing fields.
type FailingFieldListParams struct {
	// SchemaID keeps one schema's fields; empty means all.
	SchemaID string
	// Since keeps the errors recorded at or after it; zero means all time
	// (the failing_fields view).
	Since time.Time
	// BatchID keeps the errors of one batch's runs; empty means every
	// batch.
	BatchID string
	// Limit is the most rows returned. Default 100.
	Limit int
}

// The view failing_fields is failing_fields_in('-infinity', NULL)
// (migrations 000006 and 000007).
const failingFieldListSQL = `
SELECT schema_id, path_pattern, kind, errors, runs, first_pass_errors, runs_repaired,
       runs_failed, first_seen, last_seen
FROM failing_fields_in(coalesce($3::timestamptz, '-infinity'), nullif($4, ''))
WHERE ($1 = '' OR schema_id = $1)
ORDER BY errors DESC, schema_id, path_pattern, kind
LIMIT $2`

// FailingFieldList returns the fields that fail most, most errors first.
func (s *Store) FailingFieldList(ctx context.Context, db DBTX, p FailingFieldListParams) ([]FailingField, error) {
	rows, err := db.Query(ctx, failingFieldListSQL, p.SchemaID, limitOr(p.Limit, 100), sinceArg(p.Since), p.BatchID)
	if err != nil {
		return nil, fmt.Errorf("store.FailingFieldList(%q): %w", p.SchemaID, interpretError(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[FailingField])
	if err != nil {
		return nil, fmt.Errorf("store.FailingFieldList(%q): %w", p.SchemaID, interpretError(err))
	}
	return out, nil
}

// RepairEffect is one row of the repair_effectiveness view: of the runs
// whose first call had an error at one field and that got the repair call,
// how many ended valid after it. Runs never sent to repair (a reply cut
// off at the token limit, a refusal, the budget) are not counted
// (migration 000009); FailingFieldList counts them.
type RepairEffect struct {
	SchemaID     string  `db:"schema_id" json:"schema_id"`
	PathPattern  string  `db:"path_pattern" json:"path_pattern"`   // such as /items/*/sku; "/" is the whole record
	RunsFlagged  int     `db:"runs_flagged" json:"runs_flagged"`   // runs with an error there at attempt 1 and a repair call
	RunsRepaired int     `db:"runs_repaired" json:"runs_repaired"` // of those, runs that ended repaired
	RepairedPct  float64 `db:"repaired_pct" json:"repaired_pct"`   // 100 * RunsRepaired / RunsFlagged, one decimal
}

// RepairEffectListParams selects repair effectiveness rows.
type RepairEffectListParams struct {
	// SchemaID keeps one schema's fields; empty means all.
	SchemaID string
	// Since keeps the errors recorded at or after it; zero means all time
	// (the repair_effectiveness view).
	Since time.Time
	// BatchID keeps the errors of one batch's runs; empty means every
	// batch.
	BatchID string
	// Limit is the most rows returned. Default 100.
	Limit int
}

const repairEffectListSQL = `
SELECT schema_id, path_pattern, runs_flagged, runs_repaired, coalesce(repaired_pct, 0)::float8 AS repaired_pct
FROM repair_effectiveness_in(coalesce($3::timestamptz, '-infinity'), nullif($4, ''))
WHERE ($1 = '' OR schema_id = $1)
ORDER BY runs_flagged DESC, schema_id, path_pattern
LIMIT $2`

// RepairEffectList returns, per field flagged at the first attempt, how
// often the one repair fixed the run; most flagged runs first.
func (s *Store) RepairEffectList(ctx context.Context, db DBTX, p RepairEffectListParams) ([]RepairEffect, error) {
	rows, err := db.Query(ctx, repairEffectListSQL, p.SchemaID, limitOr(p.Limit, 100), sinceArg(p.Since), p.BatchID)
	if err != nil {
		return nil, fmt.Errorf("store.RepairEffectList(%q): %w", p.SchemaID, interpretError(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[RepairEffect])
	if err != nil {
		return nil, fmt.Errorf("store.RepairEffectList(%q): %w", p.SchemaID, interpretError(err))
	}
	return out, nil
}

// sinceArg is t as a query argument: nil (all time) for the zero time.
func sinceArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
