package ingest

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Format is an input format.
type Format string

// Input formats.
const (
	// FormatJSONL is one JSON object a line (see ParseLine).
	FormatJSONL Format = "jsonl"
	// FormatCSV is RFC 4180 CSV with a header row: columns "id" and "text"
	// required, "source" optional, every other column metadata.
	FormatCSV Format = "csv"
)

// FormatFor returns the format named by flag ("jsonl" or "csv", any
// case), or, when flag is empty, the one of file: FormatCSV for a name
// ending in ".csv" (any case), else FormatJSONL (stdin, "-", too). An
// unknown flag is an error.
func FormatFor(flag, file string) (Format, error) {
	switch f := Format(strings.ToLower(flag)); f {
	case FormatJSONL, FormatCSV:
		return f, nil
	case "":
		if strings.EqualFold(filepath.Ext(file), ".csv") {
			return FormatCSV, nil
		}
		return FormatJSONL, nil
	}
	return "", fmt.Errorf("unknown format %q (want %s or %s)", flag, FormatJSONL, FormatCSV)
}

// csvBufSize is the size of the buffer the input is read through.
const csvBufSize = 64 << 10

// The states of csvSplitter, as encoding/csv parses a line.
const (
	csvFieldStart = iota // a field begins: a quote here opens a quoted field
	csvUnquoted          // in an unquoted field
	csvQuoted            // in a quoted field
	csvQuote             // a quote in a quoted field: its end, or the first of ""
	csvBad               // not valid CSV: the record ends with the line
)

// csvRecord is one record as read from the input: its bytes and lines.
type csvRecord struct {
	// raw is the record's bytes, line ends included; nil when tooLong.
	raw []byte
	// start and end are its first and last line.
	start, end int
	// tooLong: the record is longer than MaxLineBytes; its bytes were
	// read past, not kept.
	tooLong bool
	// spanQuote is the line of the first quoted field that went on past
	// the end of its line (0 when none): a quote left open there takes
	// the lines after it into the record.
	spanQuote int
	// openQuote is the line of the quoted field the input ended in (0
	// when it ended outside one).
	openQuote int
}

// csvSplitter finds where each CSV record ends, as encoding/csv does,
// keeping at most MaxLineBytes of one.
type csvSplitter struct {
	br   *bufio.Reader
	line int // lines read
	buf  []byte
}

// next reads the next record. Blank lines before it are skipped. It
// returns io.EOF at the end of the input and any other read error as is.
func (s *csvSplitter) next() (csvRecord, error) {
	if err := s.skipBlank(); err != nil {
		return csvRecord{}, err
	}
	rec := csvRecord{start: s.line + 1}
	s.buf = s.buf[:0]
	state, opened, lineStart := csvFieldStart, 0, true
	for {
		chunk, err := s.br.ReadSlice('\n')
		if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
			return rec, err
		}
		if len(chunk) > 0 && lineStart {
			s.line++
		}
		for i := 0; i < len(chunk); i++ {
			if state == csvQuoted {
				// Skip to the next quote: a line end can only be last.
				j := bytes.IndexByte(chunk[i:], '"')
				if j < 0 {
					if chunk[len(chunk)-1] == '\n' && rec.spanQuote == 0 {
						rec.spanQuote = opened
					}
					break
				}
				i += j
			}
			next := csvStep(state, chunk[i])
			if next == csvQuoted && state == csvFieldStart {
				opened = s.line
			}
			state = next
		}
		if !rec.tooLong && len(s.buf)+len(chunk) > MaxLineBytes {
			rec.tooLong, s.buf = true, s.buf[:0]
		}
		if !rec.tooLong {
			s.keep(chunk)
		}
		lineStart = len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		ended := lineStart && state != csvQuoted
		if ended || err == io.EOF {
			if !ended && state == csvQuoted {
				rec.openQuote = opened
			}
			rec.end = s.line
			if !rec.tooLong {
				rec.raw = s.buf
			}
			return rec, nil
		}
	}
}

// keep appends b to buf, growing it to at most MaxLineBytes.
func (s *csvSplitter) keep(b []byte) {
	if n := len(s.buf) + len(b); n > cap(s.buf) {
		buf := make([]byte, len(s.buf), min(max(n, 2*cap(s.buf)), MaxLineBytes))
		copy(buf, s.buf)
		s.buf = buf
	}
	s.buf = append(s.buf, b...)
}

