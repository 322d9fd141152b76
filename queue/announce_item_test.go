package queue_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
)

func TestAnnounceItem(t *testing.T) {
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
	for _, bad := range []queue.TriageItemEvent{{Event: "new", ItemID: 1}, {Event: queue.TriageEventDecided}} {
		if err := a.AnnounceItem(bad); err == nil {
			t.Errorf("AnnounceItem(%+v): no error", bad)
		}
	}
	sent := queue.TriageItemEvent{Event: queue.TriageEventDecided, ItemID: 42, Status: "rejected", By: "bob", At: time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)}
	if err := a.AnnounceItem(sent); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got queue.TriageItemEvent
	if want := b.NATS.SubjectPrefix + ".triage.item.42"; m.Subject != want || json.Unmarshal(m.Data, &got) != nil || got != sent {
		t.Errorf("got %s %s, want %s %+v", m.Subject, m.Data, want, sent)
	}
	var none *queue.Announcer
	if err := none.AnnounceItem(sent); err != nil {
		t.Errorf("nil announcer: %v", err)
	}
}
