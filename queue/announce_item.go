package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/extractq/extractq/config"
)

// Item events tell the triage replicas that a person decided an item, so
// that a page showing it on another replica learns it at once. One is
// published on TriageItemSubject after the decision commits. Like an
// announcement it is a notice, published at most once and not stored: a
// page that missed one still finds the item decided when it posts. It
// carries ids, the decision and the reviewer's login, never customer
// text.

// Item events (TriageItemEvent.Event).
const (
	TriageEventDecided  = "decided"  // approved, rejected or re-run
	TriageEventReopened = "reopened" // a decision undone
)

// TriageItemEvent is the JSON body of an item event.
type TriageItemEvent struct {
	// Event is TriageEventDecided or TriageEventReopened.
	Event  string `json:"event"`
	ItemID int64  `json:"item_id"`
	// Status is the item's status after the event: approved, rejected,
	// rerun, or open after a reopen.
	Status string `json:"status"`
	// By is the login of the reviewer who decided or reopened.
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// TriageItemSubject returns the core NATS subject of item id's events:
// "<prefix>.triage.item.<id>", under TriageWildcard, outside the
// stream's subjects.
func TriageItemSubject(cfg config.NATS, id int64) string {
	return cfg.SubjectPrefix + ".triage.item." + strconv.FormatInt(id, 10)
}

// AnnounceItem publishes ev on TriageItemSubject. It returns an error for
// an event it does not know or an event without its item, and the
// connection's error when the publish is refused. A nil *Announcer
// publishes nothing.
func (a *Announcer) AnnounceItem(ev TriageItemEvent) error {
	if a == nil {
		return nil
	}
	switch {
	case ev.Event != TriageEventDecided && ev.Event != TriageEventReopened:
		return fmt.Errorf("queue: item event %q, want %q or %q", ev.Event, TriageEventDecided, TriageEventReopened)
	case ev.ItemID <= 0:
		return errors.New("queue: item event: no item id")
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("queue: item event of item %d: %w", ev.ItemID, err)
	}
	if err := a.nc.Publish(TriageItemSubject(a.cfg, ev.ItemID), body); err != nil {
		return fmt.Errorf("queue: item event of item %d: %w", ev.ItemID, err)
	}
	return nil
}
