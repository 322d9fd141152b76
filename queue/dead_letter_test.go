package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/queue"
)

// TestDeadLetter: a run whose handler panics on every delivery reaches the
// delivery limit; the advisory reaches the dead-letter handler with the
// run's envelope, and the run message leaves the stream.
func TestDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.worker.MaxDeliver = 2
	b.worker.AckWait = time.Second
	dead, err := queue.EnsureDeadLetter(ctx, b.js, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.js.DeleteStream(context.Background(), queue.DeadLetterStreamName(b.cfg)) })
	cons, err := queue.EnsureConsumer(ctx, b.js, b.cfg, b.worker)
	if err != nil {
		t.Fatal(err)
	}
	env := queue.Envelope{MessageID: 42, RunNo: 3, BatchID: "b", SchemaID: "s"}
	if _, err := queue.NewPublisher(b.js, b.cfg).Publish(ctx, env.DedupID(), env); err != nil {
		t.Fatal(err)
	}
	got := make(chan queue.Envelope, 1)
	go queue.RunDeadLetter(ctx, b.js, b.cfg, dead, func(ctx context.Context, e queue.Envelope, deliveries uint64) error {
		if deliveries != 2 {
			t.Errorf("deliveries %d, want 2", deliveries)
		}
		got <- e
		return nil
	}, nil)
	go queue.Run(ctx, cons, func(ctx context.Context, d *queue.Delivery) queue.Decision {
		panic("handler crashes on this run")
	}, queue.ConsumerOptions{Concurrency: 1, PanicDelay: 10 * time.Millisecond, FetchWait: 200 * time.Millisecond})

	select {
	case e := <-got:
		if e != env {
			t.Fatalf("envelope %+v, want %+v", e, env)
		}
	case <-ctx.Done():
		t.Fatal("no max-deliveries advisory reached the handler")
	}
	testsignal.Eventually(t, 5*time.Second, "the run message to leave the stream", func() bool { return b.streamMsgs(t) == 0 })
}
