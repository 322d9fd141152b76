package ingest_test

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
	"github.com/extractq/extractq/store"
)

func TestFormatFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		flag, file string
		want       ingest.Format
		wantErr    bool
	}{
		{"", "messages.jsonl", ingest.FormatJSONL, false},
		{"", "export.csv", ingest.FormatCSV, false},
		{"", "EXPORT.CSV", ingest.FormatCSV, false},
		{"", "export.csv.gz", ingest.FormatJSONL, false},
		{"", "-", ingest.FormatJSONL, false},
		{"", "notes.txt", ingest.FormatJSONL, false},
		{"csv", "-", ingest.FormatCSV, false},
		{"csv", "notes.txt", ingest.FormatCSV, false},
		{"jsonl", "export.csv", ingest.FormatJSONL, false},
		{"xml", "export.csv", "", true},
		{"CSV", "notes.txt", ingest.FormatCSV, false},
		{"JSONL", "export.csv", ingest.FormatJSONL, false},
		{"Csv", "-", ingest.FormatCSV, false},
	}
	for _, tt := range tests {
		got, err := ingest.FormatFor(tt.flag, tt.file)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("FormatFor(%q, %q) = %q, %v; want %q, error %v", tt.flag, tt.file, got, err, tt.want, tt.wantErr)
		}
	}
}

// csvInput is a CSV export with a BOM, CRLF ends, a blank line, quoted
// fields over several lines and bad records; csvRejects is what ingesting
// it rejects.
const csvInput = "\ufeffid,text,source,channel,priority\r\n" + // line 1

	"c-1,Where is order 48213?,web,email,high\r\n" + // 2
	"c-2,\"My parcel\r\nnever arrived, \"\"again\"\".\",,chat,\r\n" + // 3-4
	" \t \r\n" + // 5, blank: spaces and a tab
	"c-3,,web,email,low\r\n" + // 6: no text
	"c-4,Too few fields\r\n" + // 7
	"c-5,a \"bad\" quote,web,,\r\n" + // 8: a bare quote
	",no id,web,,\r\n" + // 9
	"c-6,caf\xe9 au lait,web,,\r\n" + // 10: Latin-1
	"c-7,\"multi\n\nline\",,,x\n" + // 11-13
	"c-8,last line without an end,web,email," // 14

var csvRejects = []ingest.LineError{
	{Line: 6, ID: "c-3", Reason: `"text" is empty or only white space`},
	{Line: 7, ID: "c-4", Reason: "has 2 fields, the header has 5"},
	{Line: 8, Reason: `invalid CSV at line 8, column 7: bare " in non-quoted-field`},
	{Line: 9, Reason: `"id" is empty`},
}

