package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/extracttype"
)

// Triage announcements tell other systems (a chat bot, a pager, a
// dashboard) that a triage item was created, on a core NATS subject
// (config.NATS.TriageSubject), so they need not poll Postgres. An
// announcement is a notice, not the item: it is published at most once,
// after the item is committed, and a subscriber that was away reads the
// queue from the triage API. It carries ids, the reason and the typed
// error list, which never holds the customer's values; the message text
// stays in Postgres behind login.

// TriageEventNew is the event of a triage item created: a run failed and
// its outcome, with the item, was committed.
const TriageEventNew = "new"

// TriageEvent is the JSON body of a triage announcement.
type TriageEvent struct {
	// Event is TriageEventNew.
	Event string `json:"event"`
	// ItemID is the triage item's id (triage_items.id, the id of the
	// triage API's /api/v1/items/{id}).
	ItemID    int64  `json:"item_id"`
	MessageID int64  `json:"message_id"`
	RunNo     int    `json:"run_no"`
	BatchID   string `json:"batch_id,omitempty"`
	SchemaID  string `json:"schema_id"`
	// Reason is the failure's kind (schema, rule, truncated, delivery, ...);
	// Errors the run's final error list.
	Reason string                `json:"reason"`
	Errors extracttype.ErrorList `json:"errors"`
	// At is when the item was created.
	At time.Time `json:"at"`
}

// Announcer publishes triage announcements. A nil *Announcer announces
// nothing, so announcing stays optional for its callers.
type Announcer struct {
	nc  *nats.Conn
	cfg config.NATS
}

// NewAnnouncer returns an Announcer publishing on nc, on the subjects of
// cfg.
func NewAnnouncer(nc *nats.Conn, cfg config.NATS) *Announcer {
	return &Announcer{nc: nc, cfg: cfg}
}

// Announce publishes ev on cfg.TriageSubject(ev.Event, ev.SchemaID). It
// returns an error naming what is missing when ev has no known event, item
// id or schema id, and the connection's error when the publish is refused
// (the connection closed, or the body over the server's max payload).
// Core NATS publishes are not acknowledged: a publish while reconnecting
// is buffered by the client, and one nobody listens to is dropped.
func (a *Announcer) Announce(ev TriageEvent) error {
	if a == nil {
		return nil
	}
	switch {
	case ev.Event != TriageEventNew:
		return fmt.Errorf("queue: triage announcement: event %q, want %q", ev.Event, TriageEventNew)
	case ev.ItemID <= 0:
		return errors.New("queue: triage announcement: no item id")
	case ev.SchemaID == "":
		return errors.New("queue: triage announcement: no schema id")
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("queue: triage announcement of item %d: %w", ev.ItemID, err)
	}
	if err := a.nc.Publish(a.cfg.TriageSubject(ev.Event, ev.SchemaID), body); err != nil {
		return fmt.Errorf("queue: triage announcement of item %d: %w", ev.ItemID, err)
	}
	return nil
}

// WatchTriage subscribes to the announcements of cfg's subjects (of
// schemaID only when it is not empty) and calls fn with each one's subject
// and body, on one goroutine, in the order received, until ctx is done. It
// returns ctx's error then, or the subscription's error.
func WatchTriage(ctx context.Context, nc *nats.Conn, cfg config.NATS, schemaID string, fn func(subject string, body []byte)) error {
	subject := cfg.TriageWildcard()
	if schemaID != "" {
		subject = cfg.TriageSubject(TriageEventNew, schemaID)
	}
	ch := make(chan *nats.Msg, 256)
	sub, err := nc.ChanSubscribe(subject, ch)
	if err != nil {
		return fmt.Errorf("queue: subscribing to %s: %w", subject, err)
	}
	defer sub.Unsubscribe()
	// The server has the subscription once it answers a flush.
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		return fmt.Errorf("queue: subscribing to %s: %w", subject, err)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-ch:
			fn(m.Subject, m.Data)
		}
	}
}
