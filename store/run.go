package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Run statuses. A run starts queued and gets exactly one outcome.
const (
	RunQueued    = "queued"
	RunSucceeded = "succeeded" // valid at the first pass
	RunRepaired  = "repaired"  // valid after the one repair
	RunHeld      = "held"      // valid, held for a person by a review rule: no result until approved
	RunFailed    = "failed"    // sent to triage
)

// Run is one extraction of a message: run 1 from ingest, 2, 3, ... from
// re-runs.
type Run struct {
	MessageID int64  `db:"message_id"`
	RunNo     int    `db:"run_no"` // 1, 2, ...
	BatchID   string `db:"batch_id"`
	SchemaID  string `db:"schema_id"`
	Status    string `db:"status"` // RunQueued, RunSucceeded, RunRepaired, RunHeld or RunFailed
	// DedupID is the run's publish key (Nats-Msg-Id): "run-" and a random
	// UUID, set at insert (migration 000013) and the same on every
	// publish of the run. Runs stored before that migration keep
	// "msg-<id>-run-<no>".
	DedupID     string     `db:"dedup_id"`
	PublishedAt *time.Time `db:"published_at"` // nil until the queue accepted it
	CreatedAt   time.Time  `db:"created_at"`
	FinishedAt  *time.Time `db:"finished_at"` // nil while queued
	// StreamSeq is the stream sequence of the latest copy of the run the
	// relay saw stored; 0 before the first (and for runs published before
	// migration 000013).
	StreamSeq int64 `db:"stream_seq"`
	// RelayGen counts the reconciler's republishes of the run (see
	// RunRepublishClaim).
	RelayGen int `db:"relay_gen"`
}

// runColumns are the columns of Run, in field order, for the table
// aliased r.
const runColumns = `r.message_id, r.run_no, r.batch_id, r.schema_id, r.status,
       r.dedup_id, r.published_at, r.created_at, r.finished_at,
       coalesce(r.stream_seq, 0) AS stream_seq, r.relay_gen`

func (r *Run) scanTargets() []any {
	return []any{&r.MessageID, &r.RunNo, &r.BatchID, &r.SchemaID, &r.Status,
		&r.DedupID, &r.PublishedAt, &r.CreatedAt, &r.FinishedAt, &r.StreamSeq, &r.RelayGen}
}

// RunWithMessage is a run and its message, what a worker needs to run the
// extraction or a sweeper to publish it again.
type RunWithMessage struct {
	Run
	Message Message
}

// scanRunWithMessage scans runColumns then messageColumns.
func scanRunWithMessage(row pgx.CollectableRow) (RunWithMessage, error) {
	var rm RunWithMessage
	err := row.Scan(append(rm.Run.scanTargets(), rm.Message.scanTargets()...)...)
	return rm, err
}

// RunGetParams names a run.
type RunGetParams struct {
	MessageID int64
	RunNo     int
}

const runGetWithMessageSQL = `
SELECT ` + runColumns + `,
       ` + messageColumns + `
FROM runs r
JOIN messages m ON m.id = r.message_id
WHERE r.message_id = $1 AND r.run_no = $2`

// RunGetWithMessage returns a run and its message, or an error wrapping
// ErrNotFound.
func (s *Store) RunGetWithMessage(ctx context.Context, db DBTX, p RunGetParams) (RunWithMessage, error) {
	return runGetWithMessage(ctx, db, "RunGetWithMessage", runGetWithMessageSQL, p)
}

// RunLockForOutcome is RunGetWithMessage that also locks the run row
// (SELECT ... FOR UPDATE) until the end of tx, so a concurrent delivery
// of the same run waits, then sees the outcome. tx must be a transaction.
func (s *Store) RunLockForOutcome(ctx context.Context, tx DBTX, p RunGetParams) (RunWithMessage, error) {
	return runGetWithMessage(ctx, tx, "RunLockForOutcome", runGetWithMessageSQL+"\nFOR UPDATE OF r", p)
}