func TestRunCSV(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	ctx := t.Context()

	csv := func(c *ingest.Config) { c.Format = ingest.FormatCSV }
	var progress []int
	sum, err := e.Ingest(t, strings.NewReader(csvInput), func(c *ingest.Config) {
		csv(c)
		c.Progress = func(n int) { progress = append(progress, n) }
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := ingest.Summary{BatchID: sum.BatchID, Lines: 9, Published: 5, Rejected: len(csvRejects), Errors: csvRejects,
		InvalidUTF8: 1, InvalidUTF8Lines: []int{10}}
	if !reflect.DeepEqual(sum, want) {
		t.Errorf("first ingest:\n got %+v\nwant %+v", sum, want)
	}
	if wantProgress := []int{2, 3, 6, 7, 8, 9, 10, 11, 14}; !slices.Equal(progress, wantProgress) {
		t.Errorf("progress = %v, want %v", progress, wantProgress)
	}

	wants := map[string]struct {
		source, body, meta string
		flags              []string
	}{
		"c-1": {"web", "Where is order 48213?", `{"channel":"email","priority":"high"}`, []string{}},
		"c-2": {"", "My parcel\nnever arrived, \"again\".", `{"channel":"chat"}`, []string{}},
		"c-6": {"web", "caf\uFFFD au lait", `{}`, []string{ingest.FlagInvalidUTF8}},
		"c-7": {"", "multi\n\nline", `{"priority":"x"}`, []string{}},
		"c-8": {"web", "last line without an end", `{"channel":"email"}`, []string{}},
	}
	msgs := e.Messages(t)
	if len(msgs) != len(wants) {
		t.Errorf("stored %d messages, want %d", len(msgs), len(wants))
	}
	for id, w := range wants {
		rm, err := e.Store.RunGetWithMessage(ctx, e.Store.Pool, store.RunGetParams{MessageID: msgs[id], RunNo: 1})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if rm.Message.Source != w.source || rm.Message.Body != w.body || !slices.Equal(rm.Message.Flags, w.flags) {
			t.Errorf("%s: source %q body %q flags %v; want %q %q %v", id,
				rm.Message.Source, rm.Message.Body, rm.Message.Flags, w.source, w.body, w.flags)
		}
		if !slices.Equal(rm.Message.ContentHash, ingest.ContentHash(w.body)) {
			t.Errorf("%s: content hash is not sha256 of the text", id)
		}
		assertJSONEqual(t, id+" metadata", rm.Message.Metadata, w.meta)
	}
	e.AssertStream(t, sum.BatchID, msgs)

	// The same file again, in parallel this time: duplicates only, the same
	// rejects in line order.
	sum2, err := e.Ingest(t, strings.NewReader(csvInput), func(c *ingest.Config) { csv(c); c.Parallel = 3 })
	if err != nil {
		t.Fatalf("second Run: %v", err)
	}
	if len(sum2.Waiting) != len(wants) {
		t.Errorf("second ingest waits for %d runs, want %d", len(sum2.Waiting), len(wants))
	}
	sum2.Waiting = nil
	want2 := ingest.Summary{BatchID: sum2.BatchID, Lines: 9, Duplicates: 5, Rejected: len(csvRejects), Errors: csvRejects,
		InvalidUTF8: 1, InvalidUTF8Lines: []int{10}}
	if !reflect.DeepEqual(sum2, want2) {
		t.Errorf("second ingest:\n got %+v\nwant %+v", sum2, want2)
	}
	if got := e.StreamMsgs(t); got != uint64(len(wants)) {
		t.Errorf("stream holds %d messages, want %d", got, len(wants))
	}
}

// A message is the same whichever format brings it: the key is source +
// id, and CSV ids are the text of JSONL integer ids.
func TestRunCSVAndJSONLSameIDs(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	csv := func(c *ingest.Config) { c.Format = ingest.FormatCSV }

	jsonl := `{"id":"k-1","text":"Where is order 1?"}` + "\n" +
		`{"id":42,"source":"mail","text":"Refund please"}` + "\n"
	if sum, err := e.Ingest(t, strings.NewReader(jsonl), nil); err != nil || sum.Published != 2 {
		t.Fatalf("JSONL ingest = %+v, %v; want 2 published", sum, err)
	}
	// Columns in another order, no source column.
	in := "text,id\nWhere is order 1?,k-1\n"
	sum, err := e.Ingest(t, strings.NewReader(in), csv)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ingest.Summary{BatchID: sum.BatchID, Lines: 1, Duplicates: 1, Waiting: sum.Waiting}); !reflect.DeepEqual(sum, want) {
		t.Errorf("CSV without source:\n got %+v\nwant %+v", sum, want)
	}
	in = "id,source,text\n" +
		"42,mail,Refund please\n" + // the JSONL line's message
		"42,,Refund please\n" + // another source: another message
		"k-1,,Another text\n" // same key, other text
	sum, err = e.Ingest(t, strings.NewReader(in), csv)
	if err != nil {
		t.Fatal(err)
	}
	want := ingest.Summary{BatchID: sum.BatchID, Lines: 3, Published: 1, Duplicates: 1, Rejected: 1, Waiting: sum.Waiting,
		Errors: []ingest.LineError{{Line: 4, ID: "k-1", Reason: "conflict: this id is already stored with a different text; the stored message is kept"}}}
	if !reflect.DeepEqual(sum, want) {
		t.Errorf("CSV with source:\n got %+v\nwant %+v", sum, want)
	}

	// The sample CSV holds five messages of the ABCD sample, as they are
	// in its JSONL.
	long := func(c *ingest.Config) { c.MaxTextBytes = 32768 }
	sum, err = e.IngestFile(t, filepath.Join("..", "testdata", "abcd", "small.jsonl"), long)
	if err != nil || sum.Published != 40 {
		t.Fatalf("small.jsonl = %+v, %v; want 40 published", sum, err)
	}
	sum, err = e.IngestFile(t, filepath.Join("..", "testdata", "sample.csv"), func(c *ingest.Config) { long(c); csv(c) })
	if err != nil {
		t.Fatal(err)
	}
	sum.Waiting = nil
	if want := (ingest.Summary{BatchID: sum.BatchID, Lines: 5, Duplicates: 5}); !reflect.DeepEqual(sum, want) {
		t.Errorf("sample.csv after small.jsonl:\n got %+v\nwant %+v", sum, want)
	}
	if got := e.StreamMsgs(t); got != 43 {
		t.Errorf("stream holds %d messages, want 43", got)
	}
}

func TestRunCSVHeaderErrors(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	tests := []struct{ name, in, want string }{
		{"no text column", "id,body\n1,Where is my order?\n", `CSV header: no "text" column (the columns are "id", "body"); id and text are required`},
		{"no id column", "\ufefftext\nWhere is my order?\n", `CSV header: no "id" column (the columns are "text")`},
		{"names are case-sensitive", "ID,Text\n1,x\n", `CSV header: no "id" column (the columns are "ID", "Text")`},
		{"a column twice", "id,text,tag,tag\n1,x,a,b\n", `CSV header: column "tag" occurs twice (columns 3 and 4)`},
		{"id twice", "id,text,id\n1,x,2\n", `CSV header: column "id" occurs twice (columns 1 and 3)`},
		{"a column without a name", "id,text,\n1,x,\n", "CSV header: column 3 has no name"},
		{"a blank name", "id, ,text\n1,a,x\n", "CSV header: column 2 has no name"},
		{"NUL in a name", "id,text,a\x00b\n1,x,y\n", "CSV header: the name of column 3 contains a NUL character"},
		{"JSONL given as CSV", `{"id": "a", "text": "b"}` + "\n", `CSV header: invalid CSV at line 1, column 2: bare " in non-quoted-field`},
		{"semicolons", "id;text;channel\n1;x;web\n", "CSV header: only comma-separated CSV is read; this header looks separated by ';'"},
		{"quoted semicolons", `"id";"text"` + "\r\n", "this header looks separated by ';'"},
		{"tabs", "\ufeffid\ttext\n1\tx\n", "CSV header: only comma-separated CSV is read; this header looks separated by tabs"},
		{"UTF-16 with a byte order mark", ingesttest.UTF16LE("\ufeffid,text\n1,x\n"), "CSV header: the file looks like UTF-16 (NUL bytes between the characters); only UTF-8 is read"},
		{"UTF-16 without one", ingesttest.UTF16LE("id,text\n1,x\n"), "the file looks like UTF-16"},
		{"a header over the limit", "id,text,\"" + strings.Repeat("x", ingest.MaxLineBytes) + "\"\n1,x\n",
			"CSV header: the record is longer than 4194304 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Ingest(t, strings.NewReader(tt.in), func(c *ingest.Config) { c.Format = ingest.FormatCSV })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want an error with %q", err, tt.want)
			}
			if _, ok := errors.AsType[*ingest.StartError](err); !ok {
				t.Errorf("Run error %T is not a *StartError", err)
			}
		})
	}
	// None of them recorded anything.
	if n := e.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	if n := e.StreamMsgs(t); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}
}

