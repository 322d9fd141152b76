package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/tcpproxy"
	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/relay"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// bundle is a private schema and stream with a relay between them.
type bundle struct {
	st    *store.Store
	q     *queuetest.Bundle
	pub   *queue.Publisher
	relay *relay.Relay
	reg   *prometheus.Registry
	batch string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{st: storetest.NewStore(t), q: queuetest.NewStream(t), reg: prometheus.NewRegistry()}
	b.pub = queue.NewPublisher(b.q.JS, b.q.NATS)
	var err error
	b.relay, err = relay.New(relay.Config{Store: b.st, Publisher: b.pub, Metrics: relay.NewMetrics(b.reg),
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel+1))})
	if err != nil {
		t.Fatal(err)
	}
	b.batch = ingest.NewBatchID(time.Now())
	if err := b.st.BatchInsert(t.Context(), b.st.Pool, store.BatchInsertParams{ID: b.batch, SchemaID: "customer_message"}); err != nil {
		t.Fatal(err)
	}
	return b
}

// runs records n new messages with their run 1, not published.
func (b *bundle) runs(t *testing.T, prefix string, n int) []store.Run {
	t.Helper()
	var out []store.Run
	for i := range n {
		res, err := b.st.MessageIngest(t.Context(), b.st.Pool, store.MessageIngestParams{
			ExternalID: fmt.Sprintf("%s-%d", prefix, i), Body: "text", ContentHash: []byte(fmt.Sprintf("%s-%d", prefix, i)),
			BatchID: b.batch, SchemaID: "customer_message"})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res.Run)
	}
	return out
}

// get reads a run again.
func (b *bundle) get(t *testing.T, r store.Run) store.Run {
	t.Helper()
	rw, err := b.st.RunGetWithMessage(t.Context(), b.st.Pool, store.RunGetParams{MessageID: r.MessageID, RunNo: r.RunNo})
	if err != nil {
		t.Fatal(err)
	}
	return rw.Run
}

// at reads the stream's message at seq.
func (b *bundle) at(t *testing.T, seq int64) queue.StoredRun {
	t.Helper()
	sr, err := b.pub.Lookup().RunAt(t.Context(), uint64(seq))
	if err != nil {
		t.Fatalf("stream message %d: %v", seq, err)
	}
	return sr
}

