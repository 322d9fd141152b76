package worker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/extractq/extractq/store"
)

// committer does the database steps of many runs in shared transactions
// (store.RunWriteBatch): the start of a run (its read and lease) and the
// write of its outcome. Each handler hands its step over and waits for
// the transaction, so every run is still acked only after its own outcome
// is committed, and still calls the provider only after its lease is
// taken.
//
// One collector gathers the steps into a batch: the first step of a batch
// waits for others at most the pacer's wait (see pacer.wait), and a batch
// goes as soon as it holds max steps. Up to committerLoops transactions
// are open at once; while all are busy, steps keep joining the next batch,
// so batches grow with the load however short the wait.
//
// Outcomes waiting go into a batch before starts waiting. When Postgres is
// the bound (thousands of runs in flight on a small machine), steps queue
// for the committer; taken in the order they came, the outcomes of the
// first runs waited behind the starts of every slot freed meanwhile, and
// whole seconds went by with only starts committed (scenario B at 2,048
// in flight). An outcome ends a run, acks its message and frees its slot;
// a start only begins a call that can wait, and starts come only as
// outcomes free slots, so they are not starved.
type committer struct {
	st      *store.Store
	max     int
	timeout time.Duration
	outs    chan commitReq // outcome steps
	starts  chan commitReq // start steps
	done    chan struct{}
	pace    *pacer
	// observe, if set, is told each batch's size and how long each of its
	// steps waited before its transaction began.
	observe func(size int, waited []time.Duration)

	mu     sync.RWMutex
	closed bool
}

var errCommitterClosed = errors.New("worker: committer closed")

// commitReq is one step: a start (start set) or an outcome.
type commitReq struct {
	start   *store.RunLeaseParams
	outcome store.RunOutcomeParams
	at      time.Time // when it was handed over
	startc  chan store.RunStart
	errc    chan error
}

// committerLoops is how many transactions a committer may have open at
// once.
const committerLoops = 4

func newCommitter(st *store.Store, max int, maxWait, timeout time.Duration) *committer {
	c := &committer{st: st, max: max, timeout: timeout, outs: make(chan commitReq), starts: make(chan commitReq),
		done: make(chan struct{}), pace: newPacer(maxWait)}
	batches := make(chan []commitReq)
	var wg sync.WaitGroup
	for range committerLoops {
		wg.Go(func() {
			for b := range batches {
				c.write(b)
			}
		})
	}
	go c.collect(batches)
	go func() { wg.Wait(); close(c.done) }()
	return c
}

// commit writes p with whatever other steps arrive within the batch wait,
// and returns p's own result.
func (c *committer) commit(p store.RunOutcomeParams) error {
	errc := make(chan error, 1)
	if !c.send(commitReq{outcome: p, errc: errc}) {
		return errCommitterClosed
	}
	return <-errc
}

// start reads p's run and takes its lease with whatever other steps
// arrive within the batch wait. It returns errCommitterClosed once the
// committer is closed.
func (c *committer) start(p store.RunLeaseParams) (store.RunStart, error) {
	startc := make(chan store.RunStart, 1)
	if !c.send(commitReq{start: &p, startc: startc}) {
		return store.RunStart{}, errCommitterClosed
	}
	return <-startc, nil
}

func (c *committer) send(r commitReq) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return false
	}
	r.at = time.Now()
	if r.start != nil {
		c.starts <- r
	} else {
		c.outs <- r
	}
	return true
}

// close ends the loops once pending steps are written. A step after it
// returns errCommitterClosed, and the caller does it on its own.
func (c *committer) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.outs)
		close(c.starts)
	}
	c.mu.Unlock()
	<-c.done
}

// What next returned.
const (
	gotStep   = iota // a step
	allClosed        // the committer is closed and every step taken
	timedOut         // timeout fired
	batchSent        // the batch went to a writer
)

// next takes the next step for the collector, an outcome before a start
// when both wait, unless timeout fires or, when writers is not nil, a
// writer takes batch first. A closed channel is set to nil.
func (c *committer) next(outs, starts *chan commitReq, timeout <-chan time.Time, writers chan<- []commitReq, batch []commitReq) (commitReq, int) {
	for {
		if *outs == nil && *starts == nil {
			return commitReq{}, allClosed
		}
		if *outs != nil {
			select {
			case r, ok := <-*outs:
				if !ok {
					*outs = nil
					continue
				}
				return r, gotStep
			default:
			}
		}
		select {
		case r, ok := <-*outs:
			if !ok {
				*outs = nil
				continue
			}
			return r, gotStep
		case r, ok := <-*starts:
			if !ok {
				*starts = nil
				continue
			}
			return r, gotStep
		case <-timeout:
			return commitReq{}, timedOut
		case writers <- batch:
			return commitReq{}, batchSent
		}
	}
}

