package ingestapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/ingestapi"
	"github.com/extractq/extractq/internal/httperr/httperrtest"
	"github.com/extractq/extractq/queue"
	"github.com/extractq/extractq/store"
)

// testToken is the bearer token of the test servers.
const testToken = "test-token-0123456789abcdef"

// serverEnv is a Server on a private schema and stream (newEnv), serving
// on a loopback port until the test ends.
type serverEnv struct {
	*ingesttest.Env
	srv  *ingestapi.Server
	base string // http://127.0.0.1:PORT
	// cancel ends Serve; done has its result.
	cancel context.CancelFunc
	done   chan error
	// logs holds what the server logged at info level and above.
	logs *observer.ObservedLogs
}

// newServerEnv starts a Server with the test token, the schemas
// customer_message and return_request, and the test text limit; edit may
// change its config. The server stops when the test ends, with a
// shutdown grace of 5s.
func newServerEnv(t *testing.T, e *ingesttest.Env, edit func(*ingestapi.ServerConfig)) *serverEnv {
	t.Helper()
	return newServerEnvGrace(t, e, 5*time.Second, edit)
}

// newServerEnvGrace is newServerEnv with the given shutdown grace. A test
// that reads se.done itself puts the result back for the cleanup.
func newServerEnvGrace(t *testing.T, e *ingesttest.Env, grace time.Duration, edit func(*ingestapi.ServerConfig)) *serverEnv {
	t.Helper()
	if e == nil {
		e = ingesttest.NewEnv(t)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	cfg := ingestapi.ServerConfig{
		Store: e.Store, Publisher: e.Pub, Conn: e.JS.Conn(), Schemas: []string{ingesttest.Schema, "return_request"},
		MaxTextBytes: ingesttest.MaxText, Token: testToken,
		Logger: zap.New(zapcore.NewTee(core, zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel)).Core())),
	}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := ingestapi.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	se := &serverEnv{Env: e, srv: srv, base: "http://" + ln.Addr().String(), cancel: cancel, done: make(chan error, 1), logs: logs}
	go func() { se.done <- srv.Serve(ctx, ln, grace) }()
	t.Cleanup(func() {
		cancel()
		if err := <-se.done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return se
}

// answer is a POST's JSON body: the report, and error for an error.
type answer struct {
	ingest.Report
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// reply is a response read in full.
type reply struct {
	status int
	header http.Header
	body   []byte
	ans    answer
}

// do sends req (adding the test token unless noAuth) and reads the reply.
func do(t *testing.T, req *http.Request, auth string) reply {
	t.Helper()
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, body: b}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json; body %s", req.Method, req.URL, ct, b)
	}
	if err := json.Unmarshal(b, &r.ans); err != nil {
		t.Errorf("%s %s: body is not JSON: %v\n%s", req.Method, req.URL, err, b)
	}
	return r
}

// post posts body with contentType to /v1/messages?query with the token.
func (se *serverEnv) post(t *testing.T, query, contentType, body string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, se.base+"/v1/messages?"+query, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return do(t, req, "Bearer "+testToken)
}

func (se *serverEnv) get(t *testing.T, path string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, se.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req, "")
}

// wantError checks an error reply's status and code, and that its
// message holds each of want.
func wantError(t *testing.T, what string, r reply, status int, code string, want ...string) {
	t.Helper()
	if r.status != status {
		t.Errorf("%s: status %d, want %d; body %s", what, r.status, status, r.body)
	}
	if r.ans.Error == nil {
		t.Errorf("%s: no error object in %s", what, r.body)
		return
	}
	if r.ans.Error.Code != code {
		t.Errorf("%s: error code %q, want %q", what, r.ans.Error.Code, code)
	}
	for _, w := range want {
		if !strings.Contains(r.ans.Error.Message, w) {
			t.Errorf("%s: error message %q does not contain %q", what, r.ans.Error.Message, w)
		}
	}
	// The one shape, with a documented code (docs/http-errors.md): a 422,
	// and a 503 part way, carry the report beside the error.
	httperrtest.Check(t, what, r.status, r.body, httperrtest.Extras{Beside: status == 422 || status == 503})
}

