package export

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/extractq/extractq/store"
)

// Formats of a results file, as report -format and the HTTP API's
// format= name them.
const (
	FormatJSONL = "jsonl"
	FormatCSV   = "csv"
)

// ContentType returns the media type of format.
func ContentType(format string) string {
	if format == FormatCSV {
		// RFC 4180 registers text/csv; header=present says the first
		// line names the columns.
		return "text/csv; charset=utf-8; header=present"
	}
	return "application/x-ndjson"
}

// ParseFormat checks a format name: jsonl (the default for "") or csv.
func ParseFormat(s string) (string, error) {
	switch s {
	case "", FormatJSONL:
		return FormatJSONL, nil
	case FormatCSV:
		return FormatCSV, nil
	}
	return "", fmt.Errorf("format %q: want jsonl or csv", s)
}

// Writer writes results one at a time. Flush writes what is buffered;
// call it after the last Write (and whenever the reader should see the
// rows so far).
type Writer interface {
	Write(store.BatchResult) error
	Flush() error
}

// NewWriter returns a Writer of format on w; the CSV's record columns
// are cols (Columns of the batch's schema). A CSV's header is written
// with its first Write or Flush.
func NewWriter(w io.Writer, format string, cols []Column) Writer {
	bw := bufio.NewWriterSize(w, 64<<10)
	if format == FormatCSV {
		cw := csv.NewWriter(bw)
		cw.UseCRLF = true // RFC 4180
		return &csvWriter{bw: bw, cw: cw, cols: cols, row: make([]string, len(MetaColumns)+len(cols))}
	}
	return &jsonlWriter{bw: bw, enc: json.NewEncoder(bw)}
}

type jsonlWriter struct {
	bw  *bufio.Writer
	enc *json.Encoder
}

func (j *jsonlWriter) Write(r store.BatchResult) error { return j.enc.Encode(r) }
func (j *jsonlWriter) Flush() error                    { return j.bw.Flush() }

type csvWriter struct {
	bw     *bufio.Writer
	cw     *csv.Writer
	cols   []Column
	row    []string
	header bool
}

func (c *csvWriter) writeHeader() error {
	if c.header {
		return nil
	}
	c.header = true
	names := append([]string(nil), MetaColumns...)
	for _, col := range c.cols {
		names = append(names, col.Name)
	}
	return c.cw.Write(names)
}

func (c *csvWriter) Write(r store.BatchResult) error {
	if err := c.writeHeader(); err != nil {
		return err
	}
	row := c.row
	clear(row)
	row[0] = strconv.FormatInt(r.MessageID, 10)
	row[1], row[2], row[3] = safe(r.ExternalID), safe(r.Source), r.Status
	if r.Triage != nil {
		row[4] = *r.Triage
	}
	row[5] = strconv.Itoa(r.RunNo)
	if r.ErasedAt != nil {
		row[10] = r.ErasedAt.UTC().Format(time.RFC3339Nano)
	}
	if res := r.Result; res != nil {
		row[6], row[7], row[8] = res.SchemaVersion, res.Outcome, safe(res.CreatedBy)
		row[9] = res.CreatedAt.UTC().Format(time.RFC3339Nano)
		var data map[string]json.RawMessage
		if err := json.Unmarshal(res.Data, &data); err != nil {
			return fmt.Errorf("export: message %d: the record is not a JSON object: %w", r.MessageID, err)
		}
		for i, col := range c.cols {
			cell, err := cellAt(data, col.Path)
			if err != nil {
				return fmt.Errorf("export: message %d, column %s: %w", r.MessageID, col.Name, err)
			}
			row[len(MetaColumns)+i] = cell
		}
	}
	return c.cw.Write(row)
}

func (c *csvWriter) Flush() error {
	if err := c.writeHeader(); err != nil {
		return err
	}
	c.cw.Flush()
	if err := c.cw.Error(); err != nil {
		return err
	}
	return c.bw.Flush()
}

// cellAt returns the cell of the value at path in data: "" when a key on
// the way is missing or null.
func cellAt(data map[string]json.RawMessage, path []string) (string, error) {
	v, ok := data[path[0]]
	for _, k := range path[1:] {
		if !ok || isNull(v) {
			return "", nil
		}
		var inner map[string]json.RawMessage
		if err := json.Unmarshal(v, &inner); err != nil {
			return "", fmt.Errorf("not an object")
		}
		v, ok = inner[k]
	}
	if !ok || isNull(v) {
		return "", nil
	}
	return cell(v)
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// cell renders one JSON value as a CSV cell (see the package doc).
func cell(v json.RawMessage) (string, error) {
	v = bytes.TrimSpace(v)
	switch v[0] {
	case '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", err
		}
		return safe(s), nil
	case '[', '{':
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	return string(v), nil // number, true, false
}

// safe defuses a string a spreadsheet would read as a formula by a
// leading single quote (OWASP, "CSV Injection").
func safe(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r':
		return "'" + s
	}
	return s
}
