package ingestapi_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap/zapcore"

	"github.com/extractq/extractq/ingestapi"
	"github.com/extractq/extractq/ingestapi/webhook"
	"github.com/extractq/extractq/ingestapi/webhook/webhooktest"
	"github.com/extractq/extractq/store"
)

const (
	zendeskSecret = "zendesk-secret-0123456789"
	githubSecret  = "github-secret-0123456789"
)

// zendeskMapping maps a Zendesk-like ticket event.
var zendeskMapping = webhook.Mapping{ID: "/ticket/id", Text: "/ticket/description", MetadataObject: "/ticket/fields",
	Metadata: map[string]string{"channel": "/ticket/via/channel"}}

// webhookServer is a server with three webhooks: zendesk (signed, with a
// timestamp), github (signed, without one) and plain (unsigned).
func webhookServer(t *testing.T, edit func(*ingestapi.ServerConfig)) *serverEnv {
	t.Helper()
	return newServerEnv(t, nil, func(c *ingestapi.ServerConfig) {
		c.Webhooks = []ingestapi.Webhook{
			{Name: "zendesk", Mapping: zendeskMapping, Verifier: &webhook.Verifier{Scheme: webhook.SchemeZendesk, Secret: []byte(zendeskSecret)}},
			{Name: "github", Mapping: webhook.Mapping{ID: "/issue/number", Text: "/issue/body", Source: "/repository/full_name"},
				Verifier: &webhook.Verifier{Scheme: webhook.SchemeGitHub, Secret: []byte(githubSecret)}},
			{Name: "plain", Mapping: webhook.Mapping{ID: "/id", Text: "/text"}, MaxBodyBytes: 200},
		}
		if edit != nil {
			edit(c)
		}
	})
}

// hook posts body to webhook name with header h and auth.
func (se *serverEnv) hook(t *testing.T, name string, h http.Header, body, auth string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, se.base+"/v1/webhooks/"+name, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return do(t, req, auth)
}

func zendeskBody(id int, text string) string {
	return fmt.Sprintf(`{"ticket": {"id": %d, "description": %q, "via": {"channel": "email"}, "fields": {"priority": "high"}}}`, id, text)
}

