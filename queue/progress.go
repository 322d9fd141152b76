package queue

import (
	"container/list"
	"sync"
	"time"

	"go.uber.org/zap"
)

// progressTicker marks the messages of a Run's running handlers (and its
// held suspects) in progress, every interval after each was taken, from one
// goroutine for all of them. A goroutine and a ticker per message held
// 1,669 goroutines' stacks at 2,048 in flight (about 14 KB each in the
// bench's goroutine dump, docs/benchmarks.md "Memory at 2,048 in flight").
//
// Every entry's next signal is due one interval after its last (or after
// it was added), so entries kept in the order they were added or last
// signalled are in the order they fall due: a list serves where a heap
// would otherwise be needed, and adding or removing one is O(1). The
// goroutine runs while the list holds an entry and ends when it is empty.
type progressTicker struct {
	every time.Duration
	// on, if set, is called after each signal sent without error to an
	// entry added with onTick, on a goroutine of its own (it may wait on
	// the database), at most one at a time per entry.
	on  func(d *Delivery)
	log *zap.Logger

	mu      sync.Mutex
	due     *list.List // of *progressEntry, earliest due first
	running bool       // the goroutine is on
}

// progressEntry is one message kept in progress.
type progressEntry struct {
	d      *Delivery
	log    *zap.Logger
	onTick bool
	at     time.Time     // when the next signal is due; under the ticker's mu
	elem   *list.Element // nil once removed; under the ticker's mu

	mu    sync.Mutex // held while a signal is sent
	done  bool       // stopped: no more signals; under mu
	calls sync.WaitGroup
	busy  bool // an on call is running; under mu
}

func newProgressTicker(every time.Duration, on func(*Delivery), log *zap.Logger) *progressTicker {
	return &progressTicker{every: every, on: on, log: log, due: list.New()}
}

// add keeps d in progress until the returned stop is called. stop waits
// for a signal being sent and for the entry's on call, so that none comes
// after it returns; it may be called more than once.
func (t *progressTicker) add(d *Delivery, log *zap.Logger, onTick bool) (stop func()) {
	e := &progressEntry{d: d, log: log, onTick: onTick}
	t.mu.Lock()
	e.at = time.Now().Add(t.every)
	e.elem = t.due.PushBack(e)
	if !t.running {
		t.running = true
		go t.loop()
	}
	t.mu.Unlock()
	return func() { t.remove(e) }
}

func (t *progressTicker) remove(e *progressEntry) {
	t.mu.Lock()
	if e.elem != nil {
		t.due.Remove(e.elem)
		e.elem = nil
	}
	t.mu.Unlock()
	e.mu.Lock()
	e.done = true
	e.mu.Unlock()
	e.calls.Wait()
}

// loop sends each entry's signal when it falls due, until no entry is
// left.
func (t *progressTicker) loop() {
	timer := time.NewTimer(t.every)
	defer timer.Stop()
	for {
		t.mu.Lock()
		front := t.due.Front()
		if front == nil {
			t.running = false
			t.mu.Unlock()
			return
		}
		e := front.Value.(*progressEntry)
		now := time.Now()
		if wait := e.at.Sub(now); wait > 0 {
			t.mu.Unlock()
			// An entry added meanwhile falls due after this one; one
			// removed meanwhile only wakes the loop early.
			timer.Reset(wait)
			<-timer.C
			continue
		}
		e.at = now.Add(t.every)
		t.due.MoveToBack(front)
		t.mu.Unlock()
		t.signal(e)
	}
}

// signal marks e's message in progress unless e was stopped, then starts
// the on call.
func (t *progressTicker) signal(e *progressEntry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return
	}
	if err := e.d.msg.InProgress(); err != nil {
		e.log.Warn("in-progress signal failed", zap.Error(err))
		return
	}
	if !e.onTick || t.on == nil || e.busy {
		return
	}
	e.busy = true
	e.calls.Go(func() {
		t.on(e.d)
		e.mu.Lock()
		e.busy = false
		e.mu.Unlock()
	})
}
