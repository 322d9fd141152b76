package store

import (
	"context"
	"fmt"
)

// BatchAccounting is what the repair did for a batch, derived from the
// stored calls of the latest run of each of its messages.
type BatchAccounting struct {
	Runs int
	// FirstPassFailures counts runs whose first call did not validate, or
	// that failed before any call.
	FirstPassFailures int
	// RepairCalls counts runs that made the one repair call.
	RepairCalls int
	// Repaired counts runs valid after the repair; Failed runs sent to
	// triage.
	Repaired, Failed int
	// CostUSD is the batch's whole cost; RepairCostUSD the repair calls'.
	CostUSD, RepairCostUSD float64
	// CompletionTokensPerRepair is the mean completion tokens of a repair
	// call; 0 without repairs.
	CompletionTokensPerRepair float64
}

const batchAccountingSQL = `
WITH latest AS (
    SELECT DISTINCT ON (message_id) message_id, run_no, status
    FROM runs WHERE batch_id = $1
    ORDER BY message_id, run_no DESC
), calls AS (
    SELECT c.* FROM llm_calls c JOIN latest l USING (message_id, run_no)
)
SELECT
    (SELECT count(*) FROM latest),
    (SELECT count(*) FROM latest l WHERE l.status = 'failed' AND NOT EXISTS (
        SELECT 1 FROM calls c WHERE c.message_id = l.message_id AND c.run_no = l.run_no))
    + (SELECT count(*) FROM calls WHERE attempt = 1 AND NOT valid),
    (SELECT count(*) FROM calls WHERE purpose = 'repair'),
    (SELECT count(*) FROM latest WHERE status = 'repaired'),
    (SELECT count(*) FROM latest WHERE status = 'failed'),
    (SELECT coalesce(sum(cost_usd), 0)::float8 FROM calls),
    (SELECT coalesce(sum(cost_usd), 0)::float8 FROM calls WHERE purpose = 'repair'),
    (SELECT coalesce(avg(completion_tokens), 0)::float8 FROM calls WHERE purpose = 'repair')`

// BatchAccountingGet returns the repair accounting of batch batchID.
func (s *Store) BatchAccountingGet(ctx context.Context, db DBTX, batchID string) (BatchAccounting, error) {
	var a BatchAccounting
	err := db.QueryRow(ctx, batchAccountingSQL, batchID).Scan(&a.Runs, &a.FirstPassFailures, &a.RepairCalls,
		&a.Repaired, &a.Failed, &a.CostUSD, &a.RepairCostUSD, &a.CompletionTokensPerRepair)
	if err != nil {
		return a, fmt.Errorf("store.BatchAccountingGet(%q): %w", batchID, interpretError(err))
	}
	return a, nil
}
