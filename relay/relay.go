// Package relay is the one way a run gets onto the runs stream: it reads
// what Postgres says must be on the stream and puts it there, recording
// in Postgres what the stream stored.
//
// Every publish of a run goes through a Relay: ingest's first publish
// (Publish), a triage re-run (PublishMany), the sweeper's publish of runs
// recorded but never published (Sweep), a worker's requeue of a run it
// could not finish (Requeue, the worker's queue.Requeuer), and the
// reconciler's republish of runs Postgres holds as queued that the stream
// no longer holds (Reconcile). Each records the stream sequence of the copy
// stored on the run row (runs.stream_seq).
//
// # Telling done from lost
//
// The runs stream is a work queue: a message is removed once acked, so a
// sequence gone from the stream means acked or lost. A worker acks a copy
// only once the run has an outcome (then the run is not queued), or once it
// put a newer copy on the stream (a requeue, recorded right after), or when
// another copy is being worked on under a live lease (the run then points
// to that copy). So a run still queued whose recorded copy is gone, and that has
// been so for longer than a grace period, is lost (a purged stream, a lost
// store, a stream recreated); Reconcile publishes it again under
// "<dedup id>.r<n>", a key the stream has never seen, and records the new
// copy. A copy is recognised by its Nats-Msg-Id, so a sequence reused by a
// recreated stream is not taken for the run's.
//
// # Duplicates
//
// A run's dedup id is random, set at insert and the same on every publish
// of it (store, migration 000013). The stream answers "duplicate" with the
// sequence of the copy it holds. When the publish was retried, that is the
// publish's own earlier attempt. Otherwise Publish reads that copy: a copy
// of the same run (an earlier publish that was never recorded, such as an
// ingest killed between its publish and its record) is fine; another
// message under the run's id is an anomaly, logged as an error, counted
// (extractq_relay_duplicates_total{kind="anomaly"}) and reported to the
// caller, and the run is published again under a fresh key, so it is not
// lost.
package relay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// Config configures a Relay. Store and Publisher are required.
type Config struct {
	Store     *store.Store
	Publisher *queue.Publisher
	// Lookup reads the stream Publisher publishes on; default
	// Publisher.Lookup().
	Lookup *queue.Lookup
	// Metrics, if set, receives the relay's counts (NewMetrics).
	Metrics *Metrics
	Logger  *zap.Logger
}

// Relay publishes runs and records what the stream stored. It is safe for
// concurrent use.
type Relay struct {
	cfg Config
	log *zap.Logger
}

