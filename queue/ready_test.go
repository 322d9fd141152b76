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
	}, queue.ConsumerOptions{Concurrency: 2, FetchWait: fetchWait, Ready: func(ctx context.Context) (queue.Admit, error) {
		waiting.Send(struct{}{})
		select {
		case <-open:
			return queue.AdmitAll, nil
		case <-ctx.Done():
			return queue.AdmitAll, ctx.Err()
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

// TestAdmitOneProbes: while Ready admits one message (a half-open breaker's
// probe), only one is fetched, and the next fetch waits until its handler
// has returned and its decision is applied; then Ready is asked again.
func TestAdmitOneProbes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.consumer(t)
	b.publishN(t, 6)
	var probing atomic.Bool
	probing.Store(true)
	var inFlight, maxInFlight, readyCalls atomic.Int64
	var rec deliveries
	runInBackground(t, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); cur > m && !maxInFlight.CompareAndSwap(m, cur); m = maxInFlight.Load() {
		}
		time.Sleep(100 * time.Millisecond)
		rec.add(d)
		return queue.Requeue(100 * time.Millisecond) // applied before the next probe
	}, queue.ConsumerOptions{Concurrency: 4, FetchWait: 200 * time.Millisecond, Publisher: queue.NewPublisher(b.js, b.cfg),
		Ready: func(ctx context.Context) (queue.Admit, error) {
			readyCalls.Add(1)
			if probing.Load() {
				return queue.AdmitOne, nil
			}
			return queue.AdmitAll, nil
		}})

	testsignal.Eventually(t, 10*time.Second, "four probes", func() bool { return rec.len() >= 4 })
	probing.Store(false)
	if m := maxInFlight.Load(); m != 1 {
		t.Fatalf("%d messages in flight at once while probing, want 1", m)
	}
	_, at := rec.all()
	for i := 1; i < 4; i++ {
		if gap := at[i].Sub(at[i-1]); gap < 200*time.Millisecond {
			t.Errorf("probe %d handled %s after the last: it did not wait for the last one's requeue", i, gap)
		}
	}
	// Once all are admitted, several run at once.
	testsignal.Eventually(t, 10*time.Second, "several in flight", func() bool { return maxInFlight.Load() > 1 })
}