func (se *serverEnv) sourceName(t *testing.T, batchID string) string {
	t.Helper()
	var s string
	if err := se.Store.Pool.QueryRow(t.Context(), `SELECT source_name FROM batches WHERE id = $1`, batchID).Scan(&s); err != nil {
		t.Fatalf("batch %s: %v", batchID, err)
	}
	return s
}

var generatedBatch = regexp.MustCompile(`^b-\d{8}-\d{6}-[0-9a-f]{6}$`)

func TestServeJSONL(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	body := `{"id": "h-1", "text": "Where is order 48213?"}` + "\n" +
		`{"id": "h-bad"}` + "\n" +
		`{"id": "h-2", "text": "Refund for order 48214 please", "channel": "chat"}` + "\n" +
		`{"id": 3, "text": "Parcel 48215 never came"}` + "\n"

	r := se.post(t, "", "application/x-ndjson", body)
	if r.status != http.StatusOK {
		t.Fatalf("status %d, want 200; body %s", r.status, r.body)
	}
	rep := r.ans.Report
	if r.ans.Error != nil || rep.Lines != 4 || rep.Published != 3 || rep.Duplicates != 0 || rep.Rejected != 1 || rep.Queued != 3 {
		t.Errorf("report %s, want 4 lines, 3 published and queued, 1 rejected, no error", r.body)
	}
	if len(rep.Errors) != 1 || rep.Errors[0] != (ingest.LineError{Line: 2, ID: "h-bad", Reason: `missing "text"`}) {
		t.Errorf("errors %+v, want line 2 missing text", rep.Errors)
	}
	if !generatedBatch.MatchString(rep.BatchID) {
		t.Errorf("batch_id %q, want a generated one", rep.BatchID)
	}
	// The same object as ingest -json: every key of the report.
	var keys map[string]any
	if err := json.Unmarshal(r.body, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"batch_id", "lines", "published", "duplicates", "rejected", "queued", "succeeded", "repaired", "failed",
		"llm_calls", "prompt_tokens", "completion_tokens", "cost_usd", "errors"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("report has no %q: %s", k, r.body)
		}
	}
	msgs := se.Messages(t)
	if len(msgs) != 3 {
		t.Errorf("stored messages %v, want h-1, h-2, 3", msgs)
	}
	se.AssertStream(t, rep.BatchID, msgs)
	if got := se.sourceName(t, rep.BatchID); got != "http:127.0.0.1" {
		t.Errorf("batch source_name %q, want http:127.0.0.1", got)
	}
	var meta string
	if err := se.Store.Pool.QueryRow(t.Context(), `SELECT metadata::text FROM messages WHERE external_id = 'h-2'`).Scan(&meta); err != nil || meta != `{"channel": "chat"}` {
		t.Errorf("h-2 metadata %s (%v), want channel chat", meta, err)
	}

	// The same body again, named: all duplicates, nothing published.
	r = se.post(t, "name=crm-sync", "application/jsonl; charset=utf-8", body)
	if r.status != http.StatusOK {
		t.Fatalf("again: status %d, want 200; body %s", r.status, r.body)
	}
	rep2 := r.ans.Report
	if rep2.Published != 0 || rep2.Duplicates != 3 || rep2.Rejected != 1 || rep2.QueuedDuplicates != 3 || rep2.Queued != 3 || rep2.BatchID != "" {
		t.Errorf("again: report %s, want no batch (nothing new) and 3 duplicates (still queued), 1 rejected", r.body)
	}
	if n := se.StreamMsgs(t); n != 3 {
		t.Errorf("stream holds %d messages after the second post, want 3", n)
	}
	// With one new message, named: the batch records the name.
	r = se.post(t, "name=crm-sync", "application/jsonl; charset=utf-8", body+`{"id": "h-4", "text": "One more"}`+"\n")
	if r.status != http.StatusOK || r.ans.Published != 1 || r.ans.BatchID == "" {
		t.Fatalf("with a new line: status %d, body %s", r.status, r.body)
	}
	if got := se.sourceName(t, r.ans.BatchID); got != "http:crm-sync" {
		t.Errorf("batch source_name %q, want http:crm-sync", got)
	}

	// One info line per request, with the batch and counts; never a text
	// or the token.
	var lines int
	for _, en := range se.logs.All() {
		all := en.Message
		for k, v := range en.ContextMap() {
			all += fmt.Sprintf(" %s=%v", k, v)
		}
		for _, secret := range []string{"48213", "Refund", "never came", testToken} {
			if strings.Contains(all, secret) {
				t.Errorf("log line holds %q: %s", secret, all)
			}
		}
		if en.Message == "POST /v1/messages" {
			lines++
			cm := en.ContextMap()
			_, batch := cm["batch_id"] // "" when nothing new got in
			if en.Level != zapcore.InfoLevel || cm["status"] != int64(200) || cm["lines"] == nil || !batch || cm["duration"] == nil {
				t.Errorf("request log line %v %v, want info with status, batch_id, lines, duration", en.Level, cm)
			}
		}
	}
	if lines != 3 {
		t.Errorf("%d request log lines, want 3", lines)
	}
}

