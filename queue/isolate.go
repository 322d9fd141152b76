package queue

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Isolation sets suspects apart: a delivery of a message whose earlier
// delivery ended without a decision (NumDelivered > 1: its worker died or
// stalled on it, its handler panicked, or an ack was lost) may be a poison
// message, one that kills or stalls its worker each time, and a worker
// that dies takes every run it has in flight with it. So a suspect is run
// alone: its worker takes no new message, waits for the deliveries it is
// handling to be decided, runs the suspect with nothing else in flight,
// and then resumes. Failures that are not the message's (the provider,
// the database, a shutdown) requeue it as a fresh copy whose deliveries
// count from 1 (Requeue), so they make no suspect.
//
// Suspects are held, kept in progress, until their turn; so are the
// messages of the pull requests already on the server when isolation
// begins: each puller sends no new request, reads its open one for
// settleWindow, then drains its consumption (a drained subscription gets
// nothing the server had not sent when it unsubscribed), and a message
// that came that way is handled beside the runs in flight when it is a
// first delivery, held when it is a suspect. Only once every consumption
// is drained and nothing is in flight does a suspect run, so a suspect
// that kills its worker takes only the held suspects with it. The next
// suspect to run is the held one with the fewest deliveries, ties broken
// by stream sequence, lowest first when their delivery number is even,
// highest first when it is odd (see pickSuspect).
//
// Why that bounds what one poison message P costs another message I whose
// handler returns (within SuspectWait): I spends a delivery only when it
// is on the worker P kills or stalls. At P's first delivery (no suspect)
// I may be in flight beside it: one delivery. At P's later ones P runs
// alone, so I is there only as a held suspect that was set against P and
// lost: fewer deliveries than P, or as many with the tie-break for P. I's
// count is 1 plus the deaths of P it was at, never more than P's, so it
// loses only a tie: at P's delivery k, having been at all k-1 deaths
// before; at P's delivery k+1 they would tie again with the tie-break
// turned round, and I runs first. So I is at two of P's deaths at most,
// spends at most two deliveries to it and is run by its third: within
// any max_deliver of 3 or more, I never reaches the delivery limit
// because of P. Several poison messages at once can cost more.
//
// One Isolation may be shared by the Runs of one process
// (ConsumerOptions.Isolation), whose ctx must then be the same: a suspect
// then runs with nothing in flight on any of them.
type Isolation struct {
	mu      sync.Mutex
	changed chan struct{} // closed and made anew at every change below
	// running counts deliveries handed to handlers and not yet decided.
	running int
	// outstanding counts pullers whose consumption may have a pull
	// request open on the server.
	outstanding int
	held        []*heldRun
	active      bool
	// cut is cancelled when isolation begins; a new one is made when it
	// ends. open is closed while no isolation is on.
	cut       context.Context
	cancelCut context.CancelFunc
	open      chan struct{}
	stop      <-chan struct{} // the first registered Run's ctx.Done()
}

// NewIsolation returns an Isolation for Runs to share
// (ConsumerOptions.Isolation).
func NewIsolation() *Isolation {
	iso := &Isolation{changed: make(chan struct{}), open: make(chan struct{})}
	close(iso.open)
	iso.cut, iso.cancelCut = context.WithCancel(context.Background())
	return iso
}

// heldRun is a suspect waiting for its turn, kept in progress.
type heldRun struct {
	r        *runner
	d        *Delivery
	done     chan struct{} // closed once decided, if set (an AdmitOne probe)
	stopTick func()
}

func (iso *Isolation) register(stop <-chan struct{}) {
	iso.mu.Lock()
	if iso.stop == nil {
		iso.stop = stop
	}
	iso.mu.Unlock()
}

// changedLocked wakes whoever waits for a change; iso.mu is held.
func (iso *Isolation) changedLocked() {
	close(iso.changed)
	iso.changed = make(chan struct{})
}

