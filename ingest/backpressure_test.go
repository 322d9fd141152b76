package ingest_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/store/storetest"
)

// TestBackPressure ingests more messages than the stream may hold: ingest
// waits while a consumer drains the stream, and every message arrives.
func TestBackPressure(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := storetest.NewStore(t)
	q := queuetest.NewStream(t)
	q.NATS.MaxMsgs = 3
	if _, err := queue.EnsureStream(ctx, q.JS, q.NATS); err != nil {
		t.Fatal(err)
	}
	var lines strings.Builder
	const n = 12
	for i := range n {
		fmt.Fprintf(&lines, `{"id":"bp-%d","text":"message number %d"}`+"\n", i, i)
	}
	in, err := ingest.New(ingest.Config{Store: st, Publisher: queue.NewPublisher(q.JS, q.NATS), SchemaID: "customer_message", MaxTextBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		sum ingest.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := in.Run(ctx, strings.NewReader(lines.String()))
		done <- result{sum, err}
	}()

	// Ingest must stall at the limit before anything consumes: the stream
	// fills to its limit (however slow the machine) and stays there, and
	// the ingest has not finished.
	for deadline := time.Now().Add(30 * time.Second); q.Messages(t) < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stream holds %d after 30s, want its limit 3", q.Messages(t))
		}
	}
	time.Sleep(300 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("ingest finished with a full stream: %+v %v", r.sum, r.err)
	default:
	}
	if got := q.Messages(t); got != 3 {
		t.Fatalf("stream holds %d, want its limit 3", got)
	}

	cons, err := queue.EnsureConsumer(ctx, q.JS, q.NATS, config.Worker{Concurrency: 4, AckWait: 5 * time.Second, MaxDeliver: 3})
	if err != nil {
		t.Fatal(err)
	}
	var acked atomic.Int64
	cctx, stop := context.WithCancel(ctx)
	go queue.Run(cctx, cons, func(ctx context.Context, d *queue.Delivery) queue.Decision {
		acked.Add(1)
		return queue.Ack()
	}, queue.ConsumerOptions{Concurrency: 4, FetchWait: 200 * time.Millisecond})
	defer stop()

	r := <-done
	if r.err != nil || r.sum.Published != n {
		t.Fatalf("ingest %+v %v", r.sum, r.err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for acked.Load() < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if acked.Load() != n {
		t.Fatalf("consumed %d of %d", acked.Load(), n)
	}
}