func TestServeCSV(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	body := "id,text,channel\r\n" +
		"c-1,\"Hi, where is order 48213?\nIt is late.\",chat\r\n" +
		"c-2,too,many,fields\r\n" +
		"c-3,Refund 48214 please,\r\n"
	r := se.post(t, "schema=return_request&batch=b-http-csv", "text/csv", body)
	if r.status != http.StatusOK {
		t.Fatalf("status %d, want 200; body %s", r.status, r.body)
	}
	rep := r.ans.Report
	if rep.BatchID != "b-http-csv" || rep.Lines != 3 || rep.Published != 2 || rep.Rejected != 1 {
		t.Errorf("report %s, want batch b-http-csv, 3 records, 2 published, 1 rejected", r.body)
	}
	if len(rep.Errors) != 1 || rep.Errors[0].Line != 4 || rep.Errors[0].Reason != "has 4 fields, the header has 3" {
		t.Errorf("errors %+v, want line 4 (the record after a two-line one) with 4 fields", rep.Errors)
	}
	var text, meta string
	if err := se.Store.Pool.QueryRow(t.Context(), `SELECT body, metadata::text FROM messages WHERE external_id = 'c-1'`).Scan(&text, &meta); err != nil {
		t.Fatal(err)
	}
	if text != "Hi, where is order 48213?\nIt is late." || meta != `{"channel": "chat"}` {
		t.Errorf("c-1 stored as %q %s", text, meta)
	}
	if n := se.CountSQL(t, `SELECT count(*) FROM runs WHERE batch_id = 'b-http-csv' AND schema_id = 'return_request' AND published_at IS NOT NULL`); n != 2 {
		t.Errorf("%d published return_request runs, want 2", n)
	}
	if n := se.StreamMsgs(t); n != 2 {
		t.Errorf("stream holds %d messages, want 2", n)
	}
	// A batch id is used once.
	r = se.post(t, "batch=b-http-csv", "text/csv", body)
	wantError(t, "batch again", r, http.StatusConflict, "conflict", `batch "b-http-csv" already exists`)
	if n := se.StreamMsgs(t); n != 2 {
		t.Errorf("stream holds %d messages after the refused post, want 2", n)
	}
}

