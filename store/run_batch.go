package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

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
// When the transaction fails for a transient reason (Transient; a lost
// COMMIT reply is MaybeCommitted), every start and outcome gets that
// error. When it fails for another reason (one bad outcome), each step is
// done again on its own, so one cannot hold the others back.
func (s *Store) RunWriteBatch(ctx context.Context, starts []RunLeaseParams, outcomes []RunOutcomeParams) ([]RunStart, []error) {
	res := make([]RunStart, len(starts))
	errs := make([]error, len(outcomes))
	var b pgx.Batch
	// BEGIN goes with the statements, in one round trip (pgx's
	// Batch.BeginTx); on its own it was a round trip more a batch, about
	// 2.5% of the worker's CPU at 256 in flight (issue 18).
	b.BeginTx(pgx.TxOptions{})
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
	if len(refs) > 0 {
		ids, nos := runRefArrays(refs)
		b.Queue(outboxBatchLockSQL, ids, nos)
		b.Queue(outboxBatchDoneSQL, ids, nos)
	}
	for i, p := range starts {
		if p.Owner == "" || p.TTL <= 0 {
			res[i].Err = fmt.Errorf("store.RunWriteBatch(%d, %d): lease owner and a positive TTL are required", p.MessageID, p.RunNo)
		}
	}
	if b.Len() == 1 { // BEGIN alone
		return res, errs
	}
	found := make([]bool, len(starts))
	taken := make([]bool, len(starts))
	finished := make([]int, len(idx))
	txErr := batchTx(ctx, s.Pool, &b, func(tx pgx.Tx, br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil { // BEGIN
			br.Close()
			return err
		}
		for i := range starts {
			rows, err := br.Query()
			if err != nil {
				br.Close()
				return err
			}
			got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunWithMessage, error) {
				var rm RunWithMessage
				err := row.Scan(append(append(rm.Run.scanTargets(), rm.Message.scanTargets()...), &taken[i])...)
				return rm, err
			})
			if err != nil {
				br.Close()
				return err
			}
			if len(got) == 1 {
				res[i].Run, found[i] = got[0], true
			}
		}
		for k := range idx {
			if err := br.QueryRow().Scan(&finished[k]); err != nil {
				br.Close()
				return err
			}
		}
		if err := qaResults(br, nQA); err != nil {
			br.Close()
			return err
		}
		var done []string
		if len(refs) > 0 {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
			rows, err := br.Query()
			if err == nil {
				done, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				br.Close()
				return err
			}
		}
		if err := br.Close(); err != nil {
			return err
		}
		return s.outboxBatchDone(ctx, tx, done)
	})
	if txErr != nil && (ctx.Err() != nil || errors.Is(txErr, context.DeadlineExceeded) || Transient(txErr)) {
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

// batchTx sends b, which begins a transaction (Batch.BeginTx), on a
// connection of pool, runs fn on its results and the transaction, and
// commits, as beginFunc does: a COMMIT's error is a commitError. fn must
// close the results before it uses the transaction.
func batchTx(ctx context.Context, pool *pgxpool.Pool, b *pgx.Batch, fn func(tx pgx.Tx, br pgx.BatchResults) error) error {
	br := pool.SendBatch(ctx, b)
	tx := br.Tx()
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(tx, br); err != nil {
		br.Close()
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return &commitError{err: err}
	}
	return nil
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
