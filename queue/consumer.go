package queue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Delivery is one delivery of a run message to a handler.
type Delivery struct {
	// Envelope is the run the message names, already validated.
	Envelope Envelope
	// NumDelivered counts the deliveries of this message, this one
	// included: 1 on the first delivery.
	NumDelivered uint64
	// MaxDeliver is the consumer's delivery limit, or -1 without one.
	MaxDeliver int
	// StreamSeq is the message's sequence in the stream.
	StreamSeq uint64
	// Subject is the subject the run was published on.
	Subject string
	// Requeues counts how many times the run was put back as a new message
	// (see Requeue) before this one: 0 for a first publish. It is read
	// from the RequeuesHeader.
	Requeues int
	// RequeueOf is, for a requeued copy, the stream sequence of the
	// message it replaces (RequeueOfHeader); 0 otherwise.
	RequeueOf uint64

	msg    jetstream.Msg
	fields []zap.Field // its logging context
	envErr error       // why its body is not a valid Envelope, if it is not
}

// RequeuesHeader is the header of a message that Requeue put back on the
// stream: how many requeues made it, from 1.
const RequeuesHeader = "Extractq-Requeues"

// RequeueOfHeader is the header of a message that Requeue put back on the
// stream: the stream sequence of the message it replaces.
const RequeueOfHeader = "Extractq-Requeue-Of"

// LastDelivery reports whether the server will not deliver this message
// again after this delivery unless it is acked: a nak or a handler that
// never returns now sends the server's max-deliveries advisory. A handler
// that cannot finish the run now for a reason that is not the message's
// should Requeue it.
func (d *Delivery) LastDelivery() bool {
	return d.MaxDeliver > 0 && d.NumDelivered >= uint64(d.MaxDeliver)
}

// Msg returns the underlying JetStream message. Run acks it: a handler must
// not ack, nak or term it itself.
func (d *Delivery) Msg() jetstream.Msg { return d.msg }

type decisionKind int

const (
	kindNak decisionKind = iota // the zero Decision redelivers
	kindAck
	kindTerm
	kindRequeue
)

func (k decisionKind) String() string {
	switch k {
	case kindAck:
		return "ack"
	case kindTerm:
		return "term"
	case kindRequeue:
		return "requeue"
	}
	return "nak"
}

// Decision is what a Handler wants done with its message. The zero
// Decision is Nak(0).
type Decision struct {
	kind   decisionKind
	delay  time.Duration
	reason string
}

// Ack acknowledges the message: it is done and is removed from the stream.
func Ack() Decision { return Decision{kind: kindAck} }

// Nak asks for redelivery after delay (at once when delay is 0). The
// redelivery counts towards the consumer's MaxDeliver: nak when the
// message itself may be why the delivery failed.
func Nak(delay time.Duration) Decision { return Decision{kind: kindNak, delay: max(0, delay)} }

// Requeue puts the message back on the stream as a new message, after
// delay: Run keeps the message in progress for delay (less once Run's ctx
// is done), publishes a copy with ConsumerOptions.Publisher, then acks the
// message. The copy has the same subject and body, the Nats-Msg-Id
// "<id>@<stream sequence>" (the message's own id up to any "@", and its
// sequence: a second requeue of the same delivery is a duplicate within
// the dedup window), RequeuesHeader one more than the message had and
// RequeueOfHeader the message's sequence.
//
// The copy's deliveries count from 1, so a requeue spends nothing of the
// consumer's MaxDeliver. Requeue when the delivery failed for a reason that
// is not the message's (the provider or the database failed, the worker is
// shutting down), so that only deliveries the message itself ended (its
// handler panicked, or its worker died or stalled) count towards
// MaxDeliver; Nak when the message may be the cause.
//
// Without a Publisher, or when the copy cannot be published, Run naks the
// message with delay instead (and logs why). A lost ack after the copy is
// stored leaves both on the stream; handlers are idempotent.
func Requeue(delay time.Duration) Decision { return Decision{kind: kindRequeue, delay: max(0, delay)} }

