package ingestapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/ingestapi"
	"github.com/extractq/extractq/queue"
)

// A value the database cannot store is that line's rejection: a body of
// only such lines is answered 422 (nothing was queued), one with good
// lines too is answered 200 with the bad ones in errors, never 503 with
// Retry-After, which a client would follow for ever.
func TestServeValueRefusedIs4xx(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	bad := `{"id": "v-1", "text": "Where is order 48213?", "amount": 1e1000000}` + "\n"
	r := se.post(t, "", "application/x-ndjson", bad)
	if r.status != http.StatusUnprocessableEntity || r.header.Get("Retry-After") != "" || len(r.ans.Errors) != 1 ||
		!strings.Contains(r.ans.Errors[0].Reason, `metadata "amount": the number 1e1000000 is out of the range`) {
		t.Errorf("only a bad line: status %d, Retry-After %q, body %s; want 422 naming metadata \"amount\"",
			r.status, r.header.Get("Retry-After"), r.body)
	}
	r = se.post(t, "", "application/json", `[{"id": "v-2", "text": "Refund please"}, {"id": "caf\u00e9", "text": "x", "n": [0.5e-16383]}]`)
	if r.status != http.StatusOK || r.ans.Published != 1 || r.ans.Rejected != 1 || r.ans.Errors[0].Line != 2 ||
		!strings.Contains(r.ans.Errors[0].Reason, `metadata "n[0]"`) {
		t.Errorf("a good line and a bad one: status %d, body %s; want 200, element 2 rejected naming n[0]", r.status, r.body)
	}
	r = se.post(t, "", "application/x-ndjson", "{\"id\": \"caf\xe9\", \"text\": \"Latin-1 id\"}\n")
	if r.status != http.StatusUnprocessableEntity || len(r.ans.Errors) != 1 || !strings.Contains(r.ans.Errors[0].Reason, `"id" is not valid UTF-8`) {
		t.Errorf("an id that is not UTF-8: status %d, body %s; want 422 saying so", r.status, r.body)
	}
}

// A stream that stays full is a 503 saying so, naming the stream, once
// nats.retry_time is spent: not a bare "Postgres or NATS failed".
func TestServeStreamFullSaysSo(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	e.NATS.MaxMsgs = 1
	if _, err := queue.EnsureStream(t.Context(), e.JS, e.NATS); err != nil {
		t.Fatal(err)
	}
	se := newServerEnv(t, e, func(c *ingestapi.ServerConfig) { c.NATSRetryTime = 500 * time.Millisecond })
	r := se.post(t, "", "application/x-ndjson", ingesttest.GoodLines(2))
	want := "NATS did not take the run for 500ms: stream " + e.NATS.Stream + " is full"
	if r.status != http.StatusServiceUnavailable || r.ans.Error == nil || !strings.HasPrefix(r.ans.Error.Message, want) || r.ans.Published != 1 {
		t.Errorf("status %d, body %s; want 503 saying %s..., with 1 published", r.status, r.body, want)
	}
}
