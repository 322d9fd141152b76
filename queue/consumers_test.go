package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/queue"
)

// modeConfig returns the configuration of b's stream in nats.consumers
// mode, with the default schemas (customer_message, return_request).
func (b *testBundle) modeConfig(mode string) *config.Config {
	c := config.Default()
	c.NATS = b.cfg
	c.NATS.Consumers = mode
	c.Worker = b.worker
	c.Worker.AckWait = time.Minute // no redelivery within a fetch
	return c
}

// publishSchemas publishes run 1 of messages 1..n, alternately of
// customer_message and return_request.
func (b *testBundle) publishSchemas(t *testing.T, n int) []queue.Envelope {
	t.Helper()
	return b.publish(t, n, "customer_message", "return_request")
}

// ensureConsumers makes and returns the consumers of mode
// (b.modeConfig), failing t on an error.
func (b *testBundle) ensureConsumers(t *testing.T, mode string) []jetstream.Consumer {
	t.Helper()
	cons, err := queue.EnsureConsumers(t.Context(), b.js, b.modeConfig(mode))
	if err != nil {
		t.Fatalf("EnsureConsumers(%s): %v", mode, err)
	}
	return cons
}

// perSchemaConsumers are the names of b's consumers in per_schema mode,
// sorted.
func (b *testBundle) perSchemaConsumers() []string {
	return []string{b.cfg.Consumer + "-customer_message", b.cfg.Consumer + "-return_request"}
}

// wantConsumers fails t unless the stream's consumers are want (sorted).
func (b *testBundle) wantConsumers(t *testing.T, when string, want ...string) {
	t.Helper()
	if got := b.consumerNames(t); !slices.Equal(got, want) {
		t.Fatalf("consumers %s: %v, want %v", when, got, want)
	}
}

