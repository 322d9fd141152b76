package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgDivisionByZero is Postgres's division_by_zero, what
// outboxBatchDoneGuardSQL fails with.
const pgDivisionByZero = "22012"

// RunStart is what RunWriteBatch found for one run a worker starts: the
// run with its message, and the lease it took (see RunLeaseTake). Err is
// set instead when the run could not be read or leased; it wraps
// ErrNotFound for an unknown run.
type RunStart struct {
	Run   RunWithMessage
	Lease RunLease
	Err   error
}

// runStartSQL reads a run with its message and, in the same statement,
// takes its lease as runLeaseTakeSQL does (the read sees the run as it
// was before): taken says whether the lease is the caller's now.
const runStartSQL = `
WITH up AS (` + runLeaseTakeSQL + `
    RETURNING 1)
SELECT ` + runColumns + `,
       ` + messageColumns + `,
       EXISTS (SELECT FROM up) AS taken
FROM runs r
JOIN messages m ON m.id = r.message_id
WHERE r.message_id = $1 AND r.run_no = $2`

// RunWriteBatch does a worker's database steps of several runs in one
// transaction and one round trip: for each of starts, one statement reads
// the run with its message (RunGetWithMessage) and takes its lease
// (RunLeaseTake); for each of outcomes, it writes the outcome as
// RunOutcomeInsertMany does, one guarded statement per run. The starts of
// runs that are not queued get LeaseDone with their status; a start whose
// lease another copy holds is settled after the transaction by
// RunLeaseTake on its own (rare: a republished copy).
//
// It returns one RunStart per start and one error per outcome, in order.
// When the transaction fails for a transient reason (Transient), or may
// have committed (MaybeCommitted: sent, and no answer from Postgres),
// every start and outcome gets that error. When it fails for another reason (one bad outcome), each step is
// done again on its own, so one cannot hold the others back.
func (s *Store) RunWriteBatch(ctx context.Context, starts []RunLeaseParams, outcomes []RunOutcomeParams) ([]RunStart, []error) {
	res := make([]RunStart, len(starts))
	errs := make([]error, len(outcomes))
	var b pgx.Batch
	for _, p := range starts {
		b.Queue(runStartSQL, p.MessageID, p.RunNo, p.Owner, int64(p.StreamSeq), p.TTL.Seconds(), int64(p.Replaces))
	}
	var idx []int // outcomes index of each queued outcome statement
	for i, p := range outcomes {
		if err := p.validate(); err != nil {
			errs[i] = fmt.Errorf("store.RunWriteBatch(%d, %d): %w", p.MessageID, p.RunNo, err)
			continue
		}
		args, err := outcomeArgs(p)
		if err != nil {
			errs[i] = fmt.Errorf("store.RunWriteBatch(%d, %d): %w", p.MessageID, p.RunNo, err)
			continue
		}
		b.Queue(outcomeWriteSQL, args...)
		idx = append(idx, i)
	}
	nQA := qaQueue(&b, outcomes, idx) // QA draws, after every outcome
	// The results outbox's batch.done: the batches of the outcomes are
	// locked once they are written, then checked (outboxBatchLockSQL).
	var refs []RunSeqRef
	for _, i := range idx {
		refs = append(refs, RunSeqRef{MessageID: outcomes[i].MessageID, RunNo: outcomes[i].RunNo})
	}
	var ids []int64
	var nos []int32
	if len(refs) > 0 {
		ids, nos = runRefArrays(refs)
		b.Queue(outboxBatchLockSQL, ids, nos)
	}
	for i, p := range starts {
		if p.Owner == "" || p.TTL <= 0 {
			res[i].Err = fmt.Errorf("store.RunWriteBatch(%d, %d): lease owner and a positive TTL are required", p.MessageID, p.RunNo)
		}
	}
	if b.Len() == 0 {
		return res, errs
	}
	found := make([]bool, len(starts))
	taken := make([]bool, len(starts))
	finished := make([]int, len(idx))
	// read reads the results of b's statements, the last one's (the
	// batch.done check) with last.
	read := func(br pgx.BatchResults, last func(pgx.BatchResults) error) error {
		for i := range starts {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunWithMessage, error) {
				var rm RunWithMessage
				err := row.Scan(append(append(rm.Run.scanTargets(), rm.Message.scanTargets()...), &taken[i])...)
				return rm, err
			})
			if err != nil {
				return err
			}
			if len(got) == 1 {
				res[i].Run, found[i] = got[0], true
			}
		}
		for k := range idx {
			if err := br.QueryRow().Scan(&finished[k]); err != nil {
				return err
			}
		}
		if err := qaResults(br, nQA); err != nil {
			return err
		}
		if len(refs) > 0 {
			if _, err := br.Exec(); err != nil {
				return err
			}
			return last(br)
		}
		return nil
	}
	// First in one round trip: the statements sent at once form one
	// implicit transaction, committed at their end (pgx's SendBatch
	// outside a transaction), and the batch.done check fails it when a
	// batch is done (outboxBatchDoneGuardSQL), a rare case (once a batch,
	// with the outbox on) that needs the events written in the same
	// transaction: then the whole batch again in an explicit one. A BEGIN
	// and a COMMIT of their own were two more round trips a batch, about
	// a tenth of the worker's CPU time at 256 in flight (issue 18).
	guarded := false
	if len(refs) > 0 {
		b.Queue(outboxBatchDoneGuardSQL, ids, nos)
	}
	br := s.Pool.SendBatch(ctx, &b)
	txErr := read(br, func(br pgx.BatchResults) error {
		_, err := br.Exec()
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgDivisionByZero {
			guarded = true
		}
		return err
	})
	if cerr := br.Close(); txErr == nil {
		txErr = cerr
	}
	var pgErr *pgconn.PgError
	if txErr != nil && !errors.As(txErr, &pgErr) {
		// Sent, and not answered by Postgres with an error: the implicit
		// transaction may have committed (MaybeCommitted).
		txErr = &commitError{err: txErr}
	}
	if guarded {
		b.QueuedQueries[len(b.QueuedQueries)-1] = &pgx.QueuedQuery{SQL: outboxBatchDoneSQL, Arguments: []any{ids, nos}}
		txErr = beginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
			br := tx.SendBatch(ctx, &b)
			var done []string
			err := read(br, func(br pgx.BatchResults) error {
				rows, err := br.Query()
				if err == nil {
					done, err = pgx.CollectRows(rows, pgx.RowTo[string])
				}
				return err
			})
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			return s.outboxBatchDone(ctx, tx, done)
		})
	}
	// A failure without Postgres's word on it (the connection lost, or the
	// results not read) may have committed: no step is done again.
	if txErr != nil && (ctx.Err() != nil || errors.Is(txErr, context.DeadlineExceeded) || Transient(txErr) || MaybeCommitted(txErr)) {
		err := fmt.Errorf("store.RunWriteBatch(%d starts, %d outcomes): %w", len(starts), len(idx), interpretError(txErr))
		for i := range res {
			if res[i].Err == nil {
				res[i].Err = err
			}
		}
		for _, i := range idx {
			errs[i] = err
		}
		return res, errs
	}
	if txErr != nil {
		// One step made the batch fail: do each on its own.
		for i, p := range starts {
			if res[i].Err == nil {
				res[i] = s.runStart(ctx, p)
			}
		}
		for _, i := range idx {
			errs[i] = s.RunOutcomeInsert(ctx, s.Pool, outcomes[i])
		}
		return res, errs
	}
	for i, p := range starts {
		switch {
		case res[i].Err != nil:
		case !found[i]:
			res[i].Err = fmt.Errorf("store.RunWriteBatch(%d, %d): %w", p.MessageID, p.RunNo, ErrNotFound)
		case res[i].Run.Run.Status != RunQueued:
			res[i].Lease = RunLease{State: LeaseDone, Status: res[i].Run.Run.Status}
		case taken[i]:
			res[i].Lease = RunLease{State: LeaseTaken}
		default:
			res[i].Lease, res[i].Err = s.RunLeaseTake(ctx, s.Pool, p)
		}
	}
	for k, i := range idx {
		if finished[k] == 0 {
			errs[i] = fmt.Errorf("store.RunWriteBatch(%d, %d): run is not queued: %w",
				outcomes[i].MessageID, outcomes[i].RunNo, ErrOutcomeExists)
		}
	}
	return res, errs
}

// runStart reads the run of p with its message and, if it is queued,
// takes its lease, each step on its own.
func (s *Store) runStart(ctx context.Context, p RunLeaseParams) RunStart {
	rw, err := s.RunGetWithMessage(ctx, s.Pool, RunGetParams{MessageID: p.MessageID, RunNo: p.RunNo})
	if err != nil {
		return RunStart{Err: err}
	}
	if rw.Run.Status != RunQueued {
		return RunStart{Run: rw, Lease: RunLease{State: LeaseDone, Status: rw.Run.Status}}
	}
	l, err := s.RunLeaseTake(ctx, s.Pool, p)
	return RunStart{Run: rw, Lease: l, Err: err}
}
