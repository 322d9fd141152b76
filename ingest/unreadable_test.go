package ingest_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/internal/app"
)

// goodLines is n JSONL lines of good messages ("u-0", ...).
func goodLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id": "u-%d", "text": "Where is order %d?"}`+"\n", i, 48000+i)
	}
	return b.String()
}

func gzipped(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func zipped(t *testing.T, name, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	w, err := zw.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func tarred(t *testing.T, name, s string) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(s))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// randomBytes is n bytes of (seeded) random data.
func randomBytes(n int) string {
	r := rand.NewChaCha8([32]byte{7})
	b := make([]byte, n)
	r.Read(b)
	return string(b)
}

// unreadable are inputs that are not text: Run refuses each whole, in
// either format, before recording a batch. The compressed ones other than
// gzip are their magic bytes and random data.
func unreadable(t *testing.T) []struct{ name, in, want string } {
	lines := goodLines(1015)
	return []struct{ name, in, want string }{
		{"gzip", gzipped(t, lines), "is gzip-compressed (it starts with the bytes 1f 8b), not "},
		{"zstd", "\x28\xb5\x2f\xfd" + randomBytes(500), "is zstd-compressed (it starts with the bytes 28 b5 2f fd), not "},
		{"bzip2", "BZh91AY&SY" + randomBytes(500), "is bzip2-compressed (it starts with the bytes 42 5a 68 39), not "},
		{"xz", "\xfd7zXZ\x00" + randomBytes(500), "is xz-compressed (it starts with the bytes fd 37 7a 58 5a 00), not "},
		{"zip", zipped(t, "k4.jsonl", lines), "is a zip archive (it starts with the bytes 50 4b 03 04; an Excel .xlsx workbook is one too), not "},
		{"tar", tarred(t, "k4.jsonl", lines), `is a tar archive (it holds "ustar" at byte 258), not `},
		{"3 MB of random bytes", randomBytes(3 << 20), "does not look like JSONL or CSV text ("},
		{"NUL bytes", strings.Repeat(`{"id":"n","text":"x"}`+"\x00\x00\x00\x00\n", 10), "does not look like JSONL or CSV text (40 of its first 260 bytes are control characters or not UTF-8)"},
	}
}

func TestRunUnreadableInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tt := range unreadable(t) {
		for _, format := range []ingest.Format{ingest.FormatJSONL, ingest.FormatCSV} {
			for _, parallel := range []int{1, 4} {
				name := fmt.Sprintf("%s as %s, parallel %d", tt.name, format, parallel)
				sum, err := e.ingest(t, strings.NewReader(tt.in), func(c *ingest.Config) { c.Format = format; c.Parallel = parallel })
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s: Run = %v, want an error with %q", name, err, tt.want)
					continue
				}
				if _, ok := errors.AsType[*ingest.StartError](err); !ok {
					t.Errorf("%s: error %T is not a *StartError", name, err)
				}
				if !reflect.DeepEqual(sum, ingest.Summary{BatchID: sum.BatchID}) {
					t.Errorf("%s: summary %+v, want nothing read", name, sum)
				}
			}
		}
	}
	// UTF-16 JSONL is refused up front too (UTF-16 CSV: TestRunCSVHeaderErrors).
	for _, in := range []string{utf16LE("\ufeff" + goodLines(3)), utf16LE(goodLines(3))} {
		_, err := e.ingest(t, strings.NewReader(in), nil)
		if err == nil || !strings.Contains(err.Error(), "the input looks like UTF-16 (") || !strings.Contains(err.Error(), "only UTF-8 is read") {
			t.Errorf("UTF-16 JSONL %.8q: Run = %v, want it refused as UTF-16", in, err)
		}
	}
	if n := e.countSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	if n := e.streamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}
}

// latin7 is s (Greek) in ISO 8859-7: every letter a byte that is not UTF-8.
func latin7(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 0x80:
			b.WriteRune(r)
		case r >= 'Α' && r <= 'ώ':
			b.WriteByte(byte(r - 'Α' + 0xc1))
		default:
			b.WriteByte('?')
		}
	}
	return b.String()
}

