package triage

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// The item page, live across replicas (docs/triage.md, "An item"): after
// a decision on an item commits, the replica that made it publishes an
// item event on NATS (queue.TriageItemSubject, core NATS, not Postgres
// LISTEN/NOTIFY, which a pooler in transaction pooling breaks); every
// replica with a page open on the item subscribes to the item's subject
// while it is open, and streams its events to the page (GET
// /items/{id}/events, server-sent events), which says the item was
// decided and by whom, and stops the editor.

// itemLive subscribes to items' subjects for the open item pages, one
// subscription per item however many pages show it, and publishes this
// replica's decisions.
type itemLive struct {
	nc  *nats.Conn
	cfg config.NATS
	ann *queue.Announcer
	log *zap.Logger

	mu      sync.Mutex
	watches map[int64]*itemWatch
}

type itemWatch struct {
	sub   *nats.Subscription
	pages map[chan []byte]struct{}
}

func newItemLive(nc *nats.Conn, cfg config.NATS, log *zap.Logger) *itemLive {
	return &itemLive{nc: nc, cfg: cfg, ann: queue.NewAnnouncer(nc, cfg), log: log, watches: map[int64]*itemWatch{}}
}

// watch returns a channel of item id's events (JSON bodies) and a
// function to stop. The subscription is on the server when watch returns
// (a flush), so an event published after it reaches the channel.
func (l *itemLive) watch(id int64) (<-chan []byte, func(), error) {
	ch := make(chan []byte, 4)
	l.mu.Lock()
	w := l.watches[id]
	if w == nil {
		w = &itemWatch{pages: map[chan []byte]struct{}{}}
		sub, err := l.nc.Subscribe(queue.TriageItemSubject(l.cfg, id), func(m *nats.Msg) {
			// Only an event read as one reaches a page, re-encoded.
			var ev queue.TriageItemEvent
			if json.Unmarshal(m.Data, &ev) != nil || ev.ItemID != id {
				return
			}
			body, err := json.Marshal(ev)
			if err != nil {
				return
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			for page := range w.pages {
				select {
				case page <- body:
				default: // the page has events it has not read: it reloads anyway
				}
			}
		})
		if err != nil {
			l.mu.Unlock()
			return nil, nil, fmt.Errorf("subscribing to item %d's events: %w", id, err)
		}
		w.sub = sub
		l.watches[id] = w
	}
	w.pages[ch] = struct{}{}
	l.mu.Unlock()
	stop := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(w.pages, ch)
		if len(w.pages) == 0 && l.watches[id] == w {
			delete(l.watches, id)
			_ = w.sub.Unsubscribe()
		}
	}
	if err := l.nc.FlushTimeout(5 * time.Second); err != nil {
		stop()
		return nil, nil, fmt.Errorf("subscribing to item %d's events: %w", id, err)
	}
	return ch, stop, nil
}

// announce publishes an item event of this replica, logging a failure:
// the decision is committed, and a page that misses the event finds it
// decided when it posts.
func (l *itemLive) announce(ev queue.TriageItemEvent) {
	if l == nil {
		return
	}
	ev.At = time.Now().UTC()
	if err := l.ann.AnnounceItem(ev); err != nil {
		l.log.Warn("item event not published", zap.Int64("item_id", ev.ItemID), zap.String("event", ev.Event), zap.Error(err))
	}
}

// decided announces that reviewer login decided item id (status).
func (s *Server) decided(ctx context.Context, id int64, status string) {
	s.live.announce(queue.TriageItemEvent{Event: queue.TriageEventDecided, ItemID: id, Status: status, By: reviewerFrom(ctx).Login})
}

// reopened announces that reviewer login reopened item id.
func (s *Server) reopened(ctx context.Context, id int64) {
	s.live.announce(queue.TriageItemEvent{Event: queue.TriageEventReopened, ItemID: id, Status: store.TriageOpen, By: reviewerFrom(ctx).Login})
}

// itemEvents is GET /items/{id}/events: the item's events, as
// server-sent events ("live" once listening, then "item" with each
// event's JSON), until the page goes away. Without NATS (Config.Events)
// it answers 404, and the page is not live.
func (s *Server) itemEvents(w http.ResponseWriter, r *http.Request) error {
	id, err := itemID(r)
	if err != nil {
		return err
	}
	if s.live == nil {
		return fmt.Errorf("%w: item pages are not live here (no NATS)", ErrNotFound)
	}
	if _, err := s.st.TriageItemGet(r.Context(), s.st.Pool, id); err != nil {
		return err
	}
	ch, stop, err := s.live.watch(id)
	if err != nil {
		return err
	}
	defer stop()
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	write := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write("retry: 3000\n\nevent: live\ndata: %d\n\n", id) {
		return nil
	}
	keepAlive := time.NewTicker(25 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-s.closing:
			return nil
		case body := <-ch:
			if !write("event: item\ndata: %s\n\n", body) {
				return nil
			}
		case <-keepAlive.C:
			if !write(": keep-alive\n\n") {
				return nil
			}
		}
	}
}
