package triage_test

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/bcrypt"

	"github.com/extractq/extractq/extracttype"
	"github.com/extractq/extractq/pipeline"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/queue/queuetest"
	"github.com/extractq/extractq/schemas"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
	"github.com/extractq/extractq/triage"
)

// Fixtures for the handler and browser tests: a private Postgres schema,
// the product's real schemas, failed runs made with the real validator,
// and a TLS test server (the session cookie is Secure).

// albertText is a real ABCD customer message (testdata/abcd, MIT).
const albertText = "Hello. I recently signed up for a subscription but it looks like you guys charged me twice for it.\n" +
	"sure, it's Albert Sanders and my account id is U85ALFLG2Z\nyes its 7149958247\nsilver\nit was 20 dollars\n" +
	"so you increased the cost of the service??\nok i understand\nnope thanks"

// albertFirst invents an order id (not in the message) and writes the
// amount with its unit: a grounding error and a pattern error.
const albertFirst = `{"intent":"manage_dispute_bill","flow":"subscription_inquiry","full_name":"Albert Sanders",` +
	`"account_id":"U85ALFLG2Z","username":null,"email":null,"phone":null,"membership_level":"silver",` +
	`"order_id":"7149958241","zip_code":null,"street_address":null,"city":null,"state":null,"payment_method":null,` +
	`"purchase_date":null,"refund_amount":"20 dollars","product_names":null}`

// albertRepair fixes the amount but keeps the invented order id.
const albertRepair = `{"intent":"manage_dispute_bill","flow":"subscription_inquiry","full_name":"Albert Sanders",` +
	`"account_id":"U85ALFLG2Z","username":null,"email":null,"phone":null,"membership_level":"silver",` +
	`"order_id":"7149958241","zip_code":null,"street_address":null,"city":null,"state":null,"payment_method":null,` +
	`"purchase_date":null,"refund_amount":"20","product_names":null}`

// hostileText holds markup, an attribute breakout, right-to-left text and
// a bidi override: all must show as text.
const hostileText = "Hi <script>alert('xss')</script> my order \"><img src=x onerror=alert(2)> is 1234567890\n" +
	"مرحبا، طلبي لم يصل \u202Egnp.exe\u202C and a zero\u200Bwidth space. Name: Dana Cruz"

// hostileReply echoes the markup into a field value.
const hostileReply = `{"intent":"missing","flow":"shipping_issue","full_name":"<script>alert('name')</script>",` +
	`"account_id":null,"username":null,"email":null,"phone":null,"membership_level":null,` +
	`"order_id":"1234567890","zip_code":null,"street_address":null,"city":null,"state":null,"payment_method":null,` +
	`"purchase_date":null,"refund_amount":null,"product_names":null}`

type bundle struct {
	st      *store.Store
	srv     *triage.Server
	ts      *httptest.Server
	origin  string // what a page of the server sends as Origin: ts.URL, or Config.PublicURL
	schemas map[string]triage.SchemaEntry
	batch   string
	q       *queuetest.Bundle
	seq     atomic.Int64
}

type bundleOpts struct {
	stream   bool                 // publish re-runs to a private stream
	local    bool                 // LocalOnly: no accounts
	registry *prometheus.Registry // Config.Registry
	logins   int                  // Config.LoginsPerMinute; 0 for the default
	plain    bool                 // serve plain HTTP (and InsecureCookies), not TLS
	public   string               // Config.PublicURL
	live     bool                 // Config.Events: item events on a private subject prefix (with a stream)
}

// loadSchemas returns the product's schemas as the server takes them: a
// map of its own for each caller, of schemas compiled once per test
// binary (compiling them, CEL rules and all, took a second of CPU a
// bundle under the race detector). A compiled schema is safe for
// concurrent use, as the worker uses it.
func loadSchemas(t testing.TB) map[string]triage.SchemaEntry {
	t.Helper()
	compiled, err := compiledSchemas()
	if err != nil {
		t.Fatal(err)
	}
	return maps.Clone(compiled)
}

var compiledSchemas = sync.OnceValues(func() (map[string]triage.SchemaEntry, error) {
	out := map[string]triage.SchemaEntry{}
	for id, file := range map[string]string{"customer_message": "customer_message.v1.json", "return_request": "return_request.v1.json"} {
		s, err := pipeline.LoadSchema(schemas.FS, id, file)
		if err != nil {
			return nil, err
		}
		out[id] = triage.SchemaEntry{Schema: s, PromptVersion: "extract.v1"}
	}
	return out, nil
})