// Term stops all further delivery of the message; reason is logged (and
// sent to servers that take it, see ConsumerOptions.TermWithReason).
func Term(reason string) Decision { return Decision{kind: kindTerm, reason: reason} }

// String returns "ack", "nak", "nak 5s", "requeue", "requeue 5s" or
// "term: reason".
func (d Decision) String() string {
	switch {
	case d.kind == kindTerm:
		return "term: " + d.reason
	case (d.kind == kindNak || d.kind == kindRequeue) && d.delay > 0:
		return d.kind.String() + " " + d.delay.String()
	}
	return d.kind.String()
}

// A Requeuer puts the copy of a delivery's message that a Requeue decision
// describes on the stream (see Publisher.Requeue) and returns its
// Nats-Msg-Id and where it was stored.
type Requeuer interface {
	Requeue(ctx context.Context, d *Delivery) (string, Stored, error)
}

// Handler handles one delivery and says what to do with its message. ctx
// is cancelled ShutdownGrace after Run's ctx is done. A handler must be
// idempotent: a message is delivered again when its ack is lost.
type Handler func(ctx context.Context, d *Delivery) Decision

// Admit is what ConsumerOptions.Ready lets the next pull take.
type Admit int

const (
	// AdmitAll lets the pull take a message for each free slot.
	AdmitAll Admit = iota
	// AdmitOne lets it take one message, and no other pull happens until
	// that message's handler has returned and its decision is applied: the
	// probe of a half-open circuit breaker, which lets one call through, so
	// that no other message is delivered only to be refused.
	AdmitOne
)

// ConsumerOptions configures Run. Zero fields take their defaults.
type ConsumerOptions struct {
	// Concurrency is the most messages handled at once; Run never holds
	// more messages than that. Default 1.
	Concurrency int
	// InProgressEvery is how often a running handler's message is marked
	// in progress, which restarts its ack wait. Default a third of the
	// consumer's AckWait.
	InProgressEvery time.Duration
	// ShutdownGrace is how long in-flight handlers may run on once Run's
	// ctx is done before their own ctx is cancelled. Default 30s.
	ShutdownGrace time.Duration
	// PanicDelay is how long a message whose handler panicked waits before
	// redelivery. Default 5s.
	PanicDelay time.Duration
	// FetchWait is how long one pull request waits for a message (at
	// least 1s, the least nats.go takes); when none came, the consumer's
	// info is asked for, and a failure is logged as a fetch failure.
	// Default 5s.
	FetchWait time.Duration
	// TermWithReason sends the term reason to the server. Servers before
	// 2.10.4 ignore a term with a reason and redeliver the message, so set
	// it only from TermReasonSupported. Default false: a plain term, the
	// reason only logged.
	TermWithReason bool
	// Ready, if set, is called once a slot is free, before each pull
	// request, and blocks while the worker should not take new work (a
	// provider circuit breaker that is open, a database that does not
	// answer). Then it says what the pull may take: AdmitAll, or AdmitOne for the one probe of a half-open
	// breaker. It returns an error only when ctx is done. Messages already
	// held are not affected.
	Ready func(ctx context.Context) (Admit, error)
	// Publisher publishes the copies of Requeue decisions; it must publish
	// on the consumer's stream. Without one (nor a Requeuer), a Requeue is
	// a Nak.
	Publisher *Publisher
	// Requeuer, if set, publishes the copies of Requeue decisions instead
	// of Publisher (a relay that records each copy).
	Requeuer Requeuer
	// OnInProgress, if set, is called on the handler's in-progress ticker
	// after each in-progress signal sent without error (a worker's lease on
	// the run is extended there). It should return well within the tick.
	OnInProgress func(d *Delivery)
	// Isolation, if set, is shared with the other Runs of the process, so
	// that a suspect runs with nothing in flight on any of them (see
	// Isolation); default one of Run's own.
	Isolation *Isolation
	// SuspectWait bounds how long a suspect waits for the deliveries in
	// flight to be decided before it runs all the same, and how long the
	// next one waits for a suspect that runs alone: a handler that does not
	// return holds its worker back no longer. Default 5 times the
	// consumer's AckWait (5 minutes with the shipped 60 s), 5 minutes
	// without one.
	SuspectWait time.Duration
	// OnSuspect, if set, is called as a suspect begins to run alone.
	OnSuspect func(d *Delivery)
	// Log receives the consumer's logs. Default a no-op logger.
	Log *zap.Logger
}

