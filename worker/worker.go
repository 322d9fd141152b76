// Package worker runs the extraction of each run message taken from the
// stream: it reads the message from Postgres, runs the pipeline, writes the
// outcome in one transaction and acks only after the commit.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/provider"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// SchemaEntry is one configured schema the worker can extract.
type SchemaEntry struct {
	Schema *pipeline.Schema
	Prompt *pipeline.Prompt
	// Repair is pipeline.RepairRegenerate or pipeline.RepairPatch.
	Repair string
	// QA, if set, draws the schema's validated results for the QA
	// queue (worker/qa.go); nil samples none.
	QA *config.QA
}

// Config configures a Worker. Store, Extractor and Schemas are required.
type Config struct {
	Store     *store.Store
	Extractor *pipeline.Extractor
	// Schemas maps a schema id (runs.schema_id) to its entry.
	Schemas map[string]SchemaEntry
	// Model is recorded on failure events that belong to no call.
	Model string
	// NakDelay is how long a run waits before it is put back on the stream
	// after a provider or database failure; it doubles with each later try
	// of the run, up to MaxNakDelay. Defaults 2s and 1m.
	NakDelay, MaxNakDelay time.Duration
	// DBTimeout bounds each database step. It must stay below the
	// consumer's ack wait. Default 15s.
	DBTimeout time.Duration
	// CommitBatch is the most run steps (a run's read and lease, or its
	// outcome) done in one shared transaction; CommitWait the most the
	// first waits for others, and it waits at most 5% of the median
	// latency of the recent provider calls, and not at all when steps come
	// too rarely to share (see pacer). Defaults 1 (each step on its own)
	// and DefaultCommitWait.
	CommitBatch int
	CommitWait  time.Duration
	// Metrics, if set, receives the worker's counts (NewMetrics).
	Metrics *Metrics
	// Announcer, if set, announces each triage item a failed run's
	// committed outcome made (queue.TriageEventNew).
	Announcer *queue.Announcer
	// LeaseTTL is how long a worker's lease on the run it works on holds
	// unless extended; it is extended with each in-progress signal (see
	// RunService). Set it to the consumer's ack wait, at least twice the
	// in-progress interval. Default 60s.
	LeaseTTL time.Duration
	// Breaker, if set, is the provider's circuit breaker (the
	// provider.Transport under Extractor): while it is not closed the
	// worker takes no new work (see Ready).
	Breaker Breaker
	// Logger is required in spirit; nil means no logs.
	Logger *zap.Logger
}

// DefaultCommitWait is the default of Config.CommitWait: with a
// transaction's own few milliseconds, it keeps the latency batching adds
// to a run's commit under 50 ms (issue 18's cap).
const DefaultCommitWait = 40 * time.Millisecond

// Breaker is the provider's circuit breaker as the worker reads it;
// *provider.Transport is one.
type Breaker interface {
	// BreakerStatus says whether the breaker is closed (calls go
	// through), open (every call is refused until the cooldown ends) or
	// half-open (one probe call goes through), and what opened it.
	BreakerStatus() provider.BreakerStatus
	// WaitReady blocks until a call would be let through: the breaker is
	// closed, or half-open with no probe in flight. It returns ctx's error
	// when ctx ends first.
	WaitReady(ctx context.Context) error
}

var _ Breaker = (*provider.Transport)(nil)

// Worker handles run messages. It is stateless: all state is in the
// stream and in Postgres, so any number of workers may run.
type Worker struct {
	cfg    Config
	log    *zap.Logger
	com    *committer  // nil when CommitBatch is 1
	dbDown atomic.Bool // a database step failed as Postgres went away
	// providerPaused: Ready found the breaker not closed and has not yet
	// seen it closed again.
	providerPaused atomic.Bool
	// owner names this worker on the runs it leases (runs.lease_owner).
	owner string

	// testHook, when set (export_test.go), runs first in Handle and, when
	// it says so, decides the delivery: a test's way to make a message that
	// crashes or stalls its worker.
	testHook func(ctx context.Context, d *queue.Delivery) (queue.Decision, bool)
}

