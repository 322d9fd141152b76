package queue_test

import (
	"fmt"
	"testing"

	"github.com/extractq/extractq/queue"
)

func TestPublisher(t *testing.T) {
	t.Parallel()

	t.Run("DedupSecondPublish", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := queue.NewPublisher(b.js, b.cfg)
		env := queue.Envelope{MessageID: 7, RunNo: 1, BatchID: "b1", SchemaID: "customer_message"}
		dup, err := p.Publish(t.Context(), env.DedupID(), env)
		if err != nil || dup {
			t.Fatalf("first publish: dup=%v err=%v", dup, err)
		}
		dup, err = p.Publish(t.Context(), env.DedupID(), env)
		if err != nil || !dup {
			t.Fatalf("second publish: dup=%v err=%v, want duplicate", dup, err)
		}
		if n := b.streamMsgs(t); n != 1 {
			t.Fatalf("stream holds %d messages, want 1", n)
		}

		// A re-run has its own key and is stored.
		env.RunNo = 2
		dup, err = p.Publish(t.Context(), env.DedupID(), env)
		if err != nil || dup {
			t.Fatalf("re-run publish: dup=%v err=%v", dup, err)
		}
		if n := b.streamMsgs(t); n != 2 {
			t.Fatalf("stream holds %d messages, want 2", n)
		}
	})

	t.Run("PublishesOnSchemaSubject", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := queue.NewPublisher(b.js, b.cfg)
		env := queue.Envelope{MessageID: 1, RunNo: 1, SchemaID: "invoice"}
		if _, err := p.Publish(t.Context(), env.DedupID(), env); err != nil {
			t.Fatal(err)
		}
		m, err := b.stream.GetLastMsgForSubject(t.Context(), b.cfg.RunsSubject("invoice"))
		if err != nil {
			t.Fatalf("no message on %s: %v", b.cfg.RunsSubject("invoice"), err)
		}
		if got := m.Header.Get("Nats-Msg-Id"); got != env.DedupID() {
			t.Errorf("Nats-Msg-Id = %q, want %q", got, env.DedupID())
		}
	})

	t.Run("RejectsInvalidEnvelope", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := queue.NewPublisher(b.js, b.cfg)
		for _, env := range []queue.Envelope{
			{MessageID: 0, RunNo: 1, SchemaID: "s"},
			{MessageID: 1, RunNo: 0, SchemaID: "s"},
			{MessageID: 1, RunNo: 1},
		} {
			if _, err := p.Publish(t.Context(), "k", env); err == nil {
				t.Errorf("published %+v", env)
			}
		}
		if _, err := p.Publish(t.Context(), "", queue.Envelope{MessageID: 1, RunNo: 1, SchemaID: "s"}); err == nil {
			t.Error("published with an empty dedup id")
		}
		if n := b.streamMsgs(t); n != 0 {
			t.Errorf("stream holds %d messages, want 0", n)
		}
	})

	t.Run("FailsWithoutStream", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := b.cfg
		cfg.SubjectPrefix += "_nostream"
		p := queue.NewPublisher(b.js, cfg)
		p.MaxRetries = 1
		p.InitialInterval = 10_000_000 // 10ms
		env := queue.Envelope{MessageID: 1, RunNo: 1, SchemaID: "s"}
		if _, err := p.Publish(t.Context(), env.DedupID(), env); err == nil {
			t.Fatal("published on a subject no stream holds")
		}
	})

	t.Run("BatchWithDuplicates", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := queue.NewPublisher(b.js, b.cfg)
		p.MaxPending = 8 // smaller than the batch, so the window slides
		var items []queue.BatchItem
		for i := range 50 {
			env := queue.Envelope{MessageID: int64(i%40 + 1), RunNo: 1, SchemaID: "customer_message"}
			items = append(items, queue.BatchItem{DedupID: env.DedupID(), Envelope: env})
		}
		items = append(items, queue.BatchItem{DedupID: "bad", Envelope: queue.Envelope{}})
		res := p.PublishBatch(t.Context(), items)
		if len(res) != len(items) {
			t.Fatalf("%d results for %d items", len(res), len(items))
		}
		for i, r := range res[:50] {
			wantDup := i >= 40
			if r.Err != nil || r.Duplicate != wantDup {
				t.Errorf("item %d: %+v, want duplicate=%v", i, r, wantDup)
			}
		}
		if res[50].Err == nil {
			t.Error("invalid item published")
		}
		if n := b.streamMsgs(t); n != 40 {
			t.Fatalf("stream holds %d messages, want 40", n)
		}
		// Publishing the same batch again stores nothing.
		for i, r := range p.PublishBatch(t.Context(), items[:40]) {
			if r.Err != nil || !r.Duplicate {
				t.Errorf("again item %d: %+v, want duplicate", i, r)
			}
		}
		if n := b.streamMsgs(t); n != 40 {
			t.Fatalf("stream holds %d messages after re-publish, want 40", n)
		}
	})
}

func TestEnvelopeDedupID(t *testing.T) {
	t.Parallel()
	got := queue.Envelope{MessageID: 12, RunNo: 3}.DedupID()
	if want := fmt.Sprintf("run.%d.%d", 12, 3); got != want {
		t.Errorf("DedupID = %q, want %q", got, want)
	}
}
