package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/extractq/extractq/export"
	"github.com/extractq/extractq/internal/startup"
	"github.com/extractq/extractq/store"
	"github.com/extractq/extractq/store/storetest"
)

// writeResults writes one line per message of the batch, across pages,
// and names an unknown batch.
func TestWriteResults(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	const batch, n = "b-results", 1203 // over one page of 1,000
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: batch, SchemaID: "support_ticket", SourceName: "r.jsonl"}); err != nil {
		t.Fatal(err)
	}
	// One transaction for the 1,800 writes: one commit, not one each.
	if err := st.InTx(ctx, func(tx store.DBTX) error {
		for i := range n {
			text := fmt.Sprintf("order %d never came", 48213+i)
			h := sha256.Sum256([]byte(text))
			res, err := st.MessageIngest(ctx, tx, store.MessageIngestParams{Source: "r", ExternalID: fmt.Sprintf("m-%d", i),
				Body: text, ContentHash: h[:], BatchID: batch, SchemaID: "support_ticket"})
			if err != nil {
				return err
			}
			if i%2 == 0 {
				continue // left queued
			}
			if err := st.RunOutcomeInsert(ctx, tx, store.RunOutcomeParams{MessageID: res.Run.MessageID, RunNo: 1, SchemaID: "support_ticket",
				SchemaVersion: "1", Status: store.RunSucceeded,
				Calls:      []store.LLMCall{{Attempt: 1, Model: "sim", PromptTokens: 10, CompletionTokens: 5, FinishReason: "stop", Reply: `{}`, Valid: true}},
				Extraction: &store.ExtractionParams{Data: []byte(fmt.Sprintf(`{"order_id":"%d"}`, 48213+i))}}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	var out strings.Builder
	got, err := writeResults(ctx, &out, st, batch, export.FormatJSONL, "", startup.Env{})
	if err != nil || got != n {
		t.Fatalf("writeResults = %d, %v; want %d", got, err, n)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines, want %d", len(lines), n)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		var r store.BatchResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		seen[r.ExternalID] = true
		var i int
		fmt.Sscanf(r.ExternalID, "m-%d", &i)
		switch {
		case i%2 == 0 && (r.Status != store.RunQueued || r.Result != nil):
			t.Errorf("queued %s: %s", r.ExternalID, l)
		case i%2 == 1 && (r.Status != store.RunSucceeded || r.Result == nil || string(r.Result.Data) != fmt.Sprintf(`{"order_id":"%d"}`, 48213+i)):
			t.Errorf("succeeded %s: %s", r.ExternalID, l)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct messages in %d lines", len(seen), n)
	}
	if _, err := writeResults(ctx, &out, st, "no-such-batch", export.FormatJSONL, "", startup.Env{}); err == nil || !strings.Contains(err.Error(), `there is no batch "no-such-batch"`) {
		t.Errorf("unknown batch: %v", err)
	}
}

// TestWriteResultsCSV: -format csv writes the batch as CSV with the
// bundled schema's columns, a quoted multi-line value intact.
func TestWriteResultsCSV(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.NewStore(t)
	const batch = "b-csv"
	if err := st.BatchInsert(ctx, st.Pool, store.BatchInsertParams{ID: batch, SchemaID: "customer_message"}); err != nil {
		t.Fatal(err)
	}
	for i, data := range []string{`{"intent":"refund","order_id":"A-1","full_name":"Ann \"Jo\", Lee","product_names":["mug","tea"]}`, ""} {
		text := fmt.Sprintf("message %d", i)
		h := sha256.Sum256([]byte(text))
		res, err := st.MessageIngest(ctx, st.Pool, store.MessageIngestParams{Source: "s", ExternalID: fmt.Sprintf("c-%d", i),
			Body: text, ContentHash: h[:], BatchID: batch, SchemaID: "customer_message"})
		if err != nil {
			t.Fatal(err)
		}
		if data == "" {
			continue
		}
		if err := st.RunOutcomeInsert(ctx, st.Pool, store.RunOutcomeParams{MessageID: res.Run.MessageID, RunNo: 1, SchemaID: "customer_message",
			SchemaVersion: "1", Status: store.RunSucceeded,
			Calls:      []store.LLMCall{{Attempt: 1, Model: "sim", PromptTokens: 10, CompletionTokens: 5, FinishReason: "stop", Reply: `{}`, Valid: true}},
			Extraction: &store.ExtractionParams{Data: []byte(data)}}); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if n, err := writeResults(ctx, &out, st, batch, export.FormatCSV, "", startup.Env{}); err != nil || n != 2 {
		t.Fatalf("writeResults = %d, %v", n, err)
	}
	lines := strings.Split(out.String(), "\r\n")
	if len(lines) != 4 || lines[3] != "" {
		t.Fatalf("want a header, 2 rows and a final CRLF:\n%q", out.String())
	}
	if !strings.HasPrefix(lines[0], "_message_id,_id,_source,_status,_triage,_run_no,_schema_version,_outcome,_created_by,_created_at,_erased_at,intent,flow,") ||
		!strings.HasSuffix(lines[0], ",product_names") {
		t.Errorf("header %q", lines[0])
	}
	if !strings.Contains(lines[1], `,c-0,s,succeeded,,1,1,succeeded,model,`) || !strings.Contains(lines[1], `,refund,,"Ann ""Jo"", Lee",`) ||
		!strings.HasSuffix(lines[1], `"[""mug"",""tea""]"`) {
		t.Errorf("row 1 %q", lines[1])
	}
	if !strings.Contains(lines[2], ",c-1,s,queued,,1,,,,,,") {
		t.Errorf("row 2 %q", lines[2])
	}
}
