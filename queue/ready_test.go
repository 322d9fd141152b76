package queue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/extractq/extractq/internal/testsignal"
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
	waiting := testsignal.New[struct{}](1)
	var handled atomic.Int64
	const fetchWait = 200 * time.Millisecond
	go queue.Run(ctx, cons, func(ctx context.Context, d *queue.Delivery) queue.Decision {
		handled.Add(1)
		return queue.Ack()
	}, queue.ConsumerOptions{Concurrency: 2, FetchWait: fetchWait, Ready: func(ctx context.Context) error {
		waiting.Send(struct{}{})
		select {
		case <-open:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	waiting.Wait(t, 10*time.Second, "Run to ask Ready")
	// Nothing to wait for but the absence of a fetch: a fetch made anyway
	// would deliver within one fetch wait.
	time.Sleep(fetchWait)
	if n := handled.Load(); n != 0 {
		t.Fatalf("%d runs handled while not ready", n)
	}
	if info, err := cons.Info(ctx); err != nil || info.NumAckPending != 0 || info.NumWaiting != 0 {
		t.Fatalf("consumer while not ready: %+v, %v; want no pull request and nothing delivered", info, err)
	}
	close(open)
	testsignal.Eventually(t, 10*time.Second, "3 runs handled once ready", func() bool { return handled.Load() == 3 })
}
