package triage

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/extractq/extractq/store"
)

// Live updates: open queue pages hold a server-sent events stream
// (GET /events). One goroutine per server polls the queue's version
// (store.TriageQueueVersion) while at least one page listens, and tells
// every listener when it changes; the page then fetches the fresh list.

// hub fans the queue's version changes out to listeners.
type hub struct {
	st       *store.Store
	interval time.Duration
	log      *zap.Logger
	closing  <-chan struct{}

	mu      sync.Mutex
	subs    map[chan string]struct{}
	running bool
	version string
}

func newHub(st *store.Store, interval time.Duration, log *zap.Logger, closing <-chan struct{}) *hub {
	return &hub{st: st, interval: interval, log: log, closing: closing, subs: map[chan string]struct{}{}}
}

// subscribe returns a channel that receives the queue version after each
// change, and a function to stop listening.
func (h *hub) subscribe() (<-chan string, func()) {
	ch := make(chan string, 1)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	if h.version != "" {
		ch <- h.version // the page compares it with the version it shows
	}
	if !h.running {
		h.running = true
		go h.poll()
	}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// poll checks the version every interval until nobody listens or the
// server closes.
func (h *hub) poll() {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-h.closing:
			h.mu.Lock()
			h.running = false
			h.mu.Unlock()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := h.st.TriageQueueVersion(ctx, h.st.Pool)
		cancel()
		if err != nil {
			h.log.Warn("polling the queue", zap.Error(err))
			continue
		}
		h.mu.Lock()
		if len(h.subs) == 0 {
			h.running = false
			h.version = ""
			h.mu.Unlock()
			return
		}
		if v != h.version {
			h.version = v
			for ch := range h.subs {
				select {
				case ch <- v:
				default: // a change is already pending for this listener
				}
			}
		}
		h.mu.Unlock()
	}
}

// events streams "queue" events to a page until it goes away or the
// server closes. Each event's data is the queue version; the page fetches
// the list again when it differs from the version it shows.
func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	rc := http.NewResponseController(w)
	// The stream outlives the server's read timeout, which would otherwise
	// end it (and cancel its context) mid-way.
	_ = rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	ch, stop := s.hub.subscribe()
	defer stop()
	write := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write("retry: 3000\n\n") {
		return nil
	}
	keepAlive := time.NewTicker(25 * time.Second)
	defer keepAlive.Stop()
	// A stream opened without login ends when login becomes required.
	var localEnded <-chan struct{}
	if s.localOnly() {
		localEnded = s.localEnded
	}
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-s.closing:
			return nil
		case <-localEnded:
			return nil
		case v := <-ch:
			if !write("event: queue\ndata: %s\n\n", v) {
				return nil
			}
		case <-keepAlive.C:
			if !write(": keep-alive\n\n") {
				return nil
			}
		}
	}
}
