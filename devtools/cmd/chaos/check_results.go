package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
)

// resultsVerdict counts the results stream against the outbox: every
// change published once, none lost.
type resultsVerdict struct {
	// Rows counts the outbox's rows, Published those marked published,
	// OnStream the events the stream holds.
	Rows, Published, OnStream int
	// Missing counts rows whose event id is not on the stream; Repeated
	// event ids on the stream more than once; Unknown events of no row.
	Missing, Repeated, Unknown int
	// RunsWithout counts finished runs with no outcome event (result,
	// held, failed); RunsWithSeveral those with more than one.
	RunsWithout, RunsWithSeveral int
	// BatchesDone counts the batches whose every run is finished;
	// BatchesWithout those of them with no batch.done event.
	BatchesDone, BatchesWithout int
}

func (r resultsVerdict) ok() bool {
	return r.Missing == 0 && r.Repeated == 0 && r.Unknown == 0 && r.RunsWithout == 0 && r.RunsWithSeveral == 0 &&
		r.BatchesWithout == 0 && r.Published == r.Rows
}

func (r resultsVerdict) line() string {
	return fmt.Sprintf("results stream: events=%d outbox_rows=%d published=%d missing=%d repeated=%d unknown=%d runs_without_event=%d runs_with_several=%d batches_done=%d without_batch_done=%d",
		r.OnStream, r.Rows, r.Published, r.Missing, r.Repeated, r.Unknown, r.RunsWithout, r.RunsWithSeveral, r.BatchesDone, r.BatchesWithout)
}

const (
	resultsRunsSQL = `
SELECT count(*) FILTER (WHERE n = 0), count(*) FILTER (WHERE n > 1)
FROM (SELECT (SELECT count(*) FROM results_outbox o
              WHERE o.message_id = r.message_id AND o.run_no = r.run_no AND o.type IN ('result', 'held', 'failed')) AS n
      FROM runs r WHERE r.status <> 'queued') x`
	resultsBatchesSQL = `
SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (
           SELECT 1 FROM results_outbox o WHERE o.batch_id = b.id AND o.type = 'batch.done'))
FROM batches b
WHERE EXISTS (SELECT 1 FROM runs r WHERE r.batch_id = b.id)
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.batch_id = b.id AND r.status = 'queued')`
)

// waitResults waits, up to limit, until the outbox has no row left to
// publish and the results stream holds as many events as the outbox has
// rows (a stream lost with the store is made again and filled by the
// relay's check, which runs every relay.reconcile_every).
func (h *harness) waitResults(ctx context.Context, limit time.Duration) {
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last string
	err := h.withCluster(wctx, func(js jetstream.JetStream) error {
		for {
			var rows, unpublished int
			err := h.pool.QueryRow(wctx, `SELECT count(*), count(*) FILTER (WHERE published_at IS NULL) FROM results_outbox`).Scan(&rows, &unpublished)
			if err == nil {
				var s jetstream.Stream
				if s, err = js.Stream(wctx, h.cfg.Results.StreamName(h.cfg.NATS)); err == nil {
					var info *jetstream.StreamInfo
					if info, err = s.Info(wctx); err == nil {
						last = fmt.Sprintf("%d outbox rows, %d unpublished, %d events on the stream", rows, unpublished, info.State.Msgs)
						if unpublished == 0 && info.State.Msgs == uint64(rows) {
							h.logf("results stream caught up: %s", last)
							return nil
						}
					}
				}
			}
			if err != nil {
				last = err.Error()
			}
			select {
			case <-wctx.Done():
				return wctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	if err != nil {
		h.logf("results stream not caught up after %s: %s", limit, last)
	}
}

// checkResults reads every event of the results stream and counts it
// against the outbox.
func (h *harness) checkResults(ctx context.Context, pool *pgxpool.Pool) (resultsVerdict, error) {
	var r resultsVerdict
	rows, err := pool.Query(ctx, `SELECT event_id, published_at IS NOT NULL FROM results_outbox`)
	if err != nil {
		return r, err
	}
	ids := map[string]int{}
	var id string
	var published bool
	_, err = pgx.ForEachRow(rows, []any{&id, &published}, func() error {
		r.Rows++
		if published {
			r.Published++
		}
		ids[id] = 0
		return nil
	})
	if err != nil {
		return r, err
	}
	if err := pool.QueryRow(ctx, resultsRunsSQL).Scan(&r.RunsWithout, &r.RunsWithSeveral); err != nil {
		return r, err
	}
	if err := pool.QueryRow(ctx, resultsBatchesSQL).Scan(&r.BatchesDone, &r.BatchesWithout); err != nil {
		return r, err
	}
	err = h.withCluster(ctx, func(js jetstream.JetStream) error {
		s, err := js.Stream(ctx, h.cfg.Results.StreamName(h.cfg.NATS))
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil || info.State.Msgs == 0 {
			return err
		}
		// Read by sequence, each read retried: on a cluster whose leader
		// just changed, a request may find no responder for a moment.
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			var msg *jetstream.RawStreamMsg
			for try := 0; ; try++ {
				if msg, err = s.GetMsg(ctx, seq); err == nil || errors.Is(err, jetstream.ErrMsgNotFound) || try == 20 {
					break
				}
				if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
					return err
				}
			}
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("reading event %d (of sequences %d to %d): %w", seq, info.State.FirstSeq, info.State.LastSeq, err)
			}
			r.OnStream++
			id := msg.Header.Get(jetstream.MsgIDHeader)
			n, ok := ids[id]
			switch {
			case !ok:
				r.Unknown++
			case n == 1:
				r.Repeated++
			}
			ids[id] = n + 1
		}
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("results stream: %w", err)
	}
	for _, n := range ids {
		if n == 0 {
			r.Missing++
		}
	}
	return r, nil
}