func (o ConsumerOptions) withDefaults(cons jetstream.Consumer) ConsumerOptions {
	o.Concurrency = max(1, o.Concurrency)
	if o.InProgressEvery <= 0 {
		o.InProgressEvery = 10 * time.Second
		if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
			o.InProgressEvery = max(info.Config.AckWait/3, 10*time.Millisecond)
		}
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 30 * time.Second
	}
	if o.PanicDelay <= 0 {
		o.PanicDelay = 5 * time.Second
	}
	if o.FetchWait <= 0 {
		o.FetchWait = 5 * time.Second
	}
	if o.SuspectWait <= 0 {
		o.SuspectWait = 5 * time.Minute
		if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
			o.SuspectWait = 5 * info.Config.AckWait
		}
	}
	if o.Isolation == nil {
		o.Isolation = NewIsolation()
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Requeuer == nil && o.Publisher != nil {
		o.Requeuer = o.Publisher
	}
	return o
}

// requeueTimeout bounds publishing the copy of a requeued message, its
// retries included.
const requeueTimeout = 10 * time.Second

// ackTimeout bounds waiting for the server to confirm an ack.
const ackTimeout = 10 * time.Second

// abandonAfter is how long Run still waits for handlers once their ctx is
// cancelled, before it returns without them.
const abandonAfter = 5 * time.Second

// Run pulls messages from cons and handles them with h on a fixed pool of
// opts.Concurrency goroutines, until ctx is done. It takes a message from
// the stream only once a slot is free for it, so at most opts.Concurrency
// messages are held at once (none are prefetched), through a few
// long-lived pull consumptions (see consumeLoop). While a handler runs,
// its message is marked in progress every opts.InProgressEvery. Then Run
// applies the handler's Decision: an ack (confirmed by the server only
// once Run is stopping, see apply); a nak with a delay; a term.
//
// A redelivery (NumDelivered above 1) is a suspect and runs alone, with
// nothing else in flight (see Isolation).
//
// A message whose body is not a valid Envelope is termed and logged: it can
// never be processed. A handler panic is recovered, logged with its stack,
// and the message is nakked with opts.PanicDelay. Fetch errors (such as a
// server that is down) are logged and retried with backoff; they never end
// Run.
//
// When ctx is done, Run stops fetching and waits for in-flight handlers;
// after opts.ShutdownGrace their ctx is cancelled. Messages not acked stay
// on the stream for redelivery; suspects held for their turn are
// requeued. Run then returns nil.
func Run(ctx context.Context, cons jetstream.Consumer, h Handler, opts ConsumerOptions) error {
	opts = opts.withDefaults(cons)
	r := &runner{
		cons: cons,
		h:    h,
		opts: opts,
		iso:  opts.Isolation,
		log:  opts.Log.Named("queue"),
		sem:  make(chan struct{}, opts.Concurrency),
		stop: ctx.Done(),
	}
	r.progress = newProgressTicker(opts.InProgressEvery, opts.OnInProgress, r.log)
	r.iso.register(ctx.Done())
	if info := cons.CachedInfo(); info != nil {
		r.maxDeliver = info.Config.MaxDeliver
		r.log = r.log.With(zap.String("stream", info.Stream), zap.String("consumer", info.Name))
	}
	hctx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	r.hctx = hctx

	r.consumeLoop(ctx, hctx)

	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	grace := time.NewTimer(opts.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-done:
		return nil
	case <-grace.C:
	}
	r.log.Warn("shutdown grace over, cancelling handlers", zap.Duration("shutdown_grace", opts.ShutdownGrace))
	cancelHandlers()
	select {
	case <-done:
	case <-time.After(abandonAfter):
		r.log.Error("handlers did not return after cancel; returning without them")
	}
	return nil
}