// collect gathers steps into batches and hands each to a free writer.
func (c *committer) collect(writers chan<- []commitReq) {
	defer close(writers)
	outs, starts := c.outs, c.starts
	var batch []commitReq
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if len(batch) == 0 {
			r, got := c.next(&outs, &starts, nil, nil, nil)
			if got == allClosed {
				return
			}
			c.pace.arrive(r.at)
			batch = append(batch, r)
			// A start waits as an outcome does: within 5% of the median
			// call latency, the transaction included, it delays its call
			// by little, and a shorter wait caught two or three starts.
			w := c.pace.wait()
			if w > 0 && c.max > 1 {
				timer.Reset(w)
				// Wait for others until the timer or a full batch.
				for len(batch) < c.max {
					r, got := c.next(&outs, &starts, timer.C, nil, nil)
					if got != gotStep {
						break
					}
					c.pace.arrive(r.at)
					batch = append(batch, r)
				}
				timer.Stop()
			}
		}
		// Ready: hand over to the first free writer, taking more steps
		// while none is free.
		if len(batch) >= c.max {
			writers <- batch
			batch = nil
			continue
		}
		r, got := c.next(&outs, &starts, nil, writers, batch)
		switch got {
		case batchSent:
			batch = nil
		case allClosed:
			writers <- batch
			return
		case gotStep:
			c.pace.arrive(r.at)
			batch = append(batch, r)
		}
	}
}

// write does one batch in one transaction and hands each step its
// result.
func (c *committer) write(batch []commitReq) {
	var starts []store.RunLeaseParams
	var outcomes []store.RunOutcomeParams
	now := time.Now()
	waited := make([]time.Duration, len(batch))
	for i, r := range batch {
		waited[i] = now.Sub(r.at)
		if r.start != nil {
			starts = append(starts, *r.start)
		} else {
			outcomes = append(outcomes, r.outcome)
		}
	}
	if c.observe != nil {
		c.observe(len(batch), waited)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	rs, errs := c.st.RunWriteBatch(ctx, starts, outcomes)
	cancel()
	c.pace.observeWrite(time.Since(now))
	for _, r := range batch {
		if r.start != nil {
			r.startc <- rs[0]
			rs = rs[1:]
		} else {
			r.errc <- errs[0]
			errs = errs[1:]
		}
	}
}

// pacer says how long the first step of a batch waits for others: the
// most added latency a run pays for sharing transactions (once for its
// start, once for its outcome): the time pacerTarget steps take to come
// at their recent rate, but at most the configured maximum and at most a
// twentieth (5%) of the median of the recent provider calls' latencies,
// less the recent transactions' duration (the limit is on the latency
// added, the transaction's own included),
// so a fast model is not slowed; and none at all when steps come so
// rarely that fewer than half a step is expected within it.
type pacer struct {
	maxWait time.Duration

	mu      sync.Mutex
	lat     []time.Duration // ring of recent call latencies
	next    int
	fresh   int // latencies since median was computed
	median  time.Duration
	scratch []time.Duration

	// write is the smoothed duration of a batch's transaction, in
	// nanoseconds.
	write atomic.Int64

	// Owned by the collector.
	winStart time.Time
	winCount int
	rate     float64 // steps per second, smoothed
}

// pacerWindow is how many recent call latencies the median is taken of,
// and how often it is recomputed (every pacerWindow/8 calls).
const pacerWindow = 256

// rateWindow is how long the steps are counted for each new estimate of
// their rate.
const rateWindow = 250 * time.Millisecond

func newPacer(maxWait time.Duration) *pacer {
	return &pacer{maxWait: maxWait, lat: make([]time.Duration, 0, pacerWindow)}
}

// observeLatency records the latency of one provider call.
func (p *pacer) observeLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lat) < pacerWindow {
		p.lat = append(p.lat, d)
	} else {
		p.lat[p.next] = d
		p.next = (p.next + 1) % pacerWindow
	}
	p.fresh++
	if p.median == 0 || p.fresh >= pacerWindow/8 {
		p.scratch = append(p.scratch[:0], p.lat...)
		slices.Sort(p.scratch)
		p.median = p.scratch[len(p.scratch)/2]
		p.fresh = 0
	}
}

// observeWrite records how long one batch's transaction took.
func (p *pacer) observeWrite(d time.Duration) {
	old := p.write.Load()
	if old == 0 {
		p.write.Store(int64(d))
		return
	}
	p.write.Store(old + (int64(d)-old)/8)
}

// arrive counts a step handed over at t; only the collector calls it.
func (p *pacer) arrive(t time.Time) {
	if p.winStart.IsZero() {
		p.winStart = t
	}
	p.winCount++
	if el := t.Sub(p.winStart); el >= rateWindow {
		r := float64(p.winCount) / el.Seconds()
		if p.rate == 0 || el > 4*rateWindow {
			p.rate = r
		} else {
			p.rate = (p.rate + r) / 2
		}
		p.winStart, p.winCount = t, 0
	}
}

// pacerTarget is the batch size the wait aims at: at 16 steps (8 runs'
// starts and outcomes) a run costs its share of two transactions, 1/8.
const pacerTarget = 16

// wait returns how long the first step of a batch waits for others: long
// enough for pacerTarget steps at the recent rate, within the limits.
func (p *pacer) wait() time.Duration {
	w := p.maxWait
	p.mu.Lock()
	if p.median > 0 {
		w = min(w, p.median/20)
	}
	p.mu.Unlock()
	// The limit holds for the latency added, the transaction's included.
	w -= time.Duration(p.write.Load())
	if p.rate*w.Seconds() < 0.5 {
		return 0
	}
	return min(w, time.Duration(float64(pacerTarget-1)/p.rate*float64(time.Second)))
}