// csvStep is the state after byte c in state. A line end (c == '\n')
// outside a quoted field leaves the state to ignore: the record ends.
func csvStep(state int, c byte) int {
	switch state {
	case csvFieldStart, csvUnquoted:
		switch {
		case c == '"' && state == csvFieldStart:
			return csvQuoted
		case c == '"':
			return csvBad
		case c == ',':
			return csvFieldStart
		}
		return csvUnquoted
	case csvQuoted:
		if c == '"' {
			return csvQuote
		}
		return csvQuoted
	case csvQuote:
		switch c {
		case '"':
			return csvQuoted
		case ',':
			return csvFieldStart
		case '\n':
			return csvUnquoted
		}
		return csvBad
	}
	return csvBad
}

// skipBlank skips blank lines: empty ("\n", "\r\n", a last "\r"), as
// encoding/csv does between records, or holding only spaces and tabs,
// which no message is written as.
func (s *csvSplitter) skipBlank() error {
	for {
		n, err := s.blankLine()
		if n == 0 {
			return err
		}
		s.br.Discard(n)
		s.line++
	}
}

// blankLine returns the length of the next line, its end included, when it
// holds nothing but spaces and tabs, and 0 when it holds more (or is longer
// than the reader's buffer). The error is the reader's when nothing is
// left to read.
func (s *csvSplitter) blankLine() (int, error) {
	for size := 64; ; size *= 2 {
		b, err := s.br.Peek(size)
		if len(b) == 0 {
			return 0, err
		}
		for i, c := range b {
			switch {
			case c == ' ' || c == '\t':
			case c == '\n':
				return i + 1, nil
			case c == '\r' && i+1 < len(b):
				if b[i+1] == '\n' {
					return i + 2, nil
				}
				return 0, nil
			case c == '\r' && err == io.EOF:
				return i + 1, nil
			case c == '\r':
				// The line end may be beyond b: look further.
			default:
				return 0, nil
			}
		}
		switch {
		case err == io.EOF:
			return len(b), nil // spaces to the end of the input
		case err != nil:
			return 0, nil // longer than the buffer: a record
		}
	}
}

// csvHeader is a checked header row: the column names and where id, text
// and source (-1 when absent) are.
type csvHeader struct {
	names []string
	// repaired marks names that held invalid UTF-8 (replaced by U+FFFD).
	repaired         []bool
	id, text, source int
}

// parseHeader checks a header row: every column named, once; id and text
// present. The error names the column.
func parseHeader(names []string) (csvHeader, error) {
	h := csvHeader{names: names, repaired: make([]bool, len(names)), id: -1, text: -1, source: -1}
	seen := make(map[string]int, len(names))
	for i, name := range names {
		if !utf8.ValidString(name) {
			names[i], h.repaired[i] = strings.ToValidUTF8(name, "\uFFFD"), true
			name = names[i]
		}
		switch {
		case strings.TrimSpace(name) == "":
			return h, fmt.Errorf("CSV header: column %d has no name", i+1)
		case strings.ContainsRune(name, 0):
			return h, fmt.Errorf("CSV header: the name of column %d contains a NUL character", i+1)
		}
		if j, ok := seen[name]; ok {
			return h, fmt.Errorf("CSV header: column %q occurs twice (columns %d and %d)", name, j+1, i+1)
		}
		seen[name] = i
		switch name {
		case "id":
			h.id = i
		case "text":
			h.text = i
		case "source":
			h.source = i
		}
	}
	for _, c := range []struct {
		name string
		at   int
	}{{"id", h.id}, {"text", h.text}} {
		if c.at < 0 {
			return h, fmt.Errorf("CSV header: no %q column (the columns are %s); id and text are required%s", c.name, quoteList(names), columnLike(names, c.name))
		}
	}
	for _, name := range names {
		if err := checkKeyCase("column", name); err != nil {
			return h, fmt.Errorf("CSV header: %w", err)
		}
	}
	return h, nil
}

