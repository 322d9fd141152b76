package ingestapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
)

// A POST whose body is compressed (without Content-Encoding) or not text
// is answered 400 with one short message; no batch is recorded.
func TestServeUnreadableBody(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	lines := ingesttest.GoodLines(1015)
	gz := ingesttest.Gzipped(t, lines)
	const gzWhat = "the body is gzip-compressed (it starts with the bytes 1f 8b), not "
	const gzFix = "; no batch was recorded: send it uncompressed (gunzip -c FILE | curl --data-binary @- ...); Content-Encoding is not supported either"
	tests := []struct {
		name, ctype, body string
		code              string
		msg               string
	}{
		{"gzip JSONL", "application/x-ndjson", gz, "compressed_body", gzWhat + "JSONL text" + gzFix},
		{"gzip CSV", "text/csv", ingesttest.Gzipped(t, "id,text\n1,x\n"), "compressed_body", gzWhat + "CSV text" + gzFix},
		{"gzip JSON", "application/json", ingesttest.Gzipped(t, `[{"id":"1","text":"x"}]`), "compressed_body", gzWhat + "JSON text" + gzFix},
		{"zip", "application/x-ndjson", ingesttest.Zipped(t, "k4.jsonl", lines), "compressed_body",
			"the body is a zip archive (it starts with the bytes 50 4b 03 04; an Excel .xlsx workbook is one too), not JSONL text; " +
				"no batch was recorded: send the file inside it (unzip -p FILE | curl --data-binary @- ...)"},
		{"random bytes", "application/x-ndjson", ingesttest.RandomBytes(3 << 20), "not_text",
			"the body does not look like JSONL or CSV text (2201 of its first 4096 bytes are control characters or not UTF-8); no batch was recorded"},
		{"random bytes as CSV", "text/csv", ingesttest.RandomBytes(3 << 20), "not_text",
			"the body does not look like JSONL or CSV text (2201 of its first 4096 bytes are control characters or not UTF-8); no batch was recorded"},
		{"UTF-16 JSONL", "application/x-ndjson", ingesttest.UTF16LE(ingesttest.GoodLines(3)), "not_text",
			"the body looks like UTF-16 (NUL bytes between the characters); only UTF-8 is read; no batch was recorded: " +
				"convert it to UTF-8 before sending it (iconv -f UTF-16 -t UTF-8 FILE | curl --data-binary @- ...)"},
	}
	for _, tt := range tests {
		r := se.post(t, "", tt.ctype, tt.body)
		wantError(t, tt.name, r, http.StatusBadRequest, tt.code, tt.msg)
		if len(r.body) > 1024 {
			t.Errorf("%s: the answer is %d bytes, want one short error", tt.name, len(r.body))
		}
	}
	// Sent with Content-Encoding: gzip, it is still 415.
	req, err := http.NewRequest(http.MethodPost, se.base+"/v1/messages", strings.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Content-Encoding", "gzip")
	wantError(t, "Content-Encoding gzip", do(t, req, "Bearer "+testToken), http.StatusUnsupportedMediaType, "unsupported_media_type", `Content-Encoding "gzip" is not supported`)

	if n := se.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	if n := se.StreamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}
	// The same lines uncompressed are taken.
	r := se.post(t, "", "application/x-ndjson", lines)
	var rep ingest.Report
	if err := json.Unmarshal(r.body, &rep); err != nil || r.status != http.StatusOK || rep.Published != 1015 {
		t.Errorf("uncompressed: status %d, %.300s", r.status, r.body)
	}
}
