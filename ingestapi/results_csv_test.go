package ingestapi_test

import (
	"encoding/csv"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/export"
	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/ingestapi"
)

// TestServeBatchResultsCSV: format=csv answers text/csv with the schema's
// columns, a row per message across pages; a bad format is 400, a schema
// the server has no columns for 422.
func TestServeBatchResultsCSV(t *testing.T) {
	t.Parallel()
	cols, err := export.SchemaColumns(config.Default(), ingesttest.Schema)
	if err != nil {
		t.Fatal(err)
	}
	se := newServerEnv(t, nil, func(c *ingestapi.ServerConfig) {
		c.ResultsPage = 2
		c.ResultColumns = map[string][]export.Column{ingesttest.Schema: cols}
	})
	var body strings.Builder
	const n = 5
	for i := range n {
		fmt.Fprintf(&body, `{"id":"=r-%d","source":"web","text":"Where is order %d?"}`+"\n", i, 48213+i)
	}
	p := se.post(t, "", "application/x-ndjson", body.String())
	if p.status != http.StatusOK || p.ans.Queued != n {
		t.Fatalf("POST: %d %s", p.status, p.body)
	}
	finishRuns(t, se.Env, p.ans.BatchID)
	path := "/v1/batches/" + p.ans.BatchID + "/results"

	req, err := http.NewRequest(http.MethodGet, se.base+path+"?format=csv", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/csv; charset=utf-8; header=present" {
		t.Fatalf("GET ?format=csv: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	recs, err := csv.NewReader(strings.NewReader(string(b))).ReadAll()
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if len(recs) != n+1 || len(recs[0]) != len(export.MetaColumns)+len(cols) || recs[0][0] != "_message_id" || recs[0][11] != "intent" {
		t.Fatalf("%d lines, header %v", len(recs), recs[0])
	}
	for _, r := range recs[1:] {
		// Ids starting with = are defused for spreadsheets.
		if !strings.HasPrefix(r[1], "'=r-") || r[3] != "succeeded" || r[7] != "succeeded" {
			t.Errorf("row %v", r)
		}
	}

	r, _ := se.batchStatus(t, path+"?format=xlsx")
	wantError(t, "GET ?format=xlsx", r, http.StatusBadRequest, "invalid", `format "xlsx": want jsonl or csv`)

	bare := newServerEnv(t, nil, nil)
	p = bare.post(t, "", "application/x-ndjson", `{"id":"x-1","text":"hello there"}`+"\n")
	r, _ = bare.batchStatus(t, "/v1/batches/"+p.ans.BatchID+"/results?format=csv")
	wantError(t, "GET ?format=csv without columns", r, http.StatusUnprocessableEntity, "unprocessable", "its CSV columns are unknown")
}