func (b *bundle) publishAll(t *testing.T, runs []store.Run) {
	t.Helper()
	for _, r := range runs {
		if _, err := b.relay.Publish(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
}

// reconcile runs one pass with grace (its limit is above every test's
// run count).
func (b *bundle) reconcile(t *testing.T, grace time.Duration) relay.Reconciled {
	t.Helper()
	rec, err := b.relay.Reconcile(t.Context(), relay.ReconcileParams{Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func (b *bundle) purge(t *testing.T) {
	t.Helper()
	s, err := b.q.JS.Stream(t.Context(), b.q.NATS.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestPublish: a publish records the copy's stream sequence; the stream's
// duplicate answer to a second publish is the same copy, no anomaly; a
// dedup id under which the stream holds another message is an anomaly,
// and the run still goes onto the stream, under a fresh key.
func TestPublish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	runs := b.runs(t, "p", 2)

	p, err := b.relay.Publish(t.Context(), runs[0])
	if err != nil {
		t.Fatal(err)
	}
	got := b.get(t, runs[0])
	if p.Duplicate || p.Anomaly || p.Seq == 0 || got.StreamSeq != int64(p.Seq) || got.PublishedAt == nil {
		t.Fatalf("first publish %+v, run %+v", p, got)
	}
	if sr := b.at(t, got.StreamSeq); sr.MsgID != runs[0].DedupID || sr.Envelope.MessageID != runs[0].MessageID {
		t.Fatalf("stream message %+v, want run %+v", sr, runs[0])
	}
	again, err := b.relay.Publish(t.Context(), runs[0])
	if err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || again.Anomaly || again.Seq != p.Seq {
		t.Fatalf("second publish %+v, want a duplicate of %d", again, p.Seq)
	}
	if n := counter(t, b.reg, "extractq_relay_duplicates_total", "earlier"); n != 1 {
		t.Errorf("duplicates{earlier} = %v, want 1", n)
	}

	// Another message under run 1's dedup id, as a reused id would leave.
	foreign := queue.Envelope{MessageID: 999999, RunNo: 1, SchemaID: "customer_message"}
	if _, err := b.pub.Publish(t.Context(), runs[1].DedupID, foreign); err != nil {
		t.Fatal(err)
	}
	an, err := b.relay.Publish(t.Context(), runs[1])
	if err != nil {
		t.Fatal(err)
	}
	got = b.get(t, runs[1])
	if !an.Anomaly || an.Seq == 0 || got.StreamSeq != int64(an.Seq) || got.RelayGen != 1 {
		t.Fatalf("publish under a taken id: %+v, run %+v", an, got)
	}
	if sr := b.at(t, got.StreamSeq); sr.MsgID != runs[1].DedupID+".r1" || sr.Envelope.MessageID != runs[1].MessageID {
		t.Fatalf("stream message %+v, want run %+v under a fresh key", sr, runs[1])
	}
	if n := counter(t, b.reg, "extractq_relay_duplicates_total", "anomaly"); n != 1 {
		t.Errorf("duplicates{anomaly} = %v, want 1", n)
	}
}

// TestPublishOwnRetryDuplicate: a publish whose first attempt the stream
// stored but whose ack was lost (the connection reset as the message went
// through) is retried, and the stream answers the retry "duplicate" with
// the first attempt's sequence: the run is recorded as published at that
// sequence, once on the stream, not published again and not taken for an
// anomaly.
func TestPublishOwnRetryDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.runs(t, "ownretry", 1)[0]

	proxy, err := tcpproxy.Listen(strings.TrimPrefix(queuetest.URL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	nc, js, err := queue.Connect(ctx, "nats://"+proxy.Addr(), "relay-own-retry-test", zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	pub := queue.NewPublisher(js, b.q.NATS)
	pub.AttemptTimeout, pub.InitialInterval = 2*time.Second, 50*time.Millisecond
	reg := prometheus.NewRegistry()
	rl, err := relay.New(relay.Config{Store: b.st, Publisher: pub, Lookup: b.pub.Lookup(), Metrics: relay.NewMetrics(reg),
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel+1))})
	if err != nil {
		t.Fatal(err)
	}
	// The message reaches the server; the connection is reset before
	// its ack comes back.
	proxy.LoseReplyAfter(func(chunk []byte) bool { return bytes.Contains(chunk, []byte(run.DedupID)) })

	p, err := rl.Publish(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if proxy.Accepted() < 2 {
		t.Fatalf("the proxy forwarded %d connections: the first attempt's connection was not reset", proxy.Accepted())
	}
	got := b.get(t, run)
	if !p.Duplicate || p.Anomaly || p.Seq == 0 {
		t.Fatalf("publish %+v, want the retry's duplicate answer with the first attempt's sequence", p)
	}
	if got.PublishedAt == nil || got.StreamSeq != int64(p.Seq) || got.RelayGen != 0 {
		t.Fatalf("run %+v, want published at %d, never republished", got, p.Seq)
	}
	if sr := b.at(t, got.StreamSeq); sr.MsgID != run.DedupID || sr.Envelope.MessageID != run.MessageID {
		t.Fatalf("stream message %+v, want run %+v", sr, run)
	}
	if n := b.q.Messages(t); n != 1 {
		t.Fatalf("stream holds %d messages, want the one copy", n)
	}
	if n := counter(t, reg, "extractq_relay_duplicates_total", "own_retry"); n != 1 {
		t.Errorf("duplicates{own_retry} = %v, want 1", n)
	}
	if n := counter(t, reg, "extractq_relay_duplicates_total", "anomaly"); n != 0 {
		t.Errorf("duplicates{anomaly} = %v, want 0", n)
	}
	// The reconciler finds the copy where the run says it is.
	if rec := b.reconcile(t, time.Nanosecond); rec.OnStream != 1 || rec.Republished != 0 {
		t.Fatalf("reconcile after the publish: %+v, want the copy found", rec)
	}
}

// TestReconcile: the reconciler republishes exactly the queued runs the
// stream no longer holds: purged ones, and ones whose sequence a recreated
// stream gave to another message; not those on the stream, not those with
// an outcome, not those under a live lease (until it ends), and not before
// the grace period.
func TestReconcile(t *testing.T) {
	t.Parallel()

	t.Run("Purged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runs := b.runs(t, "purged", 20)
		b.publishAll(t, runs)
		if rec := b.reconcile(t, time.Hour); rec.Checked != 0 {
			t.Fatalf("within the grace period the reconciler looked at %+v", rec)
		}
		// Every run on the stream: none republished.
		if rec := b.reconcile(t, time.Nanosecond); rec.Checked != 20 || rec.OnStream != 20 || rec.Republished != 0 {
			t.Fatalf("before the purge: %+v", rec)
		}
		if _, err := b.st.Pool.Exec(t.Context(), `UPDATE runs SET status = 'succeeded' WHERE message_id = $1`, runs[0].MessageID); err != nil {
			t.Fatal(err)
		}
		b.purge(t)
		rec := b.reconcile(t, time.Nanosecond)
		if rec.Republished != 19 || rec.Checked != 19 {
			t.Fatalf("after the purge: %+v, want the 19 queued runs republished", rec)
		}
		if n := b.q.Messages(t); n != 19 {
			t.Fatalf("stream holds %d messages, want 19", n)
		}
		for _, r := range runs[1:] {
			got := b.get(t, r)
			if sr := b.at(t, got.StreamSeq); sr.MsgID != r.DedupID+".r1" || sr.Envelope.MessageID != r.MessageID {
				t.Errorf("run %d: stream message %+v", r.MessageID, sr)
			}
		}
		if rec := b.reconcile(t, time.Nanosecond); rec.Republished != 0 || rec.OnStream != 19 {
			t.Fatalf("a pass after the republish: %+v, want every run found", rec)
		}
		if n := counter(t, b.reg, "extractq_relay_reconciled_total", "republished"); n != 19 {
			t.Errorf("reconciled{republished} = %v, want 19", n)
		}
	})

	t.Run("RecreatedStream", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runs := b.runs(t, "recreated", 5)
		b.publishAll(t, runs)
		if err := b.q.JS.DeleteStream(t.Context(), b.q.NATS.Stream); err != nil {
			t.Fatal(err)
		}
		if _, err := queue.EnsureStream(t.Context(), b.q.JS, b.q.NATS); err != nil {
			t.Fatal(err)
		}
		// Other messages take the sequences the runs had.
		for i := range 5 {
			env := queue.Envelope{MessageID: int64(500 + i), RunNo: 1, SchemaID: "customer_message"}
			if _, err := b.pub.Publish(t.Context(), fmt.Sprintf("other-%d", i), env); err != nil {
				t.Fatal(err)
			}
		}
		if rec := b.reconcile(t, time.Nanosecond); rec.Republished != 5 {
			t.Fatalf("after the stream was recreated: %+v, want the 5 runs republished", rec)
		}
		if n := b.q.Messages(t); n != 10 {
			t.Fatalf("stream holds %d messages, want 10", n)
		}
	})

	t.Run("Leased", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runs := b.runs(t, "leased", 1)
		b.publishAll(t, runs)
		b.purge(t)
		ttl := 500 * time.Millisecond
		l, err := b.st.RunLeaseTake(t.Context(), b.st.Pool, store.RunLeaseParams{MessageID: runs[0].MessageID, RunNo: 1,
			Owner: "gone", StreamSeq: uint64(b.get(t, runs[0]).StreamSeq), TTL: ttl})
		if err != nil || l.State != store.LeaseTaken {
			t.Fatalf("lease %+v, %v", l, err)
		}
		start := time.Now()
		if rec := b.reconcile(t, time.Nanosecond); rec.Checked != 0 {
			t.Fatalf("under a live lease: %+v", rec)
		}
		testsignal.Eventually(t, 10*time.Second, "the run republished once its lease ended", func() bool {
			return b.reconcile(t, time.Nanosecond).Republished == 1
		})
		if time.Since(start) < ttl/2 {
			t.Errorf("republished %s after the lease was taken, before it ended", time.Since(start))
		}
	})
}

// TestReconcileLossSkipsGrace: a pass that finds the stream lost the
// copies of queued runs (purged, or recreated empty and refilled with
// fewer messages) looks for every queued run at once, whatever the grace;
// a copy gone while the rest are there (acked in a race, as a requeue
// leaves for a moment) still waits out the grace.
func TestReconcileLossSkipsGrace(t *testing.T) {
	t.Parallel()
	const grace = time.Hour

	t.Run("Purged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runs := b.runs(t, "lostpurged", 10)
		b.publishAll(t, runs)
		if rec := b.reconcile(t, grace); rec.Lost || rec.Checked != 0 {
			t.Fatalf("before the purge: %+v, want nothing looked at", rec)
		}
		b.purge(t)
		rec := b.reconcile(t, grace)
		if !rec.Lost || rec.Republished != 10 {
			t.Fatalf("after the purge: %+v, want the loss seen and 10 republished", rec)
		}
		if rec := b.reconcile(t, grace); rec.Lost || rec.Checked != 0 {
			t.Fatalf("a pass after the republish: %+v, want no loss and the grace again", rec)
		}
	})

	t.Run("Recreated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runs := b.runs(t, "lostrecreated", 6)
		b.publishAll(t, runs)
		if err := b.q.JS.DeleteStream(t.Context(), b.q.NATS.Stream); err != nil {
			t.Fatal(err)
		}
		if _, err := queue.EnsureStream(t.Context(), b.q.JS, b.q.NATS); err != nil {
			t.Fatal(err)
		}
		// A new run published on the recreated stream takes sequence 1.
		fresh := b.runs(t, "lostfresh", 1)
		b.publishAll(t, fresh)
		rec := b.reconcile(t, grace)
		if !rec.Lost || rec.Republished != 6 || rec.OnStream != 1 {
			t.Fatalf("after the stream was recreated: %+v, want the loss seen, 6 republished, the new run found", rec)
		}
		if n := b.q.Messages(t); n != 7 {
			t.Fatalf("stream holds %d messages, want 7", n)
		}
	})

	// The stream made again by another command (ingest) after its server
	// lost its store, without the workers' consumer: the pass makes the
	// consumer again, or no worker would ever take these runs.
	t.Run("ConsumerGone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runs := b.runs(t, "lostconsumer", 3)
		b.publishAll(t, runs)
		w := config.Default().Worker
		if _, err := queue.EnsureConsumer(t.Context(), b.q.JS, b.q.NATS, w); err != nil {
			t.Fatal(err)
		}
		if err := b.q.JS.DeleteConsumer(t.Context(), b.q.NATS.Stream, b.q.NATS.Consumer); err != nil {
			t.Fatal(err)
		}
		recreated := 0
		rec, err := b.relay.Reconcile(t.Context(), relay.ReconcileParams{Grace: grace, Recreate: func(ctx context.Context) error {
			recreated++
			_, err := queue.EnsureConsumer(ctx, b.q.JS, b.q.NATS, w)
			return err
		}})
		if err != nil {
			t.Fatal(err)
		}
		if recreated != 1 || !rec.ConsumerRecreated || rec.Lost {
			t.Fatalf("consumer gone: %+v, recreated %d times; want it made again once, no loss", rec, recreated)
		}
		if _, err := b.q.JS.Consumer(t.Context(), b.q.NATS.Stream, b.q.NATS.Consumer); err != nil {
			t.Fatalf("after the pass: %v", err)
		}
		if rec, err := b.relay.Reconcile(t.Context(), relay.ReconcileParams{Grace: grace, Recreate: func(context.Context) error {
			t.Error("Recreate called with the consumer there")
			return nil
		}}); err != nil || rec.ConsumerRecreated {
			t.Fatalf("a second pass: %+v, %v", rec, err)
		}
	})

	// With a pool per schema, any one schema's consumer gone is made
	// again: its pool's runs would wait for ever otherwise.
	t.Run("SchemaConsumerGone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runs := b.runs(t, "lostschemaconsumer", 2)
		b.publishAll(t, runs)
		cfg := config.Default()
		cfg.NATS = b.q.NATS
		cfg.NATS.Consumers = config.ConsumersPerSchema
		if _, err := queue.EnsureConsumers(t.Context(), b.q.JS, cfg); err != nil {
			t.Fatal(err)
		}
		gone := cfg.NATS.SchemaConsumer("return_request").Name
		if err := b.q.JS.DeleteConsumer(t.Context(), b.q.NATS.Stream, gone); err != nil {
			t.Fatal(err)
		}
		recreate := func(ctx context.Context) error {
			_, err := queue.EnsureConsumers(ctx, b.q.JS, cfg)
			return err
		}
		rec, err := b.relay.Reconcile(t.Context(), relay.ReconcileParams{Grace: grace, Recreate: recreate, Consumers: cfg.Consumers()})
		if err != nil {
			t.Fatal(err)
		}
		if !rec.ConsumerRecreated || rec.Lost {
			t.Fatalf("consumer %s gone: %+v, want it made again, no loss", gone, rec)
		}
		if _, err := b.q.JS.Consumer(t.Context(), b.q.NATS.Stream, gone); err != nil {
			t.Fatalf("after the pass: %v", err)
		}
		// The shared consumer is no workers' consumer in this mode: its
		// absence is not a loss.
		if rec, err := b.relay.Reconcile(t.Context(), relay.ReconcileParams{Grace: grace, Consumers: cfg.Consumers(),
			Recreate: func(context.Context) error {
				t.Error("Recreate called with every consumer of the mode there")
				return nil
			}}); err != nil || rec.ConsumerRecreated {
			t.Fatalf("a second pass: %+v, %v", rec, err)
		}
	})

	t.Run("Gone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runs := b.runs(t, "lostgone", 4)
		b.publishAll(t, runs)
		if err := b.q.JS.DeleteStream(t.Context(), b.q.NATS.Stream); err != nil {
			t.Fatal(err)
		}
		recreated := 0
		rec, err := b.relay.Reconcile(t.Context(), relay.ReconcileParams{Grace: grace, Recreate: func(ctx context.Context) error {
			recreated++
			_, err := queue.EnsureStream(ctx, b.q.JS, b.q.NATS)
			return err
		}})
		if err != nil {
			t.Fatal(err)
		}
		if recreated != 1 || !rec.Lost || rec.Republished != 4 {
			t.Fatalf("stream gone: recreated %d times, %+v, want once, the loss seen and 4 republished", recreated, rec)
		}
	})

	t.Run("OneCopyGone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runs := b.runs(t, "onegone", 3)
		b.publishAll(t, runs)
		s, err := b.q.JS.Stream(t.Context(), b.q.NATS.Stream)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteMsg(t.Context(), uint64(b.get(t, runs[1]).StreamSeq)); err != nil {
			t.Fatal(err)
		}
		if rec := b.reconcile(t, grace); rec.Lost || rec.Checked != 0 {
			t.Fatalf("one copy gone, the others there: %+v, want the grace waited out", rec)
		}
		if rec := b.reconcile(t, time.Nanosecond); rec.Lost || rec.Republished != 1 {
			t.Fatalf("past the grace: %+v, want the one run republished", rec)
		}
	})
}

