package ingestapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/extractq/extractq/erasure"
	"github.com/extractq/extractq/ingestapi"
	"github.com/extractq/extractq/store"
)

// postErasure posts body to /v1/erasures with contentType and auth.
func (se *serverEnv) postErasure(t *testing.T, contentType, auth, body string) (reply, erasure.Result) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, se.base+"/v1/erasures", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	r := do(t, req, auth)
	var ans erasure.Result
	if r.status == http.StatusOK {
		if err := json.Unmarshal(r.body, &ans); err != nil {
			t.Fatalf("answer: %v\n%s", err, r.body)
		}
	}
	return r, ans
}

func TestServeErasures(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	ctx := t.Context()
	body := `{"id": "e-1", "source": "web", "text": "Order 48213 never came; call me on 555 0100."}` + "\n" +
		`{"id": "e-2", "source": "web", "text": "Still waiting for order 48213."}` + "\n" +
		`{"id": "e-3", "source": "web", "text": "Where is my refund?"}` + "\n"
	if r := se.post(t, "", ingestapi.ContentTypeNDJSON, body); r.status != http.StatusOK || r.ans.Published != 3 {
		t.Fatalf("ingest: %d %s", r.status, r.body)
	}
	// No worker runs here: e-1 and e-2 are done as if one had; e-3 stays queued.
	if _, err := se.Store.Pool.Exec(ctx, `UPDATE runs SET status = 'succeeded', finished_at = now()
		WHERE message_id IN (SELECT id FROM messages WHERE external_id IN ('e-1', 'e-2'))`); err != nil {
		t.Fatal(err)
	}
	auth := "Bearer " + testToken
	req := `{"by": "dpo", "reason": "request 118", "messages": [{"source": "web", "id": "e-1"}, {"source": "web", "id": "e-3"},
		{"source": "web", "id": "e-404"}, {"source": "web", "id": "e-2"}]}`

	r, _ := se.postErasure(t, ingestapi.ContentTypeJSON, "", req)
	wantError(t, "no token", r, http.StatusUnauthorized, "unauthenticated", "missing or wrong token")

	// A dry run answers the same and erases nothing.
	dry := strings.Replace(req, `"by": "dpo",`, `"by": "dpo", "dry_run": true,`, 1)
	if r, ans := se.postErasure(t, ingestapi.ContentTypeJSON, auth, dry); r.status != http.StatusOK || !ans.DryRun || ans.WouldErase != 2 || ans.Erased != 0 ||
		ans.Results[0].Status != store.ErasureWouldErase || ans.Results[0].ErasedAt != nil {
		t.Fatalf("dry run: %d %s", r.status, r.body)
	}
	var n int
	if err := se.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE erased_at IS NOT NULL`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d messages erased by a dry run (%v)", n, err)
	}

	r, ans := se.postErasure(t, ingestapi.ContentTypeJSON, auth, req)
	if r.status != http.StatusOK || ans.Erased != 2 || ans.Queued != 1 || ans.NotFound != 1 || len(ans.Results) != 4 {
		t.Fatalf("erase: %d %s", r.status, r.body)
	}
	for i, want := range []string{store.ErasureErased, store.ErasureQueued, store.ErasureNotFound, store.ErasureErased} {
		if ans.Results[i].Status != want {
			t.Errorf("result %d = %+v, want %s", i, ans.Results[i], want)
		}
	}
	var bodies []string
	rows, err := se.Store.Pool.Query(ctx, `SELECT body FROM messages ORDER BY external_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var b string
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	if len(bodies) != 3 || bodies[0] != "" || bodies[1] != "" || bodies[2] != "Where is my refund?" {
		t.Errorf("bodies after the erasure = %q; want e-1 and e-2 erased, e-3 kept", bodies)
	}
	var via, actor string
	if err := se.Store.Pool.QueryRow(ctx, `SELECT via, actor FROM audit_log WHERE action = 'erase' LIMIT 1`).Scan(&via, &actor); err != nil ||
		via != store.ViaAPI || actor != "dpo" {
		t.Errorf("audit entry: via %q, actor %q (%v); want api, dpo", via, actor, err)
	}
	// Again: already erased.
	if _, ans := se.postErasure(t, ingestapi.ContentTypeJSON, auth, req); ans.AlreadyErased != 2 || ans.Erased != 0 {
		t.Errorf("second erasure = %+v, want 2 already erased", ans)
	}

	for _, tt := range []struct{ name, ct, body, code, msg string }{
		{"not JSON", ingestapi.ContentTypeJSON, `by=dpo`, "invalid", "the body is not one JSON object"},
		{"unknown key", ingestapi.ContentTypeJSON, `{"by": "dpo", "ids": ["e-1"]}`, "invalid", `unknown key "ids" (keys are case-sensitive)`},
		{"key case", ingestapi.ContentTypeJSON, `{"BY": "dpo", "messages": [{"id": "e-1"}]}`, "invalid", `unknown key "BY"`},
		{"id key case", ingestapi.ContentTypeJSON, `{"by": "dpo", "messages": [{"ID": "e-1"}]}`, "invalid", `messages[0]: unknown key "ID"`},
		{"id twice", ingestapi.ContentTypeJSON, `{"by": "dpo", "messages": [{"id": "e-1", "id": "e-2"}]}`, "invalid", `key /messages/0/id occurs twice`},
		{"messages twice", ingestapi.ContentTypeJSON, `{"by": "dpo", "messages": [{"id": "e-1"}], "messages": [{"id": "e-2"}]}`, "invalid", `key /messages occurs twice`},
		{"no by", ingestapi.ContentTypeJSON, `{"messages": [{"id": "e-1"}]}`, "invalid", `"by" is required`},
		{"NUL in by", ingestapi.ContentTypeJSON, `{"by": "d\u0000po", "messages": [{"id": "e-1"}]}`, "invalid", `"by" holds a NUL character`},
		{"NUL in id", ingestapi.ContentTypeJSON, `{"by": "dpo", "messages": [{"id": "e\u0000"}]}`, "invalid", `messages[0]: "id" contains a NUL character`},
		{"no messages", ingestapi.ContentTypeJSON, `{"by": "dpo", "messages": []}`, "invalid", `"messages" names no message`},
		{"no id", ingestapi.ContentTypeJSON, `{"by": "dpo", "messages": [{"source": "web"}]}`, "invalid", `messages[0]: the object has no "id"`},
		{"float id", ingestapi.ContentTypeJSON, `{"by": "dpo", "messages": [{"id": 1.5}]}`, "invalid", `"id" must be a string or an integer, not 1.5`},
		{"two values", ingestapi.ContentTypeJSON, `{"by": "dpo", "messages": [{"id": "x"}]} {}`, "invalid", "data after the JSON value"},
		{"JSONL", ingestapi.ContentTypeNDJSON, req, "unsupported_media_type", "takes application/json"},
		{"latin1", ingestapi.ContentTypeJSON + "; charset=latin1", req, "unsupported_media_type", `charset "latin1": only UTF-8 is read`},
	} {
		r, _ := se.postErasure(t, tt.ct, auth, tt.body)
		status := http.StatusBadRequest
		if tt.code == "unsupported_media_type" {
			status = http.StatusUnsupportedMediaType
		}
		wantError(t, tt.name, r, status, tt.code, tt.msg)
	}
	var many strings.Builder
	for i := range store.MaxErasureKeys + 1 {
		fmt.Fprintf(&many, `{"id": "x-%d"},`, i)
	}
	r, _ = se.postErasure(t, ingestapi.ContentTypeJSON, auth, `{"by": "dpo", "messages": [`+strings.TrimSuffix(many.String(), ",")+`]}`)
	wantError(t, "too many", r, http.StatusBadRequest, "invalid", "names 1001 distinct messages; at most 1000")
	// Repeats count once: 1,001 copies of one key are one key.
	r, ans = se.postErasure(t, ingestapi.ContentTypeJSON, auth, `{"by": "dpo", "messages": [`+strings.Repeat(`{"id": 7},`, store.MaxErasureKeys)+`{"id": 7}]}`)
	if r.status != http.StatusOK || len(ans.Results) != 1 || ans.Results[0].ExternalID != "7" {
		t.Errorf("1,001 copies of the integer id 7: %d %s", r.status, r.body)
	}

	req2, err := http.NewRequest(http.MethodPost, se.base+"/v1/erasures?dry_run=1", strings.NewReader(req))
	if err != nil {
		t.Fatal(err)
	}
	req2.Header.Set("Content-Type", ingestapi.ContentTypeJSON)
	wantError(t, "query", do(t, req2, auth), http.StatusBadRequest, "invalid", `unknown query parameter "dry_run": POST /v1/erasures takes no query parameters`)

	r = se.get(t, "/v1/erasures")
	wantError(t, "GET", r, http.StatusMethodNotAllowed, "method_not_allowed", "takes POST")
	r = se.get(t, "/v2/erasures")
	wantError(t, "no route", r, http.StatusNotFound, "not_found", "the routes are POST /v1/messages, GET /v1/batches/{id}, "+
		"GET /v1/batches/{id}/results, POST /v1/erasures, POST /v1/webhooks/{name}, GET /healthz, GET /readyz and GET /metrics")
}

