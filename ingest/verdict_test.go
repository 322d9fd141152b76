package ingest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
)

// A value the database cannot store is its line's rejection, naming the
// field, and the lines after it go on: before, the number 1e1000000 made
// Postgres refuse the line (SQLSTATE 22003) and stopped the ingest at
// the same line on every re-run.
func TestRunValueRefusedIsTheLinesVerdict(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	var key [1600]byte
	rand.Read(key[:])
	longID := hex.EncodeToString(key[:]) // 3200 bytes that do not compress: too long for the key's index
	in := `{"id":"v-1","text":"Where is order 48213?"}` + "\n" +
		`{"id":"v-2","text":"Refund please","order":{"lines":[1,1e1000000]}}` + "\n" +
		`{"id":"v-3","text":"Tiny","x":0.5e-16383}` + "\n" +
		`{"id":"` + longID + `","text":"Long id"}` + "\n" +
		`{"id":"v-5","text":"Parcel 48215 never came","n":1e131071,"z":0e1000000}` + "\n"
	for _, parallel := range []int{1, 4} {
		if parallel > 1 {
			e = ingesttest.NewEnv(t)
		}
		sum, err := e.Ingest(t, strings.NewReader(in), func(c *ingest.Config) { c.Parallel = parallel })
		if err != nil {
			t.Fatalf("parallel %d: Run = %v, want the bad lines rejected and the rest ingested", parallel, err)
		}
		if sum.Published != 2 || sum.Rejected != 3 || len(sum.Errors) != 3 {
			t.Fatalf("parallel %d: summary %+v, want 2 published and lines 2-4 rejected", parallel, sum)
		}
		for i, want := range []string{
			`metadata "order.lines[1]": the number 1e1000000 is out of the range the database stores`,
			`metadata "x": the number 0.5e-16383 is out of the range`,
			`"id": the database refused "id" with "source" as too long to index: index row size`,
		} {
			if le := sum.Errors[i]; le.Line != i+2 || !strings.Contains(le.Reason, want) {
				t.Errorf("parallel %d: rejection %d = %+v, want line %d: %s", parallel, i, le, i+2, want)
			}
		}
		if !strings.Contains(sum.Errors[2].Reason, "SQLSTATE 54000") {
			t.Errorf("the index's refusal does not give its SQLSTATE: %s", sum.Errors[2].Reason)
		}
		if got := e.Messages(t); len(got) != 2 || got["v-1"] == 0 || got["v-5"] == 0 {
			t.Errorf("parallel %d: stored %v, want v-1 and v-5", parallel, got)
		}
	}
}

// What ParseLine refuses in metadata numbers is what Postgres jsonb
// refuses, and no more: each number is also given to Postgres itself.
func TestParseLineNumbersAsPostgres(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	for _, num := range []string{
		"0", "-0", "1", "1.5", "1e5", "1E+5", "-2.5e-3",
		"1e131071", "1e131072", "-1e131072", "9.99e131071", "10e131070", "10e131071", "0.001e131074", "0.001e131075",
		"123456789e131063", "123456789e131064",
		"1e-16383", "1e-16384", "1.5e-16382", "1.5e-16383", "0.000001e-16377", "0.000001e-16378",
		"0e1000000", "0e-16383", "0e-16384", "0e-20000", "0.0e-16383",
		"1e1000000", "1e-1000000", "1e1073741822", "0e1073741823", "1e99999999999999999999",
		"1" + strings.Repeat("0", 131071), "1" + strings.Repeat("0", 131072),
		"0." + strings.Repeat("0", 16382) + "1", "0." + strings.Repeat("0", 16383) + "1",
		"1." + strings.Repeat("0", 16383), "1." + strings.Repeat("0", 16384),
	} {
		line := `{"id":"n","text":"t","n":` + num + `}`
		_, perr := ingest.ParseLine([]byte(line), 64)
		var ok bool
		qerr := e.Store.Pool.QueryRow(context.Background(), `SELECT $1::text::jsonb IS NOT NULL`, `{"n":`+num+`}`).Scan(&ok)
		short := num
		if len(short) > 30 {
			short = fmt.Sprintf("%s... (%d bytes)", short[:20], len(num))
		}
		if (perr == nil) != (qerr == nil) {
			t.Errorf("number %s: ParseLine says %v, Postgres %v", short, perr, qerr)
		}
	}
}

