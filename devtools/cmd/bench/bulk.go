package main

import (
	"context"
	"fmt"
	"strconv"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/relay"
	"github.com/extractq/extractq/store"
)

// bulkChunk is how many messages one bulk statement and one asynchronous
// publish take.
const bulkChunk = 10000

// bulkLoad loads n messages as load does (the bench's messages, cycled,
// ids made unique the same way) but by the bulk path: store.MessageBulkLoad
// records a chunk of messages and their runs in one statement, and the
// relay publishes the chunk asynchronously and marks it published
// (relay.Relay.PublishMany), as it does a re-run's; the next chunk is
// recorded while one is published. Ingest's line-by-line checks and round
// trips would take many minutes for scenario D's 1,000,000 messages; the
// runs on the stream and in Postgres are the same. With dropSearchIndex
// it drops the schema's triage search index first. It returns the batch
// id.
func (s *stack) bulkLoad(ctx context.Context, n int, dropSearchIndex bool) (string, error) {
	batch := "bench-bulk-" + s.name
	if err := s.st.BatchInsert(ctx, s.st.Pool, store.BatchInsertParams{ID: batch, SchemaID: "customer_message", SourceName: "bench-" + s.name}); err != nil {
		return "", err
	}
	rl, err := relay.New(relay.Config{Store: s.st, Publisher: queue.NewPublisher(s.js, s.nats), Logger: zap.NewNop()})
	if err != nil {
		return "", err
	}
	// The triage search index (migration 000019: a GIN index of every
	// text's words) is most of a message insert's cost: a million texts
	// took minutes to index on the loaded 2-core machine. The worker never
	// reads it, so the scenario's private schema does without it.
	if dropSearchIndex {
		if _, err := s.st.Pool.Exec(ctx, "DROP INDEX messages_body_search_idx"); err != nil {
			return "", fmt.Errorf("scenario %s: dropping the search index: %w", s.name, err)
		}
	}
	hashes := make([][]byte, len(s.env.messages))
	for i, m := range s.env.messages {
		hashes[i] = ingest.ContentHash(m.Text)
	}
	g, gctx := errgroup.WithContext(ctx)
	recorded := make(chan []store.Run, 1)
	g.Go(func() error {
		defer close(recorded)
		for start := 0; start < n; start += bulkChunk {
			msgs := make([]store.BulkMessage, 0, bulkChunk)
			for i := start; i < min(n, start+bulkChunk); i++ {
				k := i % len(s.env.messages)
				m := s.env.messages[k]
				msgs = append(msgs, store.BulkMessage{ExternalID: m.ID + "~" + strconv.Itoa(i/len(s.env.messages)), Body: m.Text, ContentHash: hashes[k]})
			}
			runs, err := s.st.MessageBulkLoad(gctx, s.st.Pool, store.MessageBulkLoadParams{BatchID: batch, SchemaID: "customer_message", Messages: msgs})
			if err != nil {
				return fmt.Errorf("scenario %s: bulk load at message %d: %w", s.name, start, err)
			}
			if len(runs) != len(msgs) {
				return fmt.Errorf("scenario %s: bulk load at message %d: %d runs recorded of %d messages", s.name, start, len(runs), len(msgs))
			}
			select {
			case recorded <- runs:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	published := 0
	g.Go(func() error {
		for runs := range recorded {
			published += rl.PublishMany(gctx, runs)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return "", err
	}
	if published != n {
		return "", fmt.Errorf("scenario %s: published %d of %d", s.name, published, n)
	}
	return batch, nil
}
