package ingest

import (
	"context"
	"time"

	"github.com/extractq/extractq/store"
)

// WaitOptions tunes Wait.
type WaitOptions struct {
	// PollEvery is how often the batch's counts are read. Default 250ms.
	PollEvery time.Duration
	// Timeout is the most Wait waits; 0 means until ctx ends.
	Timeout time.Duration
	// Progress, if set, is called after each read with the batch's
	// messages that have a final outcome and all its messages.
	Progress func(done, total int)
}

// Wait waits until every run sum made or found queued has a final
// worker outcome: the batch sum.BatchID (none when "") has no queued run,
// nor have the earlier batches' runs of sum.Waiting (duplicates whose run
// was still queued). It reports false when o.Timeout passes or ctx ends
// first; a read that fails is tried again at the next poll.
func Wait(ctx context.Context, st *store.Store, sum Summary, o WaitOptions) bool {
	poll := o.PollEvery
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	var deadline time.Time
	if o.Timeout > 0 {
		deadline = time.Now().Add(o.Timeout)
	}
	for {
		var bs store.BatchSummary
		var err error
		if sum.BatchID != "" {
			bs, err = st.BatchSummary(ctx, st.Pool, sum.BatchID)
		}
		if err == nil {
			if o.Progress != nil {
				o.Progress(bs.Messages-bs.Queued, bs.Messages)
			}
			done := bs.Done()
			if done && len(sum.Waiting) > 0 {
				n, err := st.RunCountQueued(ctx, st.Pool, sum.Waiting)
				done = err == nil && n == 0
			}
			if done {
				return true
			}
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(poll):
		}
	}
}
