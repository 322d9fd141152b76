package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The relay's bookkeeping (package relay, migration 000013). A run row
// says what the stream must hold: a queued run that was published has a
// copy on the stream, at StreamSeq, unless that copy was lost. The relay
// records each copy stored (RunMarkPublished, RunMarkRequeued); the
// reconciler reads the runs not checked for a while (RunListToCheck),
// looks for their copy on the stream, marks the ones found
// (RunMarkChecked) and republishes the others (RunRepublishClaim, then
// RunMarkPublished). A worker leases a run while it works on it
// (RunLeaseTake, RunLeaseExtend, RunLeaseRelease), so a second copy
// delivered meanwhile costs no second provider call.

// RunListToCheckParams selects runs for the reconciler.
type RunListToCheckParams struct {
	// Grace: only runs whose copy the relay last knew to be on the stream
	// (stored or found) longer ago than this, by the database's clock.
	Grace time.Duration
	// Limit is the most runs returned. Default 500.
	Limit int
}

const runListToCheckSQL = `
SELECT ` + runColumns + `
FROM runs r
WHERE r.status = 'queued' AND r.published_at IS NOT NULL
  AND coalesce(r.relay_checked_at, r.published_at) < now() - make_interval(secs => $1::float8)
  AND (r.leased_until IS NULL OR r.leased_until <= now())
ORDER BY coalesce(r.relay_checked_at, r.published_at), r.message_id, r.run_no
LIMIT $2`

// RunListToCheck returns queued, published runs whose copy was last known
// to be on the stream more than p.Grace ago, least recently checked first.
// Runs under a live lease are left out: their worker holds their copy, or
// puts a new one on the stream, or dies and its lease ends. A run
// published by a build older than migration 000013 has no StreamSeq and
// counts from its publish time.
func (s *Store) RunListToCheck(ctx context.Context, db DBTX, p RunListToCheckParams) ([]Run, error) {
	rows, err := db.Query(ctx, runListToCheckSQL, p.Grace.Seconds(), limitOr(p.Limit, 500))
	if err != nil {
		return nil, fmt.Errorf("store.RunListToCheck: %w", err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Run])
	if err != nil {
		return nil, fmt.Errorf("store.RunListToCheck: %w", err)
	}
	return runs, nil
}

// RunQueuedMaxSeq returns the highest stream sequence recorded on a
// queued, published run; 0 when there is none. The relay reads it before
// the stream's bounds: every sequence recorded by then was stored by then,
// so a stream whose last sequence is below it lost messages (it was
// recreated, or its server lost its store).
func (s *Store) RunQueuedMaxSeq(ctx context.Context, db DBTX) (uint64, error) {
	var seq int64
	err := db.QueryRow(ctx, `
SELECT coalesce(max(stream_seq), 0) FROM runs
WHERE status = 'queued' AND published_at IS NOT NULL`).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("store.RunQueuedMaxSeq: %w", err)
	}
	return uint64(seq), nil
}

// RunIdleAt reports whether the run is queued, its recorded copy is at
// seq, and no worker holds a live lease on it: nothing is working on it
// nor has replaced that copy. The relay checks it before routing a run
// whose copy the consumer gave up on.
func (s *Store) RunIdleAt(ctx context.Context, db DBTX, messageID int64, runNo int, seq uint64) (bool, error) {
	var idle bool
	err := db.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM runs
WHERE message_id = $1 AND run_no = $2 AND status = 'queued' AND stream_seq = $3
  AND (leased_until IS NULL OR leased_until <= now()))`, messageID, runNo, int64(seq)).Scan(&idle)
	if err != nil {
		return false, fmt.Errorf("store.RunIdleAt(%d, %d): %w", messageID, runNo, err)
	}
	return idle, nil
}

// RunSeqRef names one run and a stream sequence of it.
type RunSeqRef struct {
	MessageID int64
	RunNo     int
	StreamSeq uint64
}

// RunMarkChecked records that the reconciler found each run's copy at
// StreamSeq on the stream, for runs whose recorded sequence is still that
// one. It returns how many runs it marked.
func (s *Store) RunMarkChecked(ctx context.Context, db DBTX, refs []RunSeqRef) (int, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	ids, nos, seqs := make([]int64, len(refs)), make([]int32, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		ids[i], nos[i], seqs[i] = r.MessageID, int32(r.RunNo), int64(r.StreamSeq)
	}
	tag, err := db.Exec(ctx, `