// A signed webhook goes through to a queued run and its message on the
// stream; unsigned, wrongly signed, tampered, stale or replayed ones are
// refused with their codes and store nothing.
func TestWebhookSigned(t *testing.T) {
	t.Parallel()
	se := webhookServer(t, nil)
	body := zendeskBody(4821, "Where is order 48213? It never came.")
	signed := webhooktest.Headers(webhook.SchemeZendesk, zendeskSecret, "", []byte(body), time.Now())

	r := se.hook(t, "zendesk", signed, body, "")
	if r.status != http.StatusOK || r.ans.Published != 1 || r.ans.Queued != 1 || r.ans.BatchID == "" {
		t.Fatalf("signed: %d %s", r.status, r.body)
	}
	msgs := se.Messages(t)
	if len(msgs) != 1 {
		t.Fatalf("stored %v, want 4821", msgs)
	}
	se.AssertStream(t, r.ans.BatchID, msgs)
	var source, meta, status string
	if err := se.Store.Pool.QueryRow(t.Context(), `SELECT m.source, m.metadata::text, r.status FROM messages m JOIN runs r ON r.message_id = m.id
		WHERE m.external_id = '4821' AND r.run_no = 1`).Scan(&source, &meta, &status); err != nil {
		t.Fatal(err)
	}
	if source != "zendesk" || meta != `{"channel": "email", "priority": "high"}` || status != "queued" {
		t.Errorf("message source %q, metadata %s, run %s; want zendesk, the mapped metadata, queued", source, meta, status)
	}
	if got := se.sourceName(t, r.ans.BatchID); got != "webhook:zendesk" {
		t.Errorf("batch source_name %q, want webhook:zendesk", got)
	}

	other := zendeskBody(4822, "Refund for order 48214 please")
	stale := webhooktest.Headers(webhook.SchemeZendesk, zendeskSecret, "", []byte(other), time.Now().Add(-10*time.Minute))
	wrong := webhooktest.Headers(webhook.SchemeZendesk, "not-the-secret", "", []byte(other), time.Now())
	for _, c := range []struct {
		what   string
		h      http.Header
		body   string
		status int
		code   string
		want   string
	}{
		{"unsigned", http.Header{}, other, 401, "signature_missing", "no X-Zendesk-Webhook-Signature header"},
		{"unsigned, with the bearer token", http.Header{"Authorization": {"Bearer " + testToken}}, other, 401, "signature_missing", "must be signed"},
		{"wrongly signed", wrong, other, 401, "signature_invalid", "not a signature of this body"},
		{"tampered", signed, strings.Replace(body, "48213", "48299", 1), 401, "signature_invalid", "a body changed on the way"},
		{"stale", stale, other, 401, "signature_expired", "the limit is 5m0s"},
		{"replayed", signed, body, 409, "replayed", "was taken already"},
	} {
		r := se.hook(t, "zendesk", c.h, c.body, "")
		wantError(t, c.what, r, c.status, c.code, c.want, "nothing was stored")
		if c.status == 401 && r.header.Get("WWW-Authenticate") != `Signature header="X-Zendesk-Webhook-Signature"` {
			t.Errorf("%s: WWW-Authenticate %q", c.what, r.header.Get("WWW-Authenticate"))
		}
	}
	if n := len(se.Messages(t)); n != 1 || se.StreamMsgs(t) != 1 {
		t.Errorf("after the refusals: %d messages, %d on the stream; want 1 and 1", n, se.StreamMsgs(t))
	}

	// A signed request that is refused is not remembered: its retry gets
	// the same answer, not "replayed".
	noText := `{"ticket": {"id": 4823}}`
	h := webhooktest.Headers(webhook.SchemeZendesk, zendeskSecret, "", []byte(noText), time.Now())
	for range 2 {
		wantError(t, "no text", se.hook(t, "zendesk", h, noText, ""), 422, "unmapped", `text (pointer "/ticket/description")`, `"/ticket" has no member "description"`)
	}

	// GitHub signs no timestamp: the same delivery again (its
	// "Redeliver") is taken as a duplicate of its message.
	gh := `{"issue": {"number": 7, "body": "Parcel 48215 never came"}, "repository": {"full_name": "acme/support"}}`
	ghh := webhooktest.Headers(webhook.SchemeGitHub, githubSecret, "", []byte(gh), time.Now())
	if r := se.hook(t, "github", ghh, gh, ""); r.status != 200 || r.ans.Published != 1 {
		t.Errorf("github: %d %s", r.status, r.body)
	}
	if r := se.hook(t, "github", ghh, gh, ""); r.status != 200 || r.ans.Published != 0 || r.ans.Duplicates != 1 || r.ans.BatchID != "" {
		t.Errorf("github again: %d %s, want a duplicate recording no batch (no batch_id)", r.status, r.body)
	}

	// One info line a request, naming the webhook; never a secret or a text.
	var lines int
	for _, en := range se.logs.All() {
		all := en.Message
		for k, v := range en.ContextMap() {
			all += fmt.Sprintf(" %s=%v", k, v)
		}
		for _, secret := range []string{zendeskSecret, githubSecret, "48213", "Refund", "never came"} {
			if strings.Contains(all, secret) {
				t.Errorf("log line holds %q: %s", secret, all)
			}
		}
		if en.Message == "POST /v1/webhooks/{name}" {
			lines++
			if cm := en.ContextMap(); cm["webhook"] == nil || cm["status"] == nil || en.Level != zapcore.InfoLevel {
				t.Errorf("request log line %v %v", en.Level, cm)
			}
		}
	}
	if lines != 11 {
		t.Errorf("%d request log lines, want 11", lines)
	}
}