func newBundle(t testing.TB, o bundleOpts) *bundle {
	t.Helper()
	ctx := context.Background()
	b := &bundle{st: storetest.NewStore(t), schemas: loadSchemas(t)}
	cfg := triage.Config{Store: b.st, Schemas: b.schemas, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
		LocalOnly: o.local, LocalCheckEvery: 100e6, PollInterval: 200e6, Registry: o.registry, LoginsPerMinute: o.logins,
		InsecureCookies: o.plain, PublicURL: o.public, BcryptCost: bcrypt.MinCost}
	if o.stream || o.live {
		b.q = queuetest.NewStream(t)
		cfg.Publisher = queue.NewPublisher(b.q.JS, b.q.NATS)
	}
	if o.live {
		cfg.Events, cfg.EventsNATS = b.q.Conn, b.q.NATS
	}
	srv, err := triage.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = srv
	if o.plain {
		b.ts = httptest.NewServer(srv.Handler())
	} else {
		b.ts = httptest.NewTLSServer(srv.Handler())
	}
	b.origin = cmp.Or(o.public, b.ts.URL)
	t.Cleanup(func() {
		srv.Close()
		b.ts.Close()
	})
	b.batch = fmt.Sprintf("b-%d", b.seq.Add(1))
	if err := b.st.BatchInsert(ctx, b.st.Pool, store.BatchInsertParams{ID: b.batch, SchemaID: "customer_message"}); err != nil {
		t.Fatal(err)
	}
	return b
}

