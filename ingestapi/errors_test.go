package ingestapi_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/ingestapi"
	"github.com/extractq/extractq/ingestapi/webhook"
	"github.com/extractq/extractq/ingestapi/webhook/webhooktest"
	"github.com/extractq/extractq/internal/httperr"
	"github.com/extractq/extractq/internal/httperr/httperrtest"
	"github.com/extractq/extractq/store"
)

const slackSecret = "slack-secret-0123456789"

// Every route through its error cases: each answer has the one shape of
// docs/http-errors.md ({"error": {"code", "message"}}, and the report
// beside it for a 422), the code the case wants, with its documented
// status. The error cases that need time or a shutdown (429, 503 while
// stopping, a 503 part way) are in their own tests, whose wantError
// checks the same.
func TestErrorAnswers(t *testing.T) {
	t.Parallel()
	const maxBody = 4096
	reg := prometheus.NewRegistry()
	se := newServerEnv(t, nil, func(c *ingestapi.ServerConfig) {
		c.MaxBodyBytes, c.Registry = maxBody, reg
		c.Webhooks = []ingestapi.Webhook{{Name: "slack", Mapping: webhook.Mapping{ID: "/event/client_msg_id", Text: "/event/text"},
			Verifier: &webhook.Verifier{Scheme: webhook.SchemeSlack, Secret: []byte(slackSecret)}}}
	})
	local := newServerEnv(t, se.Env, func(c *ingestapi.ServerConfig) { c.Token = "" })
	pool, err := pgxpool.New(t.Context(), "postgres://postgres@127.0.0.1:1/extractq_test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	down := newServerEnv(t, se.Env, func(c *ingestapi.ServerConfig) { c.Store = &store.Store{Pool: pool} })

	// A batch that exists, for the conflict and the routes of a batch.
	r := se.post(t, "batch=b-errors", ingestapi.ContentTypeNDJSON, `{"id": "err-1", "text": "Where is order 48213?"}`)
	if r.status != http.StatusOK {
		t.Fatalf("setup: %d %s", r.status, r.body)
	}

	auth := "Bearer " + testToken
	ndjson := map[string]string{"Content-Type": ingestapi.ContentTypeNDJSON, "Authorization": auth}
	jsonH := map[string]string{"Content-Type": ingestapi.ContentTypeJSON, "Authorization": auth}
	csv := map[string]string{"Content-Type": ingestapi.ContentTypeCSV, "Authorization": auth}
	withAuth := map[string]string{"Authorization": auth}
	with := func(h map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for hk, hv := range h {
			if hk != k {
				out[hk] = hv
			}
		}
		return out
	}
	good := `{"id": "err-2", "text": "Refund please"}`
	// Slack's webhook: one taken, to be replayed.
	slackBody := `{"event": {"client_msg_id": "s-1", "text": "Where is order 48213?"}}`
	slackSigned := func(body string, at time.Time) map[string]string {
		h := map[string]string{"Content-Type": ingestapi.ContentTypeJSON}
		for k, v := range webhooktest.Headers(webhook.SchemeSlack, slackSecret, "", []byte(body), at) {
			h[k] = v[0]
		}
		return h
	}
	taken := slackSigned(slackBody, time.Now())
	if r := se.hook(t, "slack", http.Header{"X-Slack-Signature": {taken["X-Slack-Signature"]},
		"X-Slack-Request-Timestamp": {taken["X-Slack-Request-Timestamp"]}}, slackBody, ""); r.status != http.StatusOK {
		t.Fatalf("setup: slack: %d %s", r.status, r.body)
	}
	noText := `{"event": {"client_msg_id": "s-2"}}`
	tests := []struct {
		name         string
		srv          *serverEnv
		method, path string
		header       map[string]string
		body         string
		status       int
		code         httperr.Code
	}{
		// Before any route.
		{"another origin", se, "POST", "/v1/messages", with(ndjson, "Origin", "https://evil.example"), good, 403, httperr.CrossOrigin},
		{"multipart", se, "POST", "/v1/messages", with(ndjson, "Content-Type", "multipart/form-data; boundary=x"), good, 415, httperr.UnsupportedMediaType},
		{"no token, not a loopback Host", local, "GET", "/healthz", map[string]string{"Host": "ingest.example"}, "", 421, httperr.MisdirectedRequest},
		{"no route", se, "GET", "/v2/messages", withAuth, "", 404, httperr.NotFound},
		{"POST /healthz", se, "POST", "/healthz", nil, "", 404, httperr.NotFound},

		// POST /v1/messages.
		{"messages: no token", se, "POST", "/v1/messages", with(ndjson, "Authorization", ""), good, 401, httperr.Unauthenticated},
		{"messages: wrong token", se, "POST", "/v1/messages", with(ndjson, "Authorization", "Bearer nope"), good, 401, httperr.Unauthenticated},
		{"messages: unknown parameter", se, "POST", "/v1/messages?bacth=x", ndjson, good, 400, httperr.Invalid},
		{"messages: unknown schema", se, "POST", "/v1/messages?schema=nonesuch", ndjson, good, 400, httperr.Invalid},
		{"messages: no Content-Type", se, "POST", "/v1/messages", withAuth, good, 415, httperr.UnsupportedMediaType},
		{"messages: Content-Encoding", se, "POST", "/v1/messages", with(ndjson, "Content-Encoding", "gzip"), good, 415, httperr.UnsupportedMediaType},
		{"messages: Latin-1", se, "POST", "/v1/messages", with(ndjson, "Content-Type", "text/csv; charset=latin1"), good, 415, httperr.UnsupportedMediaType},
		{"messages: over the limit", se, "POST", "/v1/messages", ndjson, strings.Repeat("x", maxBody+1), 413, httperr.TooLarge},
		{"messages: empty", se, "POST", "/v1/messages", ndjson, "", 400, httperr.Invalid},
		{"messages: blank lines", se, "POST", "/v1/messages", ndjson, "\n\n", 400, httperr.Invalid},
		{"messages: gzip", se, "POST", "/v1/messages", ndjson, ingesttest.Gzipped(t, good), 400, httperr.CompressedBody},
		{"messages: UTF-16", se, "POST", "/v1/messages", ndjson, ingesttest.UTF16LE(good + "\n" + good), 400, httperr.NotText},
		{"messages: JSON that does not parse", se, "POST", "/v1/messages", jsonH, `[{"id": 1,`, 400, httperr.Invalid},
		{"messages: CSV without id", se, "POST", "/v1/messages", csv, "ticket,text\n1,x\n", 400, httperr.Invalid},
		{"messages: every line rejected", se, "POST", "/v1/messages", ndjson, `{"id": "err-3"}`, 422, httperr.Unprocessable},
		{"messages: batch id used", se, "POST", "/v1/messages?batch=b-errors", ndjson, good, 409, httperr.Conflict},
		{"messages: GET", se, "GET", "/v1/messages", withAuth, "", 405, httperr.MethodNotAllowed},
		{"messages: Postgres down", down, "POST", "/v1/messages", ndjson, good, 503, httperr.Unavailable},

		// POST /v1/webhooks/{name}.
		{"webhook: unknown", se, "POST", "/v1/webhooks/nosuch", jsonH, good, 404, httperr.NotFound},
		{"webhook: unsigned", se, "POST", "/v1/webhooks/slack", jsonH, slackBody, 401, httperr.SignatureMissing},
		{"webhook: wrongly signed", se, "POST", "/v1/webhooks/slack", with(taken, "X-Slack-Signature", "v0="+strings.Repeat("0", 64)), slackBody, 401, httperr.SignatureInvalid},
		{"webhook: stale", se, "POST", "/v1/webhooks/slack", slackSigned(noText, time.Now().Add(-time.Hour)), noText, 401, httperr.SignatureExpired},
		{"webhook: replayed", se, "POST", "/v1/webhooks/slack", taken, slackBody, 409, httperr.Replayed},
		{"webhook: unmapped", se, "POST", "/v1/webhooks/slack", slackSigned(noText, time.Now()), noText, 422, httperr.Unmapped},
		{"webhook: not JSON", se, "POST", "/v1/webhooks/slack", slackSigned("{", time.Now()), "{", 400, httperr.Invalid},
		{"webhook: JSONL", se, "POST", "/v1/webhooks/slack", with(taken, "Content-Type", ingestapi.ContentTypeNDJSON), slackBody, 415, httperr.UnsupportedMediaType},
		{"webhook: over the limit", se, "POST", "/v1/webhooks/slack", taken, strings.Repeat("x", maxBody+1), 413, httperr.TooLarge},
		{"webhook: GET", se, "GET", "/v1/webhooks/slack", nil, "", 405, httperr.MethodNotAllowed},

		// GET /v1/batches/{id}.
		{"batch: no token", se, "GET", "/v1/batches/b-errors", nil, "", 401, httperr.Unauthenticated},
		{"batch: bad wait", se, "GET", "/v1/batches/b-errors?wait=2h", withAuth, "", 400, httperr.Invalid},
		{"batch: repeated parameter", se, "GET", "/v1/batches/b-errors?wait=1s&wait=2s", withAuth, "", 400, httperr.Invalid},
		{"batch: unknown", se, "GET", "/v1/batches/b-nonesuch", withAuth, "", 404, httperr.NotFound},
		{"batch: not text", se, "GET", "/v1/batches/b%00", withAuth, "", 404, httperr.NotFound},
		{"batch: a body", se, "GET", "/v1/batches/b-errors", withAuth, "{}", 413, httperr.TooLarge},
		{"batch: DELETE", se, "DELETE", "/v1/batches/b-errors", withAuth, "", 405, httperr.MethodNotAllowed},
		{"batch: Postgres down", down, "GET", "/v1/batches/b-errors", withAuth, "", 503, httperr.Unavailable},

		// GET /v1/batches/{id}/results.
		{"results: no token", se, "GET", "/v1/batches/b-errors/results", nil, "", 401, httperr.Unauthenticated},
		{"results: bad after", se, "GET", "/v1/batches/b-errors/results?after=-1", withAuth, "", 400, httperr.Invalid},
		{"results: unknown", se, "GET", "/v1/batches/b-nonesuch/results", withAuth, "", 404, httperr.NotFound},
		{"results: POST", se, "POST", "/v1/batches/b-errors/results", withAuth, "", 405, httperr.MethodNotAllowed},

		// POST /v1/erasures.
		{"erasures: no token", se, "POST", "/v1/erasures", with(jsonH, "Authorization", ""), `{}`, 401, httperr.Unauthenticated},
		{"erasures: a parameter", se, "POST", "/v1/erasures?dry_run=1", jsonH, `{}`, 400, httperr.Invalid},
		{"erasures: JSONL", se, "POST", "/v1/erasures", ndjson, `{}`, 415, httperr.UnsupportedMediaType},
		{"erasures: Latin-1", se, "POST", "/v1/erasures", with(jsonH, "Content-Type", "application/json; charset=latin1"), `{}`, 415, httperr.UnsupportedMediaType},
		{"erasures: not an object", se, "POST", "/v1/erasures", jsonH, `[]`, 400, httperr.Invalid},
		{"erasures: no by", se, "POST", "/v1/erasures", jsonH, `{"messages": [{"id": "err-1"}]}`, 400, httperr.Invalid},
		{"erasures: over 1 MiB", se, "POST", "/v1/erasures", jsonH, `{"by": "` + strings.Repeat("x", 1<<20) + `"}`, 413, httperr.TooLarge},
		{"erasures: GET", se, "GET", "/v1/erasures", withAuth, "", 405, httperr.MethodNotAllowed},
		{"erasures: Postgres down", down, "POST", "/v1/erasures", jsonH, `{"by": "dpo", "messages": [{"id": "err-1"}]}`, 503, httperr.Unavailable},

		// GET /healthz, /readyz, /metrics.
		{"healthz: a body", se, "GET", "/healthz", nil, "x", 413, httperr.TooLarge},
		{"readyz: a body", se, "GET", "/readyz", nil, "x", 413, httperr.TooLarge},
		{"readyz: Postgres down", down, "GET", "/readyz", nil, "", 503, httperr.Unavailable},
		{"metrics: a body", se, "GET", "/metrics", nil, "x", 413, httperr.TooLarge},
	}
	seen := map[httperr.Code]bool{}
	for _, tt := range tests {
		var body *strings.Reader
		if tt.body != "" {
			body = strings.NewReader(tt.body)
		}
		req, err := http.NewRequest(tt.method, tt.srv.base+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if body != nil {
			req, _ = http.NewRequest(tt.method, tt.srv.base+tt.path, body)
		}
		auth := ""
		for k, v := range tt.header {
			switch k {
			case "Authorization":
				auth = v
			case "Host":
				req.Host = v
			default:
				req.Header.Set(k, v)
			}
		}
		r := do(t, req, auth)
		what := tt.name + " (" + tt.method + " " + tt.path + ")"
		if r.status != tt.status {
			t.Errorf("%s: status %d, want %d; body %.300s", what, r.status, tt.status, r.body)
		}
		code := httperrtest.Check(t, what, r.status, r.body, httperrtest.Extras{Beside: tt.status == 422 && tt.code != httperr.Unmapped})
		if code != tt.code {
			t.Errorf("%s: code %q, want %q", what, code, tt.code)
		}
		seen[code] = true
		switch tt.status {
		case 401:
			if r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s: 401 without WWW-Authenticate", what)
			}
		case 405:
			if r.header.Get("Allow") == "" {
				t.Errorf("%s: 405 without Allow", what)
			}
		case 503:
			if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s <= 0 {
				t.Errorf("%s: 503 with Retry-After %q", what, r.header.Get("Retry-After"))
			}
		}
	}
	// Every code the API answers is answered here, but too_many_requests
	// (TestServeBusy's) and internal (no request can cause it); forbidden
	// is the triage API's (this one answers cross_origin).
	for _, c := range httperr.Categories() {
		if !seen[c.Code] && c.Code != httperr.TooManyRequests && c.Code != httperr.Internal && c.Code != httperr.Forbidden {
			t.Errorf("no case answers %q", c.Code)
		}
	}
}
