package erasure_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/erasure"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/relay"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// The results stream holds each result's record: once the message is
// erased and the relay has published its erased event, the stream holds
// no earlier event of the message, only that one, and the outbox no
// record of it; another message's events stay.
func TestEraseResultsStream(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	q := queuetest.NewStream(t)
	if err := st.ResultsOutboxEnable(ctx, st.Pool, true); err != nil {
		t.Fatal(err)
	}
	stream := queue.NewResultsStream(q.JS, q.NATS, config.Default().Results)
	if _, err := stream.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		q.JS.DeleteStream(dctx, stream.Name())
	})
	rel, err := relay.NewResults(relay.ResultsConfig{Store: st, Stream: stream, NATS: q.NATS})
	if err != nil {
		t.Fatal(err)
	}
	publish := func() {
		t.Helper()
		if _, err := rel.Publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	seed(t, st, "b-stream", 0, nil, []string{"s-1", "s-2"})
	for _, id := range []string{"s-1", "s-2"} {
		var mid int64
		if err := st.Pool.QueryRow(ctx, `SELECT id FROM messages WHERE external_id = $1`, id).Scan(&mid); err != nil {
			t.Fatal(err)
		}
		rec := []byte(`{"order_id":"48213","customer_name":"Ada ` + id + `"}`)
		if err := st.RunOutcomeInsert(ctx, st.Pool, store.RunOutcomeParams{MessageID: mid, RunNo: 1, SchemaID: "customer_message", SchemaVersion: "1",
			Status:     store.RunSucceeded,
			Calls:      []store.LLMCall{{Attempt: 1, Model: "sim-1", PromptVersion: "extract.v1", RequestMode: "response_format", Reply: string(rec), Valid: true}},
			Extraction: &store.ExtractionParams{Data: rec}}); err != nil {
			t.Fatal(err)
		}
		publish() // each result on the stream before the erasure
	}

	res, err := erasure.New(st).Erase(ctx, erasure.Request{Keys: []store.MessageKey{{Source: "mail", ExternalID: "s-1"}}, Actor: "dpo", Via: store.ViaCLI})
	if err != nil || res.Erased != 1 {
		t.Fatalf("erase = %+v, %v", res, err)
	}
	publish()

	s, err := q.JS.Stream(ctx, stream.Name())
	if err != nil {
		t.Fatal(err)
	}
	lastOf := func(id string) (string, uint64) {
		t.Helper()
		msg, err := s.GetLastMsgForSubject(ctx, q.NATS.ResultsSubject("customer_message", relay.MessageKey("mail", id)))
		if err != nil {
			t.Fatalf("last event of %s: %v", id, err)
		}
		var ev relay.ResultEvent
		if err := json.Unmarshal(msg.Data, &ev); err != nil {
			t.Fatal(err)
		}
		return ev.Type, msg.Sequence
	}
	if typ, _ := lastOf("s-1"); typ != store.EventErased {
		t.Errorf("s-1's last event is %s, want erased", typ)
	}
	if typ, _ := lastOf("s-2"); typ != store.EventResult {
		t.Errorf("s-2's last event is %s, want its result", typ)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(q.NATS.ResultsMessageFilter(relay.MessageKey("mail", "s-1"))))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[q.NATS.ResultsSubject("customer_message", relay.MessageKey("mail", "s-1"))]; n != 1 {
		t.Errorf("the stream holds %d events of s-1, want only its erased event", n)
	}
	var left int
	if err := st.Pool.QueryRow(ctx, `SELECT count(*) FROM results_outbox o JOIN messages m ON m.id = o.message_id
		WHERE m.external_id = 's-1' AND (o.type <> 'erased' OR o.record IS NOT NULL)`).Scan(&left); err != nil || left != 0 {
		t.Errorf("the outbox keeps %d rows of s-1 beside its erased event (%v)", left, err)
	}
}