// New returns a Relay.
func New(cfg Config) (*Relay, error) {
	if cfg.Store == nil || cfg.Publisher == nil {
		return nil, errors.New("relay: Store and Publisher are required")
	}
	if cfg.Lookup == nil {
		cfg.Lookup = cfg.Publisher.Lookup()
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Relay{cfg: cfg, log: log.Named("relay")}, nil
}

// Published is what one publish of a run did.
type Published struct {
	// Seq is the stream sequence of the run's copy.
	Seq uint64
	// Duplicate: the stream held a copy of the run already (this
	// publish's own earlier attempt, or an earlier publish never
	// recorded); nothing new was stored.
	Duplicate bool
	// Anomaly: the stream answered "duplicate" for the run's dedup id but
	// holds another message under it; the run was published again under a
	// fresh key (Seq is that copy's).
	Anomaly bool
}

// envelope is the run's message body.
func envelope(r store.Run) queue.Envelope {
	return queue.Envelope{MessageID: r.MessageID, RunNo: r.RunNo, BatchID: r.BatchID, SchemaID: r.SchemaID}
}

// ErrNotRecorded wraps the store's error when a run's copy is on the
// stream but recording it failed: the Published returned with it is
// valid, and Record may be tried again.
var ErrNotRecorded = errors.New("relay: published but not recorded")

// Publish publishes run under its dedup id, or finds the copy the stream
// holds under it, and records the copy's sequence on the run row (marking
// it published). A duplicate answer is checked as the package doc says. A
// publish that fails returns the queue's error (the run stays as it was:
// queued, and unpublished if it was); a record that fails returns an error
// wrapping ErrNotRecorded and the store's.
func (r *Relay) Publish(ctx context.Context, run store.Run) (Published, error) {
	p, err := r.publish(ctx, run)
	if err == nil || errors.Is(err, ErrNotRecorded) {
		r.cfg.Metrics.published(viaPublish)
	}
	return p, err
}

// Record records that run's copy is at seq, as Publish does after the
// publish; for a caller retrying after ErrNotRecorded.
func (r *Relay) Record(ctx context.Context, run store.Run, seq uint64) error {
	return r.record(ctx, run, seq)
}

func (r *Relay) publish(ctx context.Context, run store.Run) (Published, error) {
	st, err := r.cfg.Publisher.PublishRun(ctx, run.DedupID, envelope(run))
	if err != nil {
		return Published{}, err
	}
	p, err := r.checkDuplicate(ctx, run, st)
	if err != nil {
		return p, err
	}
	if err := r.record(ctx, run, p.Seq); err != nil {
		return p, fmt.Errorf("%w: %w", ErrNotRecorded, err)
	}
	return p, nil
}

// checkDuplicate turns the stream's answer st to a publish of run under
// its dedup id into what it means, publishing the run again under a fresh
// key when the stream holds another message under its id.
func (r *Relay) checkDuplicate(ctx context.Context, run store.Run, st queue.Stored) (Published, error) {
	p := Published{Seq: st.Seq, Duplicate: st.Duplicate}
	if !st.Duplicate {
		return p, nil
	}
	log := r.log.With(zap.Int64("message_id", run.MessageID), zap.Int("run_no", run.RunNo),
		zap.String("dedup_id", run.DedupID), zap.Uint64("stream_seq", st.Seq))
	if st.Retried {
		// The publish's own earlier attempt, stored after all.
		r.cfg.Metrics.duplicate(dupOwnRetry)
		return p, nil
	}
	held, err := r.cfg.Lookup.RunAt(ctx, st.Seq)
	switch {
	case err == nil && held.Of(run.DedupID) && held.Envelope.MessageID == run.MessageID && held.Envelope.RunNo == run.RunNo:
		// An earlier publish of this run that nobody recorded.
		r.cfg.Metrics.duplicate(dupEarlier)
		log.Info("the stream holds this run already from an earlier publish")
		return p, nil
	case err == nil:
		r.cfg.Metrics.duplicate(dupAnomaly)
		log.Error("the stream answered duplicate for this run's dedup id but holds another message under it; publishing the run under a fresh key",
			zap.String("held_msg_id", held.MsgID), zap.Int64("held_message_id", held.Envelope.MessageID), zap.Int("held_run_no", held.Envelope.RunNo))
		seq, err := r.republish(ctx, run, store.RunRepublishClaimParams{MessageID: run.MessageID, RunNo: run.RunNo,
			StreamSeq: uint64(run.StreamSeq), Force: true})
		return Published{Seq: seq, Anomaly: true}, err
	case errors.Is(err, queue.ErrNotStored):
		// The copy was acked already: the run had an outcome, or a worker
		// acked it for a copy under lease. Either way the run is handled
		// (or the reconciler finds it lost later); record that copy.
		r.cfg.Metrics.duplicate(dupGone)
		log.Info("the stream answered duplicate for this run; its copy is no longer on the stream")
		return p, nil
	default:
		// Unknown: record the sequence; the reconciler checks it later.
		log.Warn("the stream answered duplicate for this run; reading its copy failed", zap.Error(err))
		r.cfg.Metrics.duplicate(dupUnchecked)
		return p, nil
	}
}

// republish claims a republish of run (store.RunRepublishClaim with c) and
// publishes it under its dedup id and ".r" and the new generation. It
// returns 0 without an error when the claim found the run changed.
func (r *Relay) republish(ctx context.Context, run store.Run, c store.RunRepublishClaimParams) (uint64, error) {
	gen, ok, err := r.cfg.Store.RunRepublishClaim(ctx, r.cfg.Store.Pool, c)
	if err != nil || !ok {
		return 0, err
	}
	id := run.DedupID + ".r" + strconv.Itoa(gen)
	st, err := r.cfg.Publisher.PublishRun(ctx, id, envelope(run))
	if err != nil {
		return 0, err
	}
	if err := r.record(ctx, run, st.Seq); err != nil {
		return st.Seq, err
	}
	r.cfg.Metrics.published(viaReconcile)
	return st.Seq, nil
}

// record records that the run's copy is at seq.
func (r *Relay) record(ctx context.Context, run store.Run, seq uint64) error {
	return r.cfg.Store.RunMarkPublished(ctx, r.cfg.Store.Pool, store.RunMarkPublishedParams{
		MessageID: run.MessageID, RunNo: run.RunNo, StreamSeq: seq})
}

// PublishMany publishes runs (each under its dedup id) asynchronously,
// records those stored and returns how many were. A run that fails is
// logged and left unpublished, for the sweeper.
func (r *Relay) PublishMany(ctx context.Context, runs []store.Run) int {
	if len(runs) == 0 {
		return 0
	}
	items := make([]queue.BatchItem, len(runs))
	for i, run := range runs {
		items[i] = queue.BatchItem{DedupID: run.DedupID, Envelope: envelope(run)}
	}
	var ok []store.RunMarkPublishedParams
	for i, res := range r.cfg.Publisher.PublishBatch(ctx, items) {
		run := runs[i]
		if res.Err != nil {
			r.log.Warn("run not published; the sweeper will publish it", zap.String("dedup_id", run.DedupID), zap.Error(res.Err))
			continue
		}
		p, err := r.checkDuplicate(ctx, run, res.Stored)
		if err != nil {
			r.log.Warn("run not published; the sweeper will publish it", zap.String("dedup_id", run.DedupID), zap.Error(err))
			continue
		}
		r.cfg.Metrics.published(viaPublish)
		ok = append(ok, store.RunMarkPublishedParams{MessageID: run.MessageID, RunNo: run.RunNo, StreamSeq: p.Seq})
	}
	if _, err := r.cfg.Store.RunMarkPublishedMany(ctx, r.cfg.Store.Pool, ok); err != nil {
		// Published but not marked: the sweeper publishes again, and the
		// stream answers duplicate with the copy's sequence.
		r.log.Warn("recording published runs", zap.Int("runs", len(ok)), zap.Error(err))
	}
	return len(ok)
}

// Sweep publishes runs recorded more than age ago that were never
// published (an ingest killed between its write and its publish, a re-run
// whose publish failed), and returns how many it published.
func (r *Relay) Sweep(ctx context.Context, age time.Duration) (int, error) {
	runs, err := r.cfg.Store.RunListUnpublished(ctx, r.cfg.Store.Pool, store.RunListUnpublishedParams{OlderThan: time.Now().Add(-age), Limit: 1000})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, run := range runs {
		if _, err := r.publish(ctx, run); err != nil {
			return n, err
		}
		r.cfg.Metrics.published(viaSweep)
		n++
	}
	return n, nil
}

// Requeue is the worker's queue.Requeuer: it publishes the copy of d's
// message (queue.Publisher.Requeue) and records it on the run row, ending
// the lease taken on d's copy. A record that fails is logged: the copy is
// on the stream, and the reconciler's worst case is one more copy.
func (r *Relay) Requeue(ctx context.Context, d *queue.Delivery) (string, queue.Stored, error) {
	id, st, err := r.cfg.Publisher.Requeue(ctx, d)
	if err != nil {
		return id, st, err
	}
	r.cfg.Metrics.published(viaRequeue)
	err = r.cfg.Store.RunMarkRequeued(ctx, r.cfg.Store.Pool, store.RunMarkRequeuedParams{
		MessageID: d.Envelope.MessageID, RunNo: d.Envelope.RunNo, FromSeq: d.StreamSeq, StreamSeq: st.Seq})
	if err != nil {
		r.log.Warn("requeued copy not recorded; the reconciler may publish the run once more", zap.Int64("message_id", d.Envelope.MessageID),
			zap.Int("run_no", d.Envelope.RunNo), zap.Uint64("stream_seq", st.Seq), zap.Error(err))
	}
	return id, st, nil
}

var _ queue.Requeuer = (*Relay)(nil)

// Reconciled is what one Reconcile pass did.
type Reconciled struct {
	// Checked counts the runs looked for on the stream.
	Checked int
	// OnStream counts those whose copy the stream holds.
	OnStream int
	// Republished counts those published again.
	Republished int
	// GivenUp counts the runs whose copy the consumer gave up on (it
	// reached its delivery limit, and the max-deliveries advisory that
	// would have routed it was lost), handed to ReconcileParams.GivenUp
	// and removed from the stream.
	GivenUp int
	// Lost: the stream had lost copies (see ReconcileParams.Grace), so
	// the pass looked at every queued run at once.
	Lost bool
	// ConsumerRecreated: the stream had no workers' consumer, and
	// ReconcileParams.Recreate made it again.
	ConsumerRecreated bool
}

// ReconcileParams configures one pass.
type ReconcileParams struct {
	// Grace is how long a run's copy must have gone unchecked before the
	// run is looked for. Required; see Options.ReconcileGrace. A pass
	// that finds the stream lost copies skips it: the stream did not
	// exist, or its last sequence is below the highest one recorded on a
	// queued run (a stream recreated, a server that lost its store), or
	// its first sequence is past that one (a purge: no queued run's copy
	// is left). Then every queued run checked before Start is looked for.
	Grace time.Duration
	// Start is when the reconciler's tick began; default now. The passes
	// of one tick share it, so a pass that skips the grace does not look
	// again at the runs an earlier pass of the tick checked.
	Start time.Time
	// Limit is the most runs looked for in one pass. Default 500.
	Limit int
	// Recreate, if set, is called when the stream does not exist (deleted,
	// or its server lost its store): it should create the stream and its
	// consumers again (the worker's does). Then every queued run is
	// looked for, and none is found.
	Recreate func(ctx context.Context) error
	// GivenUp, if set, receives a run whose copy is on the stream but
	// that the consumer gave up on (queue.ConsumerState.GivenUp): it ran
	// out of deliveries and its max-deliveries advisory never came (lost
	// in a restart, or the dead-letter stream was missing), so nothing
	// would ever deliver it again. It should record the run as the
	// advisory's handler does (the worker's DeliveryFailed: a triage
	// item of kind delivery); on success the copy is removed. deliveries
	// is the consumer's MaxDeliver.
	GivenUp queue.DeadLetterHandler
	// Consumers are the workers' consumers (config.Config.Consumers),
	// whose state GivenUp reads for each run's schema and which Recreate
	// makes again when one is missing. Default the shared one.
	Consumers []config.ConsumerSpec
}

// Reconcile looks on the stream for the queued runs whose copy was last
// known to be there more than p.Grace ago (store.RunListToCheck), marks
// those found and publishes the others again (see the package doc). It
// returns what it did; an error stops the pass.
func (r *Relay) Reconcile(ctx context.Context, p ReconcileParams) (Reconciled, error) {
	var rec Reconciled
	if p.Grace <= 0 {
		return rec, errors.New("relay.Reconcile: Grace must be positive")
	}
	if p.Start.IsZero() {
		p.Start = time.Now()
	}
	// The highest sequence recorded, read before the bounds (see
	// store.RunQueuedMaxSeq).
	maxSeq, err := r.cfg.Store.RunQueuedMaxSeq(ctx, r.cfg.Store.Pool)
	if err != nil {
		return rec, err
	}
	if maxSeq > 0 {
		first, last, err := r.bounds(ctx, p, &rec)
		if err != nil {
			return rec, err
		}
		if maxSeq > last || maxSeq < first {
			rec.Lost = true
		}
		if rec.Lost {
			r.log.Error("the runs stream lost messages of queued runs; looking for every queued run now",
				zap.Uint64("highest_recorded_seq", maxSeq), zap.Uint64("stream_first_seq", first), zap.Uint64("stream_last_seq", last))
		}
	}
	grace := p.Grace
	if rec.Lost {
		// Every queued run checked before this tick began.
		grace = max(time.Since(p.Start), time.Millisecond)
	}
	runs, err := r.cfg.Store.RunListToCheck(ctx, r.cfg.Store.Pool, store.RunListToCheckParams{Grace: grace, Limit: p.Limit})
	if err != nil || len(runs) == 0 {
		return rec, err
	}
	// Every run listed was recorded before this read, so its copy, if
	// the stream still holds it, is within these bounds.
	first, last, err := r.bounds(ctx, p, &rec)
	if err != nil {
		return rec, err
	}
	// Read after the listing: a run's copy delivered and given up on by
	// then is still given up on (the consumer never delivers it again).
	var cons consumerStates
	if p.GivenUp != nil {
		cons = r.consumerStates(ctx, p)
	}
	var found []store.RunSeqRef
	defer func() {
		if len(found) == 0 {
			return
		}
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := r.cfg.Store.RunMarkChecked(mctx, r.cfg.Store.Pool, found); err != nil {
			r.log.Warn("recording runs found on the stream", zap.Int("runs", len(found)), zap.Error(err))
		}
	}()
	for _, run := range runs {
		rec.Checked++
		seq := uint64(run.StreamSeq)
		on, err := r.onStream(ctx, run, seq, first, last)
		if err != nil {
			return rec, err
		}
		if on && p.GivenUp != nil && cons.of(run.SchemaID).GivenUp(seq) {
			routed, err := r.givenUp(ctx, p, run, seq, cons.of(run.SchemaID))
			if err != nil {
				return rec, err
			}
			if routed {
				rec.GivenUp++
				continue
			}
		}
		if on {
			rec.OnStream++
			r.cfg.Metrics.reconciled(resultOnStream)
			found = append(found, store.RunSeqRef{MessageID: run.MessageID, RunNo: run.RunNo, StreamSeq: seq})
			continue
		}
		got, err := r.republish(ctx, run, store.RunRepublishClaimParams{MessageID: run.MessageID, RunNo: run.RunNo,
			StreamSeq: seq, Grace: grace})
		if err != nil {
			return rec, err
		}
		if got == 0 {
			continue // changed since the listing: an outcome, a requeue, another reconciler
		}
		rec.Republished++
		r.cfg.Metrics.reconciled(resultRepublished)
		r.log.Warn("queued run not on the stream; published it again", zap.Int64("message_id", run.MessageID),
			zap.Int("run_no", run.RunNo), zap.Uint64("lost_seq", seq), zap.Uint64("stream_seq", got))
	}
	return rec, nil
}

// givenUp hands run, whose copy at seq the consumer gave up on, to
// p.GivenUp and removes the copy. It first checks the run is still idle
// at seq (store.RunIdleAt): a copy acked since the listing by a worker
// that leased the run meanwhile (a requeue not yet recorded) is not one
// given up; then it reports false.
func (r *Relay) givenUp(ctx context.Context, p ReconcileParams, run store.Run, seq uint64, cons queue.ConsumerState) (bool, error) {
	idle, err := r.cfg.Store.RunIdleAt(ctx, r.cfg.Store.Pool, run.MessageID, run.RunNo, seq)
	if err != nil || !idle {
		return false, err
	}
	r.log.Error("the consumer gave up on a queued run's copy and no max-deliveries advisory routed it; routing it now",
		zap.Int64("message_id", run.MessageID), zap.Int("run_no", run.RunNo), zap.Uint64("stream_seq", seq),
		zap.Int("max_deliver", cons.MaxDeliver))
	if err := p.GivenUp(ctx, envelope(run), uint64(max(cons.MaxDeliver, 0))); err != nil {
		return false, err
	}
	r.cfg.Metrics.reconciled(resultGivenUp)
	return true, r.cfg.Lookup.Remove(ctx, seq)
}

// bounds returns the stream's first and last sequences, creating the
// stream again (p.Recreate) if it does not exist; then rec.Lost is set.
// A stream that exists without the workers' consumer (another command,
// such as ingest, made it again after its server lost its store) gets
// the consumer back the same way, once a pass: without it no worker
// takes a run.
func (r *Relay) bounds(ctx context.Context, p ReconcileParams, rec *Reconciled) (first, last uint64, err error) {
	first, last, err = r.cfg.Lookup.Bounds(ctx)
	if queue.IsStreamNotFound(err) && p.Recreate != nil {
		r.log.Error("the runs stream does not exist; creating it again, and its consumers", zap.Error(err))
		if err := p.Recreate(ctx); err != nil {
			return 0, 0, err
		}
		rec.Lost = true
		return r.cfg.Lookup.Bounds(ctx)
	}
	if err == nil && p.Recreate != nil && !rec.Lost && !rec.ConsumerRecreated {
		if cerr := r.consumerMissing(ctx, p); cerr != nil {
			r.log.Error("the runs stream lacks a workers' consumer; creating it again", zap.Error(cerr))
			if err := p.Recreate(ctx); err != nil {
				return 0, 0, err
			}
			rec.ConsumerRecreated = true
		}
	}
	return first, last, err
}

// onStream reports whether the stream holds run's copy at seq, with the
// stream's bounds first and last.
func (r *Relay) onStream(ctx context.Context, run store.Run, seq, first, last uint64) (bool, error) {
	if seq == 0 || seq < first || seq > last {
		// No sequence (published by an older build), acked or purged, or
		// past a recreated stream's end.
		return false, nil
	}
	held, err := r.cfg.Lookup.RunAt(ctx, seq)
	if errors.Is(err, queue.ErrNotStored) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return held.Of(run.DedupID) && held.Envelope.MessageID == run.MessageID && held.Envelope.RunNo == run.RunNo, nil
}

// Options configures Run. Zero fields take their defaults; a negative
// interval turns its loop off.
type Options struct {
	// SweepEvery is how often runs never published are published
	// (Sweep). Default 30s.
	SweepEvery time.Duration
	// SweepAge is how old an unpublished run must be to be swept.
	// Default 1m.
	SweepAge time.Duration
	// ReconcileEvery is how often the reconciler runs a pass. Default 1m.
	ReconcileEvery time.Duration
	// ReconcileGrace is how long a queued run's copy may go unchecked
	// before the reconciler looks for it (Reconcile). Default 5m.
	ReconcileGrace time.Duration
	// ReconcileLimit is the most runs one pass looks for; a pass that
	// reached it runs again at once (up to 20 passes a tick). Default 500.
	ReconcileLimit int
	// Recreate, GivenUp and Consumers: see ReconcileParams.
	Recreate  func(ctx context.Context) error
	GivenUp   queue.DeadLetterHandler
	Consumers []config.ConsumerSpec
}

func (o Options) withDefaults() Options {
	if o.SweepEvery == 0 {
		o.SweepEvery = 30 * time.Second
	}
	if o.SweepAge <= 0 {
		o.SweepAge = time.Minute
	}
	if o.ReconcileEvery == 0 {
		o.ReconcileEvery = time.Minute
	}
	if o.ReconcileGrace <= 0 {
		o.ReconcileGrace = 5 * time.Minute
	}
	if o.ReconcileLimit <= 0 {
		o.ReconcileLimit = 500
	}
	return o
}

// Run sweeps and reconciles, each on its own ticker, until ctx is done. A
// pass that fails is logged and tried again on the next tick.
func (r *Relay) Run(ctx context.Context, o Options) {
	o = o.withDefaults()
	done := make(chan struct{}, 2)
	loops := 0
	if o.SweepEvery > 0 {
		loops++
		go func() {
			defer func() { done <- struct{}{} }()
			every(ctx, o.SweepEvery, func() {
				if n, err := r.Sweep(ctx, o.SweepAge); err != nil && ctx.Err() == nil {
					r.log.Warn("publish sweep failed", zap.Error(err))
				} else if n > 0 {
					r.log.Info("published runs that had not been published", zap.Int("runs", n))
				}
			})
		}()
	}
	if o.ReconcileEvery > 0 {
		loops++
		go func() {
			defer func() { done <- struct{}{} }()
			every(ctx, o.ReconcileEvery, func() {
				// A full pass runs again at once, up to a bound, so a
				// large backlog is walked through quickly after a loss.
				start := time.Now()
				for range maxPassesPerTick {
					if ctx.Err() != nil {
						return
					}
					rec, err := r.Reconcile(ctx, ReconcileParams{Grace: o.ReconcileGrace, Limit: o.ReconcileLimit,
						Recreate: o.Recreate, GivenUp: o.GivenUp, Consumers: o.Consumers, Start: start})
					if err != nil && ctx.Err() == nil {
						r.log.Warn("reconcile pass failed", zap.Error(err), zap.Int("checked", rec.Checked))
					}
					if rec.Republished > 0 {
						r.log.Warn("republished queued runs the stream no longer held",
							zap.Int("runs", rec.Republished), zap.Int("checked", rec.Checked))
					}
					if err != nil || rec.Checked < o.ReconcileLimit {
						return
					}
				}
			})
		}()
	}
	for range loops {
		<-done
	}
}

// maxPassesPerTick bounds the reconciler's passes one after the other.
const maxPassesPerTick = 20

// every calls f every d until ctx is done.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
