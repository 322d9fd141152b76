package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MaxBulkRerun is the most items one bulk re-run takes.
const MaxBulkRerun = 10000

// ErrCountChanged means the items matching a bulk re-run's filter are no
// longer the number the reviewer confirmed; nothing was written. The
// returned error is a *CountChangedError.
var ErrCountChanged = errors.New("the number of matching items changed")

// CountChangedError gives the confirmed and the current count of a bulk
// re-run. It matches ErrCountChanged with errors.Is.
type CountChangedError struct{ Confirmed, Now int }

func (e *CountChangedError) Error() string {
	return fmt.Sprintf("%d items were confirmed but %d match now; check the filter and confirm again", e.Confirmed, e.Now)
}

// Is reports whether target is ErrCountChanged.
func (e *CountChangedError) Is(target error) bool { return target == ErrCountChanged }

// bulkCandidates selects the open items of a filter that reviewer may
// re-run: not under another reviewer's live lease.
func bulkCandidates(f TriageFilter, reviewer string, a *sqlArgs) string {
	f.Status, f.ClaimedBy = TriageOpen, ""
	return `SELECT t.id` + triageFrom + `
WHERE ` + f.where(a) + `
  AND (t.claimed_by IS NULL OR t.claim_expires <= now() OR t.claimed_by = ` + a.add(reviewer) + `)`
}

// TriageBulkRerunCount returns how many items TriageBulkRerun would take
// for the filter and reviewer now: the open items matching f that no other
// reviewer holds.
func (s *Store) TriageBulkRerunCount(ctx context.Context, db DBTX, f TriageFilter, reviewer string) (int, error) {
	var a sqlArgs
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM (`+bulkCandidates(f, reviewer, &a)+`) c`, a.args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("store.TriageBulkRerunCount: %w", err)
	}
	return n, nil
}

// TriageBulkRerunParams re-runs every item of a filter.
type TriageBulkRerunParams struct {
	// Filter selects the items; its Status is always open.
	Filter   TriageFilter
	Reviewer string // required
	Via      string // required
	// Confirmed is the count the reviewer saw and confirmed
	// (TriageBulkRerunCount); if the items matching now are not that many,
	// nothing is written and the error is a *CountChangedError.
	Confirmed int
	// BatchID is the new batch of the re-runs, created here; required.
	BatchID string
	// SchemaID is the new batch's schema; required.
	SchemaID string
	// Note is kept on each item and in the audit log.
	Note string
}

// TriageBulkRerun starts a new run of the message of every item matching
// the filter (at most MaxBulkRerun), in one transaction: a new batch, run
// n+1 of each message in it, each item set to rerun, one audit entry per
// item and one for the whole. Items under another reviewer's live lease,
// or locked by a concurrent transaction, are left out (FOR UPDATE SKIP
// LOCKED) and so make the count differ. It returns the new runs, not yet
// published.
func (s *Store) TriageBulkRerun(ctx context.Context, db DBTX, p TriageBulkRerunParams) ([]Run, error) {
	fail := func(err error) ([]Run, error) {
		return nil, fmt.Errorf("store.TriageBulkRerun(%q, %q): %w", p.BatchID, p.Reviewer, err)
	}
	switch {
	case p.Reviewer == "" || p.Via == "" || p.BatchID == "" || p.SchemaID == "":
		return fail(fmt.Errorf("reviewer, via, batch id and schema id are required"))
	case p.Confirmed < 1:
		return fail(fmt.Errorf("confirmed count %d: nothing to re-run", p.Confirmed))
	case p.Confirmed > MaxBulkRerun:
		return fail(fmt.Errorf("%d items: at most %d in one bulk re-run; narrow the filter", p.Confirmed, MaxBulkRerun))
	}
	if err := p.Filter.validate(); err != nil {
		return fail(err)
	}
	var runs []Run
	err := inTx(ctx, db, func(tx DBTX) error {
		var a sqlArgs
		q := bulkCandidates(p.Filter, p.Reviewer, &a) + `
ORDER BY t.created_at, t.id
LIMIT ` + a.add(MaxBulkRerun+1) + `
FOR UPDATE OF t SKIP LOCKED`
		rows, err := tx.Query(ctx, q, a.args...)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		if len(ids) != p.Confirmed {
			return &CountChangedError{Confirmed: p.Confirmed, Now: len(ids)}
		}
		if err := s.BatchInsert(ctx, tx, BatchInsertParams{
			ID: p.BatchID, SchemaID: p.SchemaID, SourceName: "bulk re-run by " + p.Reviewer,
		}); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, bulkRerunSQL, ids, p.BatchID, p.Reviewer, CleanText(p.Note), p.Via)
		if err != nil {
			return fmt.Errorf("insert runs: %w", interpretError(err))
		}
		runs, err = pgx.CollectRows(rows, pgx.RowToStructByName[Run])
		if err != nil {
			return fmt.Errorf("insert runs: %w", interpretError(err))
		}
		return auditInsert(ctx, tx, AuditInsertParams{
			Actor: p.Reviewer, Via: p.Via, Action: AuditBulkRerun, Reason: p.Note,
			After: map[string]any{"filter": p.Filter, "items": len(ids), "runs": len(runs), "batch_id": p.BatchID},
		})
	})
	if err != nil {
		return fail(err)
	}
	return runs, nil
}

// bulkRerunSQL starts run n+1 of the message of each item $1 (locked by
// the caller) in batch $2, one per message, closes the items and writes
// their audit entries. It returns the new runs.
const bulkRerunSQL = `
WITH picked AS (
    SELECT DISTINCT ON (t.message_id) t.id, t.message_id, t.run_no, t.schema_id, t.reason, t.errors, t.claimed_by
    FROM triage_items t
    WHERE t.id = ANY($1::bigint[])
    ORDER BY t.message_id, t.run_no DESC
), next AS (
    SELECT p.*, (SELECT max(r.run_no) + 1 FROM runs r WHERE r.message_id = p.message_id) AS new_run_no,
           'run-' || gen_random_uuid()::text AS dedup_id
    FROM picked p
), ins AS (
    INSERT INTO runs (message_id, run_no, batch_id, schema_id, dedup_id)
    SELECT n.message_id, n.new_run_no, $2, n.schema_id, n.dedup_id
    FROM next n
    RETURNING ` + runColumnsBare + `
), upd AS (
    UPDATE triage_items t
    SET status = 'rerun', rerun_no = n.new_run_no, decided_by = $3, decided_at = now(),
        decision_reason = $4, claimed_by = NULL, claim_expires = NULL, updated_at = now()
    FROM next n
    WHERE t.id = n.id
    RETURNING t.id
), aud AS (
    INSERT INTO audit_log (actor, via, action, triage_item_id, message_id, run_no, reason, before, after)
    SELECT $3, $5, 'rerun', n.id, n.message_id, n.run_no, $4,
           jsonb_strip_nulls(jsonb_build_object('status', 'open', 'reason', n.reason, 'errors', n.errors, 'claimed_by', n.claimed_by)),
           jsonb_build_object('status', 'rerun', 'rerun_no', n.new_run_no, 'batch_id', $2::text,
                              'dedup_id', n.dedup_id, 'decided_by', $3::text, 'bulk', true)
    FROM next n
)
SELECT ` + runColumnsBare + ` FROM ins ORDER BY message_id`