func TestServeJSON(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	r := se.post(t, "", "application/json", "{\n  \"id\": \"j-1\",\n  \"text\": \"Where is order 48213?\"\n}\n")
	if r.status != http.StatusOK || r.ans.Published != 1 || r.ans.Lines != 1 {
		t.Errorf("one object: status %d, body %s; want 200 with 1 published", r.status, r.body)
	}
	r = se.post(t, "", "application/json; charset=UTF-8",
		`[{"id": "j-2", "text": "Refund 48214"}, "not an object", {"id": "j-3", "text": "a\u00e9", "text": "b"}, {"id": "j-4", "text": "Late parcel 48215"}]`)
	if r.status != http.StatusOK || r.ans.Lines != 4 || r.ans.Published != 2 || r.ans.Rejected != 2 {
		t.Fatalf("array: status %d, body %s; want 200 with 4 lines, 2 published, 2 rejected", r.status, r.body)
	}
	want := []ingest.LineError{
		{Line: 2, Reason: "not a JSON object: the line is a JSON string"},
		{Line: 3, Reason: "key /text occurs twice"},
	}
	if fmt.Sprint(r.ans.Errors) != fmt.Sprint(want) {
		t.Errorf("array errors %+v, want %+v", r.ans.Errors, want)
	}
	if n := se.StreamMsgs(t); n != 3 {
		t.Errorf("stream holds %d messages, want 3", n)
	}

	for _, tt := range []struct{ name, body, code, msg string }{
		{"invalid JSON", `[{"id": "x", "text": }]`, "invalid", "invalid JSON at byte 22"},
		{"JSONL sent as JSON", "{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": \"b\", \"text\": \"y\"}\n", "invalid",
			"invalid JSON at byte 26: more after the first JSON value; send one object or an array, or JSONL with Content-Type: application/x-ndjson"},
		{"a string", `"hello"`, "invalid", "one JSON object or an array of objects"},
		{"empty array", ` [ ] `, "invalid", "empty JSON array"},
		{"cut off", "{\"id\":\n", "invalid", "invalid JSON at byte 6: unexpected end of JSON input (the body ends before its JSON value does)"},
		{"array cut off", `[{"id": "a", "text": "x"}, {"id"`, "invalid", "invalid JSON at byte 32: unexpected end of JSON input"},
	} {
		r := se.post(t, "", "application/json", tt.body)
		wantError(t, tt.name, r, http.StatusBadRequest, tt.code, tt.msg)
	}
}

func TestServeNothingAccepted(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	r := se.post(t, "", "application/x-ndjson", "not json\n{\"id\": \"x\"}\n")
	wantError(t, "every line bad", r, http.StatusUnprocessableEntity, "unprocessable", "every one of the 2 lines was rejected (see errors); nothing was queued")
	if r.ans.Lines != 2 || r.ans.Rejected != 2 || r.ans.Published != 0 || len(r.ans.Errors) != 2 || r.ans.Errors[1].Line != 2 || r.ans.BatchID != "" {
		t.Errorf("422 report %s, want 2 lines rejected with their errors, and no batch", r.body)
	}
	if bytes.Contains(r.body, []byte(`"batch_id"`)) {
		t.Errorf("422 report %s names a batch; none was recorded", r.body)
	}
	r = se.post(t, "", "application/x-ndjson", "nope\n")
	wantError(t, "one bad line", r, http.StatusUnprocessableEntity, "unprocessable", "the one line was rejected (see errors)")
	// CSV sent as JSONL: the hint says so.
	r = se.post(t, "", "application/x-ndjson", "id,text\n1,where is my order\n")
	wantError(t, "CSV as JSONL", r, http.StatusUnprocessableEntity, "unprocessable", "the body looks like CSV: send it with Content-Type: text/csv")
	if r.ans.Hint == "" {
		t.Errorf("no hint in %s", r.body)
	}
	if n := se.StreamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}
}

