package queue_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/extractq/extractq/queue"
)

func TestConnect(t *testing.T) {
	t.Parallel()

	t.Run("LogsConnection", func(t *testing.T) {
		t.Parallel()
		core, logs := observer.New(zap.InfoLevel)
		nc, js, err := queue.Connect(t.Context(), natsURL(), "queue-test", zap.New(core))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if js == nil || !nc.IsConnected() {
			t.Fatal("not connected")
		}
		if logs.FilterMessage("nats connected").Len() != 1 {
			t.Errorf("logs = %v, want one \"nats connected\"", logs.All())
		}
	})

	t.Run("GivesUpWhenContextEnds", func(t *testing.T) {
		t.Parallel()
		// Port 1 on loopback: nothing listens there.
		ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, _, err := queue.Connect(ctx, "nats://127.0.0.1:1", "queue-test", zap.NewNop())
		if err == nil {
			t.Fatal("connected to a closed port")
		}
		// Without the context, Connect would retry for ConnectTimeout (30s).
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("Connect took %s; its context ended after 700ms", d)
		}
	})
}

func TestEnsure(t *testing.T) {
	t.Parallel()

	t.Run("StreamAndConsumerAreIdempotent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s, err := queue.EnsureStream(t.Context(), b.js, b.cfg)
		if err != nil {
			t.Fatalf("second EnsureStream: %v", err)
		}
		info := s.CachedInfo()
		if info.Config.Retention != jetstream.WorkQueuePolicy || info.Config.Storage != jetstream.FileStorage {
			t.Errorf("retention %v storage %v", info.Config.Retention, info.Config.Storage)
		}
		if info.Config.Duplicates != b.cfg.DuplicateWindow {
			t.Errorf("duplicates = %s, want %s", info.Config.Duplicates, b.cfg.DuplicateWindow)
		}
		if !slices.Equal(info.Config.Subjects, []string{b.cfg.RunsWildcard()}) {
			t.Errorf("subjects = %v", info.Config.Subjects)
		}

		b.consumer(t)
		c := b.consumer(t)
		cc := c.CachedInfo().Config
		if cc.Durable != b.cfg.Consumer || cc.AckPolicy != jetstream.AckExplicitPolicy ||
			cc.FilterSubject != b.cfg.RunsWildcard() || cc.MaxDeliver != b.worker.MaxDeliver {
			t.Errorf("consumer config = %+v", cc)
		}
		if cc.AckWait != b.worker.AckWait {
			t.Errorf("ack wait = %s, want %s", cc.AckWait, b.worker.AckWait)
		}
		want := []time.Duration{time.Second, 2 * time.Second}
		if !slices.Equal(cc.BackOff, want) {
			t.Errorf("backoff = %v, want %v", cc.BackOff, want)
		}
	})

	t.Run("ConsumerNeedsStream", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.cfg
		cfg.Stream += "_MISSING"
		if _, err := queue.EnsureConsumer(t.Context(), b.js, cfg, b.worker); err == nil {
			t.Fatal("consumer made on a missing stream")
		}
	})
}

func TestBackOffSchedule(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ackWait    time.Duration
		maxDeliver int
		want       []time.Duration
	}{
		{time.Minute, 5, []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute}},
		{time.Minute, 7, []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 15 * time.Minute, 15 * time.Minute}},
		{time.Second, 2, []time.Duration{time.Second}},
		{time.Hour, 3, []time.Duration{time.Hour, time.Hour}},
	} {
		got := queue.BackOffSchedule(tt.ackWait, tt.maxDeliver)
		if !slices.Equal(got, tt.want) {
			t.Errorf("BackOffSchedule(%s, %d) = %v, want %v", tt.ackWait, tt.maxDeliver, got, tt.want)
		}
		if len(got) >= tt.maxDeliver {
			t.Errorf("BackOffSchedule(%s, %d): %d steps, server wants fewer than MaxDeliver", tt.ackWait, tt.maxDeliver, len(got))
		}
	}
}

func TestPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.consumer(t)
	b.publishN(t, 3)
	n, err := queue.Pending(t.Context(), c)
	if err != nil || n != 3 {
		t.Fatalf("Pending = %d, %v; want 3", n, err)
	}
	// A delivered, unacked message still counts.
	msgs, err := c.Fetch(1, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range msgs.Messages() {
	}
	n, err = queue.Pending(t.Context(), c)
	if err != nil || n != 3 {
		t.Fatalf("Pending after fetch = %d, %v; want 3", n, err)
	}
}