// columnLike names the first of names that is name but for case or the
// white space around it: " (column "ID" differs only by case; ...)"; ""
// when none is.
func columnLike(names []string, name string) string {
	for _, n := range names {
		switch t := strings.TrimSpace(n); {
		case t == name:
			return fmt.Sprintf(" (column %q has white space around its name; names are matched exactly)", n)
		case strings.EqualFold(t, name):
			return fmt.Sprintf(" (column %q differs only by case; names are case-sensitive)", n)
		}
	}
	return ""
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// parse checks one record as ParseLine checks a line: id, source and text
// from their columns, every other non-empty cell as metadata (column name
// to cell, strings). An id or source cell that is not valid UTF-8 is
// refused first; in any other cell, each run of invalid UTF-8 bytes
// becomes one U+FFFD and sets FlagInvalidUTF8. A record with another
// number of fields than the header is rejected.
func (h *csvHeader) parse(rec []string, maxText int) (Input, error) {
	var in Input
	// The key first, as read: invalid UTF-8 in it is refused, not
	// replaced as in the other cells.
	for _, k := range []struct {
		name string
		i    int
	}{{"id", h.id}, {"source", h.source}} {
		if k.i >= 0 && k.i < len(rec) {
			if err := checkKeyRaw(k.name, []byte(rec[k.i]), false); err != nil {
				return in, err
			}
		}
	}
	repaired := false
	for i, f := range rec {
		if !utf8.ValidString(f) {
			rec[i], repaired = strings.ToValidUTF8(f, "\uFFFD"), true
		}
	}
	if len(rec) != len(h.names) {
		if h.id < len(rec) {
			_ = in.setID(rec[h.id])
		}
		return in, fmt.Errorf("has %d fields, the header has %d", len(rec), len(h.names))
	}
	if err := in.setID(rec[h.id]); err != nil {
		return in, err
	}
	if h.source >= 0 {
		if err := in.setSource(rec[h.source]); err != nil {
			return in, err
		}
	}
	if err := in.setText(rec[h.text], maxText); err != nil {
		return in, err
	}
	meta := map[string]string{}
	for i, f := range rec {
		if i == h.id || i == h.text || i == h.source || f == "" {
			continue
		}
		meta[h.names[i]] = f
		repaired = repaired || h.repaired[i]
	}
	if err := in.setMetadata(meta); err != nil {
		return in, err
	}
	if repaired {
		in.Flags = append(in.Flags, FlagInvalidUTF8)
	}
	return in, nil
}

// csvInput reads CSV records after a checked header. The splitter finds
// each record's bytes, and the CSV reader parses them: so a record too
// long to keep is read past and rejected, and the next one is read.
type csvInput struct {
	split  csvSplitter
	r      *csv.Reader
	feed   bytes.Reader // the CSV reader's input: the loaded record's bytes
	fed    int64        // bytes loaded into feed so far
	rec    csvRecord    // the record loaded last
	loaded bool         // rec is loaded and not read yet
	off    int          // line of the input = line of the CSV reader + off
	header csvHeader
	// end is the last line read: the header's or the last record's.
	end int
}

// csvRead is one record read: its fields and first line, or its
// rejection when it is not valid CSV or too long.
type csvRead struct {
	fields []string
	line   int
	bad    *spanError
}

// spanError rejects a record that ends on line end.
type spanError struct {
	end    int
	reason string
}

func (e *spanError) Error() string { return e.reason }

// CheckCSVHeader reads and checks the header row of r as Run does for
// CSV, and reads nothing after it: an error is what Run would return for
// the header (an *EmptyInputError when r has no header row).
func CheckCSVHeader(r io.Reader) error {
	_, err := newCSVInput(r)
	return err
}

// newCSVInput reads and checks the header row of r. A UTF-8 byte order
// mark before it is skipped. An input without a header row (no byte, or
// only blank lines) is an *EmptyInputError.
func newCSVInput(r io.Reader) (*csvInput, error) {
	br := bufio.NewReaderSize(r, csvBufSize)
	if b, _ := br.Peek(3); bytes.Equal(b, []byte("\xef\xbb\xbf")) {
		br.Discard(3)
	}
	c := &csvInput{split: csvSplitter{br: br}}
	c.r = csv.NewReader(&c.feed)
	c.r.FieldsPerRecord = -1 // checked per record, so a bad one is only rejected
	rec, err := c.split.next()
	switch {
	case err == io.EOF && c.split.line == 0:
		return nil, &EmptyInputError{Reason: "it is empty"}
	case err == io.EOF:
		return nil, &EmptyInputError{Reason: "it has only blank lines"}
	case err != nil:
		return nil, fmt.Errorf("reading the CSV header: %w", err)
	}
	if err := checkHeaderBytes(rec.raw); err != nil {
		return nil, err
	}
	c.load(rec)
	hr, err := c.next()
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading the CSV header: %w", err)
	case hr.bad != nil:
		return nil, fmt.Errorf("CSV header: %s", hr.bad.reason)
	}
	if c.header, err = parseHeader(hr.fields); err != nil {
		return nil, err
	}
	return c, nil
}

