package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// subscribeTriage subscribes to every triage announcement of b's subjects.
func subscribeTriage(t *testing.T, b *testBundle) *nats.Subscription {
	t.Helper()
	sub, err := b.q.Conn.SubscribeSync(b.q.NATS.TriageWildcard())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.q.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// nextEvent returns the next announcement on sub and its subject. It
// fails t when the announcement holds the test texts' marker SECRET.
func nextEvent(t *testing.T, sub *nats.Subscription) (string, queue.TriageEvent) {
	t.Helper()
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no triage announcement: %v", err)
	}
	if strings.Contains(string(m.Data), "SECRET") {
		t.Errorf("an announcement carries the customer's text: %s", m.Data)
	}
	var ev queue.TriageEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatalf("announcement %s: %v", m.Data, err)
	}
	return m.Subject, ev
}

// Each failed run's triage item is announced once, after its commit, with
// the item's id and error list and none of the customer's text; succeeded
// runs are not announced.
func TestAnnounceNewTriageItems(t *testing.T) {
	t.Parallel()
	sim := config.Default().Simulator
	sim.InvalidJSONRate, sim.FencedRate, sim.ProseRate, sim.WrongTypeRate, sim.UngroundedRate, sim.TruncatedRate = 0, 0, 0, 0, 0, 0
	sim.MissingRequiredRate, sim.RepairFixRate = 0.5, 0
	b := setup(t, setupOpts{sim: sim, batch: 4})
	sub := subscribeTriage(t, b)

	const n = 40
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, `{"id":"a%d","text":"SECRET-%d: how do I cancel my order 4821%04d"}`+"\n", i, i, i)
	}
	sum := b.ingestReader(t, strings.NewReader(in.String()))
	bs := b.wait(t, sum.BatchID)
	if bs.Failed == 0 || bs.Failed == n {
		t.Fatalf("batch %+v: want some runs failed and some not", bs)
	}
	items, err := b.st.TriageItemList(context.Background(), b.st.Pool, store.TriageItemListParams{BatchID: sum.BatchID, Limit: n})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[int64]store.TriageItem{}
	for _, it := range items {
		byID[it.ID] = it
	}
	for range len(items) {
		subject, ev := nextEvent(t, sub)
		it, ok := byID[ev.ItemID]
		if !ok {
			t.Fatalf("announced item %d, not one of the batch's %d items (or announced twice)", ev.ItemID, len(items))
		}
		delete(byID, ev.ItemID)
		if subject != b.q.NATS.SubjectPrefix+".triage.new.customer_message" || ev.Event != queue.TriageEventNew {
			t.Errorf("item %d announced on %s as %q", ev.ItemID, subject, ev.Event)
		}
		if ev.MessageID != it.MessageID || ev.RunNo != it.RunNo || ev.BatchID != sum.BatchID || ev.SchemaID != "customer_message" ||
			ev.Reason != it.Reason || len(ev.Errors) != len(it.Errors) || ev.Errors[0] != it.Errors[0] || !ev.At.Equal(it.CreatedAt) {
			t.Errorf("announcement %+v, item %+v", ev, it)
		}
	}
	if m, err := sub.NextMsg(300 * time.Millisecond); err == nil {
		t.Errorf("announced more than the %d items: %s", len(items), m.Data)
	}
	if got := b.metric(t, "extractq_triage_announcements_total"); got != float64(len(items)) {
		t.Errorf("extractq_triage_announcements_total = %v, want %d", got, len(items))
	}
}

// A run sent to triage at its delivery limit is announced too, once.
func TestAnnounceDeliveryFailed(t *testing.T) {
	t.Parallel()
	down := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	b := setup(t, setupOpts{handler: down, maxDeliver: 50})
	sub := subscribeTriage(t, b)
	sum := b.ingestReader(t, strings.NewReader(`{"id":"d1","text":"order 4821300017 is late"}`+"\n"))
	var id int64
	if err := b.st.Pool.QueryRow(context.Background(), `SELECT message_id FROM runs WHERE batch_id = $1`, sum.BatchID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	env := queue.Envelope{MessageID: id, RunNo: 1, BatchID: sum.BatchID, SchemaID: "customer_message"}
	for range 2 { // the second finds the outcome and announces nothing
		if err := b.w.DeliveryFailed(context.Background(), env, 50); err != nil {
			t.Fatal(err)
		}
	}
	_, ev := nextEvent(t, sub)
	if ev.MessageID != id || ev.Reason != "delivery" || len(ev.Errors) != 1 || ev.Errors[0].Keyword != "max_deliver" {
		t.Errorf("announcement %+v", ev)
	}
	if m, err := sub.NextMsg(300 * time.Millisecond); err == nil {
		t.Errorf("announced twice: %s", m.Data)
	}
}

// A key the model invents may be the customer's words: the announcement
// carries the error list as the triage item stores it, with such a key
// folded to pipeline.UnknownKey, never the key itself.
func TestAnnounceFoldsUnknownKeys(t *testing.T) {
	t.Parallel()
	reply := completion(t, record(t, map[string]any{"intent": "status_delivery_time", "flow": "order_issue", "SECRET Chloe Zhang": "x"}))
	llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, reply)
	})
	b := setup(t, setupOpts{handler: llm})
	sub := subscribeTriage(t, b)
	sum := b.ingestReader(t, strings.NewReader(`{"id":"k1","text":"where is my order 4821300017"}`+"\n"))
	if bs := b.wait(t, sum.BatchID); bs.Failed != 1 {
		t.Fatalf("batch %+v, want the run failed", bs)
	}
	items, err := b.st.TriageItemList(context.Background(), b.st.Pool, store.TriageItemListParams{BatchID: sum.BatchID, Limit: 1})
	if err != nil || len(items) != 1 {
		t.Fatalf("items %v, %v", items, err)
	}
	_, ev := nextEvent(t, sub) // fails on SECRET
	var unknown bool
	for _, e := range ev.Errors {
		unknown = unknown || e.Path == "/"+pipeline.UnknownKey
	}
	if !unknown || len(ev.Errors) != len(items[0].Errors) || ev.Errors[0] != items[0].Errors[0] {
		t.Errorf("announced errors %v, item's %v, want the item's with %s", ev.Errors, items[0].Errors, pipeline.UnknownKey)
	}
}
