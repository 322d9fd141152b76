package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// started returns how many calls reached the LLM, answered or not.
func (g *gatedLLM) started() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// lines returns n JSONL messages with valid text, ids prefix-0...
func lines(prefix string, n int) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, `{"id":"%s-%d","text":"%s"}`+"\n", prefix, i, classText)
	}
	return sb.String()
}

// run1 returns run 1 of the message with external id ext.
func (b *testBundle) run1(t *testing.T, ext string) store.Run {
	t.Helper()
	var id int64
	if err := b.st.Pool.QueryRow(context.Background(), `SELECT id FROM messages WHERE external_id = $1`, ext).Scan(&id); err != nil {
		t.Fatal(err)
	}
	rw, err := b.st.RunGetWithMessage(context.Background(), b.st.Pool, store.RunGetParams{MessageID: id, RunNo: 1})
	if err != nil {
		t.Fatal(err)
	}
	return rw.Run
}

// TestReconcileLostStream: runs queued in Postgres whose messages the
// stream lost (purged, or the stream gone with its server's store) are
// found by the worker's reconciler, published again (the stream and the
// consumer made again first), and all reach an outcome, each with one
// call. The grace is an hour: a pass that sees the loss does not wait it
// out.
func TestReconcileLostStream(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, b *testBundle)
	}{
		{"Purged", func(t *testing.T, b *testBundle) {
			s, err := b.q.JS.Stream(t.Context(), b.q.NATS.Stream)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Purge(t.Context()); err != nil {
				t.Fatal(err)
			}
		}},
		{"StreamGone", func(t *testing.T, b *testBundle) {
			if err := b.q.JS.DeleteStream(t.Context(), b.q.NATS.Stream); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			llm := &gatedLLM{script: func(int) (int, string) { return 200, completion(t, record(t, nil)) }}
			gate := make(chan struct{})
			b := setup(t, setupOpts{handler: llm, reconcileEvery: 100 * time.Millisecond, reconcileGrace: time.Hour,
				ready: func(ctx context.Context) error {
					select {
					case <-gate:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}})
			const n = 40
			sum := b.ingestReader(t, strings.NewReader(lines("lost", n)))
			if sum.Published != n {
				t.Fatalf("published %d of %d", sum.Published, n)
			}
			if got := b.q.Messages(t); got != n {
				t.Fatalf("stream holds %d messages before the loss, want %d", got, n)
			}
			tc.lose(t, b)
			close(gate)

			bs := b.wait(t, sum.BatchID)
			if bs.Queued != 0 || bs.Succeeded != n {
				t.Fatalf("batch %+v, want all %d succeeded", bs, n)
			}
			if got := b.metric(t, "extractq_relay_reconciled_total"); got < n {
				t.Errorf("extractq_relay_reconciled_total %v, want at least %d (the republished runs)", got, n)
			}
			if paid := llm.paid(); paid != n {
				t.Errorf("%d provider calls for %d runs", paid, n)
			}
		})
	}
}

// TestLeaseInFlight: a second copy of a run delivered while a worker works
// on the first (the relay's sweeper or reconciler republished it) costs no
// second provider call: the worker sees the live lease and acks it.
func TestLeaseInFlight(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	llm := &gatedLLM{gates: map[int]chan struct{}{1: release},
		script: func(int) (int, string) { return 200, completion(t, record(t, nil)) }}
	b := setup(t, setupOpts{handler: llm})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	sum := b.ingestReader(t, strings.NewReader(lines("inflight", 1)))
	testsignal.Eventually(t, 30*time.Second, "the first call in flight", func() bool { return llm.started() == 1 })

	run := b.run1(t, "inflight-0")
	env := queue.Envelope{MessageID: run.MessageID, RunNo: 1, BatchID: run.BatchID, SchemaID: run.SchemaID}
	if _, err := b.pub.Publish(t.Context(), run.DedupID+".r1", env); err != nil {
		t.Fatal(err)
	}
	testsignal.Eventually(t, 30*time.Second, "the second copy acked", func() bool { return b.q.Messages(t) == 1 })
	unblock()

	bs := b.wait(t, sum.BatchID)
	if bs.Succeeded != 1 {
		t.Fatalf("batch %+v", bs)
	}
	testsignal.Eventually(t, 30*time.Second, "the first copy acked", func() bool { return b.q.Messages(t) == 0 })
	if started := llm.started(); started != 1 {
		t.Errorf("%d provider calls, want 1", started)
	}
	if got := b.metric(t, "extractq_lease_held_acked_total"); got != 1 {
		t.Errorf("extractq_lease_held_acked_total %v, want 1", got)
	}
}

// TestLeaseHolderDies: a run whose lease a worker took before it died
// still completes: a delivery of the copy under lease takes the lease
// over; another copy waits for the lease to end, and the reconciler
// publishes the run again if the holder's copy is gone.
func TestLeaseHolderDies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// onCopy: the dead holder's lease is on the run's copy on the
		// stream; else on a copy the stream no longer holds.
		onCopy bool
	}{
		{"CopyRedelivered", true},
		{"CopyGone", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			llm := &gatedLLM{script: func(int) (int, string) { return 200, completion(t, record(t, nil)) }}
			gate := make(chan struct{})
			b := setup(t, setupOpts{handler: llm, reconcileEvery: 100 * time.Millisecond, reconcileGrace: 300 * time.Millisecond,
				ready: func(ctx context.Context) error {
					select {
					case <-gate:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}})
			sum := b.ingestReader(t, strings.NewReader(lines("dies", 1)))
			run := b.run1(t, "dies-0")
			seq, ttl := uint64(run.StreamSeq), time.Hour
			if !tc.onCopy {
				seq, ttl = seq+1000, time.Second
			}
			l, err := b.st.RunLeaseTake(t.Context(), b.st.Pool, store.RunLeaseParams{MessageID: run.MessageID, RunNo: 1,
				Owner: "dead-worker", StreamSeq: seq, TTL: ttl})
			if err != nil || l.State != store.LeaseTaken {
				t.Fatalf("lease %+v, %v", l, err)
			}
			close(gate)

			bs := b.wait(t, sum.BatchID)
			if bs.Succeeded != 1 {
				t.Fatalf("batch %+v", bs)
			}
			if paid := llm.paid(); paid != 1 {
				t.Errorf("%d provider calls, want 1", paid)
			}
		})
	}
}