// TestReconcileGivenUp: a run whose copy reached the consumer's delivery
// limit while its max-deliveries advisory was lost (nothing captured it)
// stays on the stream, never delivered again; the reconciler finds it once
// the consumer holds nothing pending, hands it to GivenUp (the worker's
// DeliveryFailed: a triage item of kind delivery) and removes the copy.
// Not while a delivery is pending, not a run under a live lease, and not a
// run never delivered.
func TestReconcileGivenUp(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{config.ConsumersShared, config.ConsumersPerSchema} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testReconcileGivenUp(t, mode)
		})
	}
}

// testReconcileGivenUp: with nats.consumers mode, a run whose copy the
// consumer of its schema gave up on is handed to GivenUp and removed.
func testReconcileGivenUp(t *testing.T, mode string) {
	b := setup(t)
	runs := b.runs(t, "givenup", 2)
	b.publishAll(t, runs[:1])
	const ackWait = 200 * time.Millisecond
	cfg := config.Default()
	cfg.NATS = b.q.NATS
	cfg.NATS.Consumers = mode
	cfg.Worker = config.Worker{AckWait: ackWait, MaxDeliver: 2}
	served, err := queue.EnsureConsumers(t.Context(), b.q.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cons := served[0] // shared, or customer_message's, the runs' schema
	var handed []queue.Envelope
	var deliveries uint64
	reconcile := func() relay.Reconciled {
		t.Helper()
		rec, err := b.relay.Reconcile(t.Context(), relay.ReconcileParams{Grace: time.Nanosecond, Consumers: cfg.Consumers(),
			GivenUp: func(_ context.Context, env queue.Envelope, n uint64) error {
				handed, deliveries = append(handed, env), n
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	// Two deliveries, neither acked: the worker died on each.
	for i := range 2 {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for range batch.Messages() {
			got++
		}
		if got != 1 {
			t.Fatalf("delivery %d: fetched %d messages", i+1, got)
		}
		if i == 0 {
			if rec := reconcile(); rec.GivenUp != 0 || rec.OnStream != 1 {
				t.Fatalf("with the delivery pending: %+v, want the copy found and left", rec)
			}
		}
	}
	// The server gives up on a copy when it would deliver it again: to a
	// pull request waiting, as workers always have one.
	testsignal.Eventually(t, 10*time.Second, "the consumer gives up on the copy", func() bool {
		if batch, err := cons.Fetch(1, jetstream.FetchMaxWait(2*ackWait)); err == nil {
			for m := range batch.Messages() {
				t.Fatalf("delivered a third time: %v", m.Subject())
			}
		}
		info, err := cons.Info(t.Context())
		return err == nil && info.NumAckPending == 0 && info.NumRedelivered > 0
	})
	// A run published since, not delivered yet.
	b.publishAll(t, runs[1:])

	// A run under a live lease (a worker about to record a requeue) is
	// not routed.
	lease := store.RunLeaseParams{MessageID: runs[0].MessageID, RunNo: 1, Owner: "requeuing",
		StreamSeq: uint64(b.get(t, runs[0]).StreamSeq), TTL: time.Hour}
	if l, err := b.st.RunLeaseTake(t.Context(), b.st.Pool, lease); err != nil || l.State != store.LeaseTaken {
		t.Fatalf("lease %+v, %v", l, err)
	}
	if rec, err := b.relay.Reconcile(t.Context(), relay.ReconcileParams{Grace: time.Nanosecond, Consumers: cfg.Consumers(),
		GivenUp: func(context.Context, queue.Envelope, uint64) error { t.Fatal("a leased run routed"); return nil }}); err != nil || rec.GivenUp != 0 {
		t.Fatalf("leased: %+v, %v", rec, err)
	}
	if err := b.st.RunLeaseRelease(t.Context(), b.st.Pool, lease); err != nil {
		t.Fatal(err)
	}

	rec := reconcile()
	if rec.GivenUp != 1 || rec.OnStream != 1 || rec.Republished != 0 {
		t.Fatalf("after the delivery limit: %+v, want one run given up, the other found", rec)
	}
	if len(handed) != 1 || handed[0].MessageID != runs[0].MessageID || deliveries != 2 {
		t.Fatalf("GivenUp got %+v (deliveries %d), want run %d after 2", handed, deliveries, runs[0].MessageID)
	}
	if n := b.q.Messages(t); n != 1 {
		t.Fatalf("stream holds %d messages, want only the run not given up", n)
	}
	if n := counter(t, b.reg, "extractq_relay_reconciled_total", "given_up"); n != 1 {
		t.Errorf("reconciled{given_up} = %v, want 1", n)
	}
}

// counter returns the counter name's series with the one label value.
func counter(t *testing.T, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{%s}", name, value)
	return 0
}