// An id or source is kept byte for byte: one that is not valid UTF-8,
// or holds a lone surrogate escape, is refused with a reason, never
// stored with U+FFFD in place of its bad bytes (which made two ids one,
// the second rejected as a conflict). The text's bad bytes are still
// replaced, and flagged.
func TestRunInvalidUTF8IDsRefused(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	in := "{\"id\":\"caf\xe9\",\"text\":\"first\"}\n" +
		"{\"id\":\"caf\xe8\",\"text\":\"second\"}\n" +
		`{"id":"s\ud800","text":"third"}` + "\n" +
		"{\"id\":\"ok\",\"source\":\"cr\xffm\",\"text\":\"fourth\"}\n" +
		"{\"id\":\"fine\",\"text\":\"caf\xe9 au lait\"}\n"
	sum, err := e.Ingest(t, strings.NewReader(in), nil)
	if err != nil || sum.Published != 1 || sum.Rejected != 4 || sum.InvalidUTF8 != 1 {
		t.Fatalf("summary %+v, %v; want 4 rejected, fine published (its text flagged)", sum, err)
	}
	for i, want := range []string{
		`line 1: "id" is not valid UTF-8 (byte 0xE9 in "caf\xe9"): ids and sources are kept byte for byte, so it is refused, never changed`,
		`line 2: "id" is not valid UTF-8 (byte 0xE8 in "caf\xe8")`,
		`line 3: "id" holds a lone UTF-16 surrogate escape`,
		`line 4: "source" is not valid UTF-8 (byte 0xFF in "cr\xffm")`,
	} {
		if got := sum.Errors[i].Error(); !strings.HasPrefix(got, want) {
			t.Errorf("rejection %d:\n got %s\nwant %s...", i, got, want)
		}
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM messages WHERE external_id LIKE '%'||chr(65533)||'%' OR source LIKE '%'||chr(65533)||'%'`); n != 0 {
		t.Errorf("%d messages stored with a rewritten key", n)
	}

	// CSV: the same, cell by cell.
	csvIn := "id,text,note\n" + "caf\xe9,first,\n" + "ok-2,second,n\xb0 2\n"
	sum, err = e.Ingest(t, strings.NewReader(csvIn), func(c *ingest.Config) { c.Format = ingest.FormatCSV })
	if err != nil || sum.Published != 1 || sum.Rejected != 1 || !strings.Contains(sum.Errors[0].Reason, `"id" is not valid UTF-8 (byte 0xE9 in "caf\xe9")`) {
		t.Errorf("CSV: summary %+v, %v; want line 2 refused for its id, line 3 published", sum, err)
	}
}

// Rejections are kept up to MaxErrors with their reasons, handed to
// OnReject as they come, and counted past that: 20,000 bad lines
// hold no more memory than the first ones. Before, every rejection was
// kept (1 million bad lines took 555 MB). Not parallel: the heap it
// measures is the process's, so no other test may run meanwhile.
func TestRunRejectionsBounded(t *testing.T) {
	e := ingesttest.NewEnv(t)
	const n = 20_000
	var b strings.Builder
	b.Grow(n * 40)
	for i := range n {
		fmt.Fprintf(&b, `{"id":"bad-%d","txt":"no text key"}`+"\n", i)
	}
	in := b.String()
	var streamed []int
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	sum, err := e.Ingest(t, strings.NewReader(in), func(c *ingest.Config) {
		c.MaxErrors = 100
		c.OnReject = func(le ingest.LineError) { streamed = append(streamed, le.Line) }
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	if err != nil || sum.Rejected != n || len(sum.Errors) != 100 || sum.ErrorsOmitted != n-100 || sum.BatchID != "" {
		t.Fatalf("summary: %d rejected, %d listed, %d omitted, batch %q, %v; want %d, 100, %d, none",
			sum.Rejected, len(sum.Errors), sum.ErrorsOmitted, sum.BatchID, err, n, n-100)
	}
	if len(streamed) != 100 || streamed[0] != 1 || streamed[99] != 100 || sum.Errors[99].Line != 100 {
		t.Errorf("streamed %d rejections (first %v), want lines 1-100 as they came", len(streamed), streamed[:min(3, len(streamed))])
	}
	// What the summary holds after the run, beside the input itself.
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	perLine := float64(after.TotalAlloc-before.TotalAlloc) / n
	t.Logf("%d bad lines: %d bytes held after the run, %.0f bytes allocated per line", n, held, perLine)
	if held > 512<<10 {
		t.Errorf("%d bad lines left %d bytes held, want under 512 KiB: rejections must not accumulate", n, held)
	}
	runtime.KeepAlive(sum)
	runtime.KeepAlive(in)
}