// consumerNames returns the names of the stream's consumers, sorted.
func (b *testBundle) consumerNames(t *testing.T) []string {
	t.Helper()
	var names []string
	lister := b.stream.ConsumerNames(t.Context())
	for n := range lister.Name() {
		names = append(names, n)
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// fetchAll fetches up to n messages from c (without acking them).
func fetchAll(t *testing.T, c jetstream.Consumer, n int) []jetstream.Msg {
	t.Helper()
	batch, err := c.Fetch(n, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	return msgs
}

func TestConsumerModes(t *testing.T) {
	t.Parallel()

	t.Run("PerSchemaDeliversEachSchemaToItsConsumer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cons := b.ensureConsumers(t, config.ConsumersPerSchema)
		if len(cons) != 2 {
			t.Fatalf("%d consumers served, want both schemas'", len(cons))
		}
		b.publishSchemas(t, 6)
		for i, schema := range []string{"customer_message", "return_request"} {
			info := cons[i].CachedInfo()
			if info.Name != b.cfg.Consumer+"-"+schema || info.Config.FilterSubject != b.cfg.RunsSubject(schema) {
				t.Fatalf("consumer %d: %s filtered to %s", i, info.Name, info.Config.FilterSubject)
			}
			msgs := fetchAll(t, cons[i], 10)
			if len(msgs) != 3 {
				t.Fatalf("consumer %s delivered %d runs, want its schema's 3", info.Name, len(msgs))
			}
			for _, m := range msgs {
				if m.Subject() != b.cfg.RunsSubject(schema) {
					t.Errorf("consumer %s delivered %s", info.Name, m.Subject())
				}
				m.Ack()
			}
		}
		// worker.schema: only that schema's consumer is served; both exist.
		cfg := b.modeConfig(config.ConsumersPerSchema)
		cfg.Worker.Schema = "return_request"
		cons, err := queue.EnsureConsumers(t.Context(), b.js, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(cons) != 1 || cons[0].CachedInfo().Name != b.cfg.Consumer+"-return_request" {
			t.Fatalf("worker.schema return_request serves %d consumers", len(cons))
		}
		b.wantConsumers(t, "with worker.schema", b.perSchemaConsumers()...)
	})

	t.Run("SwitchDeletesTheIdleOldConsumer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := b.ensureConsumers(t, config.ConsumersShared)
		envs := b.publishSchemas(t, 6)
		// The shared consumer delivers and acks two runs; four stay undelivered.
		for _, m := range fetchAll(t, old[0], 2) {
			if err := m.DoubleAck(t.Context()); err != nil {
				t.Fatal(err)
			}
		}

		// The shared consumer is idle: the switch goes through.
		cons := b.ensureConsumers(t, config.ConsumersPerSchema)
		b.wantConsumers(t, "after the switch", b.perSchemaConsumers()...)
		// Nothing lost: the four runs the shared consumer never delivered
		// go to the new consumers.
		var got []int64
		for _, c := range cons {
			for _, m := range fetchAll(t, c, 10) {
				var env queue.Envelope
				if err := json.Unmarshal(m.Data(), &env); err != nil {
					t.Fatal(err)
				}
				got = append(got, env.MessageID)
				m.DoubleAck(t.Context())
			}
		}
		slices.Sort(got)
		if wantIDs := []int64{envs[2].MessageID, envs[3].MessageID, envs[4].MessageID, envs[5].MessageID}; !slices.Equal(got, wantIDs) {
			t.Fatalf("after the switch the new consumers delivered messages %v, want %v", got, wantIDs)
		}

		// And back: the per-schema consumers are deleted, the shared made.
		b.ensureConsumers(t, config.ConsumersShared)
		b.wantConsumers(t, "after switching back", b.cfg.Consumer)
	})

	t.Run("SwitchRefusedWhileRunsAreInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := b.ensureConsumers(t, config.ConsumersShared)
		b.publishSchemas(t, 2)
		held := fetchAll(t, old[0], 1) // delivered, not acked: a worker of the old mode is on it

		_, err := queue.EnsureConsumers(t.Context(), b.js, b.modeConfig(config.ConsumersPerSchema))
		var mse *queue.ModeSwitchError
		if !errors.As(err, &mse) || mse.Consumer != b.cfg.Consumer || mse.AckPending != 1 {
			t.Fatalf("error %v, want a ModeSwitchError naming %s with 1 run in flight", err, b.cfg.Consumer)
		}
		for _, want := range []string{"nats.consumers is per_schema", "consumer " + b.cfg.Consumer + " of nats.consumers shared",
			"1 runs in flight", "Stop the workers", "nats consumer rm " + b.cfg.Stream + " " + b.cfg.Consumer} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		b.wantConsumers(t, "after the refused switch", b.cfg.Consumer)
		// Once the run is acked, the switch goes through.
		if err := held[0].DoubleAck(t.Context()); err != nil {
			t.Fatal(err)
		}
		b.ensureConsumers(t, config.ConsumersPerSchema)
	})

	t.Run("SwitchWaitsForTheOldWorkersToStop", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := b.ensureConsumers(t, config.ConsumersShared)
		// An idle worker of the old mode: its pull requests wait.
		stop := runInBackground(t, old[0], func(context.Context, *queue.Delivery) queue.Decision { return queue.Ack() },
			queue.ConsumerOptions{FetchWait: 5 * time.Second})
		// Its first pull request reaches the server some time after it
		// starts: until then the consumer looks idle, and the switch
		// would be right to go ahead.
		testsignal.Eventually(t, 30*time.Second, "the worker's pull request at the server", func() bool {
			info, err := old[0].Info(t.Context())
			return err == nil && info.NumWaiting > 0
		})
		perSchema := b.modeConfig(config.ConsumersPerSchema)
		testsignal.Eventually(t, 30*time.Second, "the switch refused while a worker pulls", func() bool {
			_, err := queue.EnsureConsumers(t.Context(), b.js, perSchema)
			var mse *queue.ModeSwitchError
			if err == nil {
				t.Fatal("the shared consumer was deleted under a worker pulling from it")
			}
			return errors.As(err, &mse) && mse.Waiting > 0 && mse.AckPending == 0
		})
		stop()
		// Its pull requests expire (FetchWait) once it stopped.
		testsignal.Eventually(t, 60*time.Second, "the switch once the worker stopped", func() bool {
			_, err := queue.EnsureConsumers(t.Context(), b.js, perSchema)
			return err == nil
		})
		if got := b.consumerNames(t); slices.Contains(got, b.cfg.Consumer) {
			t.Fatalf("consumers after the switch %v", got)
		}
	})

	t.Run("DeadLetterCapturesEveryConsumer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.modeConfig(config.ConsumersPerSchema)
		if _, err := queue.EnsureDeadLetter(t.Context(), b.js, b.cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := queue.EnsureDeadLetter(t.Context(), b.js, b.cfg, cfg.Consumers()...); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.js.DeleteStream(t.Context(), queue.DeadLetterStreamName(b.cfg)) })
		s, err := b.js.Stream(t.Context(), queue.DeadLetterStreamName(b.cfg))
		if err != nil {
			t.Fatal(err)
		}
		want := []string{queue.MaxDeliveriesSubjectOf(b.cfg, b.cfg.Consumer+"-customer_message"),
			queue.MaxDeliveriesSubjectOf(b.cfg, b.cfg.Consumer+"-return_request")}
		if got := s.CachedInfo().Config.Subjects; !slices.Equal(got, want) {
			t.Fatalf("dead-letter subjects %v, want %v", got, want)
		}
	})
}

