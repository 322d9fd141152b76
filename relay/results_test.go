package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/erasure"
	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/relay"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// resultsBundle is a private schema, runs stream and results stream with
// a results relay between them, the outbox on.
type resultsBundle struct {
	st     *store.Store
	q      *queuetest.Bundle
	stream *queue.ResultsStream
	rel    *relay.Results
	batch  string
}

func setupResults(t *testing.T, includeText bool) *resultsBundle {
	return newResultsBundle(t, includeText)
}

// setupResultsB is setupResults for a benchmark.
func setupResultsB(b *testing.B) *resultsBundle { return newResultsBundle(b, false) }

func newResultsBundle(t testing.TB, includeText bool) *resultsBundle {
	t.Helper()
	ctx := context.Background()
	b := &resultsBundle{st: storetest.NewStore(t), q: queuetest.NewStream(t)}
	rc := config.Default().Results
	b.stream = queue.NewResultsStream(b.q.JS, b.q.NATS, rc)
	if _, err := b.stream.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.q.JS.DeleteStream(dctx, b.stream.Name())
	})
	if err := b.st.ResultsOutboxEnable(ctx, b.st.Pool, true); err != nil {
		t.Fatal(err)
	}
	var err error
	b.rel, err = relay.NewResults(relay.ResultsConfig{Store: b.st, Stream: b.stream, NATS: b.q.NATS, IncludeText: includeText,
		MaxAge: rc.MaxAge, Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel+1))})
	if err != nil {
		t.Fatal(err)
	}
	b.batch = ingest.NewBatchID(time.Now())
	if err := b.st.BatchInsert(ctx, b.st.Pool, store.BatchInsertParams{ID: b.batch, SchemaID: "customer_message"}); err != nil {
		t.Fatal(err)
	}
	return b
}

// message records message id (source "mail") with its run 1, queued.
func (b *resultsBundle) message(t *testing.T, id string) store.Run {
	t.Helper()
	res, err := b.st.MessageIngest(t.Context(), b.st.Pool, store.MessageIngestParams{Source: "mail", ExternalID: id,
		Body: "Order 48213 never arrived (" + id + ")", ContentHash: []byte(id), BatchID: b.batch, SchemaID: "customer_message"})
	if err != nil {
		t.Fatal(err)
	}
	return res.Run
}

func succeeded(r store.Run) store.RunOutcomeParams {
	return store.RunOutcomeParams{MessageID: r.MessageID, RunNo: r.RunNo, SchemaID: "customer_message", SchemaVersion: "1",
		Status: store.RunSucceeded,
		Calls: []store.LLMCall{{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
			Reply: `{"order_id":"48213"}`, Valid: true}},
		Extraction: &store.ExtractionParams{Data: []byte(`{"order_id":"48213"}`)}}
}

func failed(r store.Run) store.RunOutcomeParams {
	return store.RunOutcomeParams{MessageID: r.MessageID, RunNo: r.RunNo, SchemaID: "customer_message", SchemaVersion: "1",
		Status: store.RunFailed,
		Calls: []store.LLMCall{{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
			Reply: `{}`, ErrorCount: 1}},
		Triage: &store.TriageParams{Reason: "schema", LastReply: `{}`,
			Errors: extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: "/order_id", Keyword: "required", Message: "missing property"}}}}
}

// publish runs publish passes until the outbox is empty.
func (b *resultsBundle) publish(t *testing.T) int {
	t.Helper()
	n := 0
	for {
		res, err := b.rel.Publish(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		n += res.Events
		if !res.More {
			return n
		}
	}
}

// streamEvent is one event read back from the stream.
type streamEvent struct {
	relay.ResultEvent
	Subject string
	MsgID   string
	Seq     uint64
}

// consume reads every event the results stream holds, in order, with an
// ordered consumer, as a downstream system would.
func (b *resultsBundle) consume(t *testing.T) []streamEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := b.q.JS.Stream(ctx, b.stream.Name())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{b.q.NATS.ResultsWildcard()}})
	if err != nil {
		t.Fatal(err)
	}
	var out []streamEvent
	for uint64(len(out)) < info.State.Msgs {
		msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(out), info.State.Msgs, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		ev := streamEvent{Subject: msg.Subject(), MsgID: msg.Headers().Get(jetstream.MsgIDHeader), Seq: md.Sequence.Stream}
		if err := json.Unmarshal(msg.Data(), &ev.ResultEvent); err != nil {
			t.Fatalf("event %d: %v: %s", ev.Seq, err, msg.Data())
		}
		out = append(out, ev)
	}
	return out
}

