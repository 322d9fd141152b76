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
	}, queue.ConsumerOptions{Concurrency: 2, FetchWait: 200 * time.Millisecond, Ready: func(ctx context.Context) (queue.Admit, error) {
		select {
		case <-open:
			return queue.AdmitAll, nil
		case <-ctx.Done():
			return queue.AdmitAll, ctx.Err()
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

	eventually(t, 10*time.Second, "four probes", func() bool { return rec.len() >= 4 })
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
	eventually(t, 10*time.Second, "several in flight", func() bool { return maxInFlight.Load() > 1 })
}