func runGetWithMessage(ctx context.Context, db DBTX, op, query string, p RunGetParams) (RunWithMessage, error) {
	rows, err := db.Query(ctx, query, p.MessageID, p.RunNo)
	if err != nil {
		return RunWithMessage{}, fmt.Errorf("store.%s(%d, %d): %w", op, p.MessageID, p.RunNo, err)
	}
	rm, err := pgx.CollectExactlyOneRow(rows, scanRunWithMessage)
	if err != nil {
		return RunWithMessage{}, fmt.Errorf("store.%s(%d, %d): %w", op, p.MessageID, p.RunNo, interpretError(err))
	}
	return rm, nil
}

// RunMarkPublishedParams names the run the queue accepted and where.
type RunMarkPublishedParams struct {
	MessageID int64
	RunNo     int
	// StreamSeq is the stream sequence of the stored copy; 0 when unknown
	// (the run's recorded sequence is then left as it was).
	StreamSeq uint64
}

const runMarkPublishedSQL = `
UPDATE runs SET published_at = coalesce(published_at, now()),
       stream_seq = coalesce(nullif($3::bigint, 0), stream_seq),
       relay_checked_at = CASE WHEN $3::bigint > 0 THEN now() ELSE relay_checked_at END
WHERE message_id = $1 AND run_no = $2`

// RunMarkPublished records that the queue accepted the run, and the
// sequence of the copy it stored, the one the reconciler looks for
// (RunListToCheck). Marking a published run again keeps the first time and
// records the new sequence. An unknown run returns an error wrapping
// ErrNotFound.
func (s *Store) RunMarkPublished(ctx context.Context, db DBTX, p RunMarkPublishedParams) error {
	tag, err := db.Exec(ctx, runMarkPublishedSQL, p.MessageID, p.RunNo, int64(p.StreamSeq))
	if err != nil {
		return fmt.Errorf("store.RunMarkPublished(%d, %d): %w", p.MessageID, p.RunNo, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("store.RunMarkPublished(%d, %d): %w", p.MessageID, p.RunNo, ErrNotFound)
	}
	return nil
}

// RunListUnpublishedParams selects runs to publish again.
type RunListUnpublishedParams struct {
	// OlderThan: only runs created before this time, so a publish still in
	// flight is left alone. Zero means now.
	OlderThan time.Time
	// Limit is the most runs returned. Default 100.
	Limit int
}

const runListUnpublishedSQL = `
SELECT ` + runColumns + `
FROM runs r
WHERE r.published_at IS NULL AND r.status = 'queued' AND r.created_at < $1
ORDER BY r.created_at, r.message_id, r.run_no
LIMIT $2`

// RunListUnpublished returns queued runs that the queue never accepted
// (published_at is nil), oldest first, for a sweeper to publish again.
func (s *Store) RunListUnpublished(ctx context.Context, db DBTX, p RunListUnpublishedParams) ([]Run, error) {
	if p.OlderThan.IsZero() {
		p.OlderThan = time.Now()
	}
	rows, err := db.Query(ctx, runListUnpublishedSQL, p.OlderThan, limitOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("store.RunListUnpublished: %w", err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Run])
	if err != nil {
		return nil, fmt.Errorf("store.RunListUnpublished: %w", err)
	}
	return runs, nil
}

// limitOr returns limit, or def if limit is not positive.
func limitOr(limit, def int) int {
	if limit <= 0 {
		return def
	}
	return limit
}

// RunRef names one run.
type RunRef struct {
	MessageID int64
	RunNo     int
}

const runCountQueuedSQL = `
SELECT count(*) FROM runs r
JOIN unnest($1::bigint[], $2::int[]) AS u(message_id, run_no) USING (message_id, run_no)
WHERE r.status = 'queued'`

// RunCountQueued returns how many of refs are still queued.
func (s *Store) RunCountQueued(ctx context.Context, db DBTX, refs []RunRef) (int, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	ids, nos := make([]int64, len(refs)), make([]int32, len(refs))
	for i, r := range refs {
		ids[i], nos[i] = r.MessageID, int32(r.RunNo)
	}
	var n int
	if err := db.QueryRow(ctx, runCountQueuedSQL, ids, nos).Scan(&n); err != nil {
		return 0, fmt.Errorf("store.RunCountQueued(%d runs): %w", len(refs), interpretError(err))
	}
	return n, nil
}