// The errors of a webhook's request: each named, nothing stored.
func TestWebhookErrors(t *testing.T) {
	t.Parallel()
	se := webhookServer(t, nil)
	auth := map[string][]string{"Authorization": {"Bearer " + testToken}}
	sign := func(body string) http.Header {
		return webhooktest.Headers(webhook.SchemeZendesk, zendeskSecret, "", []byte(body), time.Now())
	}
	with := func(h http.Header, k, v string) http.Header {
		h = h.Clone()
		h.Set(k, v)
		return h
	}
	long := `{"id": "p-1", "text": "` + strings.Repeat("x", 300) + `"}`
	for _, c := range []struct {
		what, name string
		h          http.Header
		body       string
		status     int
		code       string
		want       []string
	}{
		{"unknown webhook", "nosuch", auth, `{}`, 404, "not_found", []string{`no webhook "nosuch" (the names are in ingest.webhooks of the configuration)`}},
		{"unsigned webhook, no token", "plain", nil, `{"id": "p-1", "text": "hi"}`, 401, "unauthenticated", []string{"Bearer"}},
		{"a query parameter", "plain", auth, `{"id": "p-1", "text": "hi"}`, 400, "invalid", nil},
		{"not JSON", "plain", with(auth, "Content-Type", "application/x-ndjson"), `{"id": "p-1", "text": "hi"}`, 415, "unsupported_media_type", []string{"a webhook's body is application/json"}},
		{"too large", "plain", auth, long, 413, "too_large", []string{"webhook plain's limit is 200 bytes (ingest.webhooks[2].max_body_bytes); nothing was stored"}},
		{"gzip", "plain", auth, "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage", 400, "compressed_body", []string{"send it uncompressed"}},
		{"broken JSON", "plain", auth, `{"id": "p-1", "text": `, 400, "invalid", []string{"webhook plain: the body is not JSON"}},
		{"a key twice", "plain", auth, `{"id": "p-1", "id": "p-2", "text": "hi"}`, 400, "invalid", []string{"the key /id twice"}},
		{"no id", "plain", auth, `{"text": "hi"}`, 422, "unmapped", []string{`id (pointer "/id"): not found: the body has no member "id"`}},
		{"id not a string or number", "plain", auth, `{"id": [1], "text": "hi"}`, 422, "unmapped", []string{`id (pointer "/id")`, "an array there; an id is a string or an integer"}},
		{"text not a string", "plain", auth, `{"id": "p-1", "text": null}`, 422, "unmapped", []string{`text (pointer "/text")`, "null there"}},
		{"empty text", "plain", auth, `{"id": "p-1", "text": "  "}`, 422, "unprocessable", []string{`"text" is empty or only white space (text is the body's "/text")`}},
		{"id with white space", "zendesk", sign(`{"ticket": {"id": " z ", "description": "hi"}}`), `{"ticket": {"id": " z ", "description": "hi"}}`, 422, "unprocessable",
			[]string{`starts or ends with white space`, `(id is the body's "/ticket/id")`}},
	} {
		path := c.name
		if c.what == "a query parameter" {
			path += "?batch=b-1"
		}
		wantError(t, c.what, se.hook(t, path, c.h, c.body, ""), c.status, c.code, c.want...)
	}
	// An unknown name, with no token, tells nothing of the configured ones.
	if r := se.hook(t, "nosuch", nil, `{}`, ""); r.status != 404 ||
		bytes.Contains(r.body, []byte("github")) || bytes.Contains(r.body, []byte("plain")) || bytes.Contains(r.body, []byte("zendesk")) {
		t.Errorf("unknown webhook without a token: %d %s; want 404 naming no configured webhook", r.status, r.body)
	}
	if n := se.CountSQL(t, `SELECT count(*) FROM messages`); n != 0 || se.StreamMsgs(t) != 0 {
		t.Errorf("%d messages stored, %d on the stream; want none", n, se.StreamMsgs(t))
	}
	if r := se.hook(t, "plain", auth, `{"id": "p-1", "text": "Where is order 48213?", "extra": 1}`, ""); r.status != 200 || r.ans.Published != 1 {
		t.Errorf("plain with the token: %d %s", r.status, r.body)
	}
}

