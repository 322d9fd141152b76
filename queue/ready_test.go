package queue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extractq/extractq/queue"
)

// TestReadyGatesFetching: while Ready blocks (an open circuit breaker), no
// run is fetched; once it returns, the waiting runs are handled.
func TestReadyGatesFetching(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := queue.EnsureConsumer(ctx, b.js, b.cfg, b.worker)
	if err != nil {
		t.Fatal(err)
	}
	pub := queue.NewPublisher(b.js, b.cfg)
	for i := 1; i <= 3; i++ {
		env := queue.Envelope{MessageID: int64(i), RunNo: 1, SchemaID: "s"}
		if _, err := pub.Publish(ctx, env.DedupID(), env); err != nil {
			t.Fatal(err)
		}
	}
	open := make(chan struct{})
	var handled atomic.Int64
	go queue.Run(ctx, cons, func(ctx context.Context, d *queue.Delivery) queue.Decision {
		handled.Add(1)
		return queue.Ack()
	}, queue.ConsumerOptions{Concurrency: 2, FetchWait: 200 * time.Millisecond, Ready: func(ctx context.Context) error {
		select {
		case <-open:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	time.Sleep(500 * time.Millisecond)
	if n := handled.Load(); n != 0 {
		t.Fatalf("%d runs handled while not ready", n)
	}
	close(open)
	deadline := time.Now().Add(10 * time.Second)
	for handled.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := handled.Load(); n != 3 {
		t.Fatalf("%d of 3 runs handled once ready", n)
	}
}
