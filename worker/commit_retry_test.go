package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/extractq/extractq/internal/tcpproxy"
	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// cutStore returns st's schema opened again through a TCP proxy that the
// test cuts: the worker's connections to Postgres go through it, the
// test's own (st) do not.
func cutStore(t *testing.T, st *store.Store) (*store.Store, *tcpproxy.Proxy) {
	t.Helper()
	return storetest.Proxied(t, st, 4)
}

// TestCommitFailureKeepsTheResult: the worker's connections to Postgres
// are cut after the provider answered and before the outcomes are written.
// The finished extractions are held, their messages kept in progress, and
// written once Postgres is reachable again: one paid call per message, no
// second one, nothing put back. When the worker is stopped while Postgres
// is still out of reach, the runs are put back on the stream and nothing
// is written.
func TestCommitFailureKeepsTheResult(t *testing.T) {
	t.Parallel()
	const messages = 3
	lines := func(prefix string) string {
		var b strings.Builder
		for i := range messages {
			fmt.Fprintf(&b, `{"id":"%s%d","text":"%s"}`+"\n", prefix, i, classText)
		}
		return b.String()
	}
	// cutAfterCalls makes every call of the LLM wait until the test has
	// cut the worker from Postgres, once all messages' calls arrived.
	cutAfterCalls := func(t *testing.T) (*gatedLLM, func()) {
		release := make(chan struct{})
		gates := map[int]chan struct{}{}
		for n := 1; n <= messages; n++ {
			gates[n] = release
		}
		llm := &gatedLLM{gates: gates, script: func(int) (int, string) { return 200, completion(t, record(t, nil)) }}
		open := sync.OnceFunc(func() { close(release) })
		t.Cleanup(open)
		return llm, open
	}
	arrived := func(llm *gatedLLM) func() bool {
		return func() bool { llm.mu.Lock(); defer llm.mu.Unlock(); return llm.n >= messages }
	}

	t.Run("WrittenWhenPostgresIsBack", func(t *testing.T) {
		t.Parallel()
		st := storetest.NewStore(t)
		wst, proxy := cutStore(t, st)
		llm, release := cutAfterCalls(t)
		b := setup(t, setupOpts{st: st, workerSt: wst, handler: llm})
		sum := b.ingestReader(t, strings.NewReader(lines("k")))

		testsignal.Eventually(t, 30*time.Second, "every message's call at the provider", arrived(llm))
		proxy.Cut()
		release()
		testsignal.Eventually(t, 30*time.Second, "each outcome write tried again", func() bool {
			return b.metric(t, "extractq_outcome_write_retries_total") >= messages
		})
		if n := b.count(t, `SELECT count(*) FROM runs WHERE status = 'queued'`); n != messages {
			t.Fatalf("%d runs queued while the worker is cut from Postgres, want %d", n, messages)
		}
		proxy.Restore()

		bs := b.wait(t, sum.BatchID)
		if bs.Succeeded != messages {
			t.Fatalf("summary %+v, want %d succeeded", bs, messages)
		}
		if paid := llm.paid(); paid != messages {
			t.Fatalf("the provider answered %d calls for %d messages: a finished extraction was thrown away and made again", paid, messages)
		}
		if n := b.count(t, `SELECT count(*) FROM llm_calls WHERE NOT superseded`); n != messages {
			t.Fatalf("%d calls in the ledger, want %d", n, messages)
		}
		if n := b.count(t, `SELECT count(*) FROM extractions`); n != messages {
			t.Fatalf("%d extractions, want %d", n, messages)
		}
		if n := b.metric(t, "extractq_run_naks_total"); n != 0 {
			t.Fatalf("%v runs put back; want none", n)
		}
	})

	t.Run("ReplyToCommitLost", func(t *testing.T) {
		t.Parallel()
		// The worker's COMMIT reaches Postgres, which commits, but the
		// reply is lost: the next try finds the outcome there. It is this
		// delivery's own, so its call is in the ledger once, not again as
		// a superseded one.
		st := storetest.NewStore(t)
		wst, proxy := cutStore(t, st)
		release := make(chan struct{})
		llm := &gatedLLM{gates: map[int]chan struct{}{1: release},
			script: func(int) (int, string) { return 200, completion(t, record(t, nil)) }}
		open := sync.OnceFunc(func() { close(release) })
		t.Cleanup(open)
		b := setup(t, setupOpts{st: st, workerSt: wst, handler: llm})
		sum := b.ingestReader(t, strings.NewReader(`{"id":"c1","text":"`+classText+`"}`+"\n"))
		testsignal.Eventually(t, 30*time.Second, "the call at the provider", func() bool {
			llm.mu.Lock()
			defer llm.mu.Unlock()
			return llm.n >= 1
		})
		proxy.LoseReplyAfter(func(chunk []byte) bool { return bytes.Contains(chunk, []byte("commit")) })
		open()

		bs := b.wait(t, sum.BatchID)
		if bs.Succeeded != 1 {
			t.Fatalf("summary %+v", bs)
		}
		cons, err := b.q.JS.Consumer(context.Background(), b.q.NATS.Stream, b.q.NATS.Consumer)
		if err != nil {
			t.Fatal(err)
		}
		testsignal.Eventually(t, 30*time.Second, "the message acked", func() bool {
			info, err := cons.Info(context.Background())
			return err == nil && info.NumAckPending == 0 && info.NumPending == 0
		})
		if n := b.metric(t, "extractq_outcome_write_retries_total"); n < 1 {
			t.Fatalf("%v writes tried again: the reply to the COMMIT was not lost", n)
		}
		if rows, paid := b.count(t, `SELECT count(*) FROM llm_calls`), llm.paid(); rows != paid || paid != 1 {
			t.Fatalf("%d ledger rows for %d paid calls: a committed call was booked twice", rows, paid)
		}
	})

	t.Run("PutBackWhenStoppedFirst", func(t *testing.T) {
		t.Parallel()
		st := storetest.NewStore(t)
		wst, proxy := cutStore(t, st)
		llm, release := cutAfterCalls(t)
		b := setup(t, setupOpts{st: st, workerSt: wst, handler: llm})
		b.ingestReader(t, strings.NewReader(lines("s")))

		testsignal.Eventually(t, 30*time.Second, "every message's call at the provider", arrived(llm))
		proxy.Cut()
		release()
		testsignal.Eventually(t, 30*time.Second, "each outcome write tried again", func() bool {
			return b.metric(t, "extractq_outcome_write_retries_total") >= messages
		})
		b.stop() // its shutdown grace (2s) passes with Postgres still cut

		if n := b.count(t, `SELECT count(*) FROM runs WHERE status = 'queued'`); n != messages {
			t.Fatalf("%d runs queued after the stop, want %d", n, messages)
		}
		if n := b.count(t, `SELECT count(*) FROM extractions`) + b.count(t, `SELECT count(*) FROM triage_items`); n != 0 {
			t.Fatalf("%d outcomes written by a worker that could not reach Postgres", n)
		}
		if n := b.metric(t, "extractq_run_naks_total"); n != messages {
			t.Fatalf("%v runs put back, want %d", n, messages)
		}
		cons, err := b.q.JS.Consumer(context.Background(), b.q.NATS.Stream, b.q.NATS.Consumer)
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending != messages || info.NumAckPending != 0 {
			t.Fatalf("consumer: %d pending, %d unacked; want the %d runs back on the stream, none held",
				info.NumPending, info.NumAckPending, messages)
		}
	})
}