// current returns the context cancelled when the next isolation begins,
// and nil, or, while one is on, the channel closed when it ends.
func (iso *Isolation) current() (context.Context, <-chan struct{}) {
	iso.mu.Lock()
	defer iso.mu.Unlock()
	if iso.active {
		return iso.cut, iso.open
	}
	return iso.cut, nil
}

// arrived says that puller p's pull request brought a message, and
// counts the message as running until admit hands it on (a first
// delivery stays counted until finished; a suspect's count goes to hold).
// Both in one step: were the request answered first and the message
// counted after, a suspect could be picked in between (nothing in flight,
// no request open) and run beside a first delivery.
func (iso *Isolation) arrived(p *puller) {
	iso.mu.Lock()
	defer iso.mu.Unlock()
	if p.outstanding {
		p.outstanding = false
		iso.outstanding--
	}
	iso.running++
	if iso.active {
		iso.changedLocked()
	}
}

// finished counts a delivery's decision.
func (iso *Isolation) finished() {
	iso.mu.Lock()
	iso.running--
	if iso.active { // else nobody waits for it
		iso.changedLocked()
	}
	iso.mu.Unlock()
}

// asking reports whether puller p may call Next now: no isolation is on,
// or one is and p has a pull request open, which it may read (but no new
// one is sent) until its settle window ends (see settleWindow). Then p
// counts as having a pull request open (outstanding) until answered (p.outstanding), in
// the same step, so no suspect is picked while a message may still come
// (nextAlone).
func (iso *Isolation) asking(p *puller) bool {
	iso.mu.Lock()
	defer iso.mu.Unlock()
	if iso.active {
		return p.outstanding
	}
	if !p.outstanding {
		p.outstanding = true
		iso.outstanding++
	}
	return true
}

// settleWindow is how long, once an isolation begins, a puller with a
// pull request open still reads it before it drains its consumption. The
// copies of the runs a dead worker held come back together, the server
// sending them one after the other to the open requests: unsubscribing at
// once would race those deliveries (a message the server counts as
// delivered the moment the subscription goes is dropped, and spends a
// delivery). A request open as the window ends is renewed only if it
// expired with nothing in it, so no delivery to it is likely then.
const settleWindow = 250 * time.Millisecond

// answered says that puller p has no pull request open on the server: its
// one request brought a message, or its consumption is stopped or
// drained.
func (iso *Isolation) answered(p *puller) {
	if !p.outstanding {
		return
	}
	p.outstanding = false
	iso.mu.Lock()
	iso.outstanding--
	if iso.active {
		iso.changedLocked()
	}
	iso.mu.Unlock()
}

// hold keeps the suspect d (counted by arrived) in progress until its
// turn, beginning an isolation if none is on. The caller's slot goes with
// it.
func (iso *Isolation) hold(r *runner, d *Delivery, done chan struct{}) {
	r.wg.Add(1)
	h := &heldRun{r: r, d: d, done: done, stopTick: r.keepInProgress(d, r.log.WithLazy(d.fields...), false)}
	iso.mu.Lock()
	iso.running-- // counted by arrived; held now, not running
	iso.held = append(iso.held, h)
	if !iso.active {
		iso.active = true
		iso.cancelCut()
		iso.open = make(chan struct{})
		go iso.isolate(r.opts.SuspectWait, r.log)
	}
	iso.changedLocked()
	iso.mu.Unlock()
}