func TestServeRequestErrors(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, func(c *ingestapi.ServerConfig) { c.MaxBodyBytes = 1024 })
	good := `{"id": "e-1", "text": "Where is order 48213?"}` + "\n"
	big := strings.Repeat(good, 30) // over 1024 bytes
	tests := []struct {
		name, query, ctype, body string
		hdr                      map[string]string // replaces the token when it has Authorization
		status                   int
		code                     string
		msg                      []string
	}{
		{name: "empty body", ctype: "application/x-ndjson", status: 400, code: "invalid", msg: []string{"the body is empty"}},
		{name: "blank lines only", ctype: "application/x-ndjson", body: "\n \n", status: 400, code: "invalid", msg: []string{"(it has only blank lines)"}},
		{name: "CSV header only", ctype: "text/csv", body: "id,text\n", status: 400, code: "invalid", msg: []string{"only the CSV header row"}},
		{name: "bad CSV header", ctype: "text/csv", body: "id,body\n1,hello\n", status: 400, code: "invalid",
			msg: []string{`CSV header: no "text" column (the columns are "id", "body")`}},
		{name: "JSONL sent as CSV", ctype: "text/csv", body: good, status: 400, code: "invalid", msg: []string{"the body looks like JSONL"}},
		{name: "too large, declared", ctype: "application/x-ndjson", body: big, status: 413, code: "too_large",
			msg: []string{fmt.Sprintf("the body is %d bytes; the limit is 1024 bytes", len(big))}},
		{name: "wrong content type", ctype: "text/plain", body: good, status: 415, code: "unsupported_media_type",
			msg: []string{`Content-Type "text/plain" is not supported; send application/x-ndjson or application/jsonl (JSONL), text/csv`}},
		{name: "no content type", body: good, status: 415, code: "unsupported_media_type", msg: []string{"no Content-Type; send application/x-ndjson"}},
		{name: "not UTF-8", ctype: "text/csv; charset=latin1", body: "id,text\n1,caf\xe9\n", status: 415, code: "unsupported_media_type",
			msg: []string{`charset "latin1": only UTF-8 is read`}},
		{name: "compressed", ctype: "application/x-ndjson", body: good, hdr: map[string]string{"Content-Encoding": "gzip"}, status: 415,
			code: "unsupported_media_type", msg: []string{`Content-Encoding "gzip" is not supported`}},
		{name: "unknown schema", query: "schema=invoice", ctype: "application/x-ndjson", body: good, status: 400, code: "invalid",
			msg: []string{`schema "invoice" is not configured; the configured schemas are customer_message, return_request`}},
		{name: "unknown parameter", query: "format=csv", ctype: "application/x-ndjson", body: good, status: 400, code: "invalid",
			msg: []string{`unknown query parameter "format": POST /v1/messages takes schema, batch, name`}},
		{name: "parameter twice", query: "batch=a&batch=b", ctype: "application/x-ndjson", body: good, status: 400, code: "invalid",
			msg: []string{"query parameter batch is given 2 times"}},
		{name: "empty parameter", query: "schema=", ctype: "application/x-ndjson", body: good, status: 400, code: "invalid",
			msg: []string{"query parameter schema is empty"}},
		{name: "control character in batch", query: "batch=a%00b", ctype: "application/x-ndjson", body: good, status: 400, code: "invalid",
			msg: []string{"query parameter batch contains a control character"}},
		{name: "no token", ctype: "application/x-ndjson", body: good, hdr: map[string]string{"Authorization": ""}, status: 401, code: "unauthenticated"},
		{name: "wrong token", ctype: "application/x-ndjson", body: good, hdr: map[string]string{"Authorization": "Bearer " + testToken + "x"},
			status: 401, code: "unauthenticated"},
		{name: "token as Basic", ctype: "application/x-ndjson", body: good, hdr: map[string]string{"Authorization": "Basic " + testToken},
			status: 401, code: "unauthenticated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, se.base+"/v1/messages?"+tt.query, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			auth := "Bearer " + testToken
			for k, v := range tt.hdr {
				if k == "Authorization" {
					auth = v
					continue
				}
				req.Header.Set(k, v)
			}
			r := do(t, req, auth)
			wantError(t, tt.name, r, tt.status, tt.code, tt.msg...)
			if tt.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
		})
	}

	t.Run("too large, chunked", func(t *testing.T) {
		// No Content-Length: found too long while read.
		req, err := http.NewRequest(http.MethodPost, se.base+"/v1/messages", io.MultiReader(strings.NewReader(big)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		if req.ContentLength != 0 {
			t.Fatalf("request has Content-Length %d; the test needs none", req.ContentLength)
		}
		r := do(t, req, "Bearer "+testToken)
		wantError(t, "chunked", r, http.StatusRequestEntityTooLarge, "too_large", "longer than the limit of 1024 bytes")
	})
	t.Run("routes", func(t *testing.T) {
		r := se.get(t, "/v1/messages")
		wantError(t, "GET /v1/messages", r, http.StatusMethodNotAllowed, "method_not_allowed", "takes POST")
		if r.header.Get("Allow") != "POST" {
			t.Errorf("405 Allow %q, want POST", r.header.Get("Allow"))
		}
		wantError(t, "GET /nowhere", se.get(t, "/nowhere"), http.StatusNotFound, "not_found", "POST /v1/messages")
	})

	// None of them stored or published anything.
	if n := se.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	if n := se.StreamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}
	// Within the limit it is taken.
	if r := se.post(t, "", "application/x-ndjson", good); r.status != http.StatusOK || r.ans.Published != 1 {
		t.Errorf("a body within the limit: status %d, body %s", r.status, r.body)
	}
}