// New returns a Worker.
func New(cfg Config) (*Worker, error) {
	if cfg.Store == nil || cfg.Extractor == nil || len(cfg.Schemas) == 0 {
		return nil, errors.New("worker: Store, Extractor and Schemas are required")
	}
	if cfg.NakDelay <= 0 {
		cfg.NakDelay = 2 * time.Second
	}
	if cfg.MaxNakDelay <= 0 {
		cfg.MaxNakDelay = time.Minute
	}
	if cfg.DBTimeout <= 0 {
		cfg.DBTimeout = 15 * time.Second
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = time.Minute
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	w := &Worker{cfg: cfg, log: log.Named("worker"), owner: newLeaseOwner()}
	cfg.Metrics.watch(w)
	if cfg.CommitBatch > 1 {
		if cfg.CommitWait <= 0 {
			cfg.CommitWait = DefaultCommitWait
		}
		w.com = newCommitter(cfg.Store, cfg.CommitBatch, cfg.CommitWait, cfg.DBTimeout)
		w.com.observe = cfg.Metrics.batch
	}
	return w, nil
}

// Close stops the worker's batch committer after writing what it holds.
// Call it once no Handle call is running; RunService does.
func (w *Worker) Close() {
	if w.com != nil {
		w.com.close()
	}
}

// Handle processes one delivery and says what to do with the message:
//
//   - Ack when the run's outcome is committed, or was already (a
//     redelivery costs no tokens), or when another copy of the run is
//     being worked on under a live lease (see lease). A finished outcome
//     whose write fails for a transient reason is held and written again
//     until it is committed (see commit), the message kept in progress
//     meanwhile.
//   - Requeue with a growing delay (see retryDelay) when the provider or
//     the database failed, or the worker is shutting down: none of these is
//     the message's fault, so none spends a delivery of its MaxDeliver
//     limit, however long the failure lasts. Only deliveries that end
//     without a decision (the worker died or stalled on the run) or in a
//     handler panic count; the run goes to triage as kind delivery through
//     the max-deliveries advisory (DeliveryFailed) when MaxDeliver of them
//     come in a row.
//     The calls the provider answered before a provider failure (or a
//     shutdown) are booked first, on their own, as superseded; so are
//     those of a delivery that finds the outcome committed by another.
//   - Term when the message names no stored run.
func (w *Worker) Handle(ctx context.Context, d *queue.Delivery) queue.Decision {
	if m := w.cfg.Metrics; m != nil {
		m.inFlight.Inc()
		start := time.Now()
		defer func() {
			m.inFlight.Dec()
			m.runDuration.Observe(time.Since(start).Seconds())
		}()
	}
	if w.testHook != nil {
		if dec, ok := w.testHook(ctx, d); ok {
			return dec
		}
	}
	env := d.Envelope
	// Encoded only if a line is written.
	log := w.log.WithLazy(zap.Int64("message_id", env.MessageID), zap.Int("run_no", env.RunNo),
		zap.Uint64("delivery", d.NumDelivered))

	rs := w.startRun(ctx, d)
	rw, err := rs.Run, rs.Err
	if errors.Is(err, store.ErrNotFound) {
		log.Error("run message names no stored run; terminating it")
		return queue.Term("no such run")
	}
	if err != nil {
		w.noteDBError(err)
		log.Warn("reading or leasing the run failed; will retry", zap.Error(err))
		return w.later(d, "database")
	}
	if dec, ok := w.leaseDecision(log, rs.Lease); !ok {
		return dec
	}

	entry, ok := w.cfg.Schemas[rw.Run.SchemaID]
	if !ok {
		// Not the message's fault, but no worker of this configuration can
		// run it: record it for people rather than loop.
		res := &pipeline.Result{Outcome: pipeline.OutcomeFailed, Errors: extracttype.ErrorList{{
			Kind: extracttype.KindInput, Keyword: "schema", Message: "schema " + rw.Run.SchemaID + " is not configured on the worker"}}}
		return w.commit(ctx, log, d, rw, SchemaEntry{Schema: &pipeline.Schema{ID: rw.Run.SchemaID, Version: "unknown"}}, res)
	}

	res, err := w.cfg.Extractor.Process(ctx, pipeline.Input{
		Text: rw.Message.Body, Schema: entry.Schema, Prompt: entry.Prompt, Repair: entry.Repair,
		Meta: pipeline.MessageMeta{Source: rw.Message.Source, Metadata: rw.Message.Metadata, ReceivedAt: rw.Message.ReceivedAt},
	})
	if w.com != nil && res != nil {
		for _, c := range res.Calls {
			w.com.pace.observeLatency(c.Latency)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			log.Info("shutting down during the run; it will be redelivered")
			w.bookSuperseded(ctx, log, rw, entry, res)
			return w.later(d, "shutdown")
		}
		var te *pipeline.TransportError
		if errors.As(err, &te) && !te.Retryable() {
			// The provider rejected the request itself (4xx): retrying will not
			// mend it.
			res.Outcome = pipeline.OutcomeFailed
			res.Errors = extracttype.ErrorList{{Kind: extracttype.KindTransport, Keyword: fmt.Sprint(te.StatusCode),
				Message: fmt.Sprintf("provider rejected the request with HTTP %d", te.StatusCode)}}
			return w.commit(ctx, log, d, rw, entry, res)
		}
		if te != nil && te.Class.Alert() {
			log.Error("provider refuses our calls (credentials, quota or a proxy): not the message's fault; fix the provider settings",
				zap.String("class", string(te.Class)), zap.Error(err))
		} else {
			log.Warn("provider failed; will retry", zap.Error(err))
		}
		w.bookSuperseded(ctx, log, rw, entry, res)
		return w.later(d, "provider")
	}
	return w.commit(ctx, log, d, rw, entry, res)
}

// noteDBError pauses fetching (see Ready) when err says Postgres is
// unreachable, so runs are not fetched only to be put back.
func (w *Worker) noteDBError(err error) {
	if store.Transient(err) && w.dbDown.CompareAndSwap(false, true) {
		w.log.Warn("Postgres unreachable: fetching paused until it answers", zap.Error(err))
	}
}

// Ready blocks while the worker should take no new work, and is its
// queue.ConsumerOptions.Ready:
//
//   - while Postgres is unreachable (a database step failed as it went
//     away), pinging it every second;
//   - while the provider's circuit breaker is open: no run is fetched only
//     to be refused. When its cooldown ends (half-open) it admits one run,
//     queue.AdmitOne, whose call is the probe: no other run is fetched
//     until that one is decided. A probe that fails opens the breaker
//     again; one that succeeds closes it, and then Ready admits all.
//
// It returns ctx's error when ctx ends.
func (w *Worker) Ready(ctx context.Context) (queue.Admit, error) {
	for w.dbDown.Load() {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := w.cfg.Store.Pool.Ping(pctx)
		cancel()
		if err == nil {
			w.dbDown.Store(false)
			w.log.Info("Postgres answers again: fetching resumed")
			break
		}
		select {
		case <-ctx.Done():
			return queue.AdmitAll, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	b := w.cfg.Breaker
	if b == nil {
		return queue.AdmitAll, ctx.Err()
	}
	if st := b.BreakerStatus(); st.State == provider.BreakerOpen && w.providerPaused.CompareAndSwap(false, true) {
		w.log.Warn("provider failing: fetching paused; one run probes it after each breaker cooldown",
			zap.String("class", string(st.Cause)))
	}
	if err := b.WaitReady(ctx); err != nil {
		return queue.AdmitAll, err
	}
	if b.BreakerStatus().State != provider.BreakerClosed {
		w.providerPaused.Store(true)
		return queue.AdmitOne, nil
	}
	if w.providerPaused.CompareAndSwap(true, false) {
		w.log.Info("provider answers again: fetching resumed")
	}
	return queue.AdmitAll, nil
}

// providerDown reports whether the provider's breaker is not closed.
func (w *Worker) providerDown() bool {
	return w.cfg.Breaker != nil && w.cfg.Breaker.BreakerStatus().State != provider.BreakerClosed
}

// Why a worker takes no new work, as /readyz and the metric
// extractq_worker_paused{reason} name it.
const (
	// PauseProvider: the provider's circuit breaker is open or half-open:
	// its calls failed BreakerFailures times in a row (quota, credentials,
	// a proxy, an outage, protocol errors); one run probes it after each
	// cooldown.
	PauseProvider = "provider"
	// PauseDatabase: a database step failed as Postgres went away; the
	// worker pings it every second.
	PauseDatabase = "database"
)

// Pause is one reason the worker takes no new work.
type Pause struct {
	// Reason is PauseProvider or PauseDatabase.
	Reason string
	// Detail says more, for people: the failure class that opened the
	// breaker and when it probes next.
	Detail string
}

// Paused returns why the worker takes no new work now (see Ready), or
// nothing when it takes work. Runs already in flight are not affected.
func (w *Worker) Paused() []Pause {
	var ps []Pause
	if w.cfg.Breaker != nil {
		st := w.cfg.Breaker.BreakerStatus()
		cause := string(st.Cause)
		if cause == "" {
			cause = "unknown"
		}
		switch st.State {
		case provider.BreakerOpen:
			ps = append(ps, Pause{Reason: PauseProvider, Detail: fmt.Sprintf("circuit breaker open after %s failures; next probe in %s",
				cause, max(time.Until(st.ProbeAt), 0).Round(time.Millisecond))})
		case provider.BreakerHalfOpen:
			ps = append(ps, Pause{Reason: PauseProvider, Detail: fmt.Sprintf("circuit breaker half-open after %s failures; one run probes the provider", cause)})
		}
	}
	if w.dbDown.Load() {
		ps = append(ps, Pause{Reason: PauseDatabase, Detail: "Postgres unreachable; pinging it every second"})
	}
	return ps
}

// later puts the run back on the stream for a later try when the delivery
// failed for cause (provider, database, shutdown), none of them the
// message's fault: it is requeued, which spends none of its deliveries.
//
// The run waits retryDelay first, its message kept in progress, unless
// the worker is shutting down or the provider is paused: then Ready holds
// back fetching, so the requeued run waits on the stream, and the next
// probe is not kept waiting.
func (w *Worker) later(d *queue.Delivery, cause string) queue.Decision {
	w.cfg.Metrics.nak(cause)
	if cause == "shutdown" || (cause == "provider" && w.providerDown()) {
		return queue.Requeue(0)
	}
	return queue.Requeue(w.retryDelay(d))
}

// retryDelay is NakDelay, doubled for each earlier try of the run (its
// requeues, and its deliveries that ended without a decision), up to
// MaxNakDelay.
func (w *Worker) retryDelay(d *queue.Delivery) time.Duration {
	tries := uint64(d.Requeues) + max(d.NumDelivered, 1) - 1
	delay := w.cfg.NakDelay
	for i := uint64(0); i < tries && delay < w.cfg.MaxNakDelay; i++ {
		delay *= 2
	}
	return min(delay, w.cfg.MaxNakDelay)
}

// commit writes the run's outcome in one transaction and acks after it.
//
// A write that fails for a transient reason (store.Transient: Postgres
// restarting or unreachable, its connections exhausted, a serialization
// failure) is tried again with back-off (writeRetry), the result held in
// memory and its message kept in progress by the consumer, until it
// succeeds: the paid calls are not thrown away and made again. Only when
// ctx ends first (the worker stops and its shutdown grace is over) is the
// run put back, its calls booked superseded if Postgres takes them. Any
// other write error puts the run back at once.
//
// A failed try may have committed all the same (the reply to its COMMIT
// lost, store.MaybeCommitted): when a later try then finds the outcome
// there, it is taken as this delivery's and its calls are not booked
// again. Should another delivery have committed it in between (only when
// this one's message was redelivered meanwhile), this delivery's calls are
// missing from the ledger rather than counted twice.
func (w *Worker) commit(ctx context.Context, log *zap.Logger, d *queue.Delivery, rw store.RunWithMessage, entry SchemaEntry, res *pipeline.Result) queue.Decision {
	err := w.writeOutcome(ctx, rw, entry, res)
	maybeOurs := false // a failed try may have committed this outcome
	if err != nil && store.Transient(err) {
		err, maybeOurs = w.retryWrite(ctx, log, rw, entry, res, err)
	}
	switch {
	case errors.Is(err, store.ErrOutcomeExists) && maybeOurs:
		// The reply to an earlier try's COMMIT was lost, and the outcome
		// is there: most likely that try's. Its calls are in the ledger
		// with it; booking them again would count them twice.
		log.Info("run outcome found committed after a try whose reply was lost; taking it as this delivery's")
		w.cfg.Metrics.observe(res)
		w.announceNew(ctx, rw, entry.Schema, res)
		return queue.Ack()
	case errors.Is(err, store.ErrOutcomeExists):
		log.Info("run outcome was committed by another delivery; acking")
		w.bookSuperseded(ctx, log, rw, entry, res)
		return queue.Ack()
	case err != nil && ctx.Err() != nil:
		log.Warn("stopping before the outcome could be written; the run is put back", zap.Error(err))
		if !maybeOurs { // else its calls may be in the ledger already
			w.bookSuperseded(ctx, log, rw, entry, res)
		}
		return w.later(d, "shutdown")
	case err != nil:
		w.noteDBError(err)
		log.Error("writing outcome failed; will retry", zap.Error(err))
		return w.later(d, "database")
	}
	w.cfg.Metrics.observe(res)
	log.Info("run done", zap.String("outcome", res.Outcome), zap.Int("llm_calls", len(res.Calls)),
		zap.String("reason", string(res.Reason())), zap.Int("errors", len(res.Errors)))
	w.announceNew(ctx, rw, entry.Schema, res)
	return queue.Ack()
}

// writeRetry is the back-off between tries of an outcome write that
// failed for a transient reason: from 100ms, doubling, up to 5s.
var writeRetry = backoff.ExponentialBackOff{InitialInterval: 100 * time.Millisecond, RandomizationFactor: 0.3, Multiplier: 2, MaxInterval: 5 * time.Second}

// retryWrite writes res again, after err, with the writeRetry back-off
// while the failure is transient, until the write succeeds, fails for
// another reason, or ctx ends (then it returns the last error). Each try
// is bounded by DBTimeout. maybeCommitted reports whether a failed try may
// have committed all the same (store.MaybeCommitted): then a later
// ErrOutcomeExists is most likely this delivery's own outcome.
func (w *Worker) retryWrite(ctx context.Context, log *zap.Logger, rw store.RunWithMessage, entry SchemaEntry, res *pipeline.Result, err error) (_ error, maybeCommitted bool) {
	w.noteDBError(err)
	log.Warn("writing outcome failed; holding the result and trying again", zap.Error(err))
	bo := writeRetry
	bo.Reset()
	start, tries := time.Now(), 1
	for store.Transient(err) {
		maybeCommitted = maybeCommitted || store.MaybeCommitted(err)
		w.cfg.Metrics.writeRetry()
		t := time.NewTimer(bo.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return err, maybeCommitted
		case <-t.C:
		}
		err = w.writeOutcome(ctx, rw, entry, res)
		tries++
	}
	if err == nil {
		log.Info("outcome written after failed tries", zap.Int("tries", tries), zap.Duration("after", time.Since(start).Round(time.Millisecond)))
	}
	return err, maybeCommitted
}

// bookSuperseded writes the paid calls of res, a delivery that does not
// decide its run (it is about to be nak'ed, or another delivery committed
// the outcome first), on their own and marked superseded, so that the
// ledger holds every paid call and a redelivery's calls come on top. It is
// one statement, finished even while shutting down and bounded by
// DBTimeout; a failure is logged and leaves the delivery's fate as it was.
func (w *Worker) bookSuperseded(ctx context.Context, log *zap.Logger, rw store.RunWithMessage, entry SchemaEntry, res *pipeline.Result) {
	if res == nil || len(res.Calls) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.DBTimeout)
	defer cancel()
	err := w.cfg.Store.LLMCallInsertSuperseded(cctx, w.cfg.Store.Pool, store.LLMCallInsertSupersededParams{
		MessageID: rw.Run.MessageID, RunNo: rw.Run.RunNo, SchemaID: entry.Schema.ID, SchemaVersion: entry.Schema.Version,
		Calls: ledgerCalls(entry.Schema, res.Calls),
	})
	if err != nil {
		w.noteDBError(err)
		log.Warn("booking the paid calls of a delivery that did not decide its run failed; they are missing from the ledger",
			zap.Int("llm_calls", len(res.Calls)), zap.Error(err))
		return
	}
	w.cfg.Metrics.observeCalls(res.Calls)
	log.Debug("paid calls of a delivery that did not decide its run booked as superseded", zap.Int("llm_calls", len(res.Calls)))
}

// announceNew announces the triage item that the committed outcome res of
// a failed or held run made, with the error list the item stores. It
// comes after the commit and never changes the run's fate: a lookup or
// publish that fails is logged and counted.
func (w *Worker) announceNew(ctx context.Context, rw store.RunWithMessage, schema *pipeline.Schema, res *pipeline.Result) {
	if w.cfg.Announcer == nil || (res.Outcome != pipeline.OutcomeFailed && res.Outcome != pipeline.OutcomeHeld) {
		return
	}
	// The error list as the item stores it (storedErrors): a key the
	// model invented may be the customer's words.
	reason, errs := string(res.Reason()), storedErrors(schema, res.Errors)
	if res.Outcome == pipeline.OutcomeHeld {
		reason, errs = store.TriageReasonHeld, storedErrors(schema, res.Held)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.DBTimeout)
	ref, err := w.cfg.Store.TriageItemOfRun(cctx, w.cfg.Store.Pool, rw.Run.MessageID, rw.Run.RunNo)
	cancel()
	if err == nil {
		err = w.cfg.Announcer.Announce(queue.TriageEvent{
			Event: queue.TriageEventNew, ItemID: ref.ID, MessageID: rw.Run.MessageID, RunNo: rw.Run.RunNo,
			BatchID: rw.Run.BatchID, SchemaID: rw.Run.SchemaID, Reason: reason, Errors: errs, At: ref.CreatedAt,
		})
	}
	if err != nil {
		w.cfg.Metrics.announce("failed")
		w.log.Warn("triage item not announced", zap.Int64("message_id", rw.Run.MessageID), zap.Int("run_no", rw.Run.RunNo), zap.Error(err))
		return
	}
	w.cfg.Metrics.announce("sent")
}

// writeOutcome writes res as the run's outcome in one transaction. The
// write finishes even while shutting down (it is what lets the ack
// happen), bounded by DBTimeout.
func (w *Worker) writeOutcome(ctx context.Context, rw store.RunWithMessage, entry SchemaEntry, res *pipeline.Result) error {
	params, err := OutcomeParams(rw.Run.MessageID, rw.Run.RunNo, entry.Schema, w.cfg.Model, res)
	if err != nil {
		return fmt.Errorf("building outcome: %w", err)
	}
	params.QA = qaParams(entry.QA, rw.Run.MessageID, rw.Run.RunNo)
	if com := w.com; com != nil {
		if err := com.commit(params); !errors.Is(err, errCommitterClosed) {
			return err
		}
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.DBTimeout)
	defer cancel()
	return w.cfg.Store.InTx(cctx, func(tx store.DBTX) error {
		return w.cfg.Store.RunOutcomeInsert(cctx, tx, params)
	})
}

// DeliveryFailed records a run that reached the stream's delivery limit
// without an outcome (its worker crashed or hung on every delivery) as a
// triage item of kind delivery. A run that has an outcome is left alone.
// It is the queue.DeadLetterHandler of the worker.
func (w *Worker) DeliveryFailed(ctx context.Context, env queue.Envelope, deliveries uint64) error {
	rctx, cancel := context.WithTimeout(ctx, w.cfg.DBTimeout)
	rw, err := w.cfg.Store.RunGetWithMessage(rctx, w.cfg.Store.Pool, store.RunGetParams{MessageID: env.MessageID, RunNo: env.RunNo})
	cancel()
	if errors.Is(err, store.ErrNotFound) {
		w.log.Error("run past its delivery limit is not stored; dropping it", zap.Int64("message_id", env.MessageID), zap.Int("run_no", env.RunNo))
		return nil
	}
	if err != nil {
		return err
	}
	if rw.Run.Status != store.RunQueued {
		return nil
	}
	entry, ok := w.cfg.Schemas[rw.Run.SchemaID]
	if !ok {
		entry = SchemaEntry{Schema: &pipeline.Schema{ID: rw.Run.SchemaID, Version: "unknown"}}
	}
	res := &pipeline.Result{Outcome: pipeline.OutcomeFailed, Errors: extracttype.ErrorList{{
		Kind: extracttype.KindDelivery, Keyword: "max_deliver",
		Message: fmt.Sprintf("no outcome after %d deliveries: the worker crashed or stalled on every one", deliveries)}}}
	err = w.writeOutcome(ctx, rw, entry, res)
	if errors.Is(err, store.ErrOutcomeExists) {
		return nil
	}
	if err == nil {
		w.log.Warn("run sent to triage after its delivery limit", zap.Int64("message_id", env.MessageID), zap.Int("run_no", env.RunNo))
		w.announceNew(ctx, rw, entry.Schema, res)
	}
	return err
}

// OutcomeParams maps a pipeline result to the store's outcome write: every
// call, the extraction or the triage item, and one failure event per error
// per call (plus one per final error that no call produced, such as a
// budget or delivery failure).
func OutcomeParams(messageID int64, runNo int, schema *pipeline.Schema, model string, res *pipeline.Result) (store.RunOutcomeParams, error) {
	p := store.RunOutcomeParams{
		MessageID: messageID, RunNo: runNo, SchemaID: schema.ID, SchemaVersion: schema.Version, Status: res.Outcome,
	}
	p.Calls = ledgerCalls(schema, res.Calls)
	for i, c := range res.Calls {
		for _, e := range c.Errors {
			p.Failures = append(p.Failures, store.FailureEvent{CallIndex: i, Err: storedError(schema, e)})
		}
	}
	switch res.Outcome {
	case pipeline.OutcomeSucceeded, pipeline.OutcomeRepaired:
		if len(res.Data) == 0 {
			return p, errors.New("valid outcome without data")
		}
		ev, err := json.Marshal(res.Evidence)
		if err != nil {
			return p, err
		}
		if res.Evidence == nil {
			ev = []byte("[]")
		}
		p.Extraction = &store.ExtractionParams{Data: res.Data, Evidence: ev, Outcome: res.Outcome, CreatedBy: "model"}
	case pipeline.OutcomeHeld:
		// Valid, but a review rule holds it: the record waits on a
		// triage item of kind held, naming the rules; no result.
		if len(res.Data) == 0 || len(res.Held) == 0 {
			return p, errors.New("held outcome without data or rules")
		}
		ev, err := json.Marshal(res.Evidence)
		if err != nil {
			return p, err
		}
		if res.Evidence == nil {
			ev = []byte("[]")
		}
		p.Triage = &store.TriageParams{Reason: store.TriageReasonHeld, Errors: storedErrors(schema, res.Held), LastReply: res.LastReply,
			Held: &store.HeldParams{Data: res.Data, Evidence: ev, ValidAs: res.ValidAs}}
	case pipeline.OutcomeFailed:
		if len(res.Errors) == 0 {
			return p, errors.New("failed outcome without errors")
		}
		p.Triage = &store.TriageParams{Reason: string(res.Reason()), Errors: storedErrors(schema, res.Errors), LastReply: res.LastReply}
		// Final errors no call produced.
		var last extracttype.ErrorList
		if n := len(res.Calls); n > 0 {
			last = res.Calls[n-1].Errors
		}
		for _, e := range res.Errors {
			if !contains(last, e) {
				p.Failures = append(p.Failures, store.FailureEvent{CallIndex: -1, Attempt: len(res.Calls) + 1, Model: model, Err: storedError(schema, e)})
			}
		}
	default:
		return p, fmt.Errorf("unknown outcome %q", res.Outcome)
	}
	return p, nil
}

// storedError is e as failure analytics, triage items and their
// announcements store it: its path with every key the schema does not
// name folded to pipeline.UnknownKey, as such a key (one the model
// invented, or a free-keyed object's) may hold the customer's words
// (pipeline.Schema.FieldPath), and those rows outlive an erasure. The
// reviewer still sees the key in the item's last reply, which erasure
// blanks.
func storedError(schema *pipeline.Schema, e extracttype.Error) extracttype.Error {
	e.Path = schema.FieldPath(e.Path)
	return e
}

// storedErrors is l with each error as storedError makes it; nil
// stays nil.
func storedErrors(schema *pipeline.Schema, l extracttype.ErrorList) extracttype.ErrorList {
	if l == nil {
		return nil
	}
	out := make(extracttype.ErrorList, len(l))
	for i, e := range l {
		out[i] = storedError(schema, e)
	}
	return out
}

// ledgerCalls maps the pipeline's calls to the ledger's rows.
func ledgerCalls(schema *pipeline.Schema, calls []pipeline.Call) []store.LLMCall {
	out := make([]store.LLMCall, 0, len(calls))
	for _, c := range calls {
		out = append(out, store.LLMCall{
			Attempt: c.Attempt, Purpose: c.Purpose, Model: c.Model, PromptVersion: c.PromptVersion,
			SchemaID: schema.ID, SchemaVersion: c.SchemaVersion, RequestMode: c.RequestMode,
			RepairStrategy: c.RepairStrategy, PromptTokens: c.PromptTokens, CachedTokens: c.CachedTokens,
			CompletionTokens: c.CompletionTokens, UsageEstimated: c.UsageEstimated,
			CostUSD: c.CostUSD, PriceVersion: c.PriceVersion, LatencyMS: int(c.Latency.Milliseconds()),
			FinishReason: c.FinishReason, HTTPStatus: c.HTTPStatus, ReplyBytes: c.ReplyBytes,
			Reply: c.Reply, Stripped: c.Stripped, Valid: c.Valid(), ErrorCount: len(c.Errors),
			Patch: c.Patch,
		})
	}
	return out
}

func contains(l extracttype.ErrorList, e extracttype.Error) bool {
	for _, x := range l {
		if x == e {
			return true
		}
	}
	return false
}
