package triage_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/bcrypt"

	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/triage"
)

// replica is a second triage server over b's database and NATS subjects,
// with a NATS connection of its own, as another pod of the deployment.
func (b *bundle) replica(t *testing.T) *httptest.Server {
	t.Helper()
	nc, err := nats.Connect(queuetest.URL(), nats.Name("extractq-test-replica"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	srv, err := triage.New(triage.Config{Store: b.st, Schemas: b.schemas, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
		PollInterval: 200e6, Events: nc, EventsNATS: b.q.NATS, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewTLSServer(srv.Handler())
	t.Cleanup(func() {
		srv.Close()
		ts.Close()
	})
	return ts
}

// TestLiveItem: a decision made on one replica reaches, through NATS,
// the item's event stream on another, and only that item's.
func TestLiveItem(t *testing.T) {
	t.Parallel()
	b := newBundle(t, bundleOpts{live: true})
	b.reviewer(t, "alice", "correct horse battery")
	item, _ := b.failedItem(t, "customer_message", albertText, albertFirst)
	other, _ := b.failedItem(t, "customer_message", albertText, albertFirst)
	alice := b.client(t)
	alice.login("alice", "correct horse battery")

	// Alice's page's stream, on replica A.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/items/%d/events", b.ts.URL, item), nil)
	resp, err := alice.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("item events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		var ev string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				events <- ev + " " + strings.TrimPrefix(line, "data: ")
			}
		}
		close(events)
	}()
	next := func() string {
		t.Helper()
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("the stream ended")
			}
			return e
		case <-ctx.Done():
			t.Fatal("no event within the deadline")
		}
		return ""
	}
	if e := next(); e != fmt.Sprintf("live %d", item) {
		t.Fatalf("first event %q, want live", e)
	}

	// Bob rejects another item, then this one, on replica B.
	tok := newToken(t, b, "bob")
	rb := b.replica(t)
	post := func(path, body string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, rb.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := rb.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s on replica B: %d", path, resp.StatusCode)
		}
	}
	post(fmt.Sprintf("/api/v1/items/%d/reject", other), `{"reason":"spam"}`)
	post(fmt.Sprintf("/api/v1/items/%d/reject", item), `{"reason":"spam"}`)
	e := next()
	var ev struct {
		Event  string `json:"event"`
		ItemID int64  `json:"item_id"`
		Status string `json:"status"`
		By     string `json:"by"`
	}
	name, data, _ := strings.Cut(e, " ")
	if err := json.Unmarshal([]byte(data), &ev); err != nil || name != "item" || ev.Event != "decided" || ev.ItemID != item ||
		ev.Status != store.TriageRejected || ev.By != "bob" {
		t.Errorf("event after bob's rejection = %q, want item %d decided rejected by bob (and nothing of item %d)", e, item, other)
	}

	// Without NATS, an item page is not live.
	plain := newBundle(t, bundleOpts{})
	_, c := newAliceBundleOf(t, plain)
	if r := c.get(fmt.Sprintf("/items/%d/events", item)); r.status != http.StatusNotFound {
		t.Errorf("item events without NATS: %d, want 404", r.status)
	}
}

// newAliceBundleOf adds alice to b and logs her in.
func newAliceBundleOf(t *testing.T, b *bundle) (*bundle, *client) {
	t.Helper()
	b.reviewer(t, "alice", "correct horse battery")
	c := b.client(t)
	c.login("alice", "correct horse battery")
	return b, c
}