// TestDirectGet: the runs stream allows direct get, so operators can read
// it (`nats stream view`, `nats stream get`) beside the workers' consumer,
// from any server that holds a copy; a stream made without it gets it.
func TestDirectGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A stream made by a build before direct get.
	old := queue.StreamConfig(b.cfg)
	old.AllowDirect = false
	if _, err := b.js.UpdateStream(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	s, err := queue.EnsureStream(t.Context(), b.js, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !s.CachedInfo().Config.AllowDirect {
		t.Fatal("EnsureStream left direct get off")
	}
	b.consumer(t) // the workers' consumer, filtered to every run
	envs := b.publishSchemas(t, 2)

	// What `nats stream get STREAM 2` sends: a direct get by sequence.
	reply, err := b.nc.Request("$JS.API.DIRECT.GET."+b.cfg.Stream, []byte(`{"seq":2}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if seq := reply.Header.Get("Nats-Sequence"); seq != "2" {
		t.Fatalf("direct get of sequence 2 answered sequence %q, status %q %q", seq,
			reply.Header.Get("Status"), reply.Header.Get("Description"))
	}
	var env queue.Envelope
	if err := json.Unmarshal(reply.Data, &env); err != nil || env != envs[1] {
		t.Fatalf("direct get body %s (%v), want %+v", reply.Data, err, envs[1])
	}
	// `nats stream get --last-for SUBJECT`: the last message of a subject.
	reply, err = b.nc.Request("$JS.API.DIRECT.GET."+b.cfg.Stream+"."+b.cfg.RunsSubject("customer_message"), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if seq, _ := strconv.Atoi(reply.Header.Get("Nats-Sequence")); seq != 1 {
		t.Fatalf("last of %s: sequence %q, status %q", b.cfg.RunsSubject("customer_message"), reply.Header.Get("Nats-Sequence"), reply.Header.Get("Status"))
	}
	// The product's own reads go through it too (nats.go picks direct get
	// when the stream allows it).
	sr, err := queue.NewLookup(b.js, b.cfg).RunAt(t.Context(), 1)
	if err != nil || sr.Envelope != envs[0] {
		t.Fatalf("Lookup.RunAt(1) = %+v, %v", sr, err)
	}
	if _, err := queue.NewLookup(b.js, b.cfg).RunAt(t.Context(), 99); !errors.Is(err, queue.ErrNotStored) {
		t.Fatalf("Lookup.RunAt(99): %v, want ErrNotStored", err)
	}
}