func TestRunCSVStops(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	csv := func(c *ingest.Config) { c.Format = ingest.FormatCSV }

	// A quote left open at the end: one rejected record, with its lines.
	sum, err := e.Ingest(t, strings.NewReader("id,text\nok-2,fine\nopen-2,\"never closed\nmore\n"), csv)
	want := ingest.Summary{BatchID: sum.BatchID, Lines: 2, Published: 1, Rejected: 1, Errors: []ingest.LineError{
		{Line: 3, EndLine: 4, Reason: `invalid CSV at line 4, column 6: extraneous or missing " in quoted-field ` +
			`(the quote opened on line 3 is never closed: lines 3-4, to the end of the input, were read as this one record)`}}}
	if err != nil || !reflect.DeepEqual(sum, want) {
		t.Errorf("open quote at the end:\n got %+v, %v\nwant %+v", sum, err, want)
	}
	if got, want := sum.Errors[0].Error(), "lines 3-4: invalid CSV at line 4"; !strings.HasPrefix(got, want) {
		t.Errorf("error = %q, want it to begin %q", got, want)
	}

	// A failing reader stops it with the line it got to.
	r := errorAfter("id,text\nok-3,fine\n")
	_, err = e.Ingest(t, r, csv)
	if !errors.Is(err, errBroken) || !strings.Contains(err.Error(), "reading the record after line 2") {
		t.Errorf("Run with a failing reader = %v, want reading the record after line 2: %v", err, errBroken)
	}
}

// errorAfter reads s, then fails with errBroken.
func errorAfter(s string) *failingReader { return &failingReader{s: s} }

type failingReader struct{ s string }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.s == "" {
		return 0, errBroken
	}
	n := copy(p, f.s)
	f.s = f.s[n:]
	return n, nil
}