type runner struct {
	cons       jetstream.Consumer
	h          Handler
	opts       ConsumerOptions
	iso        *Isolation
	log        *zap.Logger
	sem        chan struct{} // one token per message held
	wg         sync.WaitGroup
	maxDeliver int
	stop       <-chan struct{} // closed when Run's ctx is done
	hctx       context.Context // the handlers' ctx
	progress   *progressTicker
}

// consumeLoop takes messages into free slots until ctx is done, from a few
// long-lived pull consumptions (jetstream.Consumer.Messages, pullerCount of
// them), each asking the server for one message at a time, and only once
// a slot is free for it and Ready admits it: no message is taken from the
// stream before there is a handler for it, so none spends a delivery
// waiting (while the provider or the database is down, say). The messages go to a fixed pool of
// opts.Concurrency handler goroutines; suspects wait for their turn
// (Isolation). The consumptions' subscriptions live as long as Run, or
// until an isolation drains them: a pull request is one publish on one,
// where a fetch per free slot subscribed and unsubscribed each time.
func (r *runner) consumeLoop(ctx, hctx context.Context) {
	jobs := make(chan job)
	for range r.opts.Concurrency {
		r.wg.Go(func() {
			for j := range jobs {
				r.handle(hctx, j.d)
				r.iso.finished()
				<-r.sem
				if j.done != nil {
					close(j.done)
				}
			}
		})
	}
	defer close(jobs)

	// A few pullers, each with its consumption, so that a slow round trip
	// to the server does not hold the others back; gate makes Ready's
	// AdmitOne hold for all of them.
	gate := make(chan struct{}, 1)
	var pullers sync.WaitGroup
	for range pullerCount(r.opts.Concurrency) {
		pullers.Go(func() { r.pull(ctx, jobs, gate) })
	}
	pullers.Wait()
}

// pullerCount is how many pull consumptions a Run of concurrency slots
// keeps: one per 64 slots, at least 4 (or concurrency) and at most 32.
// Each puller takes one message a round trip to the server, so the
// pullers bound how fast freed slots fill: at 2,048 slots and 800 ms
// calls, 4 of them on a loaded machine kept only about 540 slots busy.
func pullerCount(concurrency int) int {
	return min(concurrency, max(4, min(concurrency/64, 32)))
}

// job is one message for the handler pool.
type job struct {
	d    *Delivery
	done chan struct{} // closed once the message is decided, if set
}

// puller is one pull consumption and what an isolation needs to know of it.
type puller struct {
	it jetstream.MessagesContext
	// outstanding: a pull request of it may be open on the server (Next
	// was called and returned no message).
	outstanding bool
	// ctx is the Run's ctx, cancelled too when the isolation after cut
	// begins.
	ctx    context.Context
	cancel context.CancelFunc
	cut    context.Context
}

// context returns ctx cancelled also settleWindow after the isolation
// after cut begins.
func (p *puller) context(ctx, cut context.Context) context.Context {
	if p.cut != cut {
		if p.cancel != nil {
			p.cancel()
		}
		pctx, cancel := context.WithCancel(ctx)
		context.AfterFunc(cut, func() { time.AfterFunc(settleWindow, cancel) })
		p.ctx, p.cancel, p.cut = pctx, cancel, cut
	}
	return p.ctx
}

