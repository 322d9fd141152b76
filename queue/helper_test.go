package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
)

// testBundle is one test's own stream, subjects and consumer.
type testBundle struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	cfg    config.NATS
	worker config.Worker
	stream jetstream.Stream
}

func natsURL() string { return queuetest.URL() }

// setup makes a private stream (queuetest.NewStream), deleted when the test
// ends. The worker config has a short ack wait so redelivery tests stay
// fast.
func setup(t *testing.T) *testBundle {
	t.Helper()
	q := queuetest.NewStream(t)
	s, err := q.JS.Stream(t.Context(), q.NATS.Stream)
	if err != nil {
		t.Fatalf("stream %s: %v", q.NATS.Stream, err)
	}
	w := config.Worker{Concurrency: 4, AckWait: time.Second, MaxDeliver: 3}
	return &testBundle{nc: q.Conn, js: q.JS, cfg: q.NATS, worker: w, stream: s}
}

// consumer makes the bundle's consumer with its worker config.
func (b *testBundle) consumer(t *testing.T) jetstream.Consumer {
	t.Helper()
	c, err := queue.EnsureConsumer(t.Context(), b.js, b.cfg, b.worker)
	if err != nil {
		t.Fatalf("EnsureConsumer: %v", err)
	}
	return c
}

// publishN publishes runs 1 of messages 1..n and returns their envelopes.
func (b *testBundle) publishN(t *testing.T, n int) []queue.Envelope {
	t.Helper()
	return b.publish(t, n, "customer_message")
}

// publish publishes run 1 of messages 1..n of batch b1, message i of
// schemas[i%len(schemas)], and returns their envelopes.
func (b *testBundle) publish(t *testing.T, n int, schemas ...string) []queue.Envelope {
	t.Helper()
	p := queue.NewPublisher(b.js, b.cfg)
	envs := make([]queue.Envelope, n)
	for i := range envs {
		envs[i] = queue.Envelope{MessageID: int64(i + 1), RunNo: 1, BatchID: "b1", SchemaID: schemas[i%len(schemas)]}
		if dup, err := p.Publish(t.Context(), envs[i].DedupID(), envs[i]); err != nil || dup {
			t.Fatalf("publish %d: dup=%v err=%v", i, dup, err)
		}
	}
	return envs
}

// streamMsgs returns how many messages the stream holds.
func (b *testBundle) streamMsgs(t *testing.T) uint64 {
	t.Helper()
	info, err := b.stream.Info(t.Context())
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return info.State.Msgs
}

// runInBackground starts queue.Run and returns a stop function that
// cancels it and waits for it to return.
func runInBackground(t *testing.T, cons jetstream.Consumer, h queue.Handler, opts queue.ConsumerOptions) (stop func()) {
	t.Helper()
	if opts.Log == nil {
		opts.Log = zaptest.NewLogger(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- queue.Run(ctx, cons, h, opts) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	}
	t.Cleanup(stop)
	return stop
}