// A record longer than MaxLineBytes whose quotes close is rejected with
// its lines, and the records after it are read; ingesting the file again
// rejects it again and goes on the same way.
func TestRunCSVLongRecord(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	csv := func(c *ingest.Config) { c.Format = ingest.FormatCSV }

	big := strings.Repeat("a long, long text\n", ingest.MaxLineBytes/18+1)
	in := "id,text\n" + // 1
		"long-1,fine\n" + // 2
		"long-2,\"" + big + "\"\n" + // 3 to end
		"long-3,after it\n"
	end := 3 + strings.Count(big, "\n")
	rejected := []ingest.LineError{{Line: 3, EndLine: end, Reason: "the record is longer than 4194304 bytes"}}
	for i, published := range []int{2, 0} {
		sum, err := e.Ingest(t, strings.NewReader(in), csv)
		if err != nil {
			t.Fatalf("ingest %d: %v", i+1, err)
		}
		sum.Waiting = nil
		want := ingest.Summary{BatchID: sum.BatchID, Lines: 3, Published: published, Duplicates: 2 - published, Rejected: 1, Errors: rejected}
		if !reflect.DeepEqual(sum, want) {
			t.Errorf("ingest %d:\n got %+v\nwant %+v", i+1, sum, want)
		}
	}
	if ids := e.Messages(t); len(ids) != 2 || ids["long-1"] == 0 || ids["long-3"] == 0 {
		t.Errorf("stored %v, want long-1 and long-3", ids)
	}

	// A quote never closed past the limit: the record is rejected at the
	// end of the input, and what came before it is stored.
	in = "id,text\nlong-4,fine\nlong-5,\"never closed\n" + strings.Repeat("x,y\n", ingest.MaxLineBytes/3)
	sum, err := e.Ingest(t, strings.NewReader(in), csv)
	want := ingest.Summary{BatchID: sum.BatchID, Lines: 2, Published: 1, Rejected: 1, Errors: []ingest.LineError{{
		Line: 3, EndLine: 3 + ingest.MaxLineBytes/3,
		Reason: fmt.Sprintf("the record is longer than 4194304 bytes: the quote opened on line 3 is never closed, so lines 3-%d, to the end of the input, were read as this one record", 3+ingest.MaxLineBytes/3)}}}
	if err != nil || !reflect.DeepEqual(sum, want) {
		t.Errorf("open quote past the limit:\n got %+v, %v\nwant %+v", sum, err, want)
	}
}

// An over-long record is read past, not kept: reading one of 64 MiB
// allocates far less than that.
func TestRunCSVLongRecordMemory(t *testing.T) {
	// Not parallel: the allocations counted are this test's.
	e := ingesttest.NewEnv(t)
	const size = 64 << 20
	r := io.MultiReader(strings.NewReader("id,text\nm-1,\""), io.LimitReader(repeatReader('x'), size),
		strings.NewReader("\"\nm-2,after it\n"))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	sum, err := e.Ingest(t, r, func(c *ingest.Config) { c.Format = ingest.FormatCSV })
	runtime.ReadMemStats(&after)
	if err != nil || sum.Published != 1 || sum.Rejected != 1 {
		t.Fatalf("Run = %+v, %v; want m-2 published, m-1 rejected", sum, err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	if alloc > size/4 {
		t.Errorf("reading a %d-byte record allocated %d bytes", size, alloc)
	}
	t.Logf("reading a %d-byte record allocated %d bytes", size, alloc)
}

// repeatReader reads c forever.
type repeatReader byte

func (c repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(c)
	}
	return len(p), nil
}

// A quote left open in the middle of a file takes the lines after it
// into its record, until the next quote: the rejection names the lines.
func TestRunCSVUnclosedQuote(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	in := "id,text\n" +
		"uq-1,fine\n" +
		"uq-2,\"opened, never closed\n" + // 3
		"uq-3,swallowed\n" + // 4
		"uq-4,\"quoted\" then not\n" + // 5: its first quote closes line 3's
		"uq-5,after it\n" // 6
	sum, err := e.Ingest(t, strings.NewReader(in), func(c *ingest.Config) { c.Format = ingest.FormatCSV })
	if err != nil {
		t.Fatal(err)
	}
	le := ingest.LineError{Line: 3, EndLine: 5, Reason: `invalid CSV at line 5, column 6: extraneous or missing " in quoted-field ` +
		`(a quote opened on line 3 may be unclosed: lines 3-5 were read as this one record)`}
	want := ingest.Summary{BatchID: sum.BatchID, Lines: 3, Published: 2, Rejected: 1, Errors: []ingest.LineError{le}}
	if !reflect.DeepEqual(sum, want) {
		t.Errorf("Run:\n got %+v\nwant %+v", sum, want)
	}
	if got := le.Error(); !strings.HasPrefix(got, "lines 3-5: invalid CSV at line 5, column 6") {
		t.Errorf("error = %q", got)
	}
	if ids := e.Messages(t); len(ids) != 2 || ids["uq-1"] == 0 || ids["uq-5"] == 0 {
		t.Errorf("stored %v, want uq-1 and uq-5", ids)
	}
}