// A bad webhook configuration stops NewServer, naming it.
func TestWebhookConfig(t *testing.T) {
	t.Parallel()
	e := newServerEnv(t, nil, nil).Env
	for _, c := range []struct {
		w    ingestapi.Webhook
		want string
	}{
		{ingestapi.Webhook{Name: "a b", Mapping: webhook.Mapping{ID: "/i", Text: "/t"}}, `ingest.webhooks[0].name: "a b": use 1 to 64 letters`},
		{ingestapi.Webhook{Name: "a", Schema: "nosuch", Mapping: webhook.Mapping{ID: "/i", Text: "/t"}}, `ingest.webhooks[0].schema: "nosuch" is not configured`},
		{ingestapi.Webhook{Name: "a", Mapping: webhook.Mapping{ID: "i", Text: "/t"}}, `ingest.webhooks[0].id: "i" is not a JSON Pointer`},
		{ingestapi.Webhook{Name: "a", Mapping: webhook.Mapping{ID: "/i", Text: "/t"}, Verifier: &webhook.Verifier{Scheme: "md5", Secret: []byte("s")}},
			`ingest.webhooks[0].signature.scheme: "md5"`},
		{ingestapi.Webhook{Name: "a", Mapping: webhook.Mapping{ID: "/i", Text: "/t"}, Verifier: &webhook.Verifier{Scheme: webhook.SchemeHMAC, Secret: []byte("s")}},
			"ingest.webhooks[0].signature.header: scheme hmac-sha256 needs"},
	} {
		_, err := ingestapi.NewServer(ingestapi.ServerConfig{Store: e.Store, Publisher: e.Pub, Conn: e.JS.Conn(), Schemas: []string{"customer_message"},
			MaxTextBytes: 100, Webhooks: []ingestapi.Webhook{c.w}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.w, err, c.want)
		}
	}
}

// A webhook is admitted as POST /v1/messages is, sharing its places: with
// every place held by a POST of messages, a webhook waits BusyWait and is
// answered 429 with Retry-After 1; with Postgres down, 503 with
// Retry-After, telling the sender to send it again. Nothing is stored.
func TestWebhookAdmission(t *testing.T) {
	t.Parallel()
	auth := map[string][]string{"Authorization": {"Bearer " + testToken}}
	body := `{"id": "a-1", "text": "Where is order 48213?"}`

	t.Run("Busy", func(t *testing.T) {
		t.Parallel()
		se := webhookServer(t, func(c *ingestapi.ServerConfig) { c.MaxRequests, c.BusyWait = 1, 100*time.Millisecond })
		pw, replies, errs := se.pipePost(t)
		if _, err := pw.Write([]byte(`{"id": "b-1", "text": "Refund 48214"}` + "\n")); err != nil {
			t.Fatal(err)
		}
		se.waitBusy(t, 1)
		wantBusy(t, "webhook while busy", se.hook(t, "plain", auth, body, ""))
		pw.Close()
		wantHeld(t, "the POST holding the place", replies, errs)
		if n := se.CountSQL(t, `SELECT count(*) FROM messages WHERE external_id = 'a-1'`); n != 0 {
			t.Errorf("%d webhook messages stored, want none", n)
		}
		if r := se.hook(t, "plain", auth, body, ""); r.status != http.StatusOK || r.ans.Published != 1 {
			t.Errorf("the webhook once free: %d %s", r.status, r.body)
		}
	})

	t.Run("NotReady", func(t *testing.T) {
		t.Parallel()
		pool, err := pgxpool.New(t.Context(), "postgres://postgres@127.0.0.1:1/extractq_test?sslmode=disable&connect_timeout=2")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		se := webhookServer(t, func(c *ingestapi.ServerConfig) { c.Store = &store.Store{Pool: pool} })
		r := se.hook(t, "plain", auth, body, "")
		wantError(t, "webhook with Postgres down", r, http.StatusServiceUnavailable, "unavailable",
			"Postgres is unreachable", "nothing was stored: send the webhook again later")
		if r.header.Get("Retry-After") == "" {
			t.Error("503 without Retry-After")
		}
	})
}
