package export_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/config"
	"github.com/extractq/extractq/export"
	"github.com/extractq/extractq/store"
)

const nestedSchema = `{
  "type": "object",
  "properties": {
    "zeta": {"type": "string"},
    "order": {"type": ["object", "null"], "properties": {
      "id": {"type": "string"},
      "total": {"type": "number"},
      "ship_to": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}}}
    }},
    "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
    "tags": {"type": ["array", "null"], "items": {"type": "string"}},
    "extra": {"type": "object"},
    "ok": {"type": "boolean"},
    "note": {"type": ["string", "null"]}
  }
}`

func TestColumns(t *testing.T) {
	cols, err := export.Columns([]byte(nestedSchema))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cols {
		names = append(names, c.Name)
	}
	// The schema's order, not alphabetical; nested objects by dotted path.
	want := "zeta order.id order.total order.ship_to.city order.ship_to.zip items tags extra ok note"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("columns\n got %s\nwant %s", got, want)
	}
	for _, bad := range []struct{ schema, want string }{
		{`{"type":"object","properties":{"a.b":{"type":"string"}}}`, `property "a.b": a dot in a name`},
		{`{"type":"object","properties":{"_id":{"type":"string"}}}`, `property "_id": a name starting with _`},
		{`{"type":"object","properties":[1]}`, `properties at "": not an object`},
	} {
		if _, err := export.Columns([]byte(bad.schema)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.schema, err, bad.want)
		}
	}
}

// TestCSV writes rows with nested objects, arrays, quotes, commas, line
// breaks, non-ASCII text, nulls, a formula and a row without a result,
// and reads them back with encoding/csv: RFC 4180 quoting holds, every
// row has the header's columns, and the values come back as written.
func TestCSV(t *testing.T) {
	cols, err := export.Columns([]byte(nestedSchema))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	open := store.TriageOpen
	rows := []store.BatchResult{
		{MessageID: 1, ExternalID: "m-1", Source: "shop", RunNo: 1, Status: store.RunSucceeded, Result: &store.BatchResultRecord{
			RunNo: 1, SchemaVersion: "1", Outcome: "succeeded", CreatedBy: "model", CreatedAt: at,
			Data: json.RawMessage(`{"zeta":"say \"hi\", then\nleave","order":{"id":"A-1","total":12.50,"ship_to":{"city":"Zürich","zip":null}},` +
				`"items":[{"sku":"x,1"},{"sku":"y"}],"tags":["a","b"],"extra":{"k":[1,2]},"ok":true,"note":"=HYPERLINK(\"http://evil\")"}`)}},
		{MessageID: 2, ExternalID: "m-2", RunNo: 1, Status: store.RunSucceeded, Result: &store.BatchResultRecord{
			RunNo: 1, SchemaVersion: "1", Outcome: "approved", CreatedBy: "alice", CreatedAt: at,
			Data: json.RawMessage(`{"zeta":"-5","order":null,"items":[],"tags":null,"ok":false}`)}},
		{MessageID: 3, ExternalID: "m-3", RunNo: 2, Status: store.RunFailed, Triage: &open},
	}
	var buf bytes.Buffer
	w := export.NewWriter(&buf, export.FormatCSV, cols)
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// RFC 4180: CRLF line ends (also inside a quoted field), quotes
	// doubled inside a quoted field.
	if !strings.Contains(buf.String(), "\r\n1,m-1,") || !strings.Contains(buf.String(), `"say ""hi"", then`+"\r\n"+`leave"`) {
		t.Errorf("not RFC 4180 quoting and line ends:\n%q", buf.String())
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatalf("reading the CSV back: %v\n%s", err, buf.String())
	}
	if len(recs) != 4 {
		t.Fatalf("%d lines, want a header and 3 rows", len(recs))
	}
	head := recs[0]
	get := func(row int, col string) string {
		for i, h := range head {
			if h == col {
				return recs[row][i]
			}
		}
		t.Fatalf("no column %s in %v", col, head)
		return ""
	}
	for i, r := range recs {
		if len(r) != len(head) {
			t.Errorf("line %d has %d fields, the header %d", i+1, len(r), len(head))
		}
	}
	for _, c := range []struct {
		row       int
		col, want string
	}{
		{1, "_id", "m-1"}, {1, "_source", "shop"}, {1, "_outcome", "succeeded"}, {1, "_created_at", "2026-12-01T10:00:00Z"},
		{1, "zeta", "say \"hi\", then\nleave"}, {1, "order.id", "A-1"}, {1, "order.total", "12.50"},
		{1, "order.ship_to.city", "Zürich"}, {1, "order.ship_to.zip", ""},
		{1, "items", `[{"sku":"x,1"},{"sku":"y"}]`}, {1, "tags", `["a","b"]`}, {1, "extra", `{"k":[1,2]}`},
		{1, "ok", "true"}, {1, "note", `'=HYPERLINK("http://evil")`},
		{2, "_created_by", "alice"}, {2, "zeta", "'-5"}, {2, "order.id", ""}, {2, "items", "[]"}, {2, "tags", ""}, {2, "ok", "false"},
		{3, "_status", "failed"}, {3, "_triage", "open"}, {3, "_run_no", "2"}, {3, "_outcome", ""}, {3, "zeta", ""},
	} {
		if got := get(c.row, c.col); got != c.want {
			t.Errorf("row %d %s = %q, want %q", c.row, c.col, got, c.want)
		}
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]string{"": "jsonl", "jsonl": "jsonl", "csv": "csv"} {
		if got, err := export.ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := export.ParseFormat("xlsx"); err == nil || !strings.Contains(err.Error(), `format "xlsx": want jsonl or csv`) {
		t.Errorf("xlsx: %v", err)
	}
}

// TestBundledSchemaColumns: the bundled schema gives its fields, in its
// order, product_names (an array) as one column.
func TestBundledSchemaColumns(t *testing.T) {
	cols, err := export.SchemaColumns(config.Default(), "customer_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(cols) != 17 || cols[0].Name != "intent" || cols[16].Name != "product_names" {
		t.Errorf("columns %v", cols)
	}
	if _, err := export.SchemaColumns(config.Default(), "nope"); err == nil || !strings.Contains(err.Error(), `schema "nope" is not in the configuration`) {
		t.Errorf("unknown schema: %v", err)
	}
}