UPDATE runs SET relay_checked_at = now()
FROM unnest($1::bigint[], $2::int[], $3::bigint[]) AS u(message_id, run_no, seq)
WHERE runs.message_id = u.message_id AND runs.run_no = u.run_no AND runs.stream_seq = u.seq`, ids, nos, seqs)
	if err != nil {
		return 0, fmt.Errorf("store.RunMarkChecked(%d runs): %w", len(refs), err)
	}
	return int(tag.RowsAffected()), nil
}

// RunRepublishClaimParams names a run the reconciler did not find on the
// stream.
type RunRepublishClaimParams struct {
	MessageID int64
	RunNo     int
	// StreamSeq is the sequence it looked for (the run's StreamSeq as
	// listed; 0 for none).
	StreamSeq uint64
	// Grace is the one the run was listed with.
	Grace time.Duration
	// Force claims a queued run whatever its check time (the relay found
	// another message under the run's dedup id: it must go out under a
	// fresh one).
	Force bool
}

const runRepublishClaimSQL = `
UPDATE runs SET relay_gen = relay_gen + 1, relay_checked_at = now()
WHERE message_id = $1 AND run_no = $2 AND status = 'queued'
  AND coalesce(stream_seq, 0) = $3
  AND ($5 OR (coalesce(relay_checked_at, published_at) < now() - make_interval(secs => $4::float8)
              AND (leased_until IS NULL OR leased_until <= now())))
RETURNING relay_gen`

// RunRepublishClaim claims the republish of a run the reconciler did not
// find on the stream, and returns its new RelayGen, whose publish key is
// the run's DedupID and ".r" RelayGen. It claims only a run still queued,
// whose recorded sequence is still p.StreamSeq and that nobody checked
// since the listing, and that no worker leased since: a run that got an
// outcome, was requeued, was leased or was claimed by another reconciler
// meanwhile returns ok false (Force claims it whatever its check time and
// lease). A claimed run
// counts as checked now, so a reconciler that dies before the publish
// leaves it to the next pass after the grace period.
func (s *Store) RunRepublishClaim(ctx context.Context, db DBTX, p RunRepublishClaimParams) (gen int, ok bool, err error) {
	err = db.QueryRow(ctx, runRepublishClaimSQL, p.MessageID, p.RunNo, int64(p.StreamSeq), p.Grace.Seconds(), p.Force).Scan(&gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("store.RunRepublishClaim(%d, %d): %w", p.MessageID, p.RunNo, err)
	}
	return gen, true, nil
}

// RunMarkRequeuedParams records a copy of a run a worker put back on the
// stream (queue.Requeue).
type RunMarkRequeuedParams struct {
	MessageID int64
	RunNo     int
	// FromSeq is the sequence of the copy the worker had; its lease, if it
	// is the run's, ends.
	FromSeq uint64
	// StreamSeq is the sequence of the new copy.
	StreamSeq uint64
}

// RunMarkRequeued records the new copy of a queued run and ends the lease
// taken on the copy it replaces. A run that is not queued is left alone.
func (s *Store) RunMarkRequeued(ctx context.Context, db DBTX, p RunMarkRequeuedParams) error {
	_, err := db.Exec(ctx, `
UPDATE runs SET stream_seq = $4, relay_checked_at = now(),
       lease_owner = CASE WHEN lease_seq = $3 THEN NULL ELSE lease_owner END,
       leased_until = CASE WHEN lease_seq = $3 THEN NULL ELSE leased_until END,
       lease_seq = CASE WHEN lease_seq = $3 THEN NULL ELSE lease_seq END
WHERE message_id = $1 AND run_no = $2 AND status = 'queued'`, p.MessageID, p.RunNo, int64(p.FromSeq), int64(p.StreamSeq))
	if err != nil {
		return fmt.Errorf("store.RunMarkRequeued(%d, %d): %w", p.MessageID, p.RunNo, err)
	}
	return nil
}

// RunLeaseParams names a run, the worker that works on it and the copy it
// works on.
type RunLeaseParams struct {
	MessageID int64
	RunNo     int
	// Owner names the worker process; required.
	Owner string
	// StreamSeq is the stream sequence of the copy delivered to Owner.
	StreamSeq uint64
	// Replaces, for a copy a worker requeued, is the sequence of the copy
	// it replaces (queue.Delivery.RequeueOf); 0 otherwise. A lease on that
	// copy does not keep this one from being worked on: its worker gave
	// it up when it requeued.
	Replaces uint64
	// TTL is how long the lease holds unless extended. Required for
	// RunLeaseTake and RunLeaseExtend.
	TTL time.Duration
}

// LeaseState is what RunLeaseTake found.
type LeaseState int

const (
	// LeaseTaken: the run is queued and the lease is Owner's now.
	LeaseTaken LeaseState = iota
	// LeaseHeld: another copy of the run is being worked on under a live
	// lease; the run now points to that copy (its StreamSeq is the
	// lease's), so the caller's copy may be acked without a call: the
	// holder's copy stays on the stream until the run has an outcome or a
	// new copy, and is delivered again if its holder dies.
	LeaseHeld
	// LeaseDone: the run is not queued any more.
	LeaseDone
)

// RunLease is the outcome of RunLeaseTake.
type RunLease struct {
	State LeaseState
	// Holder, HolderSeq and Until describe the live lease of LeaseHeld.
	Holder    string
	HolderSeq uint64
	Until     time.Time
	// Status is the run's status for LeaseDone.
	Status string
}

// runLeaseTakeSQL takes the lease of a queued run that has none live, or
// whose lease is on this very copy (a copy delivered again means the
// server gave up on its holder: no ack nor in-progress within the ack
// wait, so the holder is taken to be gone), or on the copy this one
// replaces (its worker requeued it, and may not have ended its lease yet).
const runLeaseTakeSQL = `
UPDATE runs SET lease_owner = $3, lease_seq = $4, leased_until = now() + make_interval(secs => $5::float8)
WHERE message_id = $1 AND run_no = $2 AND status = 'queued'
  AND (leased_until IS NULL OR leased_until <= now() OR lease_seq = $4 OR ($6::bigint > 0 AND lease_seq = $6::bigint))`

// runLeaseYieldSQL points a run under a live lease on another copy to
// that copy.
const runLeaseYieldSQL = `
UPDATE runs SET stream_seq = lease_seq, relay_checked_at = now()
WHERE message_id = $1 AND run_no = $2 AND status = 'queued'
  AND leased_until > now() AND lease_seq <> $3 AND NOT ($4::bigint > 0 AND lease_seq = $4::bigint)