func TestServeHealthAndReadiness(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	if r := se.get(t, "/healthz"); r.status != 200 {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
	if r := se.get(t, "/readyz"); r.status != 200 || !bytes.Contains(r.body, []byte(`"ready"`)) {
		t.Errorf("readyz: %d %s, want 200 ready", r.status, r.body)
	}

	// A second server whose database is unreachable (nothing listens on
	// port 1): up, not ready, and a POST is answered 503.
	pool, err := pgxpool.New(t.Context(), "postgres://postgres@127.0.0.1:1/extractq_test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	bad := newServerEnv(t, se.Env, func(c *ingestapi.ServerConfig) { c.Store = &store.Store{Pool: pool} })
	if r := bad.get(t, "/healthz"); r.status != 200 {
		t.Errorf("healthz with the database down: %d %s, want 200 (the process is up)", r.status, r.body)
	}
	r := bad.get(t, "/readyz")
	wantError(t, "readyz with the database down", r, http.StatusServiceUnavailable, "unavailable", "Postgres is unreachable")
	r = bad.post(t, "", "application/x-ndjson", `{"id": "down-1", "text": "Where is order 48213?"}`+"\n")
	wantError(t, "POST with the database down", r, http.StatusServiceUnavailable, "unavailable", "Postgres is unreachable", "nothing was stored")
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
}

// A stream that does not answer after the message is recorded: 503 with
// how far it got, and the message recorded but not published is published
// by the next post of the same body (as by the worker's sweeper).
func TestServePublishFails(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	nowhere := e.NATS
	nowhere.Stream = e.NATS.Stream + "_NONE"
	nowhere.SubjectPrefix = e.NATS.SubjectPrefix + "_none"
	pub := queue.NewPublisher(e.JS, nowhere)
	pub.MaxRetries = 0
	broken := newServerEnv(t, e, func(c *ingestapi.ServerConfig) {
		c.Publisher, c.Parallel, c.NATSRetryTime = pub, 1, 500*time.Millisecond
	})
	body := `{"id": "p-1", "text": "Where is order 48213?"}` + "\n" + `{"id": "p-2", "text": "Refund 48214"}` + "\n"

	r := broken.post(t, "", "application/x-ndjson", body)
	wantError(t, "publish fails", r, http.StatusServiceUnavailable, "unavailable",
		"NATS did not take the run for 500ms: no responders: no JetStream server answered for stream "+nowhere.Stream, "stopped after 1 line", "Post the same body again")
	if r.ans.BatchID == "" || r.ans.Lines != 1 || r.ans.Published != 0 {
		t.Errorf("503 report %s, want its batch, 1 line read, 0 published", r.body)
	}
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM runs WHERE published_at IS NULL`); n != 1 {
		t.Fatalf("%d runs recorded but not published, want 1 (kept for the sweeper)", n)
	}

	good := newServerEnv(t, e, nil)
	r = good.post(t, "", "application/x-ndjson", body)
	// p-1 was stored by the first post's batch: a duplicate here, published
	// now and counted as queued; p-2 is this batch's own.
	if r.status != http.StatusOK || r.ans.Published != 1 || r.ans.Duplicates != 1 || r.ans.Queued != 2 || r.ans.QueuedDuplicates != 1 {
		t.Fatalf("second post: %d %s, want 200 with 1 published and 1 queued duplicate", r.status, r.body)
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM runs WHERE published_at IS NULL`); n != 0 {
		t.Errorf("%d runs still unpublished, want 0", n)
	}
	if n := e.StreamMsgs(t); n != 2 {
		t.Errorf("stream holds %d messages, want 2", n)
	}
}

// pipePost starts a POST whose body is written by the test through the
// returned writer; its reply arrives on the channel.
func (se *serverEnv) pipePost(t *testing.T) (*io.PipeWriter, <-chan reply, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, se.base+"/v1/messages", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Authorization", "Bearer "+testToken)
	replies, errs := make(chan reply, 1), make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			errs <- err
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		r := reply{status: resp.StatusCode, header: resp.Header, body: b}
		_ = json.Unmarshal(b, &r.ans)
		replies <- r
	}()
	return pw, replies, errs
}

