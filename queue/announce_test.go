package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
)

func TestAnnounce(t *testing.T) {
	t.Parallel()
	b := queuetest.NewStream(t)
	sub, err := b.Conn.SubscribeSync(b.NATS.TriageWildcard())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	a := queue.NewAnnouncer(b.Conn, b.NATS)
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	sent := queue.TriageEvent{Event: queue.TriageEventNew, ItemID: 7, MessageID: 3, RunNo: 2, BatchID: "b-1", SchemaID: "customer_message",
		Reason: "schema", Errors: extracttype.ErrorList{{Kind: extracttype.KindSchema, Path: "/order_id", Keyword: "required", Message: "missing property"}}, At: at}
	if err := a.Announce(sent); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := b.NATS.SubjectPrefix + ".triage.new.customer_message"; m.Subject != want {
		t.Errorf("subject %q, want %q", m.Subject, want)
	}
	var got queue.TriageEvent
	if err := json.Unmarshal(m.Data, &got); err != nil {
		t.Fatal(err)
	}
	if got.ItemID != 7 || got.MessageID != 3 || got.RunNo != 2 || got.BatchID != "b-1" || got.Reason != "schema" ||
		len(got.Errors) != 1 || got.Errors[0].Path != "/order_id" || !got.At.Equal(at) {
		t.Errorf("announced %s", m.Data)
	}

	// Nothing announced reaches the runs stream.
	if n := b.Messages(t); n != 0 {
		t.Errorf("the stream holds %d messages after an announcement, want 0", n)
	}

	for _, tc := range []struct {
		ev   queue.TriageEvent
		want string
	}{
		{queue.TriageEvent{Event: "created", ItemID: 1, SchemaID: "s"}, `event "created"`},
		{queue.TriageEvent{Event: queue.TriageEventNew, SchemaID: "s"}, "no item id"},
		{queue.TriageEvent{Event: queue.TriageEventNew, ItemID: 1}, "no schema id"},
	} {
		if err := a.Announce(tc.ev); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Announce(%+v) = %v, want an error with %q", tc.ev, err, tc.want)
		}
	}
	var none *queue.Announcer
	if err := none.Announce(sent); err != nil {
		t.Errorf("a nil Announcer: %v", err)
	}
	if m, err := sub.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("a refused or nil announcement was published: %s %s", m.Subject, m.Data)
	}
}

// WatchTriage delivers the announcements of its schema, in order, and
// returns when its context ends.
func TestWatchTriage(t *testing.T) {
	t.Parallel()
	b := queuetest.NewStream(t)
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- queue.WatchTriage(ctx, b.Conn, b.NATS, "return_request", func(subject string, body []byte) {
			got <- subject + " " + string(body)
		})
	}()
	a := queue.NewAnnouncer(b.Conn, b.NATS)
	// The watch subscribes asynchronously: announce until the first
	// arrives, then two more in order.
	first := queue.TriageEvent{Event: queue.TriageEventNew, ItemID: 1, SchemaID: "return_request"}
	var line string
	for deadline := time.Now().Add(10 * time.Second); line == ""; {
		if time.Now().After(deadline) {
			t.Fatal("the watch received nothing")
		}
		if err := a.Announce(queue.TriageEvent{Event: queue.TriageEventNew, ItemID: 99, SchemaID: "customer_message"}); err != nil {
			t.Fatal(err)
		}
		if err := a.Announce(first); err != nil {
			t.Fatal(err)
		}
		select {
		case line = <-got:
		case <-time.After(100 * time.Millisecond):
		}
	}
	for len(got) > 0 { // more copies of the first, from the retries above
		<-got
	}
	for _, id := range []int64{2, 3} {
		if err := a.Announce(queue.TriageEvent{Event: queue.TriageEventNew, ItemID: id, SchemaID: "return_request"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []int64{2, 3} {
		select {
		case line = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("item %d not received", id)
		}
		want := fmt.Sprintf(`%s.triage.new.return_request {"event":"new","item_id":%d,`, b.NATS.SubjectPrefix, id)
		if !strings.HasPrefix(line, want) {
			t.Errorf("received %q, want it to start %q", line, want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("WatchTriage returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchTriage did not return when its context ended")
	}
	if len(got) > 0 {
		t.Errorf("another schema's announcement was delivered: %s", <-got)
	}
}