// checkHeaderBytes refuses a header row that shows the file is not
// comma-separated UTF-8: UTF-16 (a byte order mark, or NUL bytes between
// the characters), or one column separated by semicolons or tabs.
func checkHeaderBytes(raw []byte) error {
	if bytes.HasPrefix(raw, []byte("\xff\xfe")) || bytes.HasPrefix(raw, []byte("\xfe\xff")) ||
		(len(raw) > 0 && 4*bytes.Count(raw, []byte{0}) >= len(raw)) {
		return errors.New("CSV header: the file looks like UTF-16 (NUL bytes between the characters); only UTF-8 is read: " +
			`save it as "CSV UTF-8", or convert it (iconv -f UTF-16 -t UTF-8)`)
	}
	if bytes.IndexByte(raw, ',') >= 0 {
		return nil
	}
	semi, tab := bytes.Count(raw, []byte(";")), bytes.Count(raw, []byte("\t"))
	switch {
	case semi > 0 && semi >= tab:
		return errors.New("CSV header: only comma-separated CSV is read; this header looks separated by ';'")
	case tab > 0:
		return errors.New("CSV header: only comma-separated CSV is read; this header looks separated by tabs")
	}
	return nil
}

// load makes rec the next record the CSV reader reads.
func (c *csvInput) load(rec csvRecord) {
	c.rec, c.loaded, c.off = rec, true, -1
	if !rec.tooLong {
		c.feed.Reset(rec.raw)
		c.fed += int64(len(rec.raw))
	}
}

// next reads the next record; io.EOF at the end of the input.
func (c *csvInput) next() (csvRead, error) {
	for {
		if !c.loaded && c.r.InputOffset() >= c.fed {
			rec, err := c.split.next()
			if err != nil {
				return csvRead{}, err
			}
			c.load(rec)
		}
		c.loaded = false
		rec := c.rec
		c.end = rec.end
		if rec.tooLong {
			reason := fmt.Sprintf("the record is longer than %d bytes", MaxLineBytes)
			if rec.openQuote > 0 {
				reason += fmt.Sprintf(": the quote opened on line %d is never closed, so lines %d-%d, to the end of the input, were read as this one record",
					rec.openQuote, rec.start, rec.end)
			}
			return csvRead{line: rec.start, bad: &spanError{end: rec.end, reason: reason}}, nil
		}
		fields, err := c.r.Read()
		var pe *csv.ParseError
		switch {
		case err == io.EOF:
			continue // nothing but blank lines (the splitter skips them)
		case errors.As(err, &pe):
			return c.invalid(pe), nil
		case err != nil:
			return csvRead{}, err
		}
		line, _ := c.r.FieldPos(0)
		if c.off < 0 {
			c.off = rec.start - line
		}
		return csvRead{fields: fields, line: line + c.off}, nil
	}
}

// invalid is the rejection of a record that is not valid CSV. When it
// spans lines, a quote left open may have taken the lines after it into
// the record: it says so, with the lines.
func (c *csvInput) invalid(pe *csv.ParseError) csvRead {
	if c.off < 0 {
		c.off = c.rec.start - pe.StartLine
	}
	line, end := pe.StartLine+c.off, pe.Line+c.off
	reason := fmt.Sprintf("invalid CSV at line %d, column %d: %v", end, pe.Column, pe.Err)
	switch q := c.rec.openQuote; {
	case q > 0 && end > line:
		reason += fmt.Sprintf(" (the quote opened on line %d is never closed: lines %d-%d, to the end of the input, were read as this one record)", q, line, end)
	case q > 0:
		reason += fmt.Sprintf(" (the quote opened on line %d is never closed)", q)
	case end > line:
		q = cmp.Or(c.rec.spanQuote, line)
		reason += fmt.Sprintf(" (a quote opened on line %d may be unclosed: lines %d-%d were read as this one record)", q, line, end)
	}
	return csvRead{line: line, bad: &spanError{end: end, reason: reason}}
}

// empty is the EmptyInputError Reason of CSV input without records: a
// header row was read (newCSVInput reports an input without one).
func (c *csvInput) empty() string { return "it has only the CSV header row" }

// read counts the records in sum and hands each to handle, with the line
// it starts on, until handle returns false. A record that is not valid
// CSV or longer than MaxLineBytes is rejected; a read error stops it.
func (c *csvInput) read(ctx context.Context, sum *Summary, handle handleFunc) error {
	for {
		if ctx.Err() != nil {
			return nil // the cause is reported by Run
		}
		r, err := c.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ingest: reading the record after line %d: %w", c.end, err)
		}
		sum.Lines++
		var parse parseFunc
		if r.bad != nil {
			bad := r.bad
			parse = func(int) (Input, error) { return Input{}, bad }
		} else {
			h := &c.header
			parse = func(maxText int) (Input, error) { return h.parse(r.fields, maxText) }
		}
		if !handle(r.line, parse) {
			return nil
		}
	}
}