// byMessage returns the types of the events of message id, in order.
func byMessage(evs []streamEvent, id string) []string {
	var out []string
	for _, e := range evs {
		if e.MessageID == id {
			out = append(out, e.Type)
			if e.Outcome != "" {
				out[len(out)-1] += ":" + e.Outcome
			}
		}
	}
	return out
}

// TestResultsStream follows three messages of one batch through the
// results stream: results, a failure approved, undone and rejected, the
// batch done, and an erasure that purges its message's earlier events.
func TestResultsStream(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupResults(t, false)
	a, fb, c := b.message(t, "a.1 *"), b.message(t, "b-2"), b.message(t, "c-3")

	if err := b.st.RunOutcomeInsert(ctx, b.st.Pool, succeeded(a)); err != nil {
		t.Fatal(err)
	}
	if err := b.st.RunOutcomeInsert(ctx, b.st.Pool, failed(fb)); err != nil {
		t.Fatal(err)
	}
	if n := b.publish(t); n != 2 {
		t.Fatalf("published %d events, want 2 (a result, a failure)", n)
	}
	// The batch's last outcome, written as the worker writes them.
	if errs := b.st.RunOutcomeInsertMany(ctx, []store.RunOutcomeParams{succeeded(c)}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	item, err := b.st.TriageItemOfRun(ctx, b.st.Pool, fb.MessageID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.TriageItemApprove(ctx, b.st.Pool, store.TriageItemApproveParams{ItemID: item.ID, Reviewer: "alice", Via: store.ViaUI,
		Data: []byte(`{"order_id":"48213"}`), SchemaVersion: "1"}); err != nil {
		t.Fatal(err)
	}
	if err := b.st.TriageItemReopen(ctx, b.st.Pool, store.TriageItemReopenParams{ItemID: item.ID, Reviewer: "alice", Via: store.ViaUI, Within: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.TriageItemReject(ctx, b.st.Pool, store.TriageItemRejectParams{ItemID: item.ID, Reviewer: "alice", Via: store.ViaUI,
		Reason: "no order in the message"}); err != nil {
		t.Fatal(err)
	}
	b.publish(t)
	before := b.consume(t)
	if got := byMessage(before, "a.1 *"); fmt.Sprint(got) != "[result:succeeded]" {
		t.Errorf("a's events before the erasure = %v", got)
	}

	res, err := erasure.New(b.st).Erase(ctx, erasure.Request{Keys: []store.MessageKey{{Source: "mail", ExternalID: "a.1 *"}},
		Actor: "dpo", Via: store.ViaCLI, Reason: "request 7"})
	if err != nil || res.Erased != 1 {
		t.Fatalf("erase = %+v, %v", res, err)
	}
	b.publish(t)
	evs := b.consume(t)

	for id, want := range map[string]string{
		"a.1 *": "[erased]",
		"b-2":   "[failed result:approved retracted rejected]",
		"c-3":   "[result:succeeded]",
	} {
		if got := fmt.Sprint(byMessage(evs, id)); got != want {
			t.Errorf("events of %q = %s, want %s", id, got, want)
		}
	}
	seen := map[string]bool{}
	var done []streamEvent
	for _, e := range evs {
		if e.EventID == "" || e.MsgID != e.EventID || seen[e.EventID] {
			t.Errorf("event %d: event id %q, Nats-Msg-Id %q (repeated: %t)", e.Seq, e.EventID, e.MsgID, seen[e.EventID])
		}
		seen[e.EventID] = true
		if e.BatchID != b.batch || e.SchemaID != "customer_message" {
			t.Errorf("event %d: batch %q schema %q", e.Seq, e.BatchID, e.SchemaID)
		}
		switch e.Type {
		case store.EventBatchDone:
			done = append(done, e)
			if e.Subject != b.q.NATS.BatchDoneSubject() {
				t.Errorf("batch.done on %s", e.Subject)
			}
			continue
		case store.EventResult:
			if string(e.Record) != `{"order_id":"48213"}` || e.SchemaVersion != "1" || e.PromptVersion != "extract.v1" || e.Model != "sim-1" || e.RunNo != 1 {
				t.Errorf("result event %d = %+v (record %s)", e.Seq, e.ResultEvent, e.Record)
			}
		case store.EventFailed:
			if e.Reason != "schema" || len(e.Errors) == 0 || e.Record != nil {
				t.Errorf("failed event = %+v", e.ResultEvent)
			}
		case store.EventRetracted:
			if e.Undone != "approved" || e.DecidedBy != "alice" {
				t.Errorf("retracted event = %+v", e.ResultEvent)
			}
		case store.EventErased:
			if e.Record != nil || e.Source != "mail" {
				t.Errorf("erased event = %+v", e.ResultEvent)
			}
		}
		if e.Text != nil {
			t.Errorf("event %d carries the message's text without include_text", e.Seq)
		}
		if want := b.q.NATS.ResultsSubject("customer_message", relay.MessageKey(e.Source, e.MessageID)); e.Subject != want || e.MessageKey == "" {
			t.Errorf("event %d of %q on %s, want %s", e.Seq, e.MessageID, e.Subject, want)
		}
	}
	if len(done) != 1 {
		t.Fatalf("%d batch.done events, want 1", len(done))
	}
	var sum store.BatchSummary
	if err := json.Unmarshal(done[0].Summary, &sum); err != nil {
		t.Fatal(err)
	}
	if sum.BatchID != b.batch || sum.Messages != 3 || sum.Succeeded != 2 || sum.Failed != 1 || sum.Queued != 0 || !sum.Done() {
		t.Errorf("batch.done summary = %+v", sum)
	}
	// The batch's summary as GET /v1/batches/{id} reads it, before any
	// decision changed the counts (none changes runs).
	now, err := b.st.BatchSummary(ctx, b.st.Pool, b.batch)
	if err != nil {
		t.Fatal(err)
	}
	if now.Messages != sum.Messages || now.Succeeded != sum.Succeeded || now.Failed != sum.Failed || now.LLMCalls != sum.LLMCalls {
		t.Errorf("batch.done summary %+v, batch status %+v", sum, now)
	}

	// A publish pass again publishes nothing: every row is marked.
	if n := b.publish(t); n != 0 {
		t.Errorf("a second pass published %d events", n)
	}
}

// The stream's server lost its store (the stream is deleted here): the
// check makes it again, and every row kept is published again under its
// event id.
func TestResultsStreamLost(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupResults(t, true)
	for i := range 3 {
		if err := b.st.RunOutcomeInsert(ctx, b.st.Pool, succeeded(b.message(t, fmt.Sprintf("m-%d", i)))); err != nil {
			t.Fatal(err)
		}
	}
	b.publish(t)
	first := b.consume(t)
	if len(first) != 4 { // three results and the batch done
		t.Fatalf("%d events, want 4", len(first))
	}
	if first[0].Text == nil || *first[0].Text == "" {
		t.Errorf("include_text: event without the text: %+v", first[0].ResultEvent)
	}
	if c, err := b.rel.Check(ctx); err != nil || c.Lost {
		t.Fatalf("check of a whole stream = %+v, %v", c, err)
	}
	if err := b.q.JS.DeleteStream(ctx, b.stream.Name()); err != nil {
		t.Fatal(err)
	}
	c, err := b.rel.Check(ctx)
	if err != nil || !c.Lost || !c.StreamMade || c.Republish != 4 {
		t.Fatalf("check after the loss = %+v, %v", c, err)
	}
	b.publish(t)
	again := b.consume(t)
	if len(again) != len(first) {
		t.Fatalf("%d events after the loss, want %d", len(again), len(first))
	}
	for i := range first {
		if again[i].EventID != first[i].EventID {
			t.Errorf("event %d: id %s, was %s", i, again[i].EventID, first[i].EventID)
		}
	}
}