// waitBusy waits until n POSTs hold a request slot.
func (se *serverEnv) waitBusy(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); se.srv.Busy() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests in flight after 10s, want %d", se.srv.Busy(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wantBusy checks r is the 429 of a server whose one place is taken,
// with Retry-After 1.
func wantBusy(t *testing.T, what string, r reply) {
	t.Helper()
	wantError(t, what, r, http.StatusTooManyRequests, "too_many_requests", "the server handles 1 request at once")
	if r.header.Get("Retry-After") != "1" {
		t.Errorf("%s: 429 Retry-After %q, want 1", what, r.header.Get("Retry-After"))
	}
}

// wantHeld checks the answer of a POST that held the place (pipePost,
// one line written): 200 with 1 published.
func wantHeld(t *testing.T, what string, replies <-chan reply, errs <-chan error) {
	t.Helper()
	select {
	case r := <-replies:
		if r.status != http.StatusOK || r.ans.Published != 1 {
			t.Errorf("%s: %d %s, want 200 with 1 published", what, r.status, r.body)
		}
	case err := <-errs:
		t.Fatalf("%s: %v", what, err)
	}
}

func TestServeBusy(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, func(c *ingestapi.ServerConfig) { c.MaxRequests, c.BusyWait = 1, 100*time.Millisecond })
	pw, replies, errs := se.pipePost(t)
	if _, err := pw.Write([]byte(`{"id": "b-1", "text": "Where is order 48213?"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	se.waitBusy(t, 1)
	r := se.post(t, "", "application/x-ndjson", `{"id": "b-2", "text": "Refund 48214"}`+"\n")
	wantBusy(t, "second request", r)
	pw.Close()
	wantHeld(t, "first request", replies, errs)
	// Free again.
	if r := se.post(t, "", "application/x-ndjson", `{"id": "b-2", "text": "Refund 48214"}`+"\n"); r.status != http.StatusOK {
		t.Errorf("after the first: %d %s", r.status, r.body)
	}
}

func TestServeGracefulShutdown(t *testing.T) {
	t.Parallel()
	// A grace no stall of a loaded machine outlasts: the request in flight
	// must finish within it.
	se := newServerEnvGrace(t, nil, time.Minute, nil)
	pw, replies, errs := se.pipePost(t)
	if _, err := pw.Write([]byte(`{"id": "g-1", "text": "Where is order 48213?"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	se.waitBusy(t, 1)
	se.cancel() // as SIGTERM
	select {
	case err := <-se.done:
		t.Fatalf("Serve returned %v with a request in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	// New connections are refused while the one in flight finishes: once
	// Serve has closed its listener, which it does at once but which a
	// loaded machine may take a while to get to.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := fresh.Get(se.base + "/healthz"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("new requests were still served 10s after the shutdown began")
		}
	}
	select {
	case err := <-se.done:
		t.Fatalf("Serve returned %v with a request in flight", err)
	default:
	}
	if _, err := pw.Write([]byte(`{"id": "g-2", "text": "Refund 48214"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	select {
	case r := <-replies:
		if r.status != http.StatusOK || r.ans.Published != 2 {
			t.Errorf("in-flight request: %d %s, want 200 with 2 published", r.status, r.body)
		}
	case err := <-errs:
		t.Fatalf("in-flight request: %v", err)
	}
	select {
	case err := <-se.done:
		se.done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the request in flight finished")
	}
	if n := se.StreamMsgs(t); n != 2 {
		t.Errorf("stream holds %d messages, want 2", n)
	}
}

func TestServeGraceOver(t *testing.T) {
	t.Parallel()
	se := newServerEnvGrace(t, nil, 200*time.Millisecond, nil)
	e := se.Env
	pw, replies, errs := se.pipePost(t)
	if _, err := pw.Write([]byte(`{"id": "o-1", "text": "Where is order 48213?"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	se.waitBusy(t, 1)
	start := time.Now()
	se.cancel()
	select {
	case err := <-se.done:
		se.done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its grace with a request whose body never ends")
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("Serve returned after %v, before its grace of 200ms", d)
	}
	// The client's transport waits for its body to end before it reports
	// the closed connection.
	pw.CloseWithError(io.ErrUnexpectedEOF)
	select {
	case r := <-replies:
		t.Errorf("a request cut off by the shutdown was answered %d %s", r.status, r.body)
	case <-errs: // the connection was closed
	case <-time.After(10 * time.Second):
		t.Error("the cut-off request never ended")
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded from a body never read to its end, want 0", n)
	}
}

// A request whose body was read and whose ingest outlives the grace is
// stopped, and its client still gets the 503 with the report so far.
func TestServeGraceOverAnswersTheStoppedRequest(t *testing.T) {
	t.Parallel()
	se := newServerEnvGrace(t, nil, 100*time.Millisecond, func(c *ingestapi.ServerConfig) { c.Parallel = 1 })
	e := se.Env
	var body strings.Builder
	const lines = 50000
	for i := range lines {
		fmt.Fprintf(&body, `{"id": "g-%d", "text": "Where is order %d?"}`+"\n", i, 48213+i)
	}
	replies := make(chan reply, 1)
	go func() { replies <- se.post(t, "", "application/x-ndjson", body.String()) }()
	// Wait until the ingest is under way, then shut down.
	for deadline := time.Now().Add(60 * time.Second); e.CountSQL(t, `SELECT count(*) FROM messages`) < 10; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the ingest did not start")
		}
	}
	se.cancel()
	var r reply
	select {
	case r = <-replies:
	case <-time.After(60 * time.Second):
		t.Fatal("no answer")
	}
	if r.status != http.StatusServiceUnavailable || r.ans.Error == nil || r.ans.BatchID == "" || r.ans.Lines == 0 || r.ans.Lines >= lines {
		t.Fatalf("answer %d %s, want 503 with the report so far", r.status, r.body)
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM messages`); n < r.ans.Published {
		t.Errorf("%d messages stored, but the report says %d published", n, r.ans.Published)
	}
	// What was stored is queued, published or not, and the report says so.
	if n := e.CountSQL(t, `SELECT count(*) FROM runs WHERE status = 'queued'`); r.ans.Queued != n || n < r.ans.Published {
		t.Errorf("report queued %d, %d runs queued in the database (%d published)", r.ans.Queued, n, r.ans.Published)
	}
}
