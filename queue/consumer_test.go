package queue_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/extractq/extractq/internal/testsignal"
	"github.com/extractq/extractq/queue"
)

// deliveries records what a handler saw, safely across goroutines.
type deliveries struct {
	mu   sync.Mutex
	seen []queue.Delivery
	at   []time.Time
}

func (r *deliveries) add(d *queue.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, *d)
	r.at = append(r.at, time.Now())
}

func (r *deliveries) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *deliveries) all() ([]queue.Delivery, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]queue.Delivery(nil), r.seen...), append([]time.Time(nil), r.at...)
}

func consumerInfo(t *testing.T, c jetstream.Consumer) *jetstream.ConsumerInfo {
	t.Helper()
	info, err := c.Info(t.Context())
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info
}

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("BoundedConcurrency", func(t *testing.T) {
		t.Parallel()
		const n, k = 40, 4
		b := setup(t)
		c := b.consumer(t)
		b.publishN(t, n)

		var inFlight, maxInFlight atomic.Int64
		var rec deliveries
		runInBackground(t, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
			cur := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				m := maxInFlight.Load()
				if cur <= m || maxInFlight.CompareAndSwap(m, cur) {
					break
				}
			}
			time.Sleep(30 * time.Millisecond)
			rec.add(d)
			return queue.Ack()
		}, queue.ConsumerOptions{Concurrency: k})

		testsignal.Eventually(t, 10*time.Second, "all messages handled", func() bool { return rec.len() >= n })
		testsignal.Eventually(t, 5*time.Second, "stream empty", func() bool { return b.streamMsgs(t) == 0 })

		if m := maxInFlight.Load(); m > k {
			t.Errorf("%d handlers ran at once, want at most %d", m, k)
		} else if m < 2 {
			t.Errorf("at most %d handler ran at once, want concurrency", m)
		}
		seen := map[int64]bool{}
		got, _ := rec.all()
		for _, d := range got {
			if d.NumDelivered != 1 {
				t.Errorf("message %d delivered %d times", d.Envelope.MessageID, d.NumDelivered)
			}
			if d.Subject != b.cfg.RunsSubject("customer_message") || d.Envelope.RunNo != 1 || d.Envelope.BatchID != "b1" {
				t.Errorf("delivery %+v", d)
			}
			seen[d.Envelope.MessageID] = true
		}
		if len(seen) != n || len(got) != n {
			t.Errorf("handled %d deliveries of %d messages, want %d of %d", len(got), len(seen), n, n)
		}
		if p, err := queue.Pending(t.Context(), c); err != nil || p != 0 {
			t.Errorf("Pending = %d, %v; want 0", p, err)
		}
	})

	t.Run("SuspectsRunAlone", func(t *testing.T) {
		t.Parallel()
		const n, suspects, k = 16, 4, 4
		b := setup(t)
		c := b.consumer(t)
		b.publishN(t, n)

		var mu sync.Mutex
		running, alone := 0, false
		var violations []string
		var rec deliveries
		var onSuspect atomic.Int64
		runInBackground(t, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
			rec.add(d)
			suspect := d.NumDelivered > 1
			mu.Lock()
			if alone || (suspect && running > 0) {
				violations = append(violations, fmt.Sprintf("message %d (delivery %d) ran beside %d others (a suspect among them: %v)",
					d.Envelope.MessageID, d.NumDelivered, running, alone))
			}
			running++
			alone = suspect
			mu.Unlock()
			defer func() {
				mu.Lock()
				running--
				alone = false
				mu.Unlock()
			}()
			time.Sleep(20 * time.Millisecond) // the run's work
			if d.NumDelivered == 1 && d.Envelope.MessageID <= suspects {
				return queue.Nak(0) // redelivered at once: a suspect
			}
			return queue.Ack()
		}, queue.ConsumerOptions{Concurrency: k, OnSuspect: func(*queue.Delivery) { onSuspect.Add(1) }})

		testsignal.Eventually(t, 10*time.Second, "all messages handled", func() bool { return rec.len() >= n+suspects })
		testsignal.Eventually(t, 5*time.Second, "stream empty", func() bool { return b.streamMsgs(t) == 0 })
		mu.Lock()
		for _, v := range violations {
			t.Error(v)
		}
		mu.Unlock()
		got, _ := rec.all()
		for _, d := range got {
			if d.NumDelivered > 2 {
				t.Errorf("message %d delivered %d times, want 2 at most (a held suspect is kept, not nak'ed)", d.Envelope.MessageID, d.NumDelivered)
			}
		}
		if len(got) != n+suspects || onSuspect.Load() != suspects {
			t.Errorf("%d deliveries, %d suspects run alone; want %d and %d", len(got), onSuspect.Load(), n+suspects, suspects)
		}
	})

	t.Run("NakRedelivers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.consumer(t)
		b.publishN(t, 1)
		const delay = 300 * time.Millisecond
		var rec deliveries
		runInBackground(t, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
			rec.add(d)
			if d.NumDelivered == 1 {
				return queue.Nak(delay)
			}
			return queue.Ack()
		}, queue.ConsumerOptions{Concurrency: 2})

		testsignal.Eventually(t, 5*time.Second, "redelivery", func() bool { return rec.len() >= 2 })
		testsignal.Eventually(t, 5*time.Second, "stream empty", func() bool { return b.streamMsgs(t) == 0 })
		got, at := rec.all()
		if got[0].NumDelivered != 1 || got[1].NumDelivered != 2 {
			t.Errorf("NumDelivered = %d then %d, want 1 then 2", got[0].NumDelivered, got[1].NumDelivered)
		}
		if d := at[1].Sub(at[0]); d < delay-50*time.Millisecond {
			t.Errorf("redelivered after %s, want at least %s", d, delay)
		}
		if len(got) != 2 {
			t.Errorf("%d deliveries, want 2", len(got))
		}
	})

	t.Run("PanicRecoveredAndRedelivered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.consumer(t)
		b.publishN(t, 1)
		var rec deliveries
		runInBackground(t, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
			rec.add(d)
			if d.NumDelivered == 1 {
				panic("handler bug")
			}
			return queue.Ack()
		}, queue.ConsumerOptions{Concurrency: 1, PanicDelay: 100 * time.Millisecond})

		// The redelivery comes to the consumption's open pull. In one CI
		// run that pull went unanswered (nats: no heartbeat received after
		// the 5 s FetchWait), so the message could come only to the pull
		// made after it: the wait covers two pulls and the retry between.
		testsignal.Eventually(t, 20*time.Second, "redelivery after panic", func() bool { return rec.len() >= 2 })
		testsignal.Eventually(t, 5*time.Second, "stream empty", func() bool { return b.streamMsgs(t) == 0 })
		got, _ := rec.all()
		if got[1].NumDelivered != 2 {
			t.Errorf("second delivery NumDelivered = %d, want 2", got[1].NumDelivered)
		}
	})

	t.Run("InvalidEnvelopeTermed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.consumer(t)
		for _, body := range []string{"not json", `{"message_id":0,"run_no":1,"schema_id":"s"}`} {
			if _, err := b.js.Publish(t.Context(), b.cfg.RunsSubject("s"), []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		b.publishN(t, 1)
		core, logs := observer.New(zap.InfoLevel)
		var rec deliveries
		runInBackground(t, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
			rec.add(d)
			return queue.Ack()
		}, queue.ConsumerOptions{Concurrency: 2, Log: zap.New(core)})

		testsignal.Eventually(t, 5*time.Second, "valid message handled", func() bool { return rec.len() >= 1 })
		testsignal.Eventually(t, 5*time.Second, "nothing pending", func() bool {
			info := consumerInfo(t, c)
			return info.NumAckPending == 0 && info.NumPending == 0
		})
		// A termed message leaves the work-queue stream: one the server did
		// not take as termed would stay, to be delivered again past the
		// ack wait and termed again.
		testsignal.Eventually(t, 5*time.Second, "termed messages removed", func() bool { return b.streamMsgs(t) == 0 })
		if n := logs.FilterMessage("message terminated").Len(); n != 2 {
			t.Errorf("%d terms, want 2 (one per invalid message)", n)
		}
		if n := logs.FilterMessage("invalid run message; terminating it").Len(); n != 2 {
			t.Errorf("%d invalid-message logs, want 2", n)
		}
		if info := consumerInfo(t, c); info.NumAckPending != 0 {
			t.Errorf("ack pending %d, want 0", info.NumAckPending)
		}
		if got, _ := rec.all(); len(got) != 1 || got[0].Envelope.MessageID != 1 {
			t.Errorf("handler saw %+v, want only message 1", got)
		}
	})

	t.Run("InProgressKeepsSlowMessage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Handlers run half a second past the ack wait (1s): the slow
		// handler is what is under test, so this sleep stays. An
		// in-progress signal every 100ms leaves 0.9s for one to reach the
		// server on a loaded machine.
		c := b.consumer(t)
		b.publishN(t, 3)
		var rec deliveries
		var finished atomic.Int64
		// OnInProgress's calls per message: one goroutine signals every
		// running message, and calls it after each signal.
		var ticks struct {
			sync.Mutex
			n map[int64]int
		}
		ticks.n = map[int64]int{}
		// Free slots keep a fetch waiting, so a redelivery would reach the
		// handler.
		stop := runInBackground(t, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
			rec.add(d)
			time.Sleep(b.worker.AckWait + 500*time.Millisecond)
			finished.Add(1)
			return queue.Ack()
		}, queue.ConsumerOptions{Concurrency: 6, InProgressEvery: 100 * time.Millisecond, OnInProgress: func(d *queue.Delivery) {
			ticks.Lock()
			ticks.n[d.Envelope.MessageID]++
			ticks.Unlock()
		}})

		testsignal.Eventually(t, 20*time.Second, "slow messages handled", func() bool { return finished.Load() >= 3 })
		testsignal.Eventually(t, 5*time.Second, "stream empty", func() bool { return b.streamMsgs(t) == 0 })
		stop()
		got, _ := rec.all()
		for _, d := range got {
			if d.NumDelivered != 1 {
				t.Errorf("message %d: NumDelivered %d, want 1", d.Envelope.MessageID, d.NumDelivered)
			}
		}
		if len(got) != 3 {
			t.Errorf("%d deliveries, want 3", len(got))
		}
		// Each handler ran 1.5 s with a signal due every 100 ms; a loaded
		// machine may lose some, but not most.
		ticks.Lock()
		defer ticks.Unlock()
		for _, d := range got {
			if n := ticks.n[d.Envelope.MessageID]; n < 3 || n > 15 {
				t.Errorf("message %d: OnInProgress called %d times, want 3 to 15", d.Envelope.MessageID, n)
			}
		}
	})

	t.Run("ShutdownWaitsForInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.consumer(t)
		b.publishN(t, 5)
		started := make(chan struct{}, 5)
		release := make(chan struct{})
		var rec deliveries
		// The handlers finish only once Run's ctx is done, so that no slot
		// frees up for a third message before the shutdown, however slow
		// the machine.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- queue.Run(ctx, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
				started <- struct{}{}
				<-release
				time.Sleep(100 * time.Millisecond)
				rec.add(d)
				return queue.Ack()
			}, queue.ConsumerOptions{Concurrency: 2, ShutdownGrace: 30 * time.Second, Log: zap.NewNop()})
		}()

		<-started
		<-started
		cancel()
		begin := time.Now()
		close(release)
		// Run returns once the handlers are done, well before the 30s grace.
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return 20s after its handlers were released")
		}
		if d := time.Since(begin); d < 100*time.Millisecond {
			t.Errorf("Run returned %s after the handlers were released, before they finished (100ms)", d)
		}
		if n := rec.len(); n != 2 {
			t.Errorf("%d handlers finished, want the 2 in flight", n)
		}
		if n := b.streamMsgs(t); n != 3 {
			t.Errorf("stream holds %d messages, want 3 unhandled", n)
		}
	})

	t.Run("ShutdownCancelsAfterGrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.consumer(t)
		b.publishN(t, 3)
		started := make(chan struct{}, 3)
		var cancelled atomic.Int64
		stop := runInBackground(t, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
			started <- struct{}{}
			<-ctx.Done()
			cancelled.Add(1)
			return queue.Nak(0)
		}, queue.ConsumerOptions{Concurrency: 2, ShutdownGrace: 400 * time.Millisecond})

		<-started
		<-started
		begin := time.Now()
		stop()
		d := time.Since(begin)
		if d < 350*time.Millisecond || d > 10*time.Second {
			t.Errorf("Run returned after %s, want about the 400ms grace", d)
		}
		if n := cancelled.Load(); n != 2 {
			t.Errorf("%d handlers saw their ctx cancelled, want 2", n)
		}
		if n := b.streamMsgs(t); n != 3 {
			t.Errorf("stream holds %d messages, want all 3", n)
		}
		if len(started) != 0 {
			t.Error("a handler started after shutdown began")
		}
	})

	t.Run("MaxDeliverStopsRedelivery", func(t *testing.T) {
		t.Parallel()
		b := setup(t) // max deliver 3
		c := b.consumer(t)
		// The server announces the message it will not deliver again when
		// it would have: after that no fourth delivery can come.
		advisories := make(chan *nats.Msg, 4)
		sub, err := b.nc.ChanSubscribe(queue.MaxDeliveriesSubject(b.cfg), advisories)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := b.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		b.publishN(t, 1)
		var rec deliveries
		runInBackground(t, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
			rec.add(d)
			return queue.Nak(0)
		}, queue.ConsumerOptions{Concurrency: 1})

		select {
		case <-advisories:
		case <-time.After(10 * time.Second):
			t.Fatalf("no max-deliveries advisory after %d deliveries", rec.len())
		}
		got, _ := rec.all()
		if len(got) != 3 {
			t.Fatalf("%d deliveries, want 3 (MaxDeliver)", len(got))
		}
		for i, d := range got {
			if d.NumDelivered != uint64(i+1) {
				t.Errorf("delivery %d: NumDelivered %d", i, d.NumDelivered)
			}
			if last := d.LastDelivery(); last != (i == 2) {
				t.Errorf("delivery %d: LastDelivery %v", i, last)
			}
		}
	})

	t.Run("RequeueSpendsNoDeliveries", func(t *testing.T) {
		t.Parallel()
		b := setup(t) // max deliver 3
		c := b.consumer(t)
		b.publishN(t, 1)
		const requeues = 5 // more than max deliver
		var rec deliveries
		var ids []string
		runInBackground(t, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
			ids = append(ids, d.Msg().Headers().Get(jetstream.MsgIDHeader)) // before rec.add, which publishes it
			rec.add(d)
			if d.Requeues < requeues {
				return queue.Requeue(50 * time.Millisecond)
			}
			return queue.Ack()
		}, queue.ConsumerOptions{Concurrency: 1, Publisher: queue.NewPublisher(b.js, b.cfg)})

		testsignal.Eventually(t, 10*time.Second, "the last copy handled", func() bool { return rec.len() > requeues })
		testsignal.Eventually(t, 5*time.Second, "stream empty", func() bool { return b.streamMsgs(t) == 0 })
		got, at := rec.all()
		if len(got) != requeues+1 {
			t.Fatalf("%d deliveries, want %d", len(got), requeues+1)
		}
		for i, d := range got {
			if d.NumDelivered != 1 || d.Requeues != i || d.Envelope.MessageID != 1 {
				t.Errorf("delivery %d: NumDelivered %d, Requeues %d, message %d; want 1, %d, 1", i, d.NumDelivered, d.Requeues, d.Envelope.MessageID, i)
			}
			if i > 0 {
				if want := "run.1.1@" + fmt.Sprint(got[i-1].StreamSeq); ids[i] != want {
					t.Errorf("copy %d has Nats-Msg-Id %q, want %q", i, ids[i], want)
				}
				if gap := at[i].Sub(at[i-1]); gap < 50*time.Millisecond {
					t.Errorf("copy %d came %s after the last delivery, before the 50ms delay", i, gap)
				}
			}
		}
	})

	t.Run("RequeueWithoutPublisherNaks", func(t *testing.T) {
		t.Parallel()
		b := setup(t) // max deliver 3
		c := b.consumer(t)
		b.publishN(t, 1)
		var rec deliveries
		runInBackground(t, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
			rec.add(d)
			return queue.Requeue(0)
		}, queue.ConsumerOptions{Concurrency: 1})
		testsignal.Eventually(t, 5*time.Second, "three deliveries", func() bool { return rec.len() >= 3 })
		time.Sleep(2500 * time.Millisecond)
		got, _ := rec.all()
		if len(got) != 3 || got[2].NumDelivered != 3 {
			t.Fatalf("%d deliveries, want 3 (nak'ed up to MaxDeliver)", len(got))
		}
	})

	t.Run("KeepsFetchingWhenIdle", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.consumer(t)
		var rec deliveries
		// Ready is called before each fetch.
		fetches := testsignal.New[struct{}](10)
		runInBackground(t, c, func(ctx context.Context, d *queue.Delivery) queue.Decision {
			rec.add(d)
			return queue.Ack()
		}, queue.ConsumerOptions{Concurrency: 2, FetchWait: 300 * time.Millisecond, Ready: func(context.Context) (queue.Admit, error) {
			fetches.Send(struct{}{})
			return queue.AdmitAll, nil
		}})
		// Two fetches expire empty before anything arrives: the third is
		// about to start.
		for i := range 3 {
			fetches.Wait(t, 10*time.Second, fmt.Sprintf("fetch %d", i+1))
		}
		b.publishN(t, 2)
		testsignal.Eventually(t, 5*time.Second, "late messages handled", func() bool { return rec.len() >= 2 })
	})
}

func TestDecisionString(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    queue.Decision
		want string
	}{
		{queue.Ack(), "ack"},
		{queue.Nak(0), "nak"},
		{queue.Nak(5 * time.Second), "nak 5s"},
		{queue.Term("bad"), "term: bad"},
		{queue.Requeue(0), "requeue"},
		{queue.Requeue(2 * time.Second), "requeue 2s"},
		{queue.Decision{}, "nak"},
	} {
		if got := tt.d.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}
