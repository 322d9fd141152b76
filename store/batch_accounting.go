package store

import (
	"context"
	"fmt"
)

// BatchAccounting is what the repair did for a batch. Outcomes
// (FirstPassFailures, Repaired, Failed) are those of the latest run of
// each of its messages, read from the calls of the delivery that decided
// it; calls and costs count every paid call of every run of the batch,
// re-runs and the runs they replaced included, and the calls of deliveries
// that were nak'ed (superseded), as BatchSummary does.
type BatchAccounting struct {
	Runs int `json:"runs"`
	// FirstPassFailures counts latest runs whose first call did not
	// validate, or that failed before any call.
	FirstPassFailures int `json:"first_pass_failures"`
	// RepairCalls counts the repair calls of every run of the batch.
	RepairCalls int `json:"repair_calls"`
	// Repaired counts latest runs valid after the repair; Failed latest
	// runs sent to triage.
	Repaired int `json:"repaired"`
	Failed   int `json:"failed"`
	// Held counts latest runs held for review; HeldAfterRepair those of
	// them whose record validated after the repair (the repair fixed
	// them, though they are not results yet).
	Held            int `json:"held"`
	HeldAfterRepair int `json:"held_after_repair"`
	// CostUSD is the batch's whole cost; RepairCostUSD the repair calls'.
	CostUSD       float64 `json:"cost_usd"`
	RepairCostUSD float64 `json:"repair_cost_usd"`
	// CompletionTokensPerRepair is the mean completion tokens of a repair
	// call; 0 without repairs.
	CompletionTokensPerRepair float64 `json:"completion_tokens_per_repair"`
}

const batchAccountingSQL = `
WITH latest AS (
    SELECT DISTINCT ON (message_id) message_id, run_no, status
    FROM runs WHERE batch_id = $1
    ORDER BY message_id, run_no DESC
), calls AS (
    SELECT c.* FROM llm_calls c JOIN latest l USING (message_id, run_no) WHERE NOT c.superseded
), every_call AS (
    SELECT c.* FROM llm_calls c JOIN runs r USING (message_id, run_no) WHERE r.batch_id = $1
)
SELECT
    (SELECT count(*) FROM latest),
    (SELECT count(*) FROM latest l WHERE l.status = 'failed' AND NOT EXISTS (
        SELECT 1 FROM calls c WHERE c.message_id = l.message_id AND c.run_no = l.run_no))
    + (SELECT count(*) FROM calls WHERE attempt = 1 AND NOT valid),
    (SELECT count(*) FROM every_call WHERE purpose = 'repair'),
    (SELECT count(*) FROM latest WHERE status = 'repaired'),
    (SELECT count(*) FROM latest WHERE status = 'failed'),
    (SELECT count(*) FROM latest WHERE status = 'held'),
    (SELECT count(*) FROM latest l JOIN triage_items t USING (message_id, run_no)
     WHERE l.status = 'held' AND t.held_valid_as = 'repaired'),
    (SELECT coalesce(sum(cost_usd), 0)::float8 FROM every_call),
    (SELECT coalesce(sum(cost_usd), 0)::float8 FROM every_call WHERE purpose = 'repair'),
    (SELECT coalesce(avg(completion_tokens), 0)::float8 FROM every_call WHERE purpose = 'repair')`

// BatchAccountingGet returns the repair accounting of batch batchID.
func (s *Store) BatchAccountingGet(ctx context.Context, db DBTX, batchID string) (BatchAccounting, error) {
	var a BatchAccounting
	err := db.QueryRow(ctx, batchAccountingSQL, batchID).Scan(&a.Runs, &a.FirstPassFailures, &a.RepairCalls,
		&a.Repaired, &a.Failed, &a.Held, &a.HeldAfterRepair, &a.CostUSD, &a.RepairCostUSD, &a.CompletionTokensPerRepair)
	if err != nil {
		return a, fmt.Errorf("store.BatchAccountingGet(%q): %w", batchID, interpretError(err))
	}
	return a, nil
}