// pull takes messages into free slots and hands them to the pool, until
// ctx is done.
func (r *runner) pull(ctx context.Context, jobs chan<- job, gate chan struct{}) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	p := &puller{}
	defer func() {
		if p.it != nil {
			p.it.Stop()
		}
		r.iso.answered(p)
		if p.cancel != nil {
			p.cancel()
		}
	}()
	// retry waits before the next try after a fetch failure; false when
	// ctx ends first. An isolation beginning cuts the wait short.
	retry := func(pctx context.Context, err error) bool {
		wait := bo.NextBackOff()
		r.log.Warn("fetch failed; retrying", zap.Error(err), zap.Duration("retry_in", wait))
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-pctx.Done():
		}
		return ctx.Err() == nil
	}
	wait := max(r.opts.FetchWait, time.Second) // the least pull expiry nats.go takes
	for {
		// A free slot first, then Ready: what Ready says holds for the
		// message taken next.
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		msg, admit, ok := r.next(ctx, p, wait, retry, gate)
		if !ok {
			<-r.sem
			return
		}
		bo.Reset()
		if admit != AdmitOne {
			r.admit(jobs, msg, nil)
			continue
		}
		// The probe of a half-open breaker: next returned holding gate,
		// so nothing else is taken until it is decided.
		probed := make(chan struct{})
		r.admit(jobs, msg, probed)
		select {
		case <-probed:
		case <-ctx.Done():
		}
		<-gate
		if ctx.Err() != nil {
			return
		}
	}
}

// admit hands a message taken into a slot to the pool, or, a suspect, to
// the isolation to wait for its turn.
func (r *runner) admit(jobs chan<- job, msg jetstream.Msg, done chan struct{}) {
	d := r.delivery(msg)
	if d.NumDelivered > 1 {
		r.iso.hold(r, d, done)
		return
	}
	jobs <- job{d: d, done: done} // counted as running by arrived
}

// next takes one message for the slot the caller holds, once Ready admits
// it, from the consumption p (made anew when missing). Between its tries
// the slot stays held, so a pull request still open on the server always
// has a slot for its message. While an isolation is on it drains p and
// waits for it to end; a message the drain brings is returned. ok is
// false when ctx ends first.
func (r *runner) next(ctx context.Context, p *puller, wait time.Duration, retry func(context.Context, error) bool, gate chan struct{}) (_ jetstream.Msg, _ Admit, ok bool) {
	for {
		cut, open := r.iso.current()
		pctx := p.context(ctx, cut)
		if open != nil {
			if p.outstanding && pctx.Err() == nil {
				// Isolating: read the request still open, ask for no other.
				msg, err := r.try(ctx, pctx, p, wait)
				if err == nil {
					return msg, AdmitAll, true
				}
				if ctx.Err() != nil {
					return nil, AdmitAll, false
				}
				continue
			}
			if msg := r.drain(p, wait); msg != nil {
				return msg, AdmitAll, true
			}
			select {
			case <-open:
				continue
			case <-ctx.Done():
				return nil, AdmitAll, false
			}
		}
		select {
		case gate <- struct{}{}:
		case <-pctx.Done():
			if ctx.Err() != nil {
				return nil, AdmitAll, false
			}
			continue
		}
		admit := AdmitAll
		if r.opts.Ready != nil {
			var err error
			if admit, err = r.opts.Ready(pctx); err != nil {
				<-gate
				if ctx.Err() != nil {
					return nil, admit, false
				}
				continue
			}
		}
		if admit != AdmitOne {
			<-gate
		}
		msg, err := r.try(ctx, pctx, p, wait)
		if err == nil {
			return msg, admit, true // gate still held for AdmitOne
		}
		if admit == AdmitOne {
			<-gate
		}
		if ctx.Err() != nil {
			return nil, admit, false
		}
		if errors.Is(err, errIdle) || errors.Is(err, errCut) || pctx.Err() != nil {
			continue
		}
		if !retry(pctx, err) {
			return nil, admit, false
		}
	}
}

// drain ends p's consumption once an isolation has begun and its settle
// window is over, if a pull request of it may still be open on the
// server: it unsubscribes, lets what the server had sent arrive, and
// returns that message, if one came (one at most: each request asks for
// one).
func (r *runner) drain(p *puller, wait time.Duration) jetstream.Msg {
	if p.it == nil || !p.outstanding {
		return nil
	}
	it := p.it
	p.it = nil
	it.Drain()
	var got jetstream.Msg
	for {
		msg, err := it.Next(jetstream.NextMaxWait(wait))
		if err != nil {
			break
		}
		if got != nil {
			// Not expected: one request of one message was open.
			r.log.Error("a drained consumption brought a second message; nakking it")
			msg.Nak()
			continue
		}
		got = msg
	}
	it.Stop()
	if got != nil {
		r.iso.arrived(p)
	} else {
		r.iso.answered(p)
	}
	return got
}

