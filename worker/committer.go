package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/extractq/extractq/store"
)

// committer writes the outcomes of several runs in one transaction: each
// handler hands its outcome over and waits for the commit, so every run is
// still acked only after its own outcome is committed.
type committer struct {
	st      *store.Store
	max     int
	wait    time.Duration
	timeout time.Duration
	reqs    chan commitReq
	done    chan struct{}

	mu     sync.RWMutex
	closed bool
}

var errCommitterClosed = errors.New("worker: committer closed")

type commitReq struct {
	params store.RunOutcomeParams
	errc   chan error
}

// committerLoops is how many transactions a committer may have open at
// once.
const committerLoops = 4

func newCommitter(st *store.Store, max int, wait, timeout time.Duration) *committer {
	c := &committer{st: st, max: max, wait: wait, timeout: timeout, reqs: make(chan commitReq), done: make(chan struct{})}
	var wg sync.WaitGroup
	for range committerLoops {
		wg.Go(c.loop)
	}
	go func() { wg.Wait(); close(c.done) }()
	return c
}

// commit writes p with whatever other outcomes arrive within the batch
// wait, and returns p's own result.
func (c *committer) commit(p store.RunOutcomeParams) error {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return errCommitterClosed
	}
	errc := make(chan error, 1)
	c.reqs <- commitReq{params: p, errc: errc}
	c.mu.RUnlock()
	return <-errc
}

// close ends the loop once pending commits are written. A commit after it
// returns errCommitterClosed, and the caller writes on its own.
func (c *committer) close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.reqs)
	}
	c.mu.Unlock()
	<-c.done
}

func (c *committer) loop() {
	for first := range c.reqs {
		batch := []commitReq{first}
		timer := time.NewTimer(c.wait)
	collect:
		for len(batch) < c.max {
			select {
			case r, ok := <-c.reqs:
				if !ok {
					break collect
				}
				batch = append(batch, r)
			case <-timer.C:
				break collect
			}
		}
		timer.Stop()
		params := make([]store.RunOutcomeParams, len(batch))
		for i, r := range batch {
			params[i] = r.params
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		errs := c.st.RunOutcomeInsertMany(ctx, params)
		cancel()
		for i, r := range batch {
			r.errc <- errs[i]
		}
	}
}