RETURNING lease_owner, lease_seq, leased_until`

// RunLeaseTake gives the run to p.Owner for p.TTL (LeaseTaken) unless
// another copy of it is being worked on under a live lease (LeaseHeld) or
// it is not queued (LeaseDone). Each step is one statement, so it works
// through a pooler in transaction pooling. An unknown run returns an
// error wrapping ErrNotFound.
func (s *Store) RunLeaseTake(ctx context.Context, db DBTX, p RunLeaseParams) (RunLease, error) {
	fail := func(err error) (RunLease, error) {
		return RunLease{}, fmt.Errorf("store.RunLeaseTake(%d, %d): %w", p.MessageID, p.RunNo, err)
	}
	if p.Owner == "" || p.TTL <= 0 {
		return fail(errors.New("owner and a positive TTL are required"))
	}
	// A lease that ends between the two updates is taken on the next try.
	for range 3 {
		tag, err := db.Exec(ctx, runLeaseTakeSQL, p.MessageID, p.RunNo, p.Owner, int64(p.StreamSeq), p.TTL.Seconds(), int64(p.Replaces))
		if err != nil {
			return fail(err)
		}
		if tag.RowsAffected() == 1 {
			return RunLease{State: LeaseTaken}, nil
		}
		var l RunLease
		var seq int64
		err = db.QueryRow(ctx, runLeaseYieldSQL, p.MessageID, p.RunNo, int64(p.StreamSeq), int64(p.Replaces)).Scan(&l.Holder, &seq, &l.Until)
		if err == nil {
			l.State, l.HolderSeq = LeaseHeld, uint64(seq)
			return l, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fail(err)
		}
		var status string
		err = db.QueryRow(ctx, `SELECT status FROM runs WHERE message_id = $1 AND run_no = $2`, p.MessageID, p.RunNo).Scan(&status)
		if err != nil {
			return fail(interpretError(err))
		}
		if status != RunQueued {
			return RunLease{State: LeaseDone, Status: status}, nil
		}
	}
	return fail(errors.New("the lease changed hands three times in a row"))
}

// RunLeaseExtend extends p.Owner's lease on the copy p.StreamSeq by p.TTL
// from now. It returns false when the lease is not Owner's on that copy
// any more (another worker took it over, or the run has an outcome).
func (s *Store) RunLeaseExtend(ctx context.Context, db DBTX, p RunLeaseParams) (bool, error) {
	tag, err := db.Exec(ctx, `
UPDATE runs SET leased_until = now() + make_interval(secs => $5::float8)
WHERE message_id = $1 AND run_no = $2 AND status = 'queued' AND lease_owner = $3 AND lease_seq = $4`,
		p.MessageID, p.RunNo, p.Owner, int64(p.StreamSeq), p.TTL.Seconds())
	if err != nil {
		return false, fmt.Errorf("store.RunLeaseExtend(%d, %d): %w", p.MessageID, p.RunNo, err)
	}
	return tag.RowsAffected() == 1, nil
}

// RunLeaseRelease ends p.Owner's lease on the copy p.StreamSeq, if it is
// still Owner's. p.TTL is not used.
func (s *Store) RunLeaseRelease(ctx context.Context, db DBTX, p RunLeaseParams) error {
	_, err := db.Exec(ctx, `
UPDATE runs SET lease_owner = NULL, lease_seq = NULL, leased_until = NULL
WHERE message_id = $1 AND run_no = $2 AND lease_owner = $3 AND lease_seq = $4`,
		p.MessageID, p.RunNo, p.Owner, int64(p.StreamSeq))
	if err != nil {
		return fmt.Errorf("store.RunLeaseRelease(%d, %d): %w", p.MessageID, p.RunNo, err)
	}
	return nil
}