// errIdle is try's error when no message came and the server answers.
var errIdle = errors.New("queue: no message within the wait")

// errCut is try's error when an isolation is on: it asks for nothing.
var errCut = errors.New("queue: isolating a suspect")

// try takes one message from the consumption p (made anew when missing).
// It returns errIdle when the stream is idle, after which the caller
// tries again at once; pctx's error when an isolation begins; any other
// error is a fetch failure.
func (r *runner) try(ctx, pctx context.Context, p *puller, wait time.Duration) (jetstream.Msg, error) {
	if pctx.Err() != nil {
		// Shutdown or an isolation began while a slot was taken: no pull
		// request may go out, so nothing is delivered that would not be
		// handled.
		return nil, pctx.Err()
	}
	if p.it == nil {
		m, err := r.cons.Messages(jetstream.PullMaxMessages(1), jetstream.PullExpiry(wait))
		if err != nil {
			return nil, err
		}
		p.it = m
	}
	// Longer than the pull request's expiry, after which the server says
	// so, and than nats.go's wait for its heartbeats (twice the heartbeat,
	// half the expiry): a pull request the server lost (it restarted) is
	// then noticed by nats.go, which asks again, rather than waited on.
	if !r.iso.asking(p) {
		return nil, errCut
	}
	nctx, cancel := context.WithTimeout(pctx, wait*3/2)
	msg, err := p.it.Next(jetstream.NextContext(nctx))
	cancel()
	switch {
	case err == nil:
		r.iso.arrived(p) // its one request is answered, the message counted
		return msg, nil
	case pctx.Err() != nil:
		return nil, pctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		// No message within the wait: the stream is idle, or the server is
		// unreachable (the consumption waits out a disconnection without a
		// word). Asking for the consumer's info tells which.
		ictx, cancel := context.WithTimeout(pctx, wait)
		_, ierr := r.cons.Info(ictx)
		cancel()
		if ierr == nil || pctx.Err() != nil {
			return nil, errIdle
		}
		return nil, fmt.Errorf("no reply to pull request within %s: %w", wait, ierr)
	case errors.Is(err, jetstream.ErrNoHeartbeat):
		// The pull request went unanswered; the consumption asks again.
		return nil, err
	}
	p.it.Stop()
	p.it = nil
	r.iso.answered(p)
	return nil, err
}

// delivery reads msg's metadata, headers and envelope.
func (r *runner) delivery(msg jetstream.Msg) *Delivery {
	d := &Delivery{Subject: msg.Subject(), MaxDeliver: r.maxDeliver, msg: msg}
	// The delivery's logging context is encoded only if a line is written.
	d.fields = make([]zap.Field, 0, 8)
	d.fields = append(d.fields, zap.String("subject", d.Subject))
	if md, err := msg.Metadata(); err == nil {
		d.NumDelivered = md.NumDelivered
		d.StreamSeq = md.Sequence.Stream
		d.fields = append(d.fields, zap.Uint64("stream_seq", d.StreamSeq), zap.Uint64("num_delivered", d.NumDelivered))
	}
	if h := msg.Headers(); h != nil {
		if n, err := strconv.Atoi(h.Get(RequeuesHeader)); err == nil && n > 0 {
			d.Requeues = n
			d.fields = append(d.fields, zap.Int("requeues", n))
		}
		if seq, err := strconv.ParseUint(h.Get(RequeueOfHeader), 10, 64); err == nil {
			d.RequeueOf = seq
		}
	}
	env, err := decodeEnvelope(msg.Data())
	if err != nil {
		d.envErr = err
		return d
	}
	d.Envelope = env
	d.fields = append(d.fields, zap.Int64("message_id", env.MessageID), zap.Int("run_no", env.RunNo),
		zap.String("schema_id", env.SchemaID))
	return d
}

