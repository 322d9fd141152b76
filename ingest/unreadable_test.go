package ingest_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/extractq/extractq/ingest"
	"github.com/extractq/extractq/ingest/ingesttest"
)

// unreadable are inputs that are not text: Run refuses each whole, in
// either format, before recording a batch. The compressed ones other than
// gzip are their magic bytes and random data.
func unreadable(t *testing.T) []struct{ name, in, want string } {
	lines := ingesttest.GoodLines(1015)
	return []struct{ name, in, want string }{
		{"gzip", ingesttest.Gzipped(t, lines), "is gzip-compressed (it starts with the bytes 1f 8b), not "},
		{"zstd", "\x28\xb5\x2f\xfd" + ingesttest.RandomBytes(500), "is zstd-compressed (it starts with the bytes 28 b5 2f fd), not "},
		{"bzip2", "BZh91AY&SY" + ingesttest.RandomBytes(500), "is bzip2-compressed (it starts with the bytes 42 5a 68 39), not "},
		{"xz", "\xfd7zXZ\x00" + ingesttest.RandomBytes(500), "is xz-compressed (it starts with the bytes fd 37 7a 58 5a 00), not "},
		{"zip", ingesttest.Zipped(t, "k4.jsonl", lines), "is a zip archive (it starts with the bytes 50 4b 03 04; an Excel .xlsx workbook is one too), not "},
		{"tar", ingesttest.Tarred(t, "k4.jsonl", lines), `is a tar archive (it holds "ustar" at byte 258), not `},
		{"3 MB of random bytes", ingesttest.RandomBytes(3 << 20), "does not look like JSONL or CSV text ("},
		{"NUL bytes", strings.Repeat(`{"id":"n","text":"x"}`+"\x00\x00\x00\x00\n", 10), "does not look like JSONL or CSV text (40 of its first 260 bytes are control characters or not UTF-8)"},
	}
}

func TestRunUnreadableInput(t *testing.T) {
	t.Parallel()
	e := ingesttest.NewEnv(t)
	for _, tt := range unreadable(t) {
		for _, format := range []ingest.Format{ingest.FormatJSONL, ingest.FormatCSV} {
			for _, parallel := range []int{1, 4} {
				name := fmt.Sprintf("%s as %s, parallel %d", tt.name, format, parallel)
				sum, err := e.Ingest(t, strings.NewReader(tt.in), func(c *ingest.Config) { c.Format = format; c.Parallel = parallel })
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
	for _, in := range []string{ingesttest.UTF16LE("\ufeff" + ingesttest.GoodLines(3)), ingesttest.UTF16LE(ingesttest.GoodLines(3))} {
		_, err := e.Ingest(t, strings.NewReader(in), nil)
		if err == nil || !strings.Contains(err.Error(), "the input looks like UTF-16 (") || !strings.Contains(err.Error(), "only UTF-8 is read") {
			t.Errorf("UTF-16 JSONL %.8q: Run = %v, want it refused as UTF-16", in, err)
		}
	}
	if n := e.CountSQL(t, `SELECT count(*) FROM batches`); n != 0 {
		t.Errorf("%d batches recorded, want 0", n)
	}
	if n := e.StreamMsgs(t); n != 0 {
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
	e := ingesttest.NewEnv(t)

	// Greek in ISO 8859-7: most bytes are not UTF-8, yet it is text, read
	// and flagged as a Latin-1 file is.
	var b strings.Builder
	for i := range 60 {
		fmt.Fprintf(&b, `{"id": "gr-%d", "text": "%s %d"}`+"\n", i, latin7("Η παραγγελία μου δεν έφτασε ακόμα"), i)
	}
	sum, err := e.Ingest(t, strings.NewReader(b.String()), nil)
	if err != nil || sum.Published != 60 || sum.InvalidUTF8 != 60 {
		t.Errorf("ISO 8859-7 JSONL: %+v, %v; want 60 published, flagged", sum, err)
	}
	b.Reset()
	b.WriteString("id,text\n")
	for i := range 60 {
		fmt.Fprintf(&b, "gr-csv-%d,%s %d\n", i, latin7("Η παραγγελία μου δεν έφτασε ακόμα"), i)
	}
	sum, err = e.Ingest(t, strings.NewReader(b.String()), func(c *ingest.Config) { c.Format = ingest.FormatCSV })
	if err != nil || sum.Published != 60 || sum.InvalidUTF8 != 60 {
		t.Errorf("ISO 8859-7 CSV: %+v, %v; want 60 published, flagged", sum, err)
	}

	// A few bad lines among good ones: a line of binary junk, raw control
	// characters, gzip's magic bytes not at the start. Each is rejected on
	// its own, and the rest are read.
	in := ingesttest.GoodLines(100) + ingesttest.RandomBytes(200) + "\n" + `{"id":"c","text":"bell` + "\x07\x07" + `"}` + "\n" + "\x1f\x8b junk\n" + ingesttest.GoodLines(2)
	sum, err = e.Ingest(t, strings.NewReader(in), nil)
	if err != nil || sum.Rejected < 3 || sum.Published != 100 || sum.Duplicates != 2 {
		t.Errorf("good lines with bad ones: %+v, %v; want the bad ones rejected, 100 published, 2 duplicates", sum, err)
	}
	// The junk first: rejected line by line while the start of the input
	// is text enough.
	in = `{"id":"j","text":"bell` + "\x07" + `"}` + "\n" + ingesttest.GoodLines(100)
	sum, err = e.Ingest(t, strings.NewReader(in), nil)
	if err != nil || sum.Rejected != 1 || sum.Duplicates != 100 {
		t.Errorf("a control character on line 1: %+v, %v; want line 1 rejected, 100 duplicates", sum, err)
	}
	// An input shorter than the look is read as before.
	sum, err = e.Ingest(t, strings.NewReader(`{"id":"s","text":"short"}`), nil)
	if err != nil || sum.Published != 1 {
		t.Errorf("a short input: %+v, %v", sum, err)
	}
}
