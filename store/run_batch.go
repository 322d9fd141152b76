package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

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

// runStartSQL reads runs with their messages and, in the same
// statement, takes their leases as runLeaseTakeSQL does (the read sees
// the runs as they were before): one row per run found, with its
// position in $1 (1-based) and taken, whether the lease is the caller's
// now. The runs must be distinct (the UPDATE's join would take a run's
// lease once for two starts, and both would read it as theirs). The
// arrays, one element a start: message_id, run_no, owner, stream_seq,
// TTL in seconds, replaces.
const runStartSQL = `
WITH u AS (
    SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::bigint[], $5::float8[], $6::bigint[])
        WITH ORDINALITY AS u(message_id, run_no, owner, seq, ttl, replaces, ord)
), up AS (
    UPDATE runs r SET lease_owner = u.owner, lease_seq = u.seq, leased_until = now() + make_interval(secs => u.ttl)
    FROM u
    WHERE r.message_id = u.message_id AND r.run_no = u.run_no AND r.status = 'queued'
      AND (r.leased_until IS NULL OR r.leased_until <= now() OR r.lease_seq = u.seq
           OR (u.replaces > 0 AND r.lease_seq = u.replaces))
    RETURNING u.ord
)
SELECT u.ord, ` + runColumns + `,
       ` + messageColumns + `,
       EXISTS (SELECT FROM up WHERE up.ord = u.ord) AS taken
FROM u
JOIN runs r ON r.message_id = u.message_id AND r.run_no = u.run_no
JOIN messages m ON m.id = r.message_id
ORDER BY u.ord`

// forceGenericPlanSQL makes the transaction's prepared statements use
// their generic plan.
const forceGenericPlanSQL = `SET LOCAL plan_cache_mode = force_generic_plan`

// startCols are runStartSQL's arguments for several starts.
type startCols struct {
	mid, seq, replaces []int64
	runNo              []int32
	owner              []string
	ttl                []float64
	at                 []int // index in the caller's starts
}

func (c *startCols) add(i int, p RunLeaseParams) {
	c.mid, c.runNo, c.owner = append(c.mid, p.MessageID), append(c.runNo, int32(p.RunNo)), append(c.owner, p.Owner)
	c.seq, c.ttl, c.replaces = append(c.seq, int64(p.StreamSeq)), append(c.ttl, p.TTL.Seconds()), append(c.replaces, int64(p.Replaces))
	c.at = append(c.at, i)
}

func (c *startCols) args() []any {
	return []any{c.mid, c.runNo, c.owner, c.seq, c.ttl, c.replaces}
}

// runKey is a run's key.
type runKey struct {
	messageID int64
	runNo     int
}

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
	// The statements' plans are made once per connection: with custom
	// plans (Postgres's choice, as the generic one estimates ten rows an
	// array and a batch holds fewer) the starts' statement was planned
	// anew each time, 0.5 ms of Postgres's CPU a batch (scenario R's
	// pg_stat_statements, issue 18).
	b.Queue(forceGenericPlanSQL)
	// One statement for the starts and one for the outcomes, each over
	// distinct runs: a run twice among them (a republished copy) goes in a
	// second statement, after the first.
	var startGroups []*startCols
	seen := map[runKey]int{}
	for i, p := range starts {
		if p.Owner == "" || p.TTL <= 0 {
			res[i].Err = fmt.Errorf("store.RunWriteBatch(%d, %d): lease owner and a positive TTL are required", p.MessageID, p.RunNo)
			continue
		}
		k := runKey{p.MessageID, p.RunNo}
		g := seen[k]
		seen[k]++
		if g == len(startGroups) {
			startGroups = append(startGroups, &startCols{})
		}
		startGroups[g].add(i, p)
	}
	for _, g := range startGroups {
		b.Queue(runStartSQL, g.args()...)
	}
	type outcomeGroup struct {
		cols outcomeCols
		at   []int // index in outcomes
	}
	var outGroups []*outcomeGroup
	var idx []int // outcomes index of each outcome written
	clear(seen)
	for i, p := range outcomes {
		if err := p.validate(); err != nil {
			errs[i] = fmt.Errorf("store.RunWriteBatch(%d, %d): %w", p.MessageID, p.RunNo, err)
			continue
		}
		k := runKey{p.MessageID, p.RunNo}
		g := seen[k]
		if g == len(outGroups) {
			outGroups = append(outGroups, &outcomeGroup{})
		}
		if err := outGroups[g].cols.add(p); err != nil {
			errs[i] = fmt.Errorf("store.RunWriteBatch(%d, %d): %w", p.MessageID, p.RunNo, err)
			continue
		}
		seen[k]++
		outGroups[g].at = append(outGroups[g].at, i)
		idx = append(idx, i)
	}
	for _, g := range outGroups {
		if len(g.at) > 0 {
			b.Queue(outcomeWriteSQL, g.cols.args()...)
		}
	}
	slices.Sort(idx)
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
	if b.Len() == 2 { // BEGIN and SET LOCAL alone
		return res, errs
	}
	found := make([]bool, len(starts))
	taken := make([]bool, len(starts))
	finished := make([]bool, len(outcomes))
	txErr := batchTx(ctx, s.Pool, &b, func(tx pgx.Tx, br pgx.BatchResults) error {
		for range 2 { // BEGIN, SET LOCAL
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
		}
		for _, g := range startGroups {
			rows, err := br.Query()
			if err != nil {
				br.Close()
				return err
			}
			_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
				var ord int64
				var rm RunWithMessage
				var tk bool
				if err := row.Scan(append(append([]any{&ord}, rm.Run.scanTargets()...), append(rm.Message.scanTargets(), &tk)...)...); err != nil {
					return struct{}{}, err
				}
				if ord < 1 || int(ord) > len(g.at) {
					return struct{}{}, fmt.Errorf("start position %d out of range", ord)
				}
				i := g.at[ord-1]
				res[i].Run, found[i], taken[i] = rm, true, tk
				return struct{}{}, nil
			})
			if err != nil {
				br.Close()
				return err
			}
		}
		for _, g := range outGroups {
			if len(g.at) == 0 {
				continue
			}
			var fin []int64
			if err := br.QueryRow().Scan(&fin); err != nil {
				br.Close()
				return err
			}
			for _, ord := range fin {
				if ord < 1 || int(ord) > len(g.at) {
					br.Close()
					return fmt.Errorf("outcome position %d out of range", ord)
				}
				finished[g.at[ord-1]] = true
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
	for _, i := range idx {
		if !finished[i] {
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