// Text that is not all good is still read line by line, as before: the
// look at the start of the input refuses only what is not text.
func TestRunTextIsNotRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	// Greek in ISO 8859-7: most bytes are not UTF-8, yet it is text, read
	// and flagged as a Latin-1 file is.
	var b strings.Builder
	for i := range 60 {
		fmt.Fprintf(&b, `{"id": "gr-%d", "text": "%s %d"}`+"\n", i, latin7("Η παραγγελία μου δεν έφτασε ακόμα"), i)
	}
	sum, err := e.ingest(t, strings.NewReader(b.String()), nil)
	if err != nil || sum.Published != 60 || sum.InvalidUTF8 != 60 {
		t.Errorf("ISO 8859-7 JSONL: %+v, %v; want 60 published, flagged", sum, err)
	}
	b.Reset()
	b.WriteString("id,text\n")
	for i := range 60 {
		fmt.Fprintf(&b, "gr-csv-%d,%s %d\n", i, latin7("Η παραγγελία μου δεν έφτασε ακόμα"), i)
	}
	sum, err = e.ingest(t, strings.NewReader(b.String()), func(c *ingest.Config) { c.Format = ingest.FormatCSV })
	if err != nil || sum.Published != 60 || sum.InvalidUTF8 != 60 {
		t.Errorf("ISO 8859-7 CSV: %+v, %v; want 60 published, flagged", sum, err)
	}

	// A few bad lines among good ones: a line of binary junk, raw control
	// characters, gzip's magic bytes not at the start. Each is rejected on
	// its own, and the rest are read.
	in := goodLines(100) + randomBytes(200) + "\n" + `{"id":"c","text":"bell` + "\x07\x07" + `"}` + "\n" + "\x1f\x8b junk\n" + goodLines(2)
	sum, err = e.ingest(t, strings.NewReader(in), nil)
	if err != nil || sum.Rejected < 3 || sum.Published != 100 || sum.Duplicates != 2 {
		t.Errorf("good lines with bad ones: %+v, %v; want the bad ones rejected, 100 published, 2 duplicates", sum, err)
	}
	// The junk first: rejected line by line while the start of the input
	// is text enough.
	in = `{"id":"j","text":"bell` + "\x07" + `"}` + "\n" + goodLines(100)
	sum, err = e.ingest(t, strings.NewReader(in), nil)
	if err != nil || sum.Rejected != 1 || sum.Duplicates != 100 {
		t.Errorf("a control character on line 1: %+v, %v; want line 1 rejected, 100 duplicates", sum, err)
	}
	// An input shorter than the look is read as before.
	sum, err = e.ingest(t, strings.NewReader(`{"id":"s","text":"short"}`), nil)
	if err != nil || sum.Published != 1 {
		t.Errorf("a short input: %+v, %v", sum, err)
	}
}

// The file command refuses a compressed file or one that is not text
// with one message, and says how to ingest it; no batch is recorded.
func TestRunCommandUnreadableInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	env, configPath, _ := commandSetup(t, e, 0)
	dir := t.TempDir()
	write := func(name, body string) string { return writeFile(t, dir, name, body) }
	lines := goodLines(1015)
	gz := write("k4.jsonl.gz", gzipped(t, lines))
	csvGz := write("k4.csv.gz", gzipped(t, "id,text\n1,x\n"))
	bin := write("junk.bin", randomBytes(3<<20))
	utf16 := write("u16.jsonl", utf16LE("\ufeff"+goodLines(3)))
	zipFile := write("export.zip", zipped(t, "k4.jsonl", lines))
	tests := []struct {
		name   string
		o      ingest.CommandOptions
		stderr string
	}{
		{"gzip JSONL", ingest.CommandOptions{File: gz, JSON: true},
			"ingest: " + gz + " is gzip-compressed (it starts with the bytes 1f 8b), not JSONL text; nothing was read and no batch was recorded; " +
				"decompress it into ingest, adding your other flags: gunzip -c " + gz + " | ingest -\n"},
		{"gzip read as CSV", ingest.CommandOptions{File: gz, Format: "csv"},
			"ingest: " + gz + " is gzip-compressed (it starts with the bytes 1f 8b), not CSV text; nothing was read and no batch was recorded; " +
				"decompress it into ingest, adding your other flags: gunzip -c " + gz + " | ingest -format csv -\n"},
		{"gzip CSV by its name", ingest.CommandOptions{File: csvGz},
			"ingest: " + csvGz + " is gzip-compressed (it starts with the bytes 1f 8b), not JSONL text; nothing was read and no batch was recorded; " +
				"decompress it into ingest, adding your other flags: gunzip -c " + csvGz + " | ingest -format csv -\n"},
		{"zip", ingest.CommandOptions{File: zipFile, JSON: true},
			"ingest: " + zipFile + " is a zip archive (it starts with the bytes 50 4b 03 04; an Excel .xlsx workbook is one too), not JSONL text; " +
				"nothing was read and no batch was recorded; extract the file from it into ingest, adding your other flags: unzip -p " + zipFile + " | ingest -\n"},
		{"random bytes", ingest.CommandOptions{File: bin, JSON: true},
			"ingest: " + bin + " does not look like JSONL or CSV text (2201 of its first 4096 bytes are control characters or not UTF-8); " +
				"nothing was read and no batch was recorded: is it the file you meant?\n"},
		{"UTF-16", ingest.CommandOptions{File: utf16},
			"ingest: " + utf16 + " looks like UTF-16 (it starts with a UTF-16 byte order mark); only UTF-8 is read; nothing was read and no batch was recorded; " +
				"convert it into ingest, adding your other flags: iconv -f UTF-16 -t UTF-8 " + utf16 + " | ingest -\n"},
	}
	for _, tt := range tests {
		tt.o.ConfigPath, tt.o.Quiet = configPath, true
		code, stdout, stderr := runCommand(t, tt.o, env)
		if code != ingest.ExitError || stdout != "" || stderr != tt.stderr {
			t.Errorf("%s: exit %d, stdout %.200q, stderr (%d bytes)\n%.600s\nwant exit %d, no report, stderr\n%s",
				tt.name, code, stdout, len(stderr), stderr, ingest.ExitError, tt.stderr)
		}
	}
	// It is refused before connecting: with Postgres and NATS out of
	// reach too.
	nowhere := app.Env{DatabaseURL: "postgres://postgres@127.0.0.1:1/none?sslmode=disable", NATSURL: "nats://127.0.0.1:1"}
	start := time.Now()
	code, _, stderr := runCommand(t, ingest.CommandOptions{File: gz, ConfigPath: configPath, Quiet: true}, nowhere)
	if code != ingest.ExitError || stderr != tests[0].stderr || time.Since(start) > 5*time.Second {
		t.Errorf("services out of reach: exit %d after %v, stderr %.300q; want at once exit 1 and\n%s", code, time.Since(start), stderr, tests[0].stderr)
	}
	if n := e.countSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	if n := e.streamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}
}

