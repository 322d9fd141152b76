package store

import (
	"cmp"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// A re-run is a new run of a message (run n+1, status queued) that a
// reviewer asks for, one item at a time or in bulk after a prompt or
// schema fix. Its dedup id is a new random one (the column's default), so
// the queue does not drop it as a copy of run n, and the worker extracts it with the
// schema's current prompt and schema version. The store writes the run,
// the item's new status and the audit entry in one transaction; the
// caller then publishes the run and marks it published
// (RunMarkPublished, RunMarkPublishedMany). A run never published is
// published again by the worker's sweeper.

// TriageItemRerunParams sends one item back for a new run.
type TriageItemRerunParams struct {
	ItemID   int64
	Reviewer string // required
	Via      string // required
	// BatchID is the new run's batch; empty means the failed run's batch.
	// It must exist.
	BatchID string
	// Note is the reviewer's note, kept on the item and in the audit log.
	Note string
}

const runRerunInsertSQL = `
INSERT INTO runs (message_id, run_no, batch_id, schema_id)
SELECT $1, n.run_no, $2, $3
FROM (SELECT max(run_no) + 1 AS run_no FROM runs WHERE message_id = $1) n
RETURNING ` + runColumnsBare

// runColumnsBare are the columns of Run without a table alias.
const runColumnsBare = `message_id, run_no, batch_id, schema_id, status, dedup_id, published_at, created_at, finished_at,
       coalesce(stream_seq, 0) AS stream_seq, relay_gen`

// TriageItemRerun starts run n+1 of the item's message, in one
// transaction with the item's status (rerun, with the new run's number)
// and an audit entry, and returns the new run, not yet published. Errors
// are as TriageItemApprove's.
func (s *Store) TriageItemRerun(ctx context.Context, db DBTX, p TriageItemRerunParams) (Run, error) {
	fail := func(err error) (Run, error) {
		return Run{}, fmt.Errorf("store.TriageItemRerun(%d, %q): %w", p.ItemID, p.Reviewer, err)
	}
	if p.Reviewer == "" || p.Via == "" {
		return fail(fmt.Errorf("reviewer and via are required"))
	}
	var run Run
	err := inTx(ctx, db, func(tx DBTX) error {
		it, err := lockItemForDecision(ctx, tx, p.ItemID, p.Reviewer)
		if err != nil {
			return err
		}
		// One re-run of a message at a time.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM messages WHERE id = $1 FOR UPDATE`, it.MessageID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, runRerunInsertSQL, it.MessageID, cmp.Or(p.BatchID, it.BatchID), it.SchemaID)
		if err != nil {
			return fmt.Errorf("insert run: %w", interpretError(err))
		}
		run, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Run])
		if err != nil {
			return fmt.Errorf("insert run: %w", interpretError(err))
		}
		_, err = tx.Exec(ctx, `
UPDATE triage_items
SET status = 'rerun', rerun_no = $2, decided_by = $3, decided_at = now(), decision_reason = $4,
    claimed_by = NULL, claim_expires = NULL, updated_at = now()
WHERE id = $1`, it.ID, run.RunNo, p.Reviewer, CleanText(p.Note))
		if err != nil {
			return fmt.Errorf("close item: %w", err)
		}
		return auditInsert(ctx, tx, AuditInsertParams{
			Actor: p.Reviewer, Via: p.Via, Action: AuditRerun, TriageItemID: it.ID, MessageID: it.MessageID,
			RunNo: it.RunNo, Reason: p.Note, Before: it.before(),
			After: map[string]any{"status": TriageRerun, "rerun_no": run.RunNo, "batch_id": run.BatchID,
				"dedup_id": run.DedupID, "decided_by": p.Reviewer},
		})
	})
	if err != nil {
		return fail(err)
	}
	return run, nil
}

// RunMarkPublishedMany records that the queue accepted each of runs, as
// RunMarkPublished does for one, in one statement. Unknown runs are
// ignored; it returns how many runs were found.
func (s *Store) RunMarkPublishedMany(ctx context.Context, db DBTX, runs []RunMarkPublishedParams) (int, error) {
	ids := make([]int64, len(runs))
	nos := make([]int32, len(runs))
	seqs := make([]int64, len(runs))
	for i, r := range runs {
		ids[i], nos[i], seqs[i] = r.MessageID, int32(r.RunNo), int64(r.StreamSeq)
	}
	tag, err := db.Exec(ctx, `
UPDATE runs SET published_at = coalesce(published_at, now()),
       stream_seq = coalesce(nullif(u.seq, 0), runs.stream_seq),
       relay_checked_at = CASE WHEN u.seq > 0 THEN now() ELSE runs.relay_checked_at END
FROM unnest($1::bigint[], $2::int[], $3::bigint[]) AS u(message_id, run_no, seq)
WHERE runs.message_id = u.message_id AND runs.run_no = u.run_no`, ids, nos, seqs)
	if err != nil {
		return 0, fmt.Errorf("store.RunMarkPublishedMany(%d runs): %w", len(runs), err)
	}
	return int(tag.RowsAffected()), nil
}
