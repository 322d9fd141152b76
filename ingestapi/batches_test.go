package ingestapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/ingestapi"
	"github.com/extractq/extractq/store"
)

// batchAnswer is GET /v1/batches/{id}'s body.
type batchAnswer struct {
	store.BatchSummary
	Done bool `json:"done"`
}

func (se *serverEnv) batchStatus(t *testing.T, path string) (reply, batchAnswer) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, se.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := do(t, req, "Bearer "+testToken)
	var b batchAnswer
	if r.status == http.StatusOK {
		if err := json.Unmarshal(r.body, &b); err != nil {
			t.Fatalf("GET %s: %v\n%s", path, err, r.body)
		}
	}
	return r, b
}

// finishRuns writes a first-pass success as the outcome of every queued
// run of batch, as a worker would.
func finishRuns(t *testing.T, e *ingesttest.Env, batch string) {
	t.Helper()
	ctx := t.Context()
	rows, err := e.Store.Pool.Query(ctx, `SELECT message_id, run_no FROM runs WHERE batch_id = $1 AND status = 'queued'`, batch)
	if err != nil {
		t.Fatal(err)
	}
	type ref struct {
		id  int64
		run int
	}
	var refs []ref
	for rows.Next() {
		var r ref
		if err := rows.Scan(&r.id, &r.run); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		if err := e.Store.RunOutcomeInsert(ctx, e.Store.Pool, store.RunOutcomeParams{
			MessageID: r.id, RunNo: r.run, SchemaID: ingesttest.Schema, SchemaVersion: "1", Status: store.RunSucceeded,
			Calls:      []store.LLMCall{{Attempt: 1, Model: "sim", PromptTokens: 100, CompletionTokens: 10, CostUSD: 0.001, FinishReason: "stop", Reply: `{}`, Valid: true}},
			Extraction: &store.ExtractionParams{Data: []byte(`{}`)},
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestServeBatchStatus(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	p := se.post(t, "", "application/x-ndjson", `{"id":"s-1","text":"Where is order 48213?"}`+"\n"+`{"id":"s-2","text":"Refund please"}`+"\n")
	if p.status != http.StatusOK || p.ans.Queued != 2 {
		t.Fatalf("POST: %d %s", p.status, p.body)
	}
	batch := p.ans.BatchID

	r, b := se.batchStatus(t, "/v1/batches/"+batch)
	if r.status != http.StatusOK || b.BatchID != batch || b.Messages != 2 || b.Queued != 2 || b.Done {
		t.Fatalf("a queued batch: %d %s", r.status, r.body)
	}

	// wait=D answers after D when the batch is not done.
	start := time.Now()
	r, b = se.batchStatus(t, "/v1/batches/"+batch+"?wait=400ms")
	if d := time.Since(start); r.status != http.StatusOK || b.Done || d < 400*time.Millisecond {
		t.Errorf("wait=400ms on a queued batch: %d %s after %v, want not done after at least 400ms", r.status, r.body, d)
	}

	// A wait answers once the batch is done.
	type result struct {
		r reply
		b batchAnswer
	}
	got := make(chan result, 1)
	go func() {
		r, b := se.batchStatus(t, "/v1/batches/"+batch+"?wait=1m")
		got <- result{r, b}
	}()
	time.Sleep(300 * time.Millisecond) // the wait has begun: it polls
	finishRuns(t, se.Env, batch)
	select {
	case res := <-got:
		if res.r.status != http.StatusOK || !res.b.Done || res.b.Succeeded != 2 || res.b.Queued != 0 || res.b.LLMCalls != 2 {
			t.Errorf("wait=1m: %d %s, want done with 2 succeeded", res.r.status, res.r.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("wait=1m did not answer once the batch was done")
	}

	for _, tc := range []struct {
		path   string
		status int
		code   string
		want   []string
	}{
		{"/v1/batches/no-such-batch", http.StatusNotFound, "not_found", []string{`there is no batch "no-such-batch"`}},
		{"/v1/batches/%ff", http.StatusNotFound, "not_found", []string{`there is no batch "\xff": a batch id is UTF-8 text without NUL`}},
		{"/v1/batches/a%00", http.StatusNotFound, "not_found", []string{`there is no batch "a\x00"`}},
		{"/v1/batches/" + batch + "?wait=2m", http.StatusBadRequest, "invalid", []string{`wait "2m": want a duration such as 30s, at most 1m0s`}},
		{"/v1/batches/" + batch + "?wait=soon", http.StatusBadRequest, "invalid", []string{`wait "soon"`}},
		{"/v1/batches/" + batch + "?wiat=30s", http.StatusBadRequest, "invalid", []string{`unknown query parameter "wiat": GET /v1/batches/{id} takes wait`}},
	} {
		r, _ := se.batchStatus(t, tc.path)
		wantError(t, "GET "+tc.path, r, tc.status, tc.code, tc.want...)
	}
	wantError(t, "GET without the token", se.get(t, "/v1/batches/"+batch), http.StatusUnauthorized, "unauthenticated")
	req, err := http.NewRequest(http.MethodDelete, se.base+"/v1/batches/"+batch, nil)
	if err != nil {
		t.Fatal(err)
	}
	r = do(t, req, "Bearer "+testToken)
	wantError(t, "DELETE", r, http.StatusMethodNotAllowed, "method_not_allowed", "the route takes GET")
	if r.header.Get("Allow") != "GET" {
		t.Errorf("DELETE: Allow %q", r.header.Get("Allow"))
	}
}

// resultLines GETs path and returns its JSON lines.
func (se *serverEnv) resultLines(t *testing.T, path string) (int, []map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, se.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode == http.StatusOK && ct != ingestapi.ContentTypeNDJSON {
		t.Errorf("GET %s: Content-Type %q", path, ct)
	}
	var lines []map[string]any
	dec := json.NewDecoder(resp.Body)
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("GET %s: line %d: %v", path, len(lines)+1, err)
		}
		lines = append(lines, m)
	}
	return resp.StatusCode, lines
}

func TestServeBatchResults(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, func(c *ingestapi.ServerConfig) { c.ResultsPage = 2 })
	var body strings.Builder
	const n = 5 // pages of 2, 2 and 1
	for i := range n {
		fmt.Fprintf(&body, `{"id":"r-%d","source":"web","text":"Where is order %d?"}`+"\n", i, 48213+i)
	}
	p := se.post(t, "", "application/x-ndjson", body.String())
	if p.status != http.StatusOK || p.ans.Queued != n {
		t.Fatalf("POST: %d %s", p.status, p.body)
	}
	path := "/v1/batches/" + p.ans.BatchID + "/results"

	status, lines := se.resultLines(t, path)
	if status != http.StatusOK || len(lines) != n {
		t.Fatalf("queued batch: %d, %d lines, want %d", status, len(lines), n)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l["id"].(string)] = true
		if l["status"] != "queued" || l["result"] != nil || l["triage"] != nil || l["source"] != "web" {
			t.Errorf("queued message: %v", l)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct ids in %d lines: a page boundary repeated or lost one", len(seen), n)
	}

	finishRuns(t, se.Env, p.ans.BatchID)
	status, lines = se.resultLines(t, path)
	if status != http.StatusOK || len(lines) != n {
		t.Fatalf("done batch: %d, %d lines", status, len(lines))
	}
	for _, l := range lines {
		res, _ := l["result"].(map[string]any)
		if l["status"] != "succeeded" || res == nil || res["outcome"] != "succeeded" || res["schema_id"] != ingesttest.Schema || res["human_made"] != false {
			t.Errorf("succeeded message: %v", l)
		}
	}
	first := int64(lines[0]["message_id"].(float64))
	if status, rest := se.resultLines(t, fmt.Sprintf("%s?after=%d", path, first)); status != http.StatusOK || len(rest) != n-1 || rest[0]["id"] != lines[1]["id"] {
		t.Errorf("after=%d: %d, %d lines, want the %d after it", first, status, len(rest), n-1)
	}

	for _, tc := range []struct {
		path   string
		status int
		code   string
		want   string
	}{
		{"/v1/batches/no-such-batch/results", http.StatusNotFound, "not_found", `there is no batch "no-such-batch"`},
		{"/v1/batches/a%00/results", http.StatusNotFound, "not_found", `there is no batch "a\x00"`},
		{path + "?after=-1", http.StatusBadRequest, "invalid", `after "-1": want a message id`},
		{path + "?after=x", http.StatusBadRequest, "invalid", `after "x"`},
		{path + "?limit=5", http.StatusBadRequest, "invalid", `unknown query parameter "limit": GET /v1/batches/{id}/results takes after`},
	} {
		r, _ := se.batchStatus(t, tc.path)
		wantError(t, "GET "+tc.path, r, tc.status, tc.code, tc.want)
	}
	wantError(t, "GET without the token", se.get(t, path), http.StatusUnauthorized, "unauthenticated")
}