// isolate runs the held suspects one at a time, each with nothing else in
// flight, until none is held; then it ends the isolation. When the Runs
// stop first, the suspects still held are requeued, as runs a shutdown
// cuts short are (they were not tried).
func (iso *Isolation) isolate(wait time.Duration, log *zap.Logger) {
	for {
		h, waited, ok := iso.nextAlone(wait)
		if !ok {
			return
		}
		r, d := h.r, h.d
		h.stopTick()
		r.log.Info("redelivered run set apart: running it alone",
			append(slices.Clip(d.fields), zap.Duration("waited", waited), zap.Int("still_held", iso.heldCount()))...)
		if r.opts.OnSuspect != nil {
			r.opts.OnSuspect(d)
		}
		decided := make(chan struct{})
		go func() {
			r.handle(r.hctx, d)
			iso.finished()
			<-r.sem
			if h.done != nil {
				close(h.done)
			}
			close(decided)
			r.wg.Done()
		}()
		t := time.NewTimer(wait)
		select {
		case <-decided:
		case <-t.C:
			log.Warn("suspect still running after the suspect wait; no longer waiting for it",
				append(slices.Clip(d.fields), zap.Duration("suspect_wait", wait))...)
		case <-iso.stop:
		}
		t.Stop()
	}
}

func (iso *Isolation) heldCount() int {
	iso.mu.Lock()
	defer iso.mu.Unlock()
	return len(iso.held)
}

// nextAlone waits until no pull request is open and nothing is in flight
// (or wait has passed: a handler that does not return holds back no more
// than that), then takes the next suspect, counted as running. With none
// held it ends the isolation and ok is false; so it does once the Runs
// stop, after requeueing every held suspect.
func (iso *Isolation) nextAlone(wait time.Duration) (_ *heldRun, waited time.Duration, ok bool) {
	start := time.Now()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	late := false
	for {
		iso.mu.Lock()
		stopped := false
		select {
		case <-iso.stop:
			stopped = true
		default:
		}
		switch {
		case stopped || len(iso.held) == 0:
			held := iso.held
			iso.held = nil
			iso.endLocked()
			iso.mu.Unlock()
			for _, h := range held {
				h.requeue()
			}
			return nil, 0, false
		case (iso.outstanding == 0 && iso.running == 0) || late:
			h := iso.pickSuspectLocked()
			iso.running++
			iso.mu.Unlock()
			return h, time.Since(start), true
		}
		changed := iso.changed
		iso.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			late = true
		case <-iso.stop:
		}
	}
}

// endLocked ends the isolation: pullers take messages again.
func (iso *Isolation) endLocked() {
	iso.active = false
	iso.cut, iso.cancelCut = context.WithCancel(context.Background())
	close(iso.open)
	iso.changedLocked()
}

// pickSuspectLocked removes and returns the held suspect to run next: the
// one with the fewest deliveries; among as many, the lowest stream
// sequence when that number is even, the highest when it is odd. So two
// suspects that keep coming back together, each delivery spent on both,
// take turns at being first (the bound in Isolation's comment).
func (iso *Isolation) pickSuspectLocked() *heldRun {
	i := 0
	for j, h := range iso.held[1:] {
		if suspectBefore(h.d, iso.held[i].d) {
			i = j + 1
		}
	}
	h := iso.held[i]
	iso.held = slices.Delete(iso.held, i, i+1)
	return h
}

// suspectBefore reports whether a runs before b (pickSuspectLocked).
func suspectBefore(a, b *Delivery) bool {
	if c := cmp.Compare(a.NumDelivered, b.NumDelivered); c != 0 {
		return c < 0
	}
	if a.NumDelivered%2 == 0 {
		return a.StreamSeq < b.StreamSeq
	}
	return a.StreamSeq > b.StreamSeq
}

// requeue puts back a held suspect the Runs stopped before its turn.
func (h *heldRun) requeue() {
	h.stopTick()
	log := h.r.log.WithLazy(h.d.fields...)
	if h.d.envErr != nil {
		h.r.apply(log, h.d, Term("invalid envelope: "+h.d.envErr.Error()))
	} else {
		log.Info("shutting down: a suspect held for its turn is put back untried")
		h.r.apply(log, h.d, Requeue(0))
	}
	<-h.r.sem
	if h.done != nil {
		close(h.done)
	}
	h.r.wg.Done()
}