// failedItem records message text and a failed run whose calls replied
// replies (one or two), with the error list the worker's validator gives
// the last one. It returns the triage item's id and the message's id.
func (b *bundle) failedItem(t testing.TB, schemaID, text string, replies ...string) (int64, int64) {
	t.Helper()
	ctx := context.Background()
	ext := fmt.Sprintf("msg-%d", b.seq.Add(1))
	h := sha256.Sum256([]byte(text))
	res, err := b.st.MessageIngest(ctx, b.st.Pool, store.MessageIngestParams{Source: "test", ExternalID: ext, Body: text,
		ContentHash: h[:], BatchID: b.batch, SchemaID: schemaID})
	if err != nil {
		t.Fatal(err)
	}
	sch := b.schemas[schemaID].Schema
	validate := func(reply string) extracttype.ErrorList {
		rep, errs := pipeline.ParseReply(reply)
		if len(errs) > 0 {
			return errs
		}
		errs, _ = sch.Validate(any(rep.Object), text)
		return errs
	}
	var calls []store.LLMCall
	var failures []store.FailureEvent
	var errs extracttype.ErrorList
	for i, reply := range replies {
		errs = validate(reply)
		c := store.LLMCall{Attempt: i + 1, Model: "extractq-sim-1", PromptVersion: "extract.v1", RequestMode: "response_format",
			PromptTokens: 1800 + 150*i, CompletionTokens: 120 - 40*i, CostUSD: 0.00034 + 0.0001*float64(i), PriceVersion: "2026-11-01",
			LatencyMS: 420 + 100*i, FinishReason: "stop", Reply: reply, ErrorCount: len(errs)}
		if i == 1 {
			c.RepairStrategy = "regenerate"
		}
		calls = append(calls, c)
		for _, e := range errs {
			failures = append(failures, store.FailureEvent{CallIndex: i, Err: e})
		}
	}
	if len(errs) == 0 {
		t.Fatalf("failedItem: the last reply validates")
	}
	err = b.st.RunOutcomeInsert(ctx, b.st.Pool, store.RunOutcomeParams{
		MessageID: res.Run.MessageID, RunNo: 1, SchemaID: schemaID, SchemaVersion: sch.Version, Status: store.RunFailed,
		Calls: calls, Failures: failures,
		Triage: &store.TriageParams{Reason: string(errs[0].Kind), Errors: errs, LastReply: replies[len(replies)-1]},
	})
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := b.st.Pool.QueryRow(ctx, `SELECT id FROM triage_items WHERE message_id = $1`, res.Run.MessageID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id, res.Run.MessageID
}

// reviewer creates an admin account (every power, as accounts had
// before roles) with a cheap bcrypt hash.
func (b *bundle) reviewer(t testing.TB, login, password string) {
	t.Helper()
	b.account(t, login, password, store.RoleAdmin)
}

// account creates an account of role with a cheap bcrypt hash.
func (b *bundle) account(t testing.TB, login, password string, role store.Role) {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.st.ReviewerInsert(context.Background(), b.st.Pool, store.ReviewerInsertParams{Login: login, Name: strings.ToUpper(login[:1]) + login[1:], PasswordHash: string(h), Role: role}); err != nil {
		t.Fatal(err)
	}
}

// client is a browser-like client: a cookie jar, no redirects followed.
type client struct {
	t    testing.TB
	b    *bundle
	http *http.Client
	csrf string
}

// newAliceBundle returns a bundle with the reviewer alice (password
// "correct horse battery") and a client logged in as her.
func newAliceBundle(t testing.TB) (*bundle, *client) {
	t.Helper()
	b := newBundle(t, bundleOpts{})
	b.reviewer(t, "alice", "correct horse battery")
	c := b.client(t)
	c.login("alice", "correct horse battery")
	return b, c
}

func (b *bundle) client(t testing.TB) *client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	hc := *b.ts.Client() // a copy: each client has its own jar
	hc.Jar = jar
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &client{t: t, b: b, http: &hc}
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`)

type response struct {
	status   int
	body     string
	location string
	header   http.Header
}

func (c *client) do(req *http.Request) response {
	c.t.Helper()
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, body: string(body), location: resp.Header.Get("Location"), header: resp.Header}
	if m := csrfMeta.FindStringSubmatch(r.body); m != nil {
		c.csrf = m[1]
	}
	return r
}

func (c *client) get(path string) response {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.b.ts.URL+path, nil)
	return c.do(req)
}

// approvePath is the item page's Approve (not the API's).
var approvePath = regexp.MustCompile(`^/items/\d+/approve(\?|$)`)

// post posts a form with the session's CSRF token (unless the form has
// one), as a page of this site would. An approve from the item page's
// form without a validated digest gets the one the page would carry: the
// form is checked first, as the page's script does before it approves.
// (TestPageApproveWithoutDigest posts one without.)
func (c *client) post(path string, form url.Values) response {
	c.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf_token"]; !ok {
		form.Set("csrf_token", c.csrf)
	}
	if _, ok := form["validated"]; !ok && approvePath.MatchString(path) {
		if d, ok := c.checkedDigest(strings.Replace(path, "/approve", "/check", 1), form); ok {
			form = maps.Clone(form) // the caller's form may be posted again, changed
			form.Set("validated", d)
		}
	}
	return c.postForm(path, form)
}

// checkedDigest posts form to the item's check path as the page's script
// does and returns the digest of the record it checked; false when the
// check is refused (the approve is then refused alike).
func (c *client) checkedDigest(path string, form url.Values) (string, bool) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, c.b.ts.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Origin", c.b.origin)
	r := c.do(req)
	var body struct {
		Digest string `json:"digest"`
	}
	if r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &body) != nil || body.Digest == "" {
		return "", false
	}
	return body.Digest, true
}

// postForm posts form as it is, with the session's CSRF token unless
// the form has one.
func (c *client) postForm(path string, form url.Values) response {
	c.t.Helper()
	if _, ok := form["csrf_token"]; !ok {
		form.Set("csrf_token", c.csrf)
	}
	req, _ := http.NewRequest(http.MethodPost, c.b.ts.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", c.b.origin)
	return c.do(req)
}

// login logs in through the login page.
func (c *client) login(login, password string) response {
	c.t.Helper()
	c.get("/login")
	r := c.post("/login", url.Values{"login": {login}, "password": {password}, "next": {"/"}})
	if r.status == http.StatusSeeOther {
		c.get(r.location) // as a browser does: the new session's page and CSRF token
	}
	return r
}

// api calls the JSON API with a bearer token.
func (b *bundle) api(t testing.TB, token, method, path, body string) response {
	t.Helper()
	req, _ := http.NewRequest(method, b.ts.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	c := b.client(t)
	return c.do(req)
}