// A POST whose body is compressed (without Content-Encoding) or not text
// is answered 400 with one short message; no batch is recorded.
func TestServeUnreadableBody(t *testing.T) {
	t.Parallel()
	se := newServerEnv(t, nil, nil)
	lines := goodLines(1015)
	gz := gzipped(t, lines)
	const gzWhat = "the body is gzip-compressed (it starts with the bytes 1f 8b), not "
	const gzFix = "; no batch was recorded: send it uncompressed (gunzip -c FILE | curl --data-binary @- ...); Content-Encoding is not supported either"
	tests := []struct {
		name, ctype, body string
		code              string
		msg               string
	}{
		{"gzip JSONL", "application/x-ndjson", gz, "compressed_body", gzWhat + "JSONL text" + gzFix},
		{"gzip CSV", "text/csv", gzipped(t, "id,text\n1,x\n"), "compressed_body", gzWhat + "CSV text" + gzFix},
		{"gzip JSON", "application/json", gzipped(t, `[{"id":"1","text":"x"}]`), "compressed_body", gzWhat + "JSON text" + gzFix},
		{"zip", "application/x-ndjson", zipped(t, "k4.jsonl", lines), "compressed_body",
			"the body is a zip archive (it starts with the bytes 50 4b 03 04; an Excel .xlsx workbook is one too), not JSONL text; " +
				"no batch was recorded: send the file inside it (unzip -p FILE | curl --data-binary @- ...)"},
		{"random bytes", "application/x-ndjson", randomBytes(3 << 20), "not_text",
			"the body does not look like JSONL or CSV text (2201 of its first 4096 bytes are control characters or not UTF-8); no batch was recorded"},
		{"random bytes as CSV", "text/csv", randomBytes(3 << 20), "not_text",
			"the body does not look like JSONL or CSV text (2201 of its first 4096 bytes are control characters or not UTF-8); no batch was recorded"},
		{"UTF-16 JSONL", "application/x-ndjson", utf16LE(goodLines(3)), "not_text",
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

	if n := se.countSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	if n := se.streamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}
	// The same lines uncompressed are taken.
	r := se.post(t, "", "application/x-ndjson", lines)
	var rep ingest.Report
	if err := json.Unmarshal(r.body, &rep); err != nil || r.status != http.StatusOK || rep.Published != 1015 {
		t.Errorf("uncompressed: status %d, %.300s", r.status, r.body)
	}
}