// TestServeErasuresNotUTF8: a body whose id is not UTF-8 is refused,
// never read as the id with U+FFFD in its place, which is another
// customer's message ("caf\uFFFD" stored, "caf\xe9" asked).
func TestServeErasuresNotUTF8(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	ctx := t.Context()
	if r := se.post(t, "", ingestapi.ContentTypeNDJSON, `{"id": "caf\ufffd", "source": "web", "text": "Another customer's order 48213."}`+"\n"); r.status != http.StatusOK || r.ans.Published != 1 {
		t.Fatalf("ingest: %d %s", r.status, r.body)
	}
	if _, err := se.Store.Pool.Exec(ctx, `UPDATE runs SET status = 'succeeded', finished_at = now()`); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []string{"true", "false"} {
		body := `{"by": "dpo", "dry_run": ` + dry + `, "messages": [{"source": "web", "id": "caf` + "\xe9" + `"}]}`
		r, _ := se.postErasure(t, ingestapi.ContentTypeJSON, "Bearer "+testToken, body)
		wantError(t, "an id not UTF-8, dry_run "+dry, r, http.StatusBadRequest, "invalid", "the body is not valid UTF-8 (byte ", "nothing was erased")
		// The same through a lone surrogate escape: the body is ASCII,
		// and decoding reads "caf\ud800" as "caf\uFFFD".
		body = `{"by": "dpo", "dry_run": ` + dry + `, "messages": [{"source": "web", "id": "caf\ud800"}]}`
		r, _ = se.postErasure(t, ingestapi.ContentTypeJSON, "Bearer "+testToken, body)
		wantError(t, "an id with a lone surrogate escape, dry_run "+dry, r, http.StatusBadRequest, "invalid", "a lone UTF-16 surrogate escape", "nothing was erased")
	}
	var n int
	if err := se.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE erased_at IS NOT NULL`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d messages erased by a request naming an id not UTF-8 (%v)", n, err)
	}
}