// keepInProgress marks d's message in progress every InProgressEvery
// (calling OnInProgress after each, with onTick) until the returned stop
// is called; stop waits for a signal being sent and for OnInProgress.
func (r *runner) keepInProgress(d *Delivery, log *zap.Logger, onTick bool) (stop func()) {
	return r.progress.add(d, log, onTick)
}

// handle runs the handler on one delivery and applies its decision.
func (r *runner) handle(ctx context.Context, d *Delivery) {
	if d.envErr != nil {
		log := r.log.WithLazy(d.fields...)
		log.Error("invalid run message; terminating it", zap.Error(d.envErr), zap.Int("body_bytes", len(d.msg.Data())))
		r.apply(log, d, Term("invalid envelope: "+d.envErr.Error()))
		return
	}
	log := r.log.WithLazy(d.fields...)
	stop := r.keepInProgress(d, log, true)
	dec := r.call(ctx, log, d)
	if dec.kind == kindRequeue && dec.delay > 0 && r.opts.Requeuer != nil {
		// Kept in progress until the copy goes out; at once on shutdown.
		t := time.NewTimer(dec.delay)
		select {
		case <-t.C:
		case <-r.stop:
		case <-ctx.Done():
		}
		t.Stop()
	}
	stop()
	r.apply(log, d, dec)
}

// call runs the handler, turning a panic into a delayed nak.
func (r *runner) call(ctx context.Context, log *zap.Logger, d *Delivery) (dec Decision) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("handler panicked; nakking the message",
				zap.Any("panic", p), zap.ByteString("stack", debug.Stack()),
				zap.Duration("nak_delay", r.opts.PanicDelay))
			dec = Nak(r.opts.PanicDelay)
		}
	}()
	return r.h(ctx, d)
}

// apply sends the decision to the server. Only an ack while Run stops
// is confirmed: a decision lost on its way (the connection failed)
// leaves the message to be redelivered after the ack wait.
func (r *runner) apply(log *zap.Logger, d *Delivery, dec Decision) {
	msg := d.msg
	var err error
	switch dec.kind {
	case kindRequeue:
		if r.opts.Requeuer == nil {
			log.Warn("requeue without a publisher; nakking the message instead")
			r.apply(log, d, Nak(dec.delay))
			return
		}
		pctx, cancel := context.WithTimeout(context.Background(), requeueTimeout)
		id, _, err := r.opts.Requeuer.Requeue(pctx, d)
		cancel()
		if err != nil {
			log.Error("requeue failed; nakking the message instead", zap.Error(err))
			r.apply(log, d, Nak(dec.delay))
			return
		}
		log.Debug("message requeued", zap.String("copy_msg_id", id))
		r.apply(log, d, Ack())
		return
	case kindAck:
		// Not confirmed (DoubleAck) while Run goes on: the handler decided
		// after its outcome's commit, so an ack the server never gets
		// costs only a redelivery once the ack wait passes, which finds
		// the outcome committed and is acked without a call. Waiting for
		// the confirmation cost the server a reply and the worker a
		// request per message (issue 18). Once Run is stopping it is
		// confirmed, so that Run returns with its acks at the server
		// (the process may exit next).
		select {
		case <-r.stop:
			actx, cancel := context.WithTimeout(context.Background(), ackTimeout)
			err = msg.DoubleAck(actx)
			cancel()
			if err != nil {
				log.Error("ack not confirmed; the message will be redelivered", zap.Error(err))
				return
			}
		default:
			err = msg.Ack()
		}
	case kindTerm:
		if r.opts.TermWithReason {
			err = msg.TermWithReason(dec.reason)
		} else {
			err = msg.Term()
		}
		log.Warn("message terminated", zap.String("reason", dec.reason))
	default:
		if dec.delay > 0 {
			err = msg.NakWithDelay(dec.delay)
		} else {
			err = msg.Nak()
		}
		log.Debug("message nakked", zap.Duration("nak_delay", dec.delay))
	}
	if err != nil {
		log.Error("sending decision failed", zap.Stringer("decision", dec), zap.Error(err))
	}
}
